"""The op table: every IR op type (``workbench.ir.OP_TYPES``) with a few tiny cases, each
a Keras model builder and the activations to try; ``tests/ops/test_op_table.py`` runs every
case through every consumer (TF against the emulator, llvmpipe's bytes, glslang, ES 3.1, the
ONNX writer, the page and the TF.js peer in one Chromium, the Mesa drivers).  Adding an op: its
record files (design.md, How to add an op) and one entry here.

A case's input is an RGBA-sized image (4 channels, what the page feeds); a case that needs more
channels widens it first with :func:`widen`, a 1x1 conv whose stored output is exact (the
channels and their complements), so that the op under test is still the one stored layer that
rounds.  Its output is one TF and the emulator agree on within half a level: a bounded
activation's, or an op's that keeps [0, 1] (pool, upsample, concat, depth-to-space); a Dense
layer's logits within its number format's steps.

``refuses``: ``{consumer: fragment of its one-line error}`` where a consumer does not take the
case (the harness checks that it refuses, saying so); ``xfail``: ``{consumer: reason}`` where a
consumer gets it wrong (a known bug).  Consumers: :data:`CONSUMERS`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import keras
import numpy as np

from workbench.nets.layers import Act, DepthToSpace, GroupConv2D

L = keras.layers
HALF_LEVEL = 0.5 / 255 + 1e-5
CONSUMERS = ("tf", "gpu", "glslang", "es31", "onnx", "page", "tfjs", "vc4", "gc2000")
BOUNDED = ("bounded_relu", "relu6_scaled", "sigmoid_like", "sigmoid")


@dataclass(frozen=True)
class Case:
    op: str                      # the IR op type under test (a key of ir.OP_TYPES)
    name: str
    build: Callable              # (activation) -> keras.Model; its input 4 channels
    activations: tuple = (None,)  # each a case of its own (None: the op has none)
    size: tuple = (12, 10)       # the image's (height, width); a fixed-size net's own
    tolerance: float = HALF_LEVEL  # TF against the emulator's output
    dense: str = "fixed16"       # es2.compile(dense=...)
    refuses: dict = field(default_factory=dict)
    xfail: dict = field(default_factory=dict)

    def ids(self):
        return [f"{self.op}-{self.name}" + (f"-{a}" if a else "") for a in self.activations]


def _input(size=None):
    return keras.Input((*(size or (None, None)), 4))


def widen(x, channels=8):
    """The 4-channel input as ``channels`` channels, exactly: x, then 1 - x (repeated), a 1x1
    conv stored with a bounded ReLU (every value a level of the input's)."""
    eye = np.eye(4, dtype=np.float32)
    blocks = [eye if i % 2 == 0 else -eye for i in range(channels // 4)]
    conv = L.Conv2D(channels, 1, name="widen")
    y = Act("bounded_relu")(conv(x))
    conv.set_weights([np.concatenate(blocks, 1)[None, None],
                      np.concatenate([np.zeros(4) if i % 2 == 0 else np.ones(4)
                                      for i in range(channels // 4)]).astype(np.float32)])
    return y


def _seeded(build):
    def seeded(activation):
        keras.utils.set_random_seed(11)
        return build(activation)
    return seeded


def conv(filters, kernel, stride=1, padding="same", groups=1, channels=4, residual=False,
         depthwise=None):
    """One conv (``depthwise``: a DepthwiseConv2D of that multiplier) over ``channels``
    channels, ``residual``: plus its input, then the activation."""
    @_seeded
    def build(activation):
        x = inputs = _input()
        if channels > 4:
            x = widen(x, channels)
        if depthwise:
            y = L.DepthwiseConv2D(kernel, stride, padding, depth_multiplier=depthwise)(x)
        else:
            y = GroupConv2D(filters, kernel, groups=groups, strides=stride, padding=padding,
                            kernel_initializer=keras.initializers.RandomNormal(0, 0.5))(x)
        if residual:
            y = L.Add()([y, x])
        return keras.Model(inputs, Act(activation)(y))
    return build


@_seeded
def keras_conv_groups(activation):
    """Keras' own Conv2D(groups=4) over 8 channels: 2 input and 3 output channels a group
    (a group fills part of a pack)."""
    x = inputs = _input()
    return keras.Model(inputs, Act(activation)(L.Conv2D(12, 3, padding="same", groups=4)(
        widen(x, 8))))


@_seeded
def normalised_input(activation):
    """A 3x3 'same' conv over a normalised input (Rescaling folded: the input stored with an
    offset, its padding the stored value of a real 0)."""
    x = inputs = _input()
    y = GroupConv2D(4, 3)(L.Rescaling(2.0, offset=-1.0)(x))
    return keras.Model(inputs, Act(activation)(y))


def pool(kind, size, stride, padding):
    def build(_):
        layer = L.MaxPooling2D if kind == "max" else L.AveragePooling2D
        x = inputs = _input()
        return keras.Model(inputs, layer(size, stride, padding=padding)(x))
    return build


def upsample(scale, interpolation, channels=4):
    def build(_):
        x = inputs = _input()
        if channels > 4:
            x = widen(x, channels)
        return keras.Model(inputs, L.UpSampling2D(scale, interpolation=interpolation)(x))
    return build


@_seeded
def add(activation):
    """A two-input Add (not the conv-fused residual: both inputs stored) and its activation."""
    x = inputs = _input()
    a = Act("sigmoid_like")(GroupConv2D(4, 3)(x))
    b = Act("sigmoid_like")(GroupConv2D(4, 1)(x))
    return keras.Model(inputs, Act(activation)(L.Add()([a, b])))


def concat_packs(_):
    """The input's channels, then its widened copy: whole packs, the input's among them."""
    x = inputs = _input()
    return keras.Model(inputs, L.Concatenate()([widen(x, 8), x]))


def concat_convs():
    """A Concatenate of two stored convs' outputs of 6 and 2 channels and the input."""
    @_seeded
    def build(activation):
        x = inputs = _input()
        a = Act(activation)(GroupConv2D(6, 3)(x))
        b = Act(activation)(GroupConv2D(2, 1)(x))
        return keras.Model(inputs, L.Concatenate()([a, b, x]))
    return build


def depth_to_space(block, channels):
    """A 1x1 conv to ``channels`` channels stored bounded, then depth-to-space."""
    @_seeded
    def build(activation):
        x = inputs = _input()
        y = Act(activation)(GroupConv2D(channels, 1)(x))
        return keras.Model(inputs, DepthToSpace(block)(y))
    return build


def dense(size, classes, softmax=False):
    """A bounded 3x3 conv, GlobalAveragePooling2D and the Dense logits (``softmax``: then their
    softmax, on the CPU)."""
    @_seeded
    def build(_):
        x = inputs = _input(size)
        y = L.GlobalAveragePooling2D()(Act("sigmoid_like")(GroupConv2D(8, 3)(x)))
        y = L.Dense(classes)(y)
        return keras.Model(inputs, L.Softmax()(y) if softmax else y)
    return build


OFFSET_PADDING = "its padding holds the stored value of a real 0"

POOLS = [(2, 2, "valid"), (2, 1, "same"), (2, 2, "same"), (3, 1, "same"), (3, 2, "same"),
         (3, 2, "valid")]

CASES = [
    Case("Conv", "3x3", conv(4, 3), BOUNDED),
    Case("Conv", "1x1-to-8", conv(8, 1), ("sigmoid_like",)),
    Case("Conv", "5x5", conv(4, 5), ("sigmoid_like",)),  # gc2000: fitted by splitting rows
    Case("Conv", "3x3-stride2", conv(4, 3, 2), ("sigmoid_like",), size=(13, 11)),
    Case("Conv", "5x5-stride2", conv(4, 5, 2), ("bounded_relu",), size=(13, 11)),
    Case("Conv", "5x5-stride2-valid", conv(4, 5, 2, "valid"), ("sigmoid_like",), size=(13, 11)),
    Case("Conv", "grouped-3x3-stride2-valid", conv(8, 3, 2, "valid", groups=2, channels=8),
         ("sigmoid_like",), size=(13, 11)),
    Case("Conv", "grouped-3x3", conv(8, 3, groups=2, channels=8), ("sigmoid_like",)),
    Case("Conv", "grouped-1x1", conv(8, 1, groups=2, channels=8), ("bounded_relu",)),
    Case("Conv", "keras-groups-part-packs", keras_conv_groups, ("bounded_relu",)),
    Case("Conv", "groups-of-one", conv(8, 1, groups=8, channels=8), ("sigmoid_like",)),
    Case("Conv", "depthwise", conv(None, 3, depthwise=1), ("sigmoid_like",)),
    Case("Conv", "depthwise-stride2-x2", conv(None, 3, 2, depthwise=2), ("relu6_scaled",),
         size=(13, 11)),
    Case("Conv", "residual", conv(8, 3, groups=2, channels=8, residual=True),
         ("sigmoid_like", "bounded_relu")),
    Case("Conv", "normalised-input", normalised_input, ("sigmoid_like",),
         refuses={"es31": OFFSET_PADDING, "onnx": OFFSET_PADDING, "tfjs": OFFSET_PADDING}),
    *[Case("Pool", f"{kind}-{k}x{k}-stride{s}-{padding}", pool(kind, k, s, padding),
           size=(13, 11)) for kind in ("max", "average") for k, s, padding in POOLS],
    *[Case("Upsample", f"{how}-x{scale}", upsample(scale, how), size=(9, 7))
      for how in ("nearest", "bilinear") for scale in (2, 3)],
    Case("Upsample", "bilinear-x2-8", upsample(2, "bilinear", 8), size=(7, 5)),
    # two stored inputs, half a level each, and the sum's own rounding
    Case("Add", "two-stored", add, ("bounded_relu", "sigmoid_like"), tolerance=1.5 / 255 + 1e-5),
    Case("Concat", "packs", concat_packs, size=(9, 7)),
    Case("Concat", "convs", concat_convs(), ("sigmoid_like",), size=(9, 7)),
    Case("DepthToSpace", "16-to-4", depth_to_space(2, 16), ("bounded_relu",), size=(7, 9)),
    Case("DepthToSpace", "32-to-8", depth_to_space(2, 32), ("relu6_scaled",), size=(7, 9)),
    Case("DepthToSpace", "8-to-2", depth_to_space(2, 8), ("sigmoid_like",), size=(7, 9)),
    Case("Dense", "pooled-fixed16", dense((6, 6), 5), size=(6, 6), tolerance=0.02),
    Case("Dense", "pooled-float", dense((6, 6), 5), size=(6, 6), tolerance=0.005,
         dense="float"),
    Case("Dense", "softmax", dense((5, 5), 4, softmax=True), size=(5, 5), tolerance=0.01),
]


# What a consumer refuses of an activation, in any case: the ONNX writer writes PyTorch's layers
ACTIVATION_REFUSES = {"relu6_scaled": {"onnx": "activation 'relu6_scaled' has no PyTorch layer"}}


def refused(case, activation, consumer) -> str | None:
    """The fragment of ``consumer``'s refusal of ``case`` with ``activation``, or None."""
    return case.refuses.get(consumer) or ACTIVATION_REFUSES.get(activation, {}).get(consumer)


def entries():
    """``[(id, case, activation)]``: each case once per activation."""
    return [(i, case, a) for case in CASES for i, a in zip(case.ids(), case.activations)]


def image(case, seed=0) -> np.ndarray:
    """The case's input: random levels, 4 channels, ``case.size``."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (*case.size, 4)).astype(np.float32) / 255
