"""The ES 3.1 rules of :class:`workbench.ir.Add`: ``activation(input + other)``, its kernel and
cost."""
from __future__ import annotations

from workbench import ir
from workbench.es31.kernels import (
    OUTPUT_PIXEL,
    Kernel,
    Options,
    header,
    image,
    load_fn,
    main,
    texel_bytes,
)
from workbench.es31.record import OpRules, register
from workbench.ir.cost import Cost
from workbench.nets import activations


def kernel(op: ir.Add, shapes, opts: Options) -> Kernel:
    """One invocation per output pixel: both inputs' packs added, then the activation."""
    n = op.out_packs(shapes)
    src = (header(opts) + image(opts, 0, "u_a", "readonly") + image(opts, 1, "u_b", "readonly")
           + image(opts, 2, "u_out", "writeonly") + "uniform ivec2 u_out_size;\n"
           + load_fn(opts, "load_a", "u_a") + load_fn(opts, "load_b", "u_b"))
    body = list(OUTPUT_PIXEL)
    body += [f"    {{ vec4 v = load_a(q, {p}) + load_b(q, {p}); imageStore(u_out, ivec3(q, {p}), "
             f"{activations.glsl(op, 'v', p)}); }}" for p in range(n)]
    src += main(body)
    return Kernel(op.name, op.name, src, [(0, op.input, "read"), (1, op.other, "read"),
                                          (2, op.name, "write")], None,
                  {"u_out_size": ("size", op.name)}, ("pixels", op.name), 1)


def cost(op: ir.Add, shapes, opts: Options) -> Cost:
    h, w, c = shapes[op.name]
    return Cost(multiply_adds=h * w * c, texel_fetches=2 * h * w * ir.packs(c),
                texture_bytes=h * w * ir.packs(c) * texel_bytes(opts), programs=1)


def kernels(op: ir.Add, shapes, opts: Options) -> list[Kernel]:
    return [kernel(op, shapes, opts)]


RULES = register(ir.Add, OpRules(kernels, cost))
