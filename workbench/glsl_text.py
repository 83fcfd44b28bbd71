"""GLSL source text shared by the back ends."""
from __future__ import annotations

import numpy as np


def glsl_float(v) -> str:
    """A float32 as a GLSL literal that reads back exactly (``1.0``, ``0.333333343``)."""
    s = f"{float(np.float32(v)):.9g}"
    return s if any(ch in s for ch in ".en") else s + ".0"


def glsl_vec(values, n=4) -> str:
    """``vecN(...)`` of ``values``, zero-filled to ``n`` components."""
    values = list(values) + [0.0] * (n - len(values))
    return f"vec{n}({', '.join(glsl_float(v) for v in values)})"
