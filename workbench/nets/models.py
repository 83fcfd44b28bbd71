"""Model builders, and :func:`load_model` for any model the workbench saved.

:func:`sr_x2` -- the reference x2 super-resolution net on luma (docs/design.md, "The x2 SR net"):

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

from workbench.nets.layers import Act, DepthToSpace, GroupConv2D  # registers the custom layers
# Re-exported: reading a model file and resolving a name need no Keras (a command reads an
# ONNX file or a name without TensorFlow), so they live in model_files and named.
from workbench.nets.model_files import ModelFileError, load_model  # noqa: F401
from workbench.nets.named import (CLASSIFIER_PRESETS, NAMED, NamedModel, is_name,  # noqa: F401
                                  named, reference_cifar10, reference_sr)


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


# --- the dogs classifier (docs/design.md, "The dogs classifier") and smaller nets built from the same units -------
from workbench.nets.layers import FastBatchNorm, Quantize8, Shuffle  # noqa: E402

SHUFFLE_STEP = 8


def dogs_classifier(preset="dogs120", *, input_size=None, classes=None,
                    activation="sigmoid_like", bn_momentum=0.75, quantize=False, fast_bn=True,
                    name=None):
    """The reference 120-class classifier (``preset="dogs120"``: 385x385x3 -> 120 logits,
    225,112 parameters) or a smaller net of the same units (see ``CLASSIFIER_PRESETS``).

    Input: RGB in [0, 1], (N, input_size, input_size, 3).  Output: logits (softmax on the
    CPU, train with ``from_logits=True``).  Every conv has no bias and is followed by batch
    norm, then (in this order) the residual ``Add`` and the activation.  Layer names:
    ``stem``, ``s{stage}u{unit}_1x1`` / ``_3x3`` (+ ``_bn``, ``_add``, ``_act``),
    ``down{stage}``, ``final``, ``pool``, ``logits``; stages and units count from 1.
    ``quantize=True`` puts a :class:`Quantize8` (8-bit rounding, straight-through
    gradient) after every activation, for quantisation-aware training.  ``fast_bn=False``
    uses Keras' own ``BatchNormalization`` instead of :class:`FastBatchNorm` (same weights).
    """
    if preset not in CLASSIFIER_PRESETS:
        raise ValueError(f"unknown preset {preset!r}; presets: {', '.join(CLASSIFIER_PRESETS)}")
    p = CLASSIFIER_PRESETS[preset]
    input_size = input_size or p["input_size"]

    def conv_bn(x, filters, kernel, groups, label, strides=1, padding="same"):
        x = GroupConv2D(filters, kernel, groups=groups, strides=strides, padding=padding,
                        use_bias=False, name=label)(x)
        bn = FastBatchNorm if fast_bn else keras.layers.BatchNormalization
        return bn(momentum=bn_momentum, name=f"{label}_bn")(x)

    def act(x, label):
        x = Act(activation, name=f"{label}_act")(x)
        return Quantize8(name=f"{label}_q8")(x) if quantize else x

    x = inputs = keras.Input((input_size, input_size, 3), name="rgb")
    kernel, stride, padding = p["stem"]
    x = act(conv_bn(x, p["stages"][0][1], kernel, 1, "stem", stride, padding), "stem")
    widths = [c for _, c in p["stages"]] + [p["head"]]
    for s, (units, c) in enumerate(p["stages"], start=1):
        for u in range(1, units + 1):
            label = f"s{s}u{u}"
            y = Shuffle(SHUFFLE_STEP, name=f"{label}_shuffle")(x) if c > 32 and u > 1 else x
            y = act(conv_bn(y, c, 1, max(1, c // 32), f"{label}_1x1"), f"{label}_1x1")
            y = conv_bn(y, c, 3, c // 4, f"{label}_3x3")
            x = act(keras.layers.Add(name=f"{label}_add")([y, x]), label)
        x = act(conv_bn(x, widths[s], 3, c // 8, f"down{s}", 2, "valid"), f"down{s}")
    if p["final"]:
        x = act(conv_bn(x, p["head"], 3, p["head"] // 8, "final", padding="valid"), "final")
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    outputs = keras.layers.Dense(classes or p["classes"], name="logits")(x)
    return keras.Model(inputs, outputs, name=name or f"classifier_{preset}")


def plain_classifier(input_size=32, classes=10, widths=(16, 24, 28), *,
                     activation="bounded_relu", bn_momentum=0.75, quantize=False,
                     name="plain_classifier"):
    """A classifier of the layers a PyTorch user writes, which the ONNX front end reads back
    from PyTorch's export patterns: per stage a 3x3 conv (stride 1, 'same'), BatchNorm and
    the activation, then a residual unit (two 3x3 convs, the sum activated), then 2x2 max
    pooling (not after the last); global average pooling and the logits.

    Widths up to 28: a full 3x3 conv over 28 channels (7 packs) with a residual reads 9 x 7
    + 1 = 64 texels and binds 8 textures, ES 2.0's limits (wider layers need groups, as
    :func:`dogs_classifier`'s).
    Input: RGB in [0, 1], (N, input_size, input_size, 3).  Output: logits.  ``activation``
    ``bounded_relu`` is ``nn.Hardtanh(0, 1)`` (``Clip(0, 1)`` in ONNX); ``quantize`` as
    :func:`dogs_classifier`.  Layer names ``s{stage}_in``, ``s{stage}_a``, ``s{stage}_b``
    (+ ``_bn``, ``_act``), ``s{stage}_add``, ``s{stage}_pool``, ``pool``, ``logits``."""
    def conv_bn(x, filters, label):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False, name=label)(x)
        return FastBatchNorm(momentum=bn_momentum, name=f"{label}_bn")(x)

    def act(x, label):
        x = Act(activation, name=f"{label}_act")(x)
        return Quantize8(name=f"{label}_q8")(x) if quantize else x

    x = inputs = keras.Input((input_size, input_size, 3), name="rgb")
    for s, width in enumerate(widths, start=1):
        x = act(conv_bn(x, width, f"s{s}_in"), f"s{s}_in")
        y = act(conv_bn(x, width, f"s{s}_a"), f"s{s}_a")
        y = conv_bn(y, width, f"s{s}_b")
        x = act(keras.layers.Add(name=f"s{s}_add")([y, x]), f"s{s}_add")
        if s < len(widths):
            x = keras.layers.MaxPooling2D(2, name=f"s{s}_pool")(x)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    outputs = keras.layers.Dense(classes, name="logits")(x)
    return keras.Model(inputs, outputs, name=name)


def load_named(entry: NamedModel) -> keras.Model:
    """The model of a name (:func:`workbench.nets.named.named`): its checkpoint where it is
    there, else its preset's net with random weights (seed 0); a missing checkpoint without a
    preset is FileNotFoundError naming the path."""
    if entry.trained or entry.preset is None:
        return load_model(entry.path)
    keras.utils.set_random_seed(0)
    return dogs_classifier(entry.preset)
