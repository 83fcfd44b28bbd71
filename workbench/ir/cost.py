"""What running a net costs on an ES 2.0 GPU: multiply-adds, texel fetches, texture memory,
shader programs.  Each IR op reports its own :class:`Cost` for a given input size; totals are
sums of those, never separate bookkeeping.

Counting convention: a multiply-add is one weight times one input value (a 3x3 conv from
12 to 8 channels costs 9 * 12 * 8 per output pixel); a texel fetch is one ``texture2D`` call
(one RGBA texel, 4 channels) executed by a fragment; texture memory is the RGBA8 textures an
op writes (4 bytes per texel); a program renders one RGBA output texture, or several with draw
buffers (ES 2.0 ``GL_EXT_draw_buffers``), which then share each fetched texel:
``single_target_fetches`` is the count of the one-output form beside it (0: not counted).
"""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Cost:
    multiply_adds: int = 0
    texel_fetches: int = 0
    texture_bytes: int = 0
    programs: int = 0
    single_target_fetches: int = 0

    def __add__(self, other):
        return Cost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


def total(costs) -> Cost:
    return sum(costs, Cost())


def table(rows: dict[str, Cost]) -> str:
    """A Markdown table, one row per op, with the total last; a column of single-target
    fetches when some op's differ from its fetches (a net compiled with draw buffers)."""
    both = any(c.single_target_fetches not in (0, c.texel_fetches) for c in rows.values())
    head = ("| op | multiply-adds | texel fetches | " + ("fetches, 1 target | " if both else "")
            + "texture KiB | programs |\n|---|---:|---:|" + ("---:|" if both else "") + "---:|---:|")
    lines = [head]
    for name, c in list(rows.items()) + [("**total**", total(rows.values()))]:
        single = f"{c.single_target_fetches:,} | " if both else ""
        lines.append(f"| {name} | {c.multiply_adds:,} | {c.texel_fetches:,} | {single}"
                     f"{c.texture_bytes / 1024:,.1f} | {c.programs} |")
    return "\n".join(lines)
