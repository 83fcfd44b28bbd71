"""The ES 2.0 record of :class:`workbench.ir.Upsample`: x``scale`` nearest or bilinear
upsampling of every channel, one program per pack of 4 channels, its emulator, limits, cost
and tiling.

Nearest: output pixel ``o`` fetches input pixel ``floor(o / scale)``.  Bilinear (half-pixel
centres, edges clamped, as ``tf.image.resize`` and Keras' ``UpSampling2D``): 4 nearest
fetches mixed in float, as the SR demux mixes the chroma (:func:`workbench.es2.emulate.
bilinear`; a GL_LINEAR sampler on RGBA8 would filter with 8-bit weights).
"""
from __future__ import annotations

from workbench import ir
from workbench.es2.emulate import bilinear, quantize
from workbench.es2.limits import Target, fits
from workbench.es2.record import OpRecord, register
from workbench.es2.shaders import (OUT_TEXEL, Pass, bilinear_taps, block_position, fetch_lines,
                                   same_pack_pass)
from workbench.ir.cost import Cost


def fetches(op: ir.Upsample) -> int:
    return 1 if op.interpolation == "nearest" else 4


def program(op: ir.Upsample, pack: int, precision="highp") -> Pass:
    if op.interpolation == "nearest":  # the input pixel it lies in
        vectors, body = {}, [f"    gl_FragColor = texture2D(u_in0, {OUT_TEXEL});"]
    else:
        vectors, up = {"u_in_texel": ("texel", op.input)}, bilinear_taps(op.scale)
        taps = [f"t{k}" for k in range(4)]
        body = block_position(op.scale) + list(up.lines) + fetch_lines(
            [(f"vec4 {t}", "u_in0", where, "") for t, where in zip(taps, up.taps)]) + [
            f"    gl_FragColor = {up.mixed(taps)};"]
    return same_pack_pass(op, pack, precision, body, vectors, out_texel=True)


def passes(op: ir.Upsample, shapes, target: Target) -> list[Pass]:
    """One program per pack of 4 channels (one render target each)."""
    return [program(op, p, target.precision) for p in range(op.out_packs(shapes))]


def emulate(op: ir.Upsample, x):
    """The upsampled HxWxC ``x`` in its float type, as the program computes it."""
    if op.interpolation == "nearest":
        return x.repeat(op.scale, axis=0).repeat(op.scale, axis=1)
    return bilinear(x, op.scale)


def apply(op: ir.Upsample, tensors, arithmetic):
    """The stored output, as the next op fetches it."""
    return quantize(emulate(op, tensors[op.input]), arithmetic)


def check(op: ir.Upsample, shapes, limits):
    fits(op.name, "texel fetches per fragment", fetches(op), limits.fetches_per_fragment, limits)


def cost(op: ir.Upsample, shapes, programs=None) -> Cost:
    """Fetches (and the bilinear mix's 3 multiply-adds a channel) of every output pixel."""
    h, w, c = shapes[op.name]
    n = op.out_packs(shapes)
    return Cost(multiply_adds=h * w * c * 3 if op.interpolation == "bilinear" else 0,
                texel_fetches=h * w * n * fetches(op), texture_bytes=h * w * 4 * n, programs=n)


def tile(op: ir.Upsample, step, reach):
    """The step divides by the scale; nearest reads its own source pixel, bilinear the two
    nearest."""
    out = reach[op.input] + (step[op.input] if op.interpolation == "bilinear" else 0)
    return step[op.input] / op.scale, out


RECORD = register(ir.Upsample, OpRecord(
    "Upsample", passes=passes, apply=apply, check=check, cost=cost, tile=tile))
