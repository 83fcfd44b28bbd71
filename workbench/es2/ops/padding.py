"""A convolution's taps in the padding: 0/1 masks (exact: a masked tap adds 0) and, where the
padding holds a value other than 0 (a tensor stored with an offset: the op's ``pad_value``),
what each input pack's masked tap adds instead.  The masks of a column and a row are
``mx<dx>`` and ``my<dy>`` (:func:`workbench.es2.shaders.coordinates`), or inline."""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.es2.shaders import inside_mask
from workbench.glsl_text import glsl_vec


def axis_mask(axis, d, inline_masks) -> str:
    """The mask of tap ``d`` along ``axis`` (``"x"`` or ``"y"``): 1 inside the input, else 0."""
    return f"({inside_mask(axis, d)})" if inline_masks else f"m{axis}{d}"


def tap_mask(dx, dy, inline_masks) -> str:
    """The line that sets the mask ``m<dx>_<dy>`` of tap ``(dy, dx)``."""
    return (f"    float m{dx}_{dy} = {axis_mask('x', dx, inline_masks)} * "
            f"{axis_mask('y', dy, inline_masks)};")


def padding_terms(op, logical) -> list[str]:
    """What each input pack's masked tap adds where the padding holds ``pad_value`` (a
    tensor stored with an offset): ``+ pv * (1.0 - m)`` after its ``texel * m`` (exact: m is
    0 or 1); nothing where the padding holds 0."""
    if op.pad_value is None:
        return [""] * len(logical)
    values = np.pad(op.pad_value, (0, ir.PACK * max(logical, default=0) + ir.PACK))
    return [f" + {glsl_vec(values[ir.PACK * p:ir.PACK * p + ir.PACK])} * (1.0 - m{{dx}}_{{dy}})"
            for p in logical]
