"""Activations, each defined once: TensorFlow, keras.ops, numpy and GLSL forms side by side.

Every activation here maps into [0, 1] (or is the identity), so that its output
fits an RGBA8 texture of OpenGL ES 2.0.  The GLSL form is an expression template
over a ``vec4`` (or ``float``) named ``{x}``; back ends fill it in with
``act.glsl.format(x="sum")``.

Register a new candidate with :func:`register` and it shows up in the layers,
the code generators, the emulator and the figures.

The layers call :meth:`Activation.fn`: ``tf_fn`` under Keras' TensorFlow back end (TF's own
kernels and the hand-written gradients tuned for its CPU training), ``ops_fn`` (written with
``keras.ops``, the same values and gradients) under any other back end, e.g. JAX.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import keras
import numpy as np
import tensorflow as tf


@dataclass(frozen=True)
class Activation:
    """One activation: its name, the implementations and a description.  ``np_fn``
    computes in float32, or in float16 when given float16 (the emulator's mediump).
    ``ops_fn``: the ``keras.ops`` form for Keras' other back ends (None: TensorFlow only)."""

    name: str
    tf_fn: Callable[[tf.Tensor], tf.Tensor]
    np_fn: Callable[[np.ndarray], np.ndarray]
    glsl: str
    description: str
    output_range: tuple[float, float] | None = (0.0, 1.0)
    ops_fn: Callable | None = None

    def fn(self, tensorflow: bool | None = None) -> Callable:
        """The form for the running Keras back end (or, given ``tensorflow``, for TensorFlow or
        not): ``tf_fn`` under TensorFlow, else ``ops_fn`` (an activation without one names
        itself)."""
        if tensorflow is None:
            tensorflow = keras.backend.backend() == "tensorflow"
        if tensorflow:
            return self.tf_fn
        if self.ops_fn is None:
            raise ValueError(f"activation {self.name!r} has no keras.ops form (ops_fn), so it "
                             f"runs only under Keras' TensorFlow back end, not "
                             f"{keras.backend.backend()!r}")
        return self.ops_fn

    def __call__(self, x):
        return self.fn()(x)


_REGISTRY: dict[str, Activation] = {}


def register(act: Activation) -> Activation:
    """Add an activation to the registry (replacing one of the same name)."""
    _REGISTRY[act.name] = act
    return act


def get(name: str | Activation) -> Activation:
    """Look an activation up by name; the error lists the known names."""
    if isinstance(name, Activation):
        return name
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown activation {name!r}; known: {', '.join(sorted(_REGISTRY))}"
        ) from None


def names() -> list[str]:
    return list(_REGISTRY)


def gradient(name: str | Activation, x) -> np.ndarray:
    """d act(x) / dx at the points ``x`` (float32), by TensorFlow autodiff: the gradient the
    training uses (for ``sigmoid_like`` its hand-written one)."""
    x = tf.constant(np.asarray(x, np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = get(name).tf_fn(x)
    return tape.gradient(y, x).numpy()


# --- the sigmoid-like piecewise-linear activation -------------------------------
# y = clip(0.05x + clip(0.1x, -0.05, 0.05) + clip(0.05x, -0.125, 0.125) + 0.5, 0, 1)
# Breakpoints at |x| = 0.5, 2.5, 6.5; slopes 0.2, 0.1, 0.05, then 0.
_SIGMOID_BREAKS = np.array([0.5, 2.5, 6.5], np.float32)
_SIGMOID_SLOPES = np.array([0.2, 0.1, 0.05, 0.0], np.float32)


def _float(x):
    """``x`` as float32, or kept float16 (the emulator's mediump prediction computes in it:
    with numpy's scalar rules every constant and every step below then rounds to float16)."""
    x = np.asarray(x)
    return x if x.dtype == np.float16 else x.astype(np.float32)


def _sigmoid_like_np(x):
    x = _float(x)
    inner = 0.05 * x + np.clip(0.1 * x, -0.05, 0.05) + np.clip(0.05 * x, -0.125, 0.125)
    return np.clip(inner + 0.5, 0.0, 1.0).astype(x.dtype)


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
def _sigmoid_like_tf(x):
    # The clip form with a hand-written gradient, both XLA-compiled: the plain
    # clip_by_value chain costs ~14x a ReLU in forward+backward here; this ~1.1x
    # (one XLA compilation per tensor shape on first use).
    return _sigmoid_like_forward(x), lambda dy: _sigmoid_like_grad(x, dy)


@tf.custom_gradient
def _bounded_relu_tf(x):
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
def _bounded_relu_ops(x):
    ops = keras.ops

    def grad(*args, upstream=None):  # Relu6Grad's: dy where 0 < x < 1
        dy = _upstream(args, upstream)
        return dy * ops.cast(ops.logical_and(x > 0.0, x < 1.0), dy.dtype)
    return ops.clip(x, 0.0, 1.0), grad


@keras.ops.custom_gradient
def _sigmoid_like_ops(x):
    ops = keras.ops
    inner = 0.05 * x + ops.clip(0.1 * x, -0.05, 0.05) + ops.clip(0.05 * x, -0.125, 0.125)

    def grad(*args, upstream=None):  # _sigmoid_like_slope
        dy = _upstream(args, upstream)
        a = ops.abs(x)
        slope = ops.where(a < 0.5, 0.2, ops.where(a < 2.5, 0.1, ops.where(a < 6.5, 0.05, 0.0)))
        return dy * ops.cast(slope, dy.dtype)
    return ops.clip(inner + 0.5, 0.0, 1.0), grad


register(Activation(
    name="bounded_relu",
    tf_fn=_bounded_relu_tf,
    np_fn=lambda x: np.clip(_float(x), 0.0, 1.0),
    glsl="clamp({x}, 0.0, 1.0)",
    description="ReLU bounded to [0, 1] (an RGBA8 target clamps for free)",
    ops_fn=_bounded_relu_ops,
))
register(Activation(
    name="relu6_scaled",
    tf_fn=lambda x: tf.clip_by_value(x, 0.0, 6.0) / 6.0,
    np_fn=lambda x: np.clip(_float(x), 0.0, 6.0) / 6.0,
    glsl="(clamp({x}, 0.0, 6.0) / 6.0)",
    description="ReLU6 rescaled to [0, 1]",
    ops_fn=lambda x: clip_ops(x, 0.0, 6.0) / 6.0,
))
register(Activation(
    name="sigmoid_like",
    tf_fn=_sigmoid_like_tf,
    np_fn=_sigmoid_like_np,
    glsl=("clamp(0.05 * {x} + clamp(0.1 * {x}, -0.05, 0.05)"
          " + clamp(0.05 * {x}, -0.125, 0.125) + 0.5, 0.0, 1.0)"),
    description="piecewise-linear sigmoid: slopes 0.2/0.1/0.05/0 with breaks at |x| = 0.5/2.5/6.5",
    ops_fn=_sigmoid_like_ops,
))
register(Activation(
    name="sigmoid",
    tf_fn=tf.math.sigmoid,
    np_fn=lambda x: 1.0 / (1.0 + np.exp(-_float(x))),
    glsl="(1.0 / (1.0 + exp(-{x})))",
    description="logistic sigmoid (reference, not piecewise linear)",
    ops_fn=keras.ops.sigmoid,
))
register(Activation(
    name="linear",
    tf_fn=tf.identity,
    np_fn=_float,
    glsl="{x}",
    description="identity (no activation); only for outputs that are not stored in RGBA8",
    output_range=None,
    ops_fn=lambda x: x,
))
