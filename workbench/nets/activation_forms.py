"""The TensorFlow and ``keras.ops`` forms of :mod:`workbench.nets.activations` (imported at
their first call, so that the GLSL and numpy forms load no TensorFlow).  The TF forms are TF's
own kernels with hand-written gradients tuned for its CPU training; the ``keras.ops`` forms
compute the same values and gradients on Keras' other back ends, e.g. JAX."""
from __future__ import annotations

import keras
import tensorflow as tf


def _sigmoid_like_slope(x):
    """Exact derivative of the sigmoid-like activation (0.2 / 0.1 / 0.05 / 0)."""
    a = tf.abs(x)
    return tf.where(a < 0.5, 0.2, tf.where(a < 2.5, 0.1, tf.where(a < 6.5, 0.05, 0.0)))


@tf.function(jit_compile=True)
def _sigmoid_like_forward(x):
    inner = 0.05 * x + tf.clip_by_value(0.1 * x, -0.05, 0.05) + tf.clip_by_value(
        0.05 * x, -0.125, 0.125
    )
    return tf.clip_by_value(inner + 0.5, 0.0, 1.0)


@tf.function(jit_compile=True)
def _sigmoid_like_grad(x, dy):
    return dy * tf.cast(_sigmoid_like_slope(x), dy.dtype)


@tf.custom_gradient
def sigmoid_like_tf(x):
    # The clip form with a hand-written gradient, both XLA-compiled: the plain
    # clip_by_value chain costs ~14x a ReLU in forward+backward here; this ~1.1x
    # (one XLA compilation per tensor shape on first use).
    return _sigmoid_like_forward(x), lambda dy: _sigmoid_like_grad(x, dy)


@tf.custom_gradient
def bounded_relu_tf(x):
    # clip_by_value's own gradient is 5 element-wise ops (~30 % of the SR net's training step
    # here); Relu6Grad passes dy where 0 < 6y < 6, i.e. 0 < x < 1, in one fused op.
    y = tf.clip_by_value(x, 0.0, 1.0)
    return y, lambda dy: tf.raw_ops.Relu6Grad(gradients=dy, features=6.0 * y)


# --- keras.ops forms (any Keras back end): the same values, and the gradients of the TF forms,
# also at the breakpoints (JAX's own clip gives half the gradient where x equals a bound).

def _upstream(args, upstream):
    """The incoming gradient of a keras.ops.custom_gradient rule, on every back end."""
    return args[0] if upstream is None else upstream


def clip_ops(x, low, high):
    """``clip(x, low, high)`` with ``tf.clip_by_value``'s gradient: dy where low <= x <= high."""
    ops = keras.ops

    @ops.custom_gradient
    def clip(x):
        def grad(*args, upstream=None):
            dy = _upstream(args, upstream)
            return dy * ops.cast(ops.logical_and(x >= low, x <= high), dy.dtype)
        return ops.clip(x, low, high), grad

    return clip(x)


@keras.ops.custom_gradient
def bounded_relu_ops(x):
    ops = keras.ops

    def grad(*args, upstream=None):  # Relu6Grad's: dy where 0 < x < 1
        dy = _upstream(args, upstream)
        return dy * ops.cast(ops.logical_and(x > 0.0, x < 1.0), dy.dtype)
    return ops.clip(x, 0.0, 1.0), grad


@keras.ops.custom_gradient
def sigmoid_like_ops(x):
    ops = keras.ops
    inner = 0.05 * x + ops.clip(0.1 * x, -0.05, 0.05) + ops.clip(0.05 * x, -0.125, 0.125)

    def grad(*args, upstream=None):  # _sigmoid_like_slope
        dy = _upstream(args, upstream)
        a = ops.abs(x)
        slope = ops.where(a < 0.5, 0.2, ops.where(a < 2.5, 0.1, ops.where(a < 6.5, 0.05, 0.0)))
        return dy * ops.cast(slope, dy.dtype)
    return ops.clip(inner + 0.5, 0.0, 1.0), grad


sigmoid_tf = tf.math.sigmoid
identity_tf = tf.identity
sigmoid_ops = keras.ops.sigmoid


def relu6_scaled_tf(x):
    return tf.clip_by_value(x, 0.0, 6.0) / 6.0


def relu6_scaled_ops(x):
    return clip_ops(x, 0.0, 6.0) / 6.0


def identity_ops(x):
    return x


relu_tf = tf.nn.relu
relu_ops = keras.ops.relu


def leaky_relu_tf(x, slope):
    return tf.nn.leaky_relu(x, slope)


def leaky_relu_ops(x, slope):
    return keras.ops.leaky_relu(x, slope)


def prelu_tf(x, slope, zero=None):
    y = tf.nn.relu(x) + slope * tf.minimum(x, 0.0)
    return y if zero is None else tf.clip_by_value(y + zero, 0.0, 1.0)


def prelu_ops(x, slope, zero=None):
    y = keras.ops.relu(x) + slope * keras.ops.minimum(x, 0.0)
    return y if zero is None else clip_ops(y + zero, 0.0, 1.0)
