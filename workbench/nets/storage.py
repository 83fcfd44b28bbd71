"""How a value in [0, 1] is stored in an 8-bit texture channel: its storage law, each form
(numpy or ``keras.ops``, and GLSL) defined once, side by side.

* ``"linear"`` -- the value itself, rounded to a multiple of 1/255 (every tensor of a net).
* ``"sqrt"`` -- companded about 0.5: ``v = 0.5 + sign(t) sqrt(|t| / 2)``, ``t = q - 0.5``, read
  back as ``q = 0.5 + 2 (v - 0.5) |v - 0.5|`` (exact inverses on [0, 1]).  The steps are finest
  near 0.5 (the two levels around it 1/255**2 apart) and ~2/255 at 0 and 1: for an SR net's
  anchor correction, small almost everywhere, the rounding error is several times smaller.

Each law maps values below 0 to values below 0 and values above 1 to values above 1, and
is monotonic: a clamp to [0, 1] after it (an 8-bit target's) stores what one before it would.

The code generators fill the GLSL templates in with ``template.format(x=...)`` (a float or
vec expression, used more than once: pass a variable).
"""
from __future__ import annotations

import numpy as np

LAWS = ("linear", "sqrt")
# sign(t) sqrt(|t| / 2) computed as t / sqrt(max(2 |t|, FLOOR)): one square root (a reciprocal
# one) and no sign (VideoCore IV's L5 179 -> 160 instructions).  Below the floor (|t| <
# 2**-15) it is linear, no NaN at 0, and stores what the law stores there, the level either
# side of 0.5 by t's sign (the next ones begin at |t| = 2 / 255**2, past 2**-15); 2**-14 is
# mediump's smallest normal
FLOOR = 2.0 ** -14
ENCODE_GLSL = {"sqrt": "(0.5 + ({x} - 0.5) * inversesqrt(max(abs({x} + {x} - 1.0), "
                       f"{FLOOR!r})))"}
DECODE_GLSL = {"sqrt": "(0.5 + 2.0 * ({x} - 0.5) * abs({x} - 0.5))"}


def check(law: str, where: str = "storage") -> str:
    """``law`` if it is one of :data:`LAWS`, else a ValueError naming ``where``."""
    if law not in LAWS:
        raise ValueError(f"{where} must be one of {', '.join(LAWS)}, not {law!r}")
    return law


def encode(q, law: str, xp=np):
    """Value(s) ``q`` in [0, 1] -> what the texture stores, before its rounding (``xp``: numpy,
    or ``keras.ops``; numpy keeps a float16 input in float16, as the emulator's mediump)."""
    if law == "linear":
        return q
    t = q - 0.5
    return 0.5 + t * (1.0 / xp.sqrt(xp.maximum(xp.abs(t + t), FLOOR)))  # (as ENCODE_GLSL)


def decode(v, law: str, xp=np):
    """What a texture stores -> the value it stands for (the inverse of :func:`encode`)."""
    if law == "linear":
        return v
    t = v - 0.5
    return 0.5 + 2.0 * t * xp.abs(t)
