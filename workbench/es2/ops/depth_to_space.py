"""The ES 2.0 record of :class:`workbench.ir.DepthToSpace`: ``tf.nn.depth_to_space``, one
program per output pack; with ``chroma_from`` the SR demux (the net's luma recombined with the
RGB image's bilinearly upsampled chroma).  Its emulator, limits, cost and tiling.
"""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.es2.emulate import bilinear, luma, quantize
from workbench.es2.limits import Target, fits
from workbench.es2.record import OpRecord, register
from workbench.es2.shaders import (Binding, Pass, bilinear_corners, block_position, header,
                                   uniform_declarations)
from workbench.glsl_text import glsl_float, glsl_vec
from workbench.ir.cost import Cost
from workbench.nets import storage


def fetches(op: ir.DepthToSpace, shapes, pack) -> int:
    """Texel fetches per fragment of output pack ``pack``: each source pack once, and the
    demux's 4 chroma taps."""
    return len(op.source_packs(shapes, pack)) + (4 if op.chroma_from else 0)


def program(op: ir.DepthToSpace, pack: int, shapes, precision="highp") -> Pass:
    """Depth-to-space; with ``chroma_from`` the SR demux: the sub-pixel luma plus the chroma
    of the input image sampled bilinearly (a luma change added equally to R, G and B leaves
    Cb and Cr unchanged, since their weights sum to 0 and Y's to 1).  An ``anchor`` takes its
    luma from the same 4 taps (nearest: the tap of weight >= 0.5 on each axis), no fetch
    more; its sub-pixel is decoded first if stored companded (``anchor_storage``)."""
    in_packs = op.source_packs(shapes, pack)
    samplers = [f"u_in{i}" for i in range(len(in_packs))]
    bindings = [Binding(s, op.input, p) for s, p in zip(samplers, in_packs)]
    body = block_position(op.block)
    body += [f"    vec4 t{p} = texture2D({s}, uv);" for s, p in zip(samplers, in_packs)]
    # the sub-pixel's channels, chosen by its row, then its column (a selection: exact)
    chosen = []
    for chans in op.source_channels(shapes, pack):
        parts = [f"t{c // ir.PACK}.{'xyzw'[c % ir.PACK]}" for c in chans]
        chosen.append(f"vec4({', '.join(parts + ['0.0'] * (ir.PACK - len(parts)))})")
    rows = [_choose("sub.x", chosen[r * op.block:(r + 1) * op.block]) for r in range(op.block)]
    body.append(f"    vec4 v = {_choose('sub.y', rows)};")
    vectors = {"u_in_texel": ("texel", op.input)}
    if op.chroma_from:
        # Bilinear chroma with half-pixel centres and clamped edges, computed from 4 nearest
        # fetches in float: a GL_LINEAR sampler on RGBA8 filters with 8-bit weights on
        # llvmpipe, which would not match the emulator byte for byte.
        samplers.append("u_image")
        bindings.append(Binding("u_image", op.chroma_from, 0))
        body += bilinear_corners(op.block) + [
                 "    vec3 c00 = texture2D(u_image, lo).rgb;",
                 "    vec3 c10 = texture2D(u_image, vec2(hi.x, lo.y)).rgb;",
                 "    vec3 c01 = texture2D(u_image, vec2(lo.x, hi.y)).rgb;",
                 "    vec3 c11 = texture2D(u_image, hi).rgb;",
                 "    vec3 rgb = mix(mix(c00, c10, f.x), mix(c01, c11, f.x), f.y);",
                 "    float y = v.x;"]
        if op.anchor_storage != "linear":
            body.append(f"    y = {storage.DECODE_GLSL[op.anchor_storage].format(x='y')};")
        luma = glsl_vec(ir.LUMA, 3)
        if op.anchor:
            # the nearest input pixel is the tap of weight >= 0.5 on each axis
            anchor = (f"dot(rgb, {luma})" if op.anchor == "bilinear" else
                      f"dot(s.y > 0.5 ? (s.x > 0.5 ? c00 : c10) : (s.x > 0.5 ? c01 : c11), {luma})")
            body.append(f"    y = clamp({anchor} + {glsl_float(op.anchor_scale)} * (y - 0.5), "
                        "0.0, 1.0);")
        body.append(f"    gl_FragColor = vec4(rgb + (y - dot(rgb, {luma})), 1.0);")
    else:
        body.append("    gl_FragColor = v;")
    source = (header(precision) + uniform_declarations(samplers, vectors)
              + "void main() {\n" + "\n".join(body) + "\n}\n")
    return Pass(f"{op.name}.{pack}", op.name, source, bindings, [(op.name, pack)], vectors)


def _choose(index, options, first=0) -> str:
    """GLSL choosing ``options[k]`` where the float ``index`` holds ``first + k``."""
    if len(options) == 1:
        return options[0]
    return (f"({index} < {glsl_float(first + 0.5)} ? {options[0]} : "
            f"{_choose(index, options[1:], first + 1)})")


def passes(op: ir.DepthToSpace, shapes, target: Target) -> list[Pass]:
    """One program per output pack (one render target each, whatever the target allows)."""
    return [program(op, p, shapes, target.precision) for p in range(op.out_packs(shapes))]



def emulate(op: ir.DepthToSpace, x, image=None):
    """``tf.nn.depth_to_space``; with ``image`` (the SR demux) the luma recombined with the
    image's bilinearly upsampled chroma: ``rgb + (y - luma(rgb))``, ``y`` corrected by the
    anchor's ``clip(a + anchor_scale * (y - 0.5), 0, 1)`` when there is one (``y`` decoded
    first by its ``anchor_storage`` law)."""
    h, w, c = x.shape
    b = op.block
    y = x.reshape(h, w, b, b, c // (b * b)).transpose(0, 2, 1, 3, 4).reshape(h * b, w * b, -1)
    if image is None:
        return y
    rgb = bilinear(image[..., :3], b)
    y = storage.decode(y[..., :1], op.anchor_storage)
    if op.anchor:
        a = (luma(rgb) if op.anchor == "bilinear"
             else luma(image[..., :3]).repeat(b, axis=0).repeat(b, axis=1))
        y = np.clip(a[..., None] + op.anchor_scale * (y - 0.5), 0.0, 1.0)
    return rgb + (y - luma(rgb)[..., None])


def apply(op: ir.DepthToSpace, tensors, arithmetic):
    """The stored output, as the next op fetches it."""
    chroma = tensors[op.chroma_from] if op.chroma_from else None
    return quantize(emulate(op, tensors[op.input], chroma), arithmetic)



def check(op: ir.DepthToSpace, shapes, limits):
    """The fetches per fragment of each program."""
    for pack in range(op.out_packs(shapes)):
        fits(op.name, "texel fetches per fragment", fetches(op, shapes, pack),
             limits.fetches_per_fragment, limits)


def cost(op: ir.DepthToSpace, shapes, programs=None) -> Cost:
    h, w, _ = shapes[op.name]
    n = op.out_packs(shapes)
    return Cost(texel_fetches=h * w * sum(fetches(op, shapes, p) for p in range(n)),
                texture_bytes=h * w * 4 * n, programs=n)


def tile(op: ir.DepthToSpace, step, reach):
    """The step divides by the block; an output pixel reads its own source pixel, and the
    demux's bilinear chroma the image's two nearest pixels."""
    out = reach[op.input]
    if op.chroma_from:
        out = max(out, reach[op.chroma_from] + step[op.chroma_from])
    return step[op.input] / op.block, out


RECORD = register(ir.DepthToSpace, OpRecord(
    "DepthToSpace", passes=passes, apply=apply, check=check, cost=cost, tile=tile))
