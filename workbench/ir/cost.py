"""What running a net costs on an ES 2.0 GPU: multiply-adds, texel fetches, texture memory,
shader programs.  Each IR op reports its own :class:`Cost` for a given input size; totals are
sums of those, never separate bookkeeping.

Counting convention: a multiply-add is one weight times one input value (a 3x3 conv from
12 to 8 channels costs 9 * 12 * 8 per output pixel); a texel fetch is one ``texture2D`` call
(one RGBA texel, 4 channels) executed by a fragment; texture memory is the RGBA8 textures an
op writes (4 bytes per texel); each program renders one RGBA output texture.
"""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Cost:
    multiply_adds: int = 0
    texel_fetches: int = 0
    texture_bytes: int = 0
    programs: int = 0

    def __add__(self, other):
        return Cost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


def total(costs) -> Cost:
    return sum(costs, Cost())


def table(rows: dict[str, Cost]) -> str:
    """A Markdown table, one row per op, with the total last."""
    head = "| op | multiply-adds | texel fetches | texture KiB | programs |\n|---|---:|---:|---:|---:|"
    lines = [head]
    for name, c in list(rows.items()) + [("**total**", total(rows.values()))]:
        lines.append(f"| {name} | {c.multiply_adds:,} | {c.texel_fetches:,} | "
                     f"{c.texture_bytes / 1024:,.1f} | {c.programs} |")
    return "\n".join(lines)
