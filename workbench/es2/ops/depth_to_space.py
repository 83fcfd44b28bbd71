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
from workbench.es2.shaders import (OUT_TEXEL, Binding, Pass, bilinear_taps, block_position,
                                   fetch_lines, header, sub_index, uniform_declarations)
from workbench.glsl_text import glsl_float, glsl_vec
from workbench.ir.cost import Cost
from workbench.nets import storage


def fetches(op: ir.DepthToSpace, shapes, pack) -> int:
    """Texel fetches per fragment of output pack ``pack``: each source pack once, and the
    demux's 4 chroma taps (and its anchor's pixel where no tap is it)."""
    extra = op.anchor == "nearest" and bilinear_taps(op.block).nearest is None
    return len(op.source_packs(shapes, pack)) + (4 + extra if op.chroma_from else 0)


def program(op: ir.DepthToSpace, pack: int, shapes, precision="highp", chained=False) -> Pass:
    """Depth-to-space; with ``chroma_from`` the SR demux: the sub-pixel luma plus the chroma
    of the input image sampled bilinearly (:func:`~workbench.es2.shaders.bilinear_taps`; a luma
    change added equally to R, G and B leaves Cb and Cr unchanged, since their weights sum to
    0 and Y's to 1).  An ``anchor`` takes its luma from the input pixel the output pixel lies
    in (by 2 a chroma tap, else a fetch of its own at
    :data:`~workbench.es2.shaders.OUT_TEXEL`); its sub-pixel is decoded first if stored
    companded (``anchor_storage``).  ``chained``: the fetches requested each after the
    previous one's result (:func:`~workbench.es2.shaders.fetch_lines`: the same texels)."""
    in_packs = op.source_packs(shapes, pack)
    samplers = [f"u_in{i}" for i in range(len(in_packs))]
    bindings = [Binding(s, op.input, p) for s, p in zip(samplers, in_packs)]
    body = block_position(op.block)
    reads = [(f"vec4 t{p}", s, OUT_TEXEL, "") for s, p in zip(samplers, in_packs)]
    # the sub-pixel's channels, chosen by its row, then its column (a selection: exact)
    chosen = []
    for chans in op.source_channels(shapes, pack):
        parts = [f"t{c // ir.PACK}.{'xyzw'[c % ir.PACK]}" for c in chans]
        chosen.append(f"vec4({', '.join(parts + ['0.0'] * (ir.PACK - len(parts)))})")
    index = sub_index(op.block)
    rows = [_choose(f"{index}.x", chosen[r * op.block:(r + 1) * op.block])
            for r in range(op.block)]
    picked = [f"    vec4 v = {_choose(f'{index}.y', rows)};"]
    vectors = {"u_in_texel": ("texel", op.input)}
    if not op.chroma_from:
        body += fetch_lines(reads, chained) + picked + ["    gl_FragColor = v;"]
    else:
        # Bilinear chroma computed from 4 nearest fetches in float: a GL_LINEAR sampler on
        # RGBA8 filters with 8-bit weights on llvmpipe, which would not match the emulator
        # byte for byte.
        samplers.append("u_image")
        bindings.append(Binding("u_image", op.chroma_from, 0))
        up = bilinear_taps(op.block)
        taps = [f"c{k}" for k in range(4)]
        reads += [(f"vec3 {c}", "u_image", where, ".rgb") for c, where in zip(taps, up.taps)]
        anchor = taps[up.nearest] if up.nearest is not None else "a"
        if op.anchor == "nearest" and up.nearest is None:
            reads.append(("vec3 a", "u_image", OUT_TEXEL, ".rgb"))
        fetched = fetch_lines(reads, chained)  # (the sub-pixel picked before the chroma's)
        body += list(up.lines) + fetched[:len(in_packs)] + picked + fetched[len(in_packs):]
        body += [f"    vec3 rgb = {up.mixed(taps)};", "    float y = v.x;"]
        if op.anchor_storage != "linear":
            body.append(f"    y = {storage.DECODE_GLSL[op.anchor_storage].format(x='y')};")
        luma = glsl_vec(ir.LUMA, 3)
        if op.anchor:
            near = f"dot({anchor if op.anchor == 'nearest' else 'rgb'}, {luma})"
            body.append(f"    y = clamp({near} + {glsl_float(op.anchor_scale)} * (y - 0.5), "
                        "0.0, 1.0);")
        body.append(f"    gl_FragColor = vec4(rgb + (y - dot(rgb, {luma})), 1.0);")
    source = (header(precision) + uniform_declarations(samplers, vectors, out_texel=True)
              + "void main() {\n" + "\n".join(body) + "\n}\n")
    return Pass(f"{op.name}.{pack}", op.name, source, bindings, [(op.name, pack)], vectors)


def _choose(index, options, first=0) -> str:
    """GLSL choosing ``options[k]`` where the float ``index`` holds ``first + k``."""
    if len(options) == 1:
        return options[0]
    return (f"({index} < {glsl_float(first + 0.5)} ? {options[0]} : "
            f"{_choose(index, options[1:], first + 1)})")


def passes(op: ir.DepthToSpace, shapes, target: Target, chained=False) -> list[Pass]:
    """One program per output pack (one render target each, whatever the target allows);
    ``chained``: a layer option (:func:`layer_options`), see :func:`program`."""
    return [program(op, p, shapes, target.precision, chained)
            for p in range(op.out_packs(shapes))]


def layer_options(op: ir.DepthToSpace) -> tuple[str, ...]:
    """What a driver may ask of its programs: its fetches ``chained``
    (:func:`workbench.es2.drivers.tune`, where the driver estimates cycles)."""
    return ("chained",)



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
    "DepthToSpace", passes=passes, apply=apply, check=check, cost=cost, tile=tile,
    layer_options=layer_options))
