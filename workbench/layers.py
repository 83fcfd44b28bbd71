"""Keras layers of the workbench (NHWC tensors, float32).

* :class:`GroupConv2D` -- convolution with groups that trains fast on CPU: it calls
  ``tf.nn.conv2d`` with a grouped filter of shape ``(kh, kw, cin // groups, cout)``.
  Keras' own ``Conv2D(groups=...)`` is ~20x slower to train here.
* :class:`Act` -- one of the registered activations of :mod:`workbench.activations`,
  by name, so that the code generators know exactly which function it is.
* :class:`DepthToSpace` -- ``tf.nn.depth_to_space``: channel ``c = dy * block + dx``
  becomes the sub-pixel ``(dy, dx)``.
"""
from __future__ import annotations

import keras
import tensorflow as tf

from workbench import activations

PACKAGE = "workbench"


@keras.saving.register_keras_serializable(package=PACKAGE)
class GroupConv2D(keras.layers.Layer):
    """2-D convolution with ``groups`` groups; input channels ``cin`` must divide by groups.

    Group ``g`` reads input channels ``[g*cin/groups, (g+1)*cin/groups)`` and writes output
    channels ``[g*filters/groups, (g+1)*filters/groups)`` (the ``tf.nn.conv2d`` convention).
    ``padding`` is ``"same"`` (zero padding) or ``"valid"``.
    """

    def __init__(self, filters, kernel_size, groups=1, strides=1, padding="same",
                 use_bias=True, kernel_initializer="he_uniform", **kwargs):
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.kernel_size = int(kernel_size)
        self.groups = int(groups)
        self.strides = int(strides)
        self.padding = padding.lower()
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        if self.padding not in ("same", "valid"):
            raise ValueError(f"{self.name}: padding must be 'same' or 'valid', not {padding!r}")
        if self.filters % self.groups:
            raise ValueError(
                f"{self.name}: filters={self.filters} is not divisible by groups={self.groups}")

    def build(self, input_shape):
        cin = int(input_shape[-1])
        if cin % self.groups:
            raise ValueError(
                f"{self.name}: {cin} input channels are not divisible by groups={self.groups}")
        k = self.kernel_size
        self.kernel = self.add_weight(
            name="kernel", shape=(k, k, cin // self.groups, self.filters),
            initializer=self.kernel_initializer)
        self.bias = (self.add_weight(name="bias", shape=(self.filters,), initializer="zeros")
                     if self.use_bias else None)

    def call(self, x):
        y = tf.nn.conv2d(x, self.kernel, self.strides, self.padding.upper())
        return y + self.bias if self.use_bias else y

    def compute_output_shape(self, input_shape):
        h, w = input_shape[1], input_shape[2]

        def size(n):
            if n is None:
                return None
            if self.padding == "same":
                return -(-n // self.strides)
            return (n - self.kernel_size) // self.strides + 1

        return (input_shape[0], size(h), size(w), self.filters)

    def get_config(self):
        return {**super().get_config(), "filters": self.filters,
                "kernel_size": self.kernel_size, "groups": self.groups,
                "strides": self.strides, "padding": self.padding, "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer)}


@keras.saving.register_keras_serializable(package=PACKAGE)
class Act(keras.layers.Layer):
    """A registered activation applied element-wise, named e.g. ``"bounded_relu"``."""

    def __init__(self, activation, **kwargs):
        super().__init__(**kwargs)
        self.activation = activations.get(activation).name

    def call(self, x):
        return activations.get(self.activation).tf_fn(x)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "activation": self.activation}


@keras.saving.register_keras_serializable(package=PACKAGE)
class DepthToSpace(keras.layers.Layer):
    """``tf.nn.depth_to_space``: (N, H, W, C*b*b) -> (N, H*b, W*b, C)."""

    def __init__(self, block_size=2, **kwargs):
        super().__init__(**kwargs)
        self.block_size = int(block_size)

    def call(self, x):
        return tf.nn.depth_to_space(x, self.block_size)

    def compute_output_shape(self, input_shape):
        b = self.block_size
        n, h, w, c = input_shape
        return (n, None if h is None else h * b, None if w is None else w * b, c // (b * b))

    def get_config(self):
        return {**super().get_config(), "block_size": self.block_size}
