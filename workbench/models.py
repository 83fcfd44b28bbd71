"""Model builders.

:func:`sr_x2` -- the reference x2 super-resolution net on luma (DESIGN.md §1a):

=====  =======================================  ==========  ========
layer  op                                       in -> out   programs
=====  =======================================  ==========  ========
L1     5x5 conv                                 1 -> 48     12
L2     grouped 3x3 conv, 4 groups of 12 -> 8    48 -> 32    8
L3     1x1 conv                                 32 -> 24    6
L4     grouped 3x3 conv, 2 groups of 12 -> 8    24 -> 16    4
L5     1x1 conv, outputs = the 2x2 sub-pixels   16 -> 4     1
=====  =======================================  ==========  ========

Input: full-range luma ``Y = 0.299R + 0.587G + 0.114B`` in [0, 1], shape (N, H, W, 1),
any H and W.  Output: luma of the x2 image, (N, 2H, 2W, 1), in [0, 1].
7,340 parameters with the default widths.
"""
from __future__ import annotations

import keras

from workbench.layers import Act, DepthToSpace, GroupConv2D

SR_WIDTHS = (48, 32, 24, 16)
SR_KERNELS = (5, 3, 1, 3)
SR_GROUPS = (1, 4, 1, 2)


def sr_x2(widths=SR_WIDTHS, kernels=SR_KERNELS, groups=SR_GROUPS,
          activation="bounded_relu", scale=2, name="sr_x2"):
    """The reference SR net; ``widths``/``kernels``/``groups`` give layers L1..L4.

    L5 is a 1x1 conv to ``scale**2`` sub-pixel outputs, followed by the same bounded
    activation (the RGBA8 target clamps to [0, 1]) and depth-to-space.
    """
    if not (len(widths) == len(kernels) == len(groups)):
        raise ValueError("sr_x2: widths, kernels and groups must have the same length, "
                         f"got {len(widths)}, {len(kernels)}, {len(groups)}")
    x = inputs = keras.Input((None, None, 1), name="luma")
    for i, (w, k, g) in enumerate(zip(widths, kernels, groups), start=1):
        x = GroupConv2D(w, k, groups=g, name=f"L{i}")(x)
        x = Act(activation, name=f"L{i}_act")(x)
    i = len(widths) + 1
    x = GroupConv2D(scale * scale, 1, name=f"L{i}")(x)
    x = Act(activation, name=f"L{i}_act")(x)
    outputs = DepthToSpace(scale, name="subpixels")(x)
    return keras.Model(inputs, outputs, name=name)
