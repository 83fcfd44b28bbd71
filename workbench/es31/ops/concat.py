"""The ES 3.1 rules of :class:`workbench.ir.Concat`: its kernel and cost."""
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


def kernel(op: ir.Concat, shapes, opts: Options) -> Kernel:
    """One invocation per output pixel: each input pack a channel comes from loaded once, the
    output packs assembled from their components."""
    inputs = list(op.inputs)
    src = "".join(image(opts, u, f"u_in{u}", "readonly") for u in range(len(inputs)))
    src = (header(opts) + src + image(opts, len(inputs), "u_out", "writeonly")
           + "uniform ivec2 u_out_size;\n"
           + "".join(load_fn(opts, f"load_in{u}", f"u_in{u}") for u in range(len(inputs))))
    body = list(OUTPUT_PIXEL)
    sources = op.sources(shapes)
    loaded = list(dict.fromkeys((t, c // 4) for t, c in sources))
    body += [f"    vec4 t{i} = load_in{inputs.index(t)}(q, {k});" for i, (t, k) in enumerate(loaded)]
    for p in range(op.out_packs(shapes)):
        parts = [f"t{loaded.index((t, c // 4))}.{'xyzw'[c % 4]}" for t, c in sources[4 * p:4 * p + 4]]
        body.append(f"    imageStore(u_out, ivec3(q, {p}), vec4({', '.join(parts + ['0.0'] * (4 - len(parts)))}));")
    src += main(body)
    images = [(u, t, "read") for u, t in enumerate(inputs)] + [(len(inputs), op.name, "write")]
    return Kernel(op.name, op.name, src, images, None, {"u_out_size": ("size", op.name)},
                  ("pixels", op.name), 1)


def cost(op: ir.Concat, shapes, opts: Options) -> Cost:
    h, w, c = shapes[op.name]
    loads = len({(t, ch // 4) for t, ch in op.sources(shapes)})
    return Cost(texel_fetches=h * w * loads,
                texture_bytes=h * w * ir.packs(c) * texel_bytes(opts), programs=1)


def kernels(op: ir.Concat, shapes, opts: Options) -> list[Kernel]:
    return [kernel(op, shapes, opts)]


RULES = register(ir.Concat, OpRules(kernels, cost))
