"""RGBA8 texels as the GPU converts them: a fetch turns level ``n`` into ``n * float32(1/255)``
(:func:`load`), a render target clamps to [0, 1] and rounds ``255 * y`` to the nearest level
(:func:`store`); the float types the emulator (:mod:`workbench.es2.emulate`) computes in."""
from __future__ import annotations

import numpy as np

F32 = np.float32
LEVEL = F32(1 / 255)
# the GPU's arithmetic the emulator predicts: "float32" (highp; llvmpipe, whatever the shader
# declares) or "float16" (a GPU whose mediump is a true 16-bit float)
DTYPES = {"float32": np.float32, "float16": np.float16}
# no storage at all: every tensor kept as computed, float32 (the calibration of unbounded
# tensors' ranges, :mod:`workbench.es2.calibrate`); not a GPU's arithmetic
REAL = "real"
# the GPU's storage with float32 arithmetic in any order (a convolution as matrix products):
# the emulator's bytes but for rounding ties, many times faster (the reference check of a
# deploy, :mod:`workbench.es2.reference`); not a GPU's arithmetic either
FAST = "fast"


def dtype(arithmetic):
    """The numpy float type the emulator computes in for ``arithmetic``."""
    if arithmetic in (REAL, FAST):
        return np.float32
    if arithmetic not in DTYPES:
        raise ValueError(f"arithmetic must be one of {tuple(DTYPES)}, not {arithmetic!r}")
    return DTYPES[arithmetic]


def load(levels, arithmetic="float32"):
    """8-bit levels -> float, as a texture fetch converts RGBA8: ``level * float32(1/255)``
    (rounded to float16 for ``arithmetic="float16"``)."""
    return (np.asarray(levels, F32) * LEVEL).astype(dtype(arithmetic))


def store(x):
    """float32 (or float16) -> uint8 levels, as an RGBA8 render target stores them: clamp to
    [0, 1], then ``255 * x`` rounded to the nearest integer, ties to even (NaN, which only a
    float16 overflow makes, as 0)."""
    x = np.nan_to_num(np.asarray(x, F32), nan=0.0)
    return np.rint(np.clip(x, F32(0), F32(1)) * F32(255)).astype(np.uint8)
