"""16-bit fixed point in two 8-bit channels, as the ES 2.0 dense layer stores numbers.

A value ``v`` in [-128, 128) is kept as the integer ``q = round(256 v) + 32768`` in
[0, 65535]: high byte ``q // 256`` in one channel, low byte ``q % 256`` in the next
(8 integer bits including the sign, 8 fractional bits).  Outside the range it saturates;
:class:`FixedPointOverflow` reports that instead of returning garbage.
"""
from __future__ import annotations

import numpy as np

RANGE = (-128.0, 128.0)
STEP = 1.0 / 256
LOW, HIGH = -32768, 32767

# GLSL ES 1.00 forms of the same, for the shaders.
GLSL = """vec2 enc(float v) {
    float u = clamp(floor(v * 256.0 + 0.5), -32768.0, 32767.0) + 32768.0;
    float hi = floor(u / 256.0);
    return vec2(hi, u - hi * 256.0) / 255.0;
}
float dec(vec2 t) {
    vec2 b = floor(t * 255.0 + 0.5);
    return (b.x * 256.0 + b.y - 32768.0) / 256.0;
}
vec4 enc2(vec2 v) { return vec4(enc(v.x), enc(v.y)); }
vec2 dec2(vec4 t) { return vec2(dec(t.xy), dec(t.zw)); }
"""


class FixedPointOverflow(ValueError):
    """A value out of the 16-bit fixed-point range; names the layer and how far out."""


def quantize(v):
    """Round to steps of 1/256 and saturate to [-128, 128 - 1/256] (float64)."""
    return np.clip(np.round(np.asarray(v, np.float64) * 256), LOW, HIGH) / 256


def check(v, layer, stage):
    """Raise :class:`FixedPointOverflow` if any value of ``v`` falls outside the range."""
    v = np.asarray(v, np.float64)
    worst = float(v.flat[np.argmax(np.abs(v))]) if v.size else 0.0
    if np.round(worst * 256) > HIGH or np.round(worst * 256) < LOW:
        raise FixedPointOverflow(
            f"layer {layer!r}: {stage} reaches {worst:.2f}, outside the 16-bit fixed-point range "
            f"[{RANGE[0]:.0f}, {RANGE[1]:.0f}) by {abs(worst) - 128:.2f}; scale the layer's "
            "weights down or use the float dense path (dense='float')")


def glsl_enc(v):
    """:data:`GLSL`'s ``enc`` op by op in ``v``'s float type (float16 for the mediump
    prediction): values (...) -> the (hi, lo) / 255 it writes, (..., 2), before the RGBA8
    store."""
    v = np.asarray(v)
    u = np.clip(np.floor(v * 256.0 + 0.5), -32768.0, 32767.0) + 32768.0
    with np.errstate(invalid="ignore", over="ignore"):  # float16: u = 65536 is inf, lo NaN
        hi = np.floor(u / 256.0)
        return np.stack([hi, u - hi * 256.0], axis=-1) / 255.0


def glsl_dec(t):
    """:data:`GLSL`'s ``dec`` op by op in ``t``'s float type: fetched (hi, lo) texel values
    (..., 2) -> values (...)."""
    b = np.floor(np.asarray(t) * 255.0 + 0.5)
    return (b[..., 0] * 256.0 + b[..., 1] - 32768.0) / 256.0


def encode(v):
    """Values -> uint8 (..., 2): high and low byte (saturating)."""
    q = (np.clip(np.round(np.asarray(v, np.float64) * 256), LOW, HIGH) + 32768).astype(np.int64)
    return np.stack([q // 256, q % 256], axis=-1).astype(np.uint8)


def decode(b):
    """uint8 (..., 2) -> values (float64)."""
    b = np.asarray(b, np.int64)
    return (b[..., 0] * 256 + b[..., 1] - 32768) / 256.0


def saturated(b):
    """Where the stored uint8 pairs hold the range's end codes (a sign of overflow)."""
    q = np.asarray(b, np.int64)[..., 0] * 256 + np.asarray(b, np.int64)[..., 1]
    return (q == 0) | (q == 65535)
