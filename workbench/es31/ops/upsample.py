"""The ES 3.1 rules of :class:`workbench.ir.Upsample` (nearest or bilinear): its kernel and
cost."""
from __future__ import annotations

from workbench import ir
from workbench.es31.kernels import (
    OUTPUT_PIXEL,
    Kernel,
    Options,
    header_in_out,
    load_fn,
    main,
    texel_bytes,
)
from workbench.es31.record import OpRules, register
from workbench.glsl_text import glsl_float
from workbench.ir.cost import Cost


def kernel(op: ir.Upsample, shapes, opts: Options) -> Kernel:
    """One invocation per output pixel, every pack: the source pixel (nearest), or the 4
    nearest mixed with half-pixel centres and clamped edges (bilinear)."""
    n = op.out_packs(shapes)
    src = header_in_out(opts)
    src += ("uniform ivec2 u_in_size;\nuniform ivec2 u_out_size;\n"
            + load_fn(opts, "load_in", "u_in"))
    body = list(OUTPUT_PIXEL)
    if op.interpolation == "nearest":
        body += [f"    imageStore(u_out, ivec3(q, {p}), load_in(q / {op.scale}, {p}));"
                 for p in range(n)]
    else:
        body += [f"    vec2 u = (vec2(q) + 0.5) / {glsl_float(op.scale)} - 0.5;",
                 "    vec2 i0 = floor(u);", "    vec2 f = u - i0;",
                 "    ivec2 lo = clamp(ivec2(i0), ivec2(0), u_in_size - 1);",
                 "    ivec2 hi = clamp(ivec2(i0) + 1, ivec2(0), u_in_size - 1);"]
        body += [f"    imageStore(u_out, ivec3(q, {p}), mix(mix(load_in(lo, {p}), "
                 f"load_in(ivec2(hi.x, lo.y), {p}), f.x), mix(load_in(ivec2(lo.x, hi.y), {p}), "
                 f"load_in(hi, {p}), f.x), f.y));" for p in range(n)]
    src += main(body)
    uniforms = {"u_in_size": ("size", op.input), "u_out_size": ("size", op.name)}
    return Kernel(op.name, op.name, src, [(0, op.input, "read"), (1, op.name, "write")], None,
                  uniforms, ("pixels", op.name), 1)


def cost(op: ir.Upsample, shapes, opts: Options) -> Cost:
    h, w, c = shapes[op.name]
    taps = 1 if op.interpolation == "nearest" else 4
    return Cost(multiply_adds=h * w * c * 3 if taps == 4 else 0,
                texel_fetches=h * w * ir.packs(c) * taps,
                texture_bytes=h * w * ir.packs(c) * texel_bytes(opts), programs=1)


def kernels(op: ir.Upsample, shapes, opts: Options) -> list[Kernel]:
    return [kernel(op, shapes, opts)]


RULES = register(ir.Upsample, OpRules(kernels, cost))
