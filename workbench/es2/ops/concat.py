"""The ES 2.0 record of :class:`workbench.ir.Concat`: the channels of its inputs one after
the other; one program per output pack, which fetches each input pack it takes a channel from
once and puts the components in place (a copy: the bytes are the inputs' bytes)."""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.es2.limits import LimitError, Target, fits
from workbench.es2.record import OpRecord, register
from workbench.es2.shaders import OUT_TEXEL, Binding, Pass, header, uniform_declarations
from workbench.ir.cost import Cost


def sources(op: ir.Concat, shapes, pack: int) -> list[tuple[str, int]]:
    """``(tensor, channel)`` of each channel of output pack ``pack``."""
    return op.sources(shapes)[ir.PACK * pack:ir.PACK * pack + ir.PACK]


def fetched(op: ir.Concat, shapes, pack: int) -> list[tuple[str, int]]:
    """The input packs, ``(tensor, pack)``, that output pack ``pack`` reads, in order."""
    return list(dict.fromkeys((t, c // ir.PACK) for t, c in sources(op, shapes, pack)))


def program(op: ir.Concat, shapes, pack: int, precision="highp") -> Pass:
    reads = fetched(op, shapes, pack)
    samplers = [f"u_in{i}" for i in range(len(reads))]
    parts = [f"t{reads.index((t, c // ir.PACK))}.{'xyzw'[c % ir.PACK]}"
             for t, c in sources(op, shapes, pack)]
    body = [f"    vec2 uv = {OUT_TEXEL};"]
    body += [f"    vec4 t{i} = texture2D({s}, uv);" for i, s in enumerate(samplers)]
    body.append(f"    gl_FragColor = vec4({', '.join(parts + ['0.0'] * (4 - len(parts)))});")
    source = (header(precision) + uniform_declarations(samplers, {}, out_texel=True)
              + "void main() {\n" + "\n".join(body) + "\n}\n")
    return Pass(f"{op.name}.{pack}", op.name, source,
                [Binding(s, t, p) for s, (t, p) in zip(samplers, reads)], [(op.name, pack)],
                {})


def passes(op: ir.Concat, shapes, target: Target) -> list[Pass]:
    """One program per output pack (one render target each)."""
    return [program(op, shapes, p, target.precision) for p in range(op.out_packs(shapes))]


def apply(op: ir.Concat, tensors, arithmetic):
    """The inputs' values, channels one after the other (nothing is rounded again)."""
    return np.concatenate([tensors[t] for t in op.inputs], axis=-1)


def check(op: ir.Concat, shapes, limits):
    """Inputs of one size; each program's texture units within the limit."""
    sizes = {shapes[t][:2] for t in op.inputs}
    if len(sizes) > 1:
        raise LimitError(f"layer {op.name!r}: concatenates tensors of sizes {sorted(sizes)}; "
                         "they must have one size")
    for pack in range(op.out_packs(shapes)):
        fits(op.name, "texture units", len(fetched(op, shapes, pack)), limits.texture_units,
             limits)


def cost(op: ir.Concat, shapes, programs=None) -> Cost:
    h, w, _ = shapes[op.name]
    n = op.out_packs(shapes)
    reads = sum(len(fetched(op, shapes, p)) for p in range(n))
    return Cost(texel_fetches=h * w * reads, texture_bytes=h * w * 4 * n, programs=n)


def tile(op: ir.Concat, step, reach):
    if len({step[t] for t in op.inputs}) > 1:
        return None
    return step[op.input], max(reach[t] for t in op.inputs)


RECORD = register(ir.Concat, OpRecord(
    "Concat", passes=passes, apply=apply, check=check, cost=cost, tile=tile))
