"""The ES 3.1 rules of :class:`workbench.ir.Pool` (max or average over a window; the global
average before a Dense layer is :mod:`workbench.es31.ops.dense`'s): its kernel and cost."""
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
from workbench.ir.cost import Cost


def kernel(op: ir.Pool, shapes, opts: Options) -> Kernel:
    """Max or average pooling: one invocation per output pixel, every pack; a tap outside the
    input is skipped (left out of the max and of the average's count, as TF does)."""
    k, s, n = op.size, op.stride, op.out_packs(shapes)
    src = header_in_out(opts)
    src += ("uniform ivec2 u_in_size;\nuniform ivec2 u_out_size;\nuniform ivec2 u_pad;\n"
            + load_fn(opts, "load_in", "u_in"))
    start = "vec4(-3.0e38)" if op.kind == "max" else "vec4(0.0)"
    body = OUTPUT_PIXEL + [f"    ivec2 first = q * {s} - u_pad;"]
    for p in range(n):
        body.append(f"    {{ vec4 acc = {start}; float count = 0.0;")
        for dy in range(k):
            for dx in range(k):
                step = (f"acc = max(acc, load_in(t, {p}));" if op.kind == "max"
                        else f"acc += load_in(t, {p}); count += 1.0;")
                body.append(f"      {{ ivec2 t = first + ivec2({dx}, {dy}); if (all(greaterThanEqual("
                            f"t, ivec2(0))) && all(lessThan(t, u_in_size))) {{ {step} }} }}")
        value = "acc" if op.kind == "max" else "acc / count"
        body.append(f"      imageStore(u_out, ivec3(q, {p}), {value}); }}")
    src += main(body)
    uniforms = {"u_in_size": ("size", op.input), "u_out_size": ("size", op.name),
                "u_pad": ("pad", op.input, k, s, op.padding)}
    return Kernel(op.name, op.name, src, [(0, op.input, "read"), (1, op.name, "write")], None,
                  uniforms, ("pixels", op.name), 1)


def cost(op: ir.Pool, shapes, opts: Options) -> Cost:
    """Loads: the taps inside the input, of every output pixel and pack."""
    h, w, c = shapes[op.input]
    oh, ow, _ = shapes[op.name]
    (top, left), k, s = ir.conv_pads((h, w), op.size, op.stride, op.padding), op.size, op.stride

    def inside(n_out, n_in, pad):  # taps inside the input, summed over one axis
        return sum(0 <= o * s - pad + d < n_in for o in range(n_out) for d in range(k))
    taps = inside(oh, h, top) * inside(ow, w, left)
    return Cost(multiply_adds=oh * ow * c * k * k if op.kind == "average" else 0,
                texel_fetches=taps * ir.packs(c),
                texture_bytes=oh * ow * ir.packs(c) * texel_bytes(opts), programs=1)


def kernels(op: ir.Pool, shapes, opts: Options) -> list[Kernel]:
    return [kernel(op, shapes, opts)]


RULES = register(ir.Pool, OpRules(kernels, cost))
