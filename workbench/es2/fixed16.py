"""16-bit fixed point in two 8-bit channels, as the ES 2.0 dense layer stores numbers, and
a tensor stored at 16 bits (:func:`tensor_bits`).

A value ``v`` in [-128, 128) is kept as the integer ``q = round(256 v) + 32768`` in
[0, 65535]: high byte ``q // 256`` in one channel, low byte ``q % 256`` in the next
(8 integer bits including the sign, 8 fractional bits).  Outside the range it saturates;
:class:`FixedPointOverflow` reports that instead of returning garbage.
"""
from __future__ import annotations

import numpy as np

from workbench.es2.record import record
from workbench.es2.texels import REAL, dtype, load, store

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


# --- a tensor stored at 16 bits ------------------------------------------------------------
# A tensor a convolution writes in [0, 1] may be stored at 16 bits instead of 8 (a tensor kept
# with a scale, where only convolutions read it: :func:`workbench.es2.ops.conv.wide_tensors`):
# channels 0-1 of pack p in texture 2p, 2-3 in texture 2p + 1, each value v as the code of
# ``v * 2**SHIFT`` (``enc2``), so in steps of 2**-15 (v = 1 saturates one step below it).

SHIFT = 7


def tensor_bits(op) -> int:
    """The bits a value of ``op``'s output is stored in: 8 (one RGBA8 texture a pack) or 16
    (two, :data:`SHIFT`), as its record says (``bits``: a conv's form,
    :meth:`~workbench.es2.ops.conv.ConvForm.bits`); 8 where it says none."""
    bits = record(op).bits
    return bits(op) if bits else 8


def fetch_glsl(first, second, where) -> str:
    """GLSL of one pack of a 16-bit tensor at ``where``: its two textures' samplers decoded,
    in [0, 1]."""
    return (f"(vec4(dec2(texture2D({first}, {where})), dec2(texture2D({second}, {where})))"
            f" * {1 / 2 ** SHIFT!r})")


def store_glsl(value, components=None) -> str:
    """GLSL of the colour that stores ``components`` (``"xy"`` or ``"zw"``; None: the half
    the pass's ``u_half`` names, 0 or 1, so that one program draws both) of ``value`` (a
    ``vec4`` in [0, 1] where it is not clamped) in one texture of a 16-bit tensor."""
    part = f"{value}.{components}" if components else \
        f"(u_half.x > 0.5 ? {value}.zw : {value}.xy)"
    return f"enc2(clamp({part}, 0.0, 1.0) * {float(2 ** SHIFT)!r})"


def round_trip(values, shift, arithmetic="float32"):
    """``values`` (float32, or float16 for the mediump prediction) as a reader fetches them
    back after a store of ``values * 2**shift`` in two RGBA8 channels each: encoded as the
    shader's ``enc`` does, stored, fetched and decoded as its ``dec`` does, times ``2**-shift``
    (powers of 2: exact)."""
    levels = store(glsl_enc(values * values.dtype.type(2.0 ** shift)))
    return _fetched(levels, shift, arithmetic)


def _fetched(levels, shift, arithmetic):
    """Stored (hi, lo) byte pairs (..., 2) as a reader fetches them: loaded, decoded as the
    shader's ``dec`` does, times ``2**-shift``, in ``arithmetic``'s float type."""
    kind = dtype(arithmetic)
    return (glsl_dec(load(levels, arithmetic)) * kind(2.0 ** -shift)).astype(kind)


def stored_tensor(values, arithmetic="float32"):
    """A 16-bit tensor's values (HxWxC, the float type of ``arithmetic``) as its reader
    fetches them after the store (:func:`store_glsl`: clamped to [0, 1]); ``"real"``
    arithmetic (no storage): ``values`` themselves."""
    if arithmetic == REAL:
        return values
    return round_trip(np.clip(values, values.dtype.type(0), values.dtype.type(1)), SHIFT,
                      arithmetic)


def tensor_bytes(values):
    """A 16-bit tensor's fetched values (HxWxC, :func:`stored_tensor`) -> uint8
    HxWx(8*packs), its textures' bytes in order (channel c's high and low byte at 2c, 2c + 1),
    as the GPU runner returns them; a texture's channel past the tensor's holds 0's code, and
    a texture wholly past it, no program writes, zero bytes)."""
    h, w, c = values.shape
    written = np.zeros((h, w, c + c % 2))
    written[..., :c] = np.asarray(values, np.float64) * 2 ** SHIFT
    out = np.zeros((h, w, 4 * -(-c // 4), 2), np.uint8)
    out[..., :written.shape[2], :] = encode(written)
    return out.reshape(h, w, -1)


def tensor_values(stored, channels, arithmetic="float32"):
    """:func:`tensor_bytes`' inverse: the values a reader fetches from a 16-bit tensor's
    bytes (uint8 HxWx(8*packs)), HxWx``channels``."""
    pairs = np.asarray(stored).reshape(*stored.shape[:2], -1, 2)[..., :channels, :]
    return _fetched(pairs, SHIFT, arithmetic)
