"""The ES 2.0 record of :class:`workbench.ir.Pool`: max or average pooling, one program per
pack of 4 channels, its emulator, limits, cost and tiling.

A program fetches the ``size`` x ``size`` taps of its output pixel's window (coordinates and
'same'-padding masks as a convolution's, :func:`workbench.es2.shaders.coordinates`).  Max:
``m = max(m, tap * mask)`` from ``m = 0`` (stored values are >= 0, so a padded tap, 0, never
wins).  Average: ``s += tap * mask`` in tap order, then ``s * (rx * ry)``, where ``rx`` is
the reciprocal of the valid taps along x (1, 1/2 or the float32 nearest 1/3, chosen exactly,
never divided) and ``ry`` along y; for 'valid' windows ``rx * ry`` is one literal.  The
emulator computes the same steps in the same float type.
"""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.es2.emulate import F32, quantize
from workbench.es2.limits import Target, fits
from workbench.es2.record import OpRecord, register
from workbench.es2.shaders import Pass, coordinates, masked, same_pack_pass, window_uniforms
from workbench.glsl_text import glsl_float
from workbench.ir.cost import Cost

RECIPROCALS = {1: F32(1.0), 2: F32(0.5), 3: F32(1 / 3)}  # 1 / valid taps along one axis


def program(op: ir.Pool, pack: int, precision="highp") -> Pass:
    k = op.size
    vectors = window_uniforms(op)
    padded = masked(op.size, op.padding)
    body = coordinates(k, padded, precision=precision)
    body.append("    vec4 m = vec4(0.0);" if op.kind == "max" else "    vec4 s = vec4(0.0);")
    for dy in range(k):
        for dx in range(k):
            tap = f"texture2D(u_in0, vec2(x{dx}, y{dy}))" + (f" * (mx{dx} * my{dy})"
                                                              if padded else "")
            body.append(f"    m = max(m, {tap});" if op.kind == "max" else f"    s += {tap};")
    if op.kind == "max":
        body.append("    gl_FragColor = m;")
    elif padded:
        third = glsl_float(RECIPROCALS[3])
        for axis in "xy":
            count = " + ".join(f"m{axis}{d}" for d in range(k))
            body += [f"    float c{axis} = {count};",
                     f"    float r{axis} = c{axis} < 1.5 ? 1.0 : (c{axis} < 2.5 ? 0.5 : {third});"]
        body.append("    gl_FragColor = s * (rx * ry);")
    else:
        body.append(f"    gl_FragColor = s * {glsl_float(RECIPROCALS[k] * RECIPROCALS[k])};")
    return same_pack_pass(op, pack, precision, body, vectors)


def passes(op: ir.Pool, shapes, target: Target) -> list[Pass]:
    """One program per pack of 4 channels (one render target each)."""
    return [program(op, p, target.precision) for p in range(op.out_packs(shapes))]


def emulate(op: ir.Pool, x):
    """Pooling of HxWxC ``x`` (float32, or float16 for mediump: the arithmetic follows
    ``x``'s type) as the program computes it, before storage."""
    F = x.dtype.type
    h, w, c = x.shape
    k, s = op.size, op.stride
    (oh, ow), (pt, pl) = ir.conv_out_hw((h, w), k, s, op.padding), \
        ir.conv_pads((h, w), k, s, op.padding)
    rows, cols = max(h + 2 * pt, (oh - 1) * s + k), max(w + 2 * pl, (ow - 1) * s + k)
    padded = np.zeros((rows, cols, c), F)
    padded[pt:pt + h, pl:pl + w] = x
    row_ok = (np.arange(rows) >= pt) & (np.arange(rows) < pt + h)
    col_ok = (np.arange(cols) >= pl) & (np.arange(cols) < pl + w)
    acc = np.zeros((oh, ow, c), F)
    for dy in range(k):
        for dx in range(k):
            tap = padded[dy:dy + (oh - 1) * s + 1:s, dx:dx + (ow - 1) * s + 1:s]
            acc = np.maximum(acc, tap) if op.kind == "max" else acc + tap
    if op.kind == "max":
        return acc
    if masked(op.size, op.padding):
        def reciprocal(ok, n):  # valid taps along one axis, per output position
            counts = sum(ok[d:d + (n - 1) * s + 1:s].astype(int) for d in range(k))
            return np.array([RECIPROCALS[int(n_)] for n_ in counts]).astype(F)
        inv = reciprocal(row_ok, oh)[:, None] * reciprocal(col_ok, ow)[None, :]
        return acc * inv[..., None]
    return acc * F(RECIPROCALS[k] * RECIPROCALS[k])


def apply(op: ir.Pool, tensors, arithmetic):
    """The stored output, as the next op fetches it."""
    return quantize(emulate(op, tensors[op.input]), arithmetic)


def check(op: ir.Pool, shapes, limits):
    """Its taps within the fetches a fragment may make."""
    fits(op.name, "texel fetches per fragment", op.size ** 2, limits.fetches_per_fragment,
         limits)


def cost(op: ir.Pool, shapes, programs=None) -> Cost:
    """Adds (the average's) and fetches of every output pixel and channel."""
    h, w, c = shapes[op.name]
    n = op.out_packs(shapes)
    return Cost(multiply_adds=h * w * c * op.size ** 2 if op.kind == "average" else 0,
                texel_fetches=h * w * n * op.size ** 2, texture_bytes=h * w * 4 * n,
                programs=n)


def tile(op: ir.Pool, step, reach):
    """A stride-1 'same' window keeps the grid and reaches ``size // 2`` more pixels."""
    if op.stride != 1 or op.padding != "same":
        return None
    return step[op.input], reach[op.input] + (op.size // 2) * step[op.input]


RECORD = register(ir.Pool, OpRecord(
    "Pool", passes=passes, apply=apply, check=check, cost=cost, tile=tile))
