"""The intermediate representation: a Keras model lowered to a list of ops with numpy weights.

Every back end (ES 2.0 shaders, the numpy emulator) reads this and nothing else.

Storage convention: a tensor of C channels is kept as ``ceil(C / 4)`` RGBA textures
("packs"); channel ``c`` is component ``c % 4`` of pack ``c // 4``.  Spatial layout is
row-major like numpy: row ``r`` of a tensor is texture row ``r`` (GL's ``gl_FragCoord.y``).

Ops:

* :class:`Input` -- the image (``rgb=True``: an RGB picture, 1 pack) or a C-channel tensor.
* :class:`Conv` -- convolution + bias (+ residual) + activation, BatchNorm folded in.
  ``kernel`` is ``(k, k, cin // groups, cout)`` as ``tf.nn.conv2d``; ``luma_input`` means the
  input is the RGB image and the conv sees its full-range luma; ``residual`` names a tensor
  of the output's shape added before the activation; ``input_order`` is the binding order of
  the input packs (a channel shuffle is a property of this connection, never a copy).
* :class:`DepthToSpace` -- ``tf.nn.depth_to_space``; with ``chroma_from`` it is the SR demux:
  1 luma channel out, recombined with the chroma of that RGB tensor sampled bilinearly.
"""
from __future__ import annotations

from dataclasses import dataclass

import keras
import numpy as np

from workbench import activations
from workbench.cost import Cost

PACK = 4
LUMA = np.array([0.299, 0.587, 0.114], np.float32)


def packs(channels: int) -> int:
    return -(-channels // PACK)


class LoweringError(ValueError):
    """A Keras model that cannot be turned into the IR; the message names the layer."""


@dataclass
class Input:
    name: str
    channels: int
    rgb: bool = False

    def out_shape(self, shapes, hw):
        return (*hw, self.channels)


@dataclass
class Conv:
    name: str
    input: str
    kernel: np.ndarray
    bias: np.ndarray
    stride: int = 1
    padding: str = "same"
    groups: int = 1
    activation: str = "linear"
    residual: str | None = None
    luma_input: bool = False
    input_order: tuple[int, ...] | None = None

    @property
    def size(self):
        return self.kernel.shape[0]

    @property
    def cin(self):
        return self.kernel.shape[2] * self.groups

    @property
    def cout(self):
        return self.kernel.shape[3]

    def out_hw(self, hw):
        if self.padding == "same":
            return tuple(-(-n // self.stride) for n in hw)
        return tuple((n - self.size) // self.stride + 1 for n in hw)

    def pads(self, hw):
        """Zero padding before the first row and column, as TensorFlow's 'SAME' puts it."""
        if self.padding == "valid":
            return (0, 0)
        return tuple(max((o - 1) * self.stride + self.size - n, 0) // 2
                     for o, n in zip(self.out_hw(hw), hw))

    def out_shape(self, shapes, hw):
        return (*self.out_hw(shapes[self.input][:2]), self.cout)

    def out_packs(self):
        return packs(self.cout)

    def group_channels(self, pack):
        """(first, count) of the input channels that output pack ``pack`` reads."""
        cin_g, cout_g = self.kernel.shape[2], self.cout // self.groups
        group = (pack * PACK) // cout_g
        return group * cin_g, cin_g

    def input_packs(self, pack):
        """Physical input packs (texture indices) read by output pack ``pack``, in order."""
        if self.luma_input:
            return [0]
        first, count = self.group_channels(pack)
        logical = range(first // PACK, packs(first + count))
        order = self.input_order or range(packs(self.cin))
        return [order[i] for i in logical]

    def fetches_per_fragment(self, pack):
        return self.size ** 2 * len(self.input_packs(pack)) + (1 if self.residual else 0)

    def cost(self, shapes):
        h, w, _ = shapes[self.name]
        pixels = h * w
        fetches = sum(self.fetches_per_fragment(p) for p in range(self.out_packs()))
        return Cost(multiply_adds=pixels * self.kernel.size,
                    texel_fetches=pixels * fetches,
                    texture_bytes=pixels * 4 * self.out_packs(),
                    programs=self.out_packs())


@dataclass
class DepthToSpace:
    name: str
    input: str
    block: int
    chroma_from: str | None = None

    def out_shape(self, shapes, hw):
        h, w, c = shapes[self.input]
        return (h * self.block, w * self.block, 3 if self.chroma_from else c // self.block ** 2)

    def out_channels(self, shapes):
        """Channels of the depth-to-space result (1 luma channel for the SR demux)."""
        return 1 if self.chroma_from else shapes[self.name][2]

    def source_channels(self, shapes, pack):
        """For each sub-pixel s = dy * block + dx, the input channels of output pack ``pack``."""
        c_out = self.out_channels(shapes)
        return [[s * c_out + c for c in range(pack * PACK, min(pack * PACK + PACK, c_out))]
                for s in range(self.block ** 2)]

    def source_packs(self, shapes, pack):
        """The input packs that output pack ``pack`` reads (each fetched once per fragment)."""
        return sorted({c // PACK for chans in self.source_channels(shapes, pack) for c in chans})

    def out_packs(self, shapes):
        return packs(self.out_channels(shapes))

    def fetches_per_fragment(self, shapes, pack):
        return len(self.source_packs(shapes, pack)) + (4 if self.chroma_from else 0)

    def cost(self, shapes):
        h, w, _ = shapes[self.name]
        n = self.out_packs(shapes)
        fetches = sum(self.fetches_per_fragment(shapes, p) for p in range(n))
        return Cost(texel_fetches=h * w * fetches, texture_bytes=h * w * 4 * n, programs=n)


@dataclass
class Graph:
    input: Input
    ops: list
    output: str
    name: str = "net"

    def op(self, name):
        return next(op for op in self.ops if op.name == name)

    def shapes(self, hw) -> dict[str, tuple[int, int, int]]:
        """(height, width, channels) of every tensor for an input of ``hw = (h, w)``."""
        shapes = {self.input.name: self.input.out_shape({}, tuple(hw))}
        for op in self.ops:
            shapes[op.name] = op.out_shape(shapes, None)
        return shapes

    def cost(self, hw) -> dict[str, Cost]:
        shapes = self.shapes(hw)
        return {op.name: op.cost(shapes) for op in self.ops}


# --- lowering from Keras ------------------------------------------------------------------

def _keras_activation(layer):
    name = getattr(getattr(layer, "activation", None), "__name__", "linear")
    if name in ("linear", "sigmoid"):
        return name
    raise LoweringError(f"layer {layer.name!r}: Keras activation {name!r} has no [0, 1]-bounded "
                        f"GLSL form; use workbench.layers.Act with one of {activations.names()}")


def _conv_from(layer, source):
    from workbench.layers import GroupConv2D

    if isinstance(layer, GroupConv2D):
        stride, padding, groups, act = layer.strides, layer.padding, layer.groups, "linear"
    else:
        if layer.strides[0] != layer.strides[1] or layer.dilation_rate != (1, 1):
            raise LoweringError(f"layer {layer.name!r}: only square strides, no dilation")
        stride, padding, groups = layer.strides[0], layer.padding, layer.groups
        act = _keras_activation(layer)
    weights = layer.get_weights()
    kernel = weights[0].astype(np.float32)
    if kernel.shape[0] != kernel.shape[1]:
        raise LoweringError(f"layer {layer.name!r}: only square kernels, got {kernel.shape[:2]}")
    bias = weights[1] if len(weights) > 1 else np.zeros(kernel.shape[3])
    return Conv(layer.name, source, kernel, bias.astype(np.float32), stride, padding, groups, act)


def _fold_batchnorm(conv, layer):
    gamma, beta, mean, var = (layer.gamma.numpy() if layer.scale else 1.0,
                              layer.beta.numpy() if layer.center else 0.0,
                              layer.moving_mean.numpy(), layer.moving_variance.numpy())
    k = gamma / np.sqrt(var + layer.epsilon)
    conv.kernel = (conv.kernel * k).astype(np.float32)
    conv.bias = ((conv.bias - mean) * k + beta).astype(np.float32)


def from_keras(model, luma_input=None) -> Graph:
    """Lower a Keras functional model to a :class:`Graph`.

    ``luma_input``: the net takes an RGB image and sees its full-range luma (the SR net).
    Default: True when the model has a 1-channel input.  A final DepthToSpace of a luma net
    becomes the SR demux (chroma from the input image).
    """
    from workbench.layers import Act, DepthToSpace as D2S, GroupConv2D

    if len(model.inputs) != 1 or len(model.outputs) != 1:
        raise LoweringError(f"model {model.name!r}: one input and one output are supported")
    channels = model.inputs[0].shape[-1]
    luma_input = channels == 1 if luma_input is None else luma_input
    graph_input = Input("image", 3 if luma_input else channels, rgb=luma_input)
    ops, tensor_of = [], {}

    def producer(keras_tensor):
        return tensor_of[id(keras_tensor)]

    def last_conv(keras_tensor, layer, what):
        name = producer(keras_tensor)
        op = ops[-1] if ops else None
        if not isinstance(op, Conv) or op.name != name or op.activation != "linear":
            raise LoweringError(f"layer {layer.name!r}: {what} must directly follow a "
                                f"convolution without activation (it follows {name!r})")
        return op

    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            tensor_of[id(layer.output)] = graph_input.name
            continue
        inputs = layer.input if isinstance(layer.input, list) else [layer.input]
        if isinstance(layer, (GroupConv2D, keras.layers.Conv2D)):
            if isinstance(layer, keras.layers.DepthwiseConv2D):
                raise LoweringError(f"layer {layer.name!r}: DepthwiseConv2D is not supported; "
                                    "use GroupConv2D")
            op = _conv_from(layer, producer(inputs[0]))
            op.luma_input = luma_input and op.input == graph_input.name
            ops.append(op)
            tensor_of[id(layer.output)] = op.name
        elif isinstance(layer, keras.layers.BatchNormalization):
            _fold_batchnorm(last_conv(inputs[0], layer, "BatchNormalization"), layer)
            tensor_of[id(layer.output)] = producer(inputs[0])
        elif isinstance(layer, (Act, keras.layers.Activation)):
            op = last_conv(inputs[0], layer, "an activation")
            op.activation = (layer.activation if isinstance(layer, Act)
                             else _keras_activation(layer))
            tensor_of[id(layer.output)] = op.name
        elif isinstance(layer, keras.layers.Add):
            if len(inputs) != 2:
                raise LoweringError(f"layer {layer.name!r}: Add of exactly two tensors supported")
            names = [producer(t) for t in inputs]
            op = ops[-1] if ops else None
            if not isinstance(op, Conv) or op.name not in names:
                raise LoweringError(f"layer {layer.name!r}: one input of Add must be the "
                                    "convolution just before it")
            last_conv(inputs[names.index(op.name)], layer, "Add")
            op.residual = names[1 - names.index(op.name)]
            tensor_of[id(layer.output)] = op.name
        elif isinstance(layer, D2S):
            source = producer(inputs[0])
            chroma = graph_input.name if luma_input else None
            op = DepthToSpace(layer.name, source, layer.block_size, chroma_from=chroma)
            ops.append(op)
            tensor_of[id(layer.output)] = op.name
        else:
            raise LoweringError(f"layer {layer.name!r} ({type(layer).__name__}) is not supported "
                                "by the ES 2.0 back end")
    graph = Graph(graph_input, ops, producer(model.outputs[0]), model.name)
    graph.shapes((64, 64))  # every op can work out its shape
    return graph
