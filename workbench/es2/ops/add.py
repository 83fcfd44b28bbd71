"""The ES 2.0 record of :class:`workbench.ir.Add`: ``activation(input + other)``, one
program per pack of 4 channels (each fetches the pack of both), its emulator, limits, cost
and tiling.  The emulator adds the two fetched values in the tensors' float type and applies
the activation's numpy form, as the shader does."""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.es2.emulate import quantize
from workbench.es2.limits import Target, check_storage
from workbench.es2.record import OpRecord, register
from workbench.es2.shaders import OUT_TEXEL, Binding, Pass, header, uniform_declarations
from workbench.ir.cost import Cost
from workbench.nets import activations


def program(op: ir.Add, pack: int, precision="highp") -> Pass:
    act = activations.glsl(op, "s", pack, stored=True)  # (an 8-bit target clamps)
    source = (header(precision) + uniform_declarations(["u_a", "u_b"], {}, out_texel=True)
              + f"void main() {{\n    vec2 uv = {OUT_TEXEL};\n"
              "    vec4 s = texture2D(u_a, uv) + texture2D(u_b, uv);\n"
              f"    gl_FragColor = {act};\n}}\n")
    return Pass(f"{op.name}.{pack}", op.name, source,
                [Binding("u_a", op.input, pack), Binding("u_b", op.other, pack)],
                [(op.name, pack)], {})


def passes(op: ir.Add, shapes, target: Target) -> list[Pass]:
    """One program per pack of 4 channels (one render target each)."""
    return [program(op, p, target.precision) for p in range(op.out_packs(shapes))]


def apply(op: ir.Add, tensors, arithmetic):
    """The stored output, as the next op fetches it."""
    a, b = tensors[op.input], tensors[op.other]
    return quantize(np.asarray(activations.of(op).np_fn(a + b), a.dtype), arithmetic)


def check(op: ir.Add, shapes, limits):
    """Two inputs of one shape, a sum its activation keeps in the storage's range."""
    if shapes[op.input] != shapes[op.other]:
        raise ir.LoweringError(f"layer {op.name!r}: adds {op.input!r} {shapes[op.input]} and "
                               f"{op.other!r} {shapes[op.other]}, of different shapes")
    check_storage(op.name, activations.of(op), limits)


def cost(op: ir.Add, shapes, programs=None) -> Cost:
    h, w, c = shapes[op.name]
    n = op.out_packs(shapes)
    return Cost(multiply_adds=h * w * c, texel_fetches=2 * h * w * n, texture_bytes=h * w * 4 * n,
                programs=n)


def tile(op: ir.Add, step, reach):
    if step[op.input] != step[op.other]:
        return None
    return step[op.input], max(reach[op.input], reach[op.other])


RECORD = register(ir.Add, OpRecord(
    "Add", passes=passes, apply=apply, check=check, cost=cost, tile=tile))
