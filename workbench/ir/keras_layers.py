"""What one Keras layer becomes in the IR, for the Keras front end (:mod:`.lower`, which walks
the model): a convolution's :class:`~workbench.ir.ops.Conv`, a pooling's or an upsampling's
op, a BatchNormalization folded into its conv, an activation given to the op before it, and
an input normalisation handed to :class:`~workbench.ir.lowering.Scales`.
"""
from __future__ import annotations

import keras
import numpy as np

from workbench.ir.lowering import LoweringError, check_finite, fold_batchnorm, leaky_relu, prelu
from workbench.ir.ops import Conv, Pool, Upsample
from workbench.nets import activations
from workbench.nets.layers import GroupConv2D


def keras_activation(layer, op, found):
    """Give ``op`` (a Conv or an Add) the Keras activation of ``layer``: linear, sigmoid,
    relu6 (clipped at 6, stored as y / 6), a ReLU layer with a ``max_value``, or relu /
    ``ReLU()``, LeakyReLU, PReLU (unbounded: ES 2.0 stores them with a calibrated scale)."""
    where = f"layer {layer.name!r}"
    if isinstance(layer, keras.layers.PReLU):
        prelu(op, keras.ops.convert_to_numpy(layer.alpha), layer.input.shape[-1], where, -1)
        return
    if isinstance(layer, keras.layers.LeakyReLU):
        op.activation = leaky_relu(layer.negative_slope, where)
        return
    if isinstance(layer, keras.layers.ReLU):
        if layer.threshold or (layer.negative_slope and layer.max_value is not None):
            raise LoweringError(f"{where}: a ReLU with a threshold, or a negative_slope and a "
                                "max_value, has no GLSL form here")
        if layer.negative_slope:
            op.activation = leaky_relu(layer.negative_slope, where)
            return
        if layer.max_value is None:
            op.activation = "relu"
        else:
            found.clip(op, 0, layer.max_value, where)
        return
    name = activation_name(layer)
    if name == "relu6":
        found.clip(op, 0, 6, where)
        return
    if name == "leaky_relu":  # keras.activations.leaky_relu's default slope
        op.activation = leaky_relu(0.2, where)
        return
    if name not in ("linear", "sigmoid", "relu"):
        raise LoweringError(f"{where}: Keras activation {name!r} has no [0, 1]-bounded GLSL "
                            f"form; use workbench.nets.layers.Act with one of "
                            f"{activations.names()}")
    op.activation = name


def activation_name(layer) -> str:
    return getattr(getattr(layer, "activation", None), "__name__", "linear")


def is_softmax(layer) -> bool:
    """A Softmax layer, an Activation("softmax"), or a layer whose activation is softmax."""
    return isinstance(layer, keras.layers.Softmax) or activation_name(layer) == "softmax"


def normalise(layer, found):
    """Rescaling (``x * scale + offset``) or Normalization (``(x - mean) / sqrt(variance)``)
    of the input, for :class:`Scales` to fold into the convs that read it."""
    where = f"layer {layer.name!r}"
    if isinstance(layer, keras.layers.Rescaling):
        found.normalise("mul", layer.scale, where, -1)
        found.normalise("add", layer.offset, where, -1)
        return
    if layer.invert:
        raise LoweringError(f"{where}: an inverted Normalization; only of the input")
    mean, variance = (keras.ops.convert_to_numpy(v) for v in (layer.mean, layer.variance))
    found.normalise("sub", mean, where, -1)
    found.normalise("div", np.maximum(np.sqrt(variance), keras.backend.epsilon()), where, -1)


def conv_from(layer, source, found):
    if isinstance(layer, GroupConv2D):
        stride, padding, groups = layer.strides, layer.padding, layer.groups
    else:
        if layer.strides[0] != layer.strides[1] or layer.dilation_rate != (1, 1):
            raise LoweringError(f"layer {layer.name!r}: only square strides, no dilation")
        stride, padding = layer.strides[0], layer.padding
        groups = getattr(layer, "groups", 1)  # DepthwiseConv2D: set from its kernel below
    weights = layer.get_weights()
    kernel = weights[0].astype(np.float32)
    if isinstance(layer, keras.layers.DepthwiseConv2D):  # (k, k, C, m): C groups of 1 -> m
        groups = kernel.shape[2]
        kernel = kernel.reshape(*kernel.shape[:2], 1, -1)
    if kernel.shape[0] != kernel.shape[1]:
        raise LoweringError(f"layer {layer.name!r}: only square kernels, got {kernel.shape[:2]}")
    bias = weights[1] if len(weights) > 1 else np.zeros(kernel.shape[3])
    check_finite(layer.name, {"kernel": kernel, "bias": bias})
    op = Conv(layer.name, source, kernel, bias.astype(np.float32), stride, padding, groups)
    if not isinstance(layer, GroupConv2D):
        keras_activation(layer, op, found)
    return op


def pool_from(layer, source) -> Pool:
    """Max or average pooling: square windows of 2 or 3, square strides."""
    (kh, kw), (sh, sw) = layer.pool_size, layer.strides
    if kh != kw or sh != sw or kh not in (2, 3):
        raise LoweringError(f"layer {layer.name!r}: pooling takes square 2x2 or 3x3 windows "
                            f"and square strides, got {kh}x{kw} at {sh}x{sw}")
    kind = "max" if isinstance(layer, keras.layers.MaxPooling2D) else "average"
    return Pool(layer.name, source, kind, kh, sh, layer.padding)


def upsample_from(layer, source) -> Upsample:
    """Nearest or bilinear upsampling by one whole factor on both axes."""
    (sy, sx), how = layer.size, layer.interpolation
    if sy != sx or how not in ("nearest", "bilinear"):
        raise LoweringError(f"layer {layer.name!r}: upsampling takes one factor on both axes "
                            f"and nearest or bilinear, got {sy}x{sx} {how}")
    return Upsample(layer.name, source, sy, how)


def fold_batchnorm_layer(conv, layer):
    fold_batchnorm(conv, layer.name, layer.gamma.numpy() if layer.scale else 1.0,
                   layer.beta.numpy() if layer.center else 0.0, layer.moving_mean.numpy(),
                   layer.moving_variance.numpy(), layer.epsilon)
