"""The ES 3.1 rules of :class:`workbench.ir.DepthToSpace`: one invocation per input pixel
writes its ``block x block`` output pixels (the SR demux, with their bilinear chroma from its
3x3 neighbourhood where it has ``chroma_from``); its loads, cost and images."""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.es31.kernels import Kernel, Options, header_in_out, image, load_fn, main, texel_bytes
from workbench.es31.record import OpRules, register
from workbench.glsl_text import glsl_float
from workbench.ir.cost import Cost


def kernel(op: ir.DepthToSpace, shapes, opts: Options) -> Kernel:
    """One invocation per input pixel writes its ``block x block`` output pixels."""
    blk = op.block
    n_out = op.out_packs(shapes)
    needed = sorted({c // 4 for p in range(n_out) for chans in op.source_channels(shapes, p)
                     for c in chans})
    images = [(0, op.input, "read"), (1, op.name, "write")]
    src = header_in_out(opts)
    src += "uniform ivec2 u_in_size;\n" + load_fn(opts, "load_in", "u_in")
    if op.chroma_from:
        images.append((2, op.chroma_from, "read"))
        src += image(opts, 2, "u_image", "readonly") + load_fn(opts, "load_image", "u_image")
    body = ["    ivec2 q = ivec2(gl_GlobalInvocationID.xy);",
            "    if (any(greaterThanEqual(q, u_in_size))) return;"]
    body += [f"    vec4 t{p} = load_in(q, {p});" for p in needed]
    if op.chroma_from:
        luma = f"vec3({', '.join(glsl_float(v) for v in ir.LUMA)})"
        for a in range(3):
            for c in range(3):
                body.append(f"    vec3 n{a}{c} = load_image(clamp(q + ivec2({c - 1}, {a - 1}), "
                            f"ivec2(0), u_in_size - 1), 0).rgb;")
    for dy in range(blk):
        for dx in range(blk):
            s = dy * blk + dx
            for p in range(n_out):
                chans = op.source_channels(shapes, p)[s]
                parts = [f"t{c // 4}.{'xyzw'[c % 4]}" for c in chans] + ["0.0"] * (4 - len(chans))
                where = f"ivec3(q * {blk} + ivec2({dx}, {dy}), {p})"
                if not op.chroma_from:
                    body.append(f"    imageStore(u_out, {where}, vec4({', '.join(parts)}));")
                    continue
                # bilinear chroma at the sub-pixel, half-pixel centres, clamped edges
                oy, ox = (np.floor((d + 0.5) / blk - 0.5) for d in (dy, dx))
                fy, fx = ((d + 0.5) / blk - 0.5 - o for d, o in ((dy, oy), (dx, ox)))
                a, c = int(oy) + 1, int(ox) + 1
                body.append(f"    {{ vec3 rgb = mix(mix(n{a}{c}, n{a}{c + 1}, {glsl_float(fx)}), "
                            f"mix(n{a + 1}{c}, n{a + 1}{c + 1}, {glsl_float(fx)}), "
                            f"{glsl_float(fy)});")
                y = parts[0]
                if op.anchor:  # the anchor's luma: this pixel's (nearest) or the bilinear one
                    near = "n11" if op.anchor == "nearest" else "rgb"
                    y = (f"clamp(dot({near}, {luma}) + {glsl_float(op.anchor_scale)} * "
                         f"({y} - 0.5), 0.0, 1.0)")
                body.append(f"      imageStore(u_out, {where}, vec4(clamp(rgb + ({y} - "
                            f"dot(rgb, {luma})), 0.0, 1.0), 1.0)); }}")
    src += main(body)
    return Kernel(op.name, op.name, src, images, None, {"u_in_size": ("size", op.input)},
                  ("pixels", op.input), 1)


def loads(op: ir.DepthToSpace, shapes, opts: Options) -> int:
    h, w, _ = shapes[op.input]
    needed = {c // 4 for p in range(op.out_packs(shapes)) for chans in op.source_channels(shapes, p)
              for c in chans}
    return h * w * (len(needed) + (9 if op.chroma_from else 0))


def cost(op: ir.DepthToSpace, shapes, opts: Options) -> Cost:
    h, w, _ = shapes[op.name]
    return Cost(texel_fetches=loads(op, shapes, opts),
                texture_bytes=h * w * op.out_packs(shapes) * texel_bytes(opts), programs=1)


def images(op: ir.DepthToSpace, shapes, dtype) -> dict:
    h, w, c = shapes[op.name]
    return {op.name: (w, h, 1 if op.chroma_from else ir.packs(c), dtype)}


def kernels(op: ir.DepthToSpace, shapes, opts: Options) -> list[Kernel]:
    return [kernel(op, shapes, opts)]


RULES = register(ir.DepthToSpace, OpRules(kernels, cost, images=images))
