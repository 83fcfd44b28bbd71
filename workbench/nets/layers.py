"""Keras layers of the workbench (NHWC tensors, float32).

* :class:`GroupConv2D` -- convolution with groups that trains fast on CPU: it calls
  ``tf.nn.conv2d`` with a grouped filter of shape ``(kh, kw, cin // groups, cout)`` (up to 4
  groups: one ``tf.nn.conv2d`` per group, see ``grouped_formulation``).
  Keras' own ``Conv2D(groups=...)`` is ~20x slower to train here.  TensorFlow computes the
  gradients of a grouped convolution on the CPU only with oneDNN, which it turns on by itself
  only on CPUs with AVX-512 VNNI (``import workbench`` before TensorFlow asks for it
  everywhere); without oneDNN the gradients are computed group by group.
* :class:`Act` -- one of the registered activations of :mod:`workbench.nets.activations`,
  by name, so that the code generators know exactly which function it is.
* :class:`DepthToSpace` -- ``tf.nn.depth_to_space``: channel ``c = dy * block + dx``
  becomes the sub-pixel ``(dy, dx)``.
* :class:`AnchorResidual` -- an x2 SR net's 4 sub-pixels as a correction of the input luma
  upsampled (nearest or bilinear): ``clip(anchor + scale * (q - 0.5), 0, 1)``.

Every layer runs on any Keras 3 back end: under TensorFlow (the default) it calls the TF
kernels above, unchanged (numbers and speed); under another (``KERAS_BACKEND=jax``) the same
computation written with ``keras.ops``, with the same gradients (:func:`on_tensorflow`).
"""
from __future__ import annotations

import functools

import keras
import tensorflow as tf

from workbench.nets import activations
from workbench.nets import storage as storage_laws
from workbench.nets.activation_forms import clip_ops

PACKAGE = "workbench"


def on_tensorflow() -> bool:
    """Whether Keras runs on its TensorFlow back end (chosen at Keras' import, from
    ``KERAS_BACKEND`` or ~/.keras/keras.json); the layers' TF forms run only there."""
    return keras.backend.backend() == "tensorflow"


def conv2d_ops(x, kernel, strides, padding, groups=1):
    """:func:`grouped_conv2d` in ``keras.ops`` (any back end), one convolution per group and a
    concat (the "split" formulation): XLA's CPU gradient of a grouped convolution
    (``feature_group_count``) takes seconds for the SR net's L2, the split one milliseconds."""
    ops = keras.ops

    def conv(x, kernel):
        return ops.conv(x, kernel, strides=strides, padding=padding.lower(),
                        data_format="channels_last")

    if groups == 1:
        return conv(x, kernel)
    return ops.concatenate([conv(xg, kg) for xg, kg in
                            zip(ops.split(x, groups, -1), ops.split(kernel, groups, -1))], -1)


def depth_to_space_ops(x, block):
    """``tf.nn.depth_to_space`` (NHWC) in ``keras.ops``: channel ``(dy * block + dx) * C + c``
    of pixel (h, w) -> channel c of pixel (h * block + dy, w * block + dx)."""
    ops = keras.ops
    n, h, w, c = ops.shape(x)
    c //= block * block
    x = ops.reshape(x, (n, h, w, block, block, c))
    x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    return ops.reshape(x, (n, h * block, w * block, c))


@functools.cache
def onednn_enabled() -> bool:
    """Whether TensorFlow runs its CPU kernels through oneDNN (fixed at its import)."""
    try:
        from tensorflow.python.util import _pywrap_util_port
        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return False


# How grouped_conv2d computes a grouped convolution (read when a model is traced):
# "grouped" -- one tf.nn.conv2d with the grouped filter; "split" -- one conv per group and a
# concat; "dense" -- one conv with the block-diagonal dense (kh, kw, cin, cout) filter;
# "auto" -- "split" up to SPLIT_MAX_GROUPS groups, else "grouped".
GROUPED_FORMULATIONS = ("grouped", "split", "dense", "auto")
SPLIT_MAX_GROUPS = 4
grouped_formulation = "auto"  # fastest for the SR net, neutral for the classifier (NOTES-sr.md)


def block_diagonal(kernel, groups):
    """Grouped kernel (kh, kw, cin // groups, cout) -> dense (kh, kw, cin, cout), zeros
    outside the groups' blocks."""
    kh, kw, cin_g, cout = kernel.shape
    k = tf.reshape(kernel, (kh, kw, cin_g, groups, cout // groups))
    dense = tf.einsum("hwiGo,gG->hwgiGo", k, tf.eye(groups, dtype=kernel.dtype))
    return tf.reshape(dense, (kh, kw, groups * cin_g, cout))


def grouped_conv2d(x, kernel, strides, padding, groups, per_group_gradient=None,
                   formulation=None):
    """``tf.nn.conv2d`` with a grouped ``kernel`` (kh, kw, cin // groups, cout).

    ``formulation`` (default: the module's ``grouped_formulation``, or "grouped" when
    ``per_group_gradient`` is given) is one of ``GROUPED_FORMULATIONS``; all give the same
    result.  With ``"grouped"`` the forward pass is
    TensorFlow's own.  Its gradients run on the CPU only through oneDNN
    ("Gradients for grouped convolutions are not supported on CPU" otherwise), so without it
    (or with ``per_group_gradient=True``) they are computed group by group with the plain
    backprop ops.
    """
    formulation = formulation or ("grouped" if per_group_gradient is not None
                                  else grouped_formulation)
    if formulation == "auto":
        formulation = "split" if groups <= SPLIT_MAX_GROUPS else "grouped"
    if groups > 1 and formulation == "split":
        return tf.concat([tf.nn.conv2d(xg, kg, strides, padding) for xg, kg in
                          zip(tf.split(x, groups, -1), tf.split(kernel, groups, -1))], -1)
    if groups > 1 and formulation == "dense":
        return tf.nn.conv2d(x, block_diagonal(kernel, groups), strides, padding)
    if per_group_gradient is None:
        per_group_gradient = groups > 1 and not onednn_enabled()
    if not per_group_gradient:
        return tf.nn.conv2d(x, kernel, strides, padding)

    @tf.custom_gradient
    def conv(x, kernel):
        def grad(dy):
            step = [1, strides, strides, 1]
            parts = zip(*(tf.split(t, groups, axis=-1) for t in (x, kernel, dy)))
            dx, dk = zip(*[(tf.raw_ops.Conv2DBackpropInput(
                                input_sizes=tf.shape(xg), filter=kg, out_backprop=dyg,
                                strides=step, padding=padding),
                            tf.raw_ops.Conv2DBackpropFilter(
                                input=xg, filter_sizes=tf.shape(kg), out_backprop=dyg,
                                strides=step, padding=padding))
                           for xg, kg, dyg in parts])
            return tf.concat(dx, axis=-1), tf.concat(dk, axis=-1)
        return tf.nn.conv2d(x, kernel, strides, padding), grad

    return conv(tf.convert_to_tensor(x), tf.convert_to_tensor(kernel))


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
        conv = grouped_conv2d if on_tensorflow() else conv2d_ops
        y = conv(x, self.kernel, self.strides, self.padding.upper(), self.groups)
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
        return activations.get(self.activation).fn(on_tensorflow())(x)

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
        if on_tensorflow():
            return tf.nn.depth_to_space(x, self.block_size)
        return depth_to_space_ops(x, self.block_size)

    def compute_output_shape(self, input_shape):
        b = self.block_size
        n, h, w, c = input_shape
        return (n, None if h is None else h * b, None if w is None else w * b, c // (b * b))

    def get_config(self):
        return {**super().get_config(), "block_size": self.block_size}


@keras.saving.register_keras_serializable(package=PACKAGE)
class AnchorResidual(keras.layers.Layer):
    """``[luma (N,H,W,1), q (N,H,W,4)] -> clip(anchor + scale * (q - 0.5), 0, 1)`` with
    ``anchor`` the LR luma at the 4 sub-pixels (``c = 2 dy + dx``): ``"nearest"`` repeats
    it, ``"bilinear"`` is x2 bilinear with half-pixel centres and edge replication
    (0.75 / 0.25 weights per axis).  Before the final :class:`DepthToSpace` of an x2 SR net
    on luma, the net's output is a correction of the anchor: on the GPU the SR demux adds it
    to the anchor it samples from the input image (:class:`workbench.ir.DepthToSpace`).
    ``storage``: how the 8-bit back end stores ``q`` (:mod:`workbench.nets.storage`; ``"sqrt"``
    rounds small corrections more finely); it does not change the float function."""

    def __init__(self, mode="nearest", scale=0.5, storage="linear", **kwargs):
        super().__init__(**kwargs)
        if mode not in ("nearest", "bilinear"):
            raise ValueError(f"anchor mode must be 'nearest' or 'bilinear', not {mode!r}")
        self.mode, self.scale = mode, float(scale)
        self.storage = storage_laws.check(storage, f"layer {self.name!r}: storage")

    def call(self, inputs):
        x, q = inputs
        clip = tf.clip_by_value if on_tensorflow() else clip_ops
        return clip(anchor_subpixels(x, self.mode) + self.scale * (q - 0.5), 0.0, 1.0)

    def compute_output_shape(self, input_shapes):
        return input_shapes[1]

    def get_config(self):
        return {**super().get_config(), "mode": self.mode, "scale": self.scale,
                "storage": self.storage}


def anchor_subpixels(x, mode):
    """LR luma (N,H,W,1) -> its x2 upsampling as 4 sub-pixel channels (N,H,W,4)."""
    tile, pad, concat = ((tf.tile, tf.pad, tf.concat) if on_tensorflow() else
                         (keras.ops.tile, keras.ops.pad, keras.ops.concatenate))
    if mode == "nearest":
        return tile(x, (1, 1, 1, 4))
    p = pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="symmetric")
    near = p[:, 1:-1]
    rows = (0.75 * near + 0.25 * p[:, :-2], 0.75 * near + 0.25 * p[:, 2:])  # dy = 0, 1
    return concat([0.75 * r[:, :, 1:-1] + 0.25 * r[:, :, side]
                   for r in rows for side in (slice(None, -2), slice(2, None))], axis=-1)


def shuffle_order(packs: int, step: int) -> list[int]:
    """The texture binding order of a channel shuffle with ``step`` over ``packs`` packs of 4
    channels: ``order[i] = (i * step) % packs + (i * step) // packs`` (the reference article's
    deterministic shuffle; 128 channels, step 8 -> 0, 8, 16, 24, 1, 9, ...)."""
    order = [(i * step) % packs + (i * step) // packs for i in range(packs)]
    if sorted(order) != list(range(packs)):
        raise ValueError(f"shuffle step {step} over {packs} packs is not a permutation: {order}")
    return order


@keras.saving.register_keras_serializable(package=PACKAGE)
class Shuffle(keras.layers.Layer):
    """Channel shuffle by packs of 4: output pack ``i`` is input pack ``order[i]`` of
    :func:`shuffle_order`.  Free at inference: the ES 2.0 back end only changes the order in
    which textures are bound (the shuffle is a property of the connection)."""

    def __init__(self, step, **kwargs):
        super().__init__(**kwargs)
        self.step = int(step)

    def build(self, input_shape):
        channels = int(input_shape[-1])
        if channels % 4:
            raise ValueError(f"{self.name}: {channels} channels are not whole packs of 4")
        self.order = shuffle_order(channels // 4, self.step)
        self._index = [4 * p + c for p in self.order for c in range(4)]

    def call(self, x):
        if on_tensorflow():
            return tf.gather(x, self._index, axis=-1)
        return keras.ops.take(x, self._index, axis=-1)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "step": self.step}


@tf.custom_gradient
def _round_8bit(x):
    def grad(dy):
        return dy

    return tf.round(x * 255.0) / 255.0, grad


@keras.ops.custom_gradient
def _round_8bit_ops(x):
    def grad(*args, upstream=None):
        return args[0] if upstream is None else upstream

    return keras.ops.round(x * 255.0) / 255.0, grad  # both round half to even


@keras.saving.register_keras_serializable(package=PACKAGE)
class Quantize8(keras.layers.Layer):
    """Quantisation-aware training: round to a multiple of 1/255 (what an RGBA8 texture
    stores) in the forward pass, identity ("straight-through") gradient.  Placed after an
    activation in [0, 1]; the shader lowering treats it as a no-op (the texture rounds).
    ``law``: the texture's storage law (:mod:`workbench.nets.storage`); with ``"sqrt"`` the
    value is encoded, rounded and decoded (the value the next layer reads)."""

    def __init__(self, law="linear", **kwargs):
        super().__init__(**kwargs)
        self.law = storage_laws.check(law, f"layer {self.name!r}: law")

    def call(self, x):
        if self.law == "linear":
            return _round_8bit(x) if on_tensorflow() else _round_8bit_ops(x)
        ops = keras.ops
        v = ops.round(storage_laws.encode(x, self.law, ops) * 255.0) / 255.0
        return x + ops.stop_gradient(storage_laws.decode(v, self.law, ops) - x)

    def get_config(self):
        return {**super().get_config(), "law": self.law}

    def compute_output_shape(self, input_shape):
        return input_shape


@keras.saving.register_keras_serializable(package=PACKAGE)
class FastBatchNorm(keras.layers.BatchNormalization):
    """``keras.layers.BatchNormalization`` (same weights, attributes and config) whose
    training pass on 4-D NHWC input runs TF's fused kernel, ~3x faster here.

    Batch statistics are the biased variance, as in the Keras layer (the fused kernel's
    Bessel-corrected variance is scaled back by ``(n - 1) / n``); the moving statistics
    are updated with the same ``momentum``.  Other cases (and Keras' other back ends) fall
    back to the Keras code.
    """

    def call(self, inputs, training=None, mask=None):
        if not (on_tensorflow() and training and self.trainable and mask is None
                and len(inputs.shape) == 4 and self.axis in (-1, 3) and self.scale
                and self.center and not self.renorm and inputs.dtype == tf.float32):
            return super().call(inputs, training=training, mask=mask)
        y, mean, variance = tf.compat.v1.nn.fused_batch_norm(
            inputs, self.gamma, self.beta, epsilon=self.epsilon, data_format="NHWC",
            is_training=True)
        shape = tf.shape(inputs)
        n = tf.cast(shape[0] * shape[1] * shape[2], tf.float32)
        variance = variance * ((n - 1.0) / tf.maximum(n, 1.0))
        m = self.momentum
        self.moving_mean.assign(self.moving_mean * m + mean * (1.0 - m))
        self.moving_variance.assign(self.moving_variance * m + variance * (1.0 - m))
        return y
