"""Lowering a Keras functional model to the IR (:class:`workbench.ir.graph.Graph`): the walk
over its layers, each by its handler in :data:`LAYERS` (what one layer becomes:
:mod:`.keras_layers`).

BatchNorm is folded into the conv before it, a channel shuffle becomes the ``input_order`` of
the conv that reads it, ``Quantize8`` (training-time rounding) disappears: RGBA8 storage does it.
"""
from __future__ import annotations

from collections import Counter

import keras
import numpy as np

from workbench.ir.graph import Graph, Input
from workbench.ir.keras_layers import (activation_name, conv_from, fold_batchnorm_layer,
                                       is_softmax, keras_activation, normalise, pool_from,
                                       upsample_from)
from workbench.ir.lowering import (LoweringError, Scales, check_demux_size, check_finite,
                                   store_subpixels)
from workbench.ir.ops import Add, Concat, Conv, Dense, DepthToSpace
from workbench.ir.registry import Table
from workbench.nets.layers import Act, AnchorResidual, GroupConv2D, Quantize8, Shuffle
from workbench.nets.layers import DepthToSpace as D2S


# The Keras layers the lowering takes (each with the conditions its handler checks).
SUPPORTED = ("Conv2D (any groups)", "DepthwiseConv2D", "GroupConv2D", "BatchNormalization (after a conv)",
             "Activation / Act (after a conv or an Add; relu6 stored as y / 6)",
             "ReLU(max_value=m) (after a conv or an Add; stored as y / m)",
             "ReLU / relu, LeakyReLU, PReLU (shared_axes=[1, 2]) (after a conv or an Add; "
             "ES 2.0 stores it with a calibrated scale)",
             "ZeroPadding2D (before a conv with padding 'valid')",
             "Rescaling / Normalization (of the input, before the first convs)",
             "Add (of two tensors)",
             "Concatenate (channels)",
             "MaxPooling2D", "AveragePooling2D", "UpSampling2D (nearest, bilinear)",
             "GlobalAveragePooling2D + Dense (last; a softmax after it on the CPU)",
             "DepthToSpace", "AnchorResidual (of the input luma, before the last DepthToSpace)",
             "Shuffle", "Quantize8")


def _inputs(layer) -> list:
    return layer.input if isinstance(layer.input, list) else [layer.input]


# The Keras front end's table: Keras layer type -> handler(lowering, layer, its inputs), which
# lowers the layer and returns the IR tensor its output is (None: not a tensor of the IR).
LAYERS = Table("the Keras front end", taken=SUPPORTED)


class _Lowering:
    """What one :func:`from_keras` has found so far: the IR ops, what each Keras tensor is."""

    def __init__(self, model, luma_input):
        self.model, self.luma_input = model, luma_input
        channels = model.inputs[0].shape[-1]
        self.input = Input("image", 3 if luma_input else channels, rgb=luma_input)
        self.ops, self.tensor_of, self.order_of = [], {}, {}  # keras tensor id -> IR, pack order
        self.found = Scales(1 if luma_input else channels)  # ReLU6's scales, the normalisation
        self.readers = Counter(id(t) for layer in model.layers
                               if not isinstance(layer, keras.layers.InputLayer)
                               for t in _inputs(layer))
        # keras tensor id of: a global average pooling -> the IR tensor it averages; a
        # ZeroPadding2D's output -> (top, left, bottom, right); an AnchorResidual -> (its
        # sub-pixels' IR tensor, the layer)
        self.pooled, self.pads, self.anchored = {}, {}, {}

    def producer(self, keras_tensor, padded=False):
        if id(keras_tensor) in self.pads and not padded:
            raise LoweringError(f"tensor {keras_tensor.name!r}: a ZeroPadding2D must feed a "
                                "convolution with padding 'valid' (it becomes its padding)")
        if id(keras_tensor) in self.anchored:
            raise LoweringError(f"layer {self.anchored[id(keras_tensor)][1].name!r}: an "
                                "AnchorResidual must feed the net's last DepthToSpace")
        if id(keras_tensor) not in self.tensor_of:
            raise LoweringError(f"tensor {keras_tensor.name!r} feeds a layer the ES 2.0 back end "
                                "cannot take it from (a global pooling must feed a Dense layer)")
        return self.tensor_of[id(keras_tensor)]

    def last_conv(self, keras_tensor, layer, what, kinds=(Conv,)):
        """The op making ``keras_tensor``, where nothing lowered yet reads it (Keras may
        order a branch's layers between a conv and its BatchNormalization)."""
        name = self.producer(keras_tensor)
        ops = self.ops
        at = next((i for i, o in enumerate(ops) if o.name == name), None)
        op = ops[at] if at is not None else None
        if (not isinstance(op, kinds) or any(name in o.reads for o in ops[at + 1:])
                or op.activation != "linear" or id(keras_tensor) in self.order_of):
            raise LoweringError(f"layer {layer.name!r}: {what} must directly follow a "
                                f"convolution without activation (it follows {name!r})")
        return op

    def unshuffled(self, keras_tensor, layer):
        if id(keras_tensor) in self.order_of:
            raise LoweringError(f"layer {layer.name!r}: its input {keras_tensor.name!r} is "
                                "shuffled; take it before the shuffle")
        return self.producer(keras_tensor)

    def keep_order(self, layer, keras_tensor):
        """``layer`` works per channel: its output's packs keep its input's order."""
        if id(keras_tensor) in self.order_of:
            self.order_of[id(layer.output)] = self.order_of[id(keras_tensor)]

    def emit(self, op) -> str:
        self.ops.append(op)
        return op.name


@LAYERS.add(keras.layers.InputLayer)
def _input(low, layer, inputs):
    return low.input.name


@LAYERS.add(GroupConv2D, keras.layers.Conv2D, keras.layers.DepthwiseConv2D)
def _conv(low, layer, inputs):
    op = conv_from(layer, low.producer(inputs[0], padded=True), low.found)
    if id(inputs[0]) in low.pads:
        if op.padding != "valid":
            raise LoweringError(f"layer {layer.name!r}: reads a ZeroPadding2D, so its "
                                f"own padding must be 'valid', not {op.padding!r}")
        op.padding = low.pads[id(inputs[0])]
    op.luma_input = low.luma_input and op.input == low.input.name
    op.input_order = low.order_of.get(id(inputs[0]))
    return low.emit(op)


@LAYERS.add(keras.layers.BatchNormalization)
def _batchnorm(low, layer, inputs):
    fold_batchnorm_layer(low.last_conv(inputs[0], layer, "BatchNormalization"), layer)
    return low.producer(inputs[0])


@LAYERS.add(keras.layers.Softmax)
def _softmax(low, layer, inputs):
    op = low.ops[-1] if low.ops else None
    if not isinstance(op, Dense) or op.name != low.producer(inputs[0]) or op.softmax:
        raise LoweringError(f"layer {layer.name!r}: a softmax must follow the last "
                            "Dense layer (the logits)")
    op.softmax = True
    return op.name


@LAYERS.add(Act, keras.layers.ReLU, keras.layers.LeakyReLU, keras.layers.PReLU)
def _activation(low, layer, inputs):
    op = low.last_conv(inputs[0], layer, "an activation", (Conv, Add))
    if isinstance(layer, Act):
        op.activation = layer.activation
    else:
        keras_activation(layer, op, low.found)
    return op.name


@LAYERS.add(keras.layers.Activation)
def _activation_layer(low, layer, inputs):
    return (_softmax if is_softmax(layer) else _activation)(low, layer, inputs)


@LAYERS.add(keras.layers.Rescaling, keras.layers.Normalization)
def _normalisation(low, layer, inputs):
    if low.producer(inputs[0]) != low.input.name or low.readers[id(inputs[0])] > 1:
        raise LoweringError(f"layer {layer.name!r}: a {type(layer).__name__} only of "
                            "the input, read by it alone (it folds into the convs)")
    normalise(layer, low.found)
    return low.input.name


@LAYERS.add(keras.layers.ZeroPadding2D)
def _zero_padding(low, layer, inputs):
    (top, bottom), (left, right) = layer.padding
    low.pads[id(layer.output)] = (top, left, bottom, right)
    return low.producer(inputs[0])


@LAYERS.add(Shuffle)
def _shuffle(low, layer, inputs):
    previous = low.order_of.get(id(inputs[0]), range(len(layer.order)))
    low.order_of[id(layer.output)] = tuple(previous[i] for i in layer.order)
    return low.producer(inputs[0])


@LAYERS.add(Quantize8)
def _quantize8(low, layer, inputs):  # training-time rounding; RGBA8 storage does it
    low.keep_order(layer, inputs[0])
    return low.producer(inputs[0])


@LAYERS.add(keras.layers.Add)
def _add(low, layer, inputs):
    if len(inputs) != 2:
        raise LoweringError(f"layer {layer.name!r}: Add of exactly two tensors supported")
    names = [low.producer(t) for t in inputs]
    op = low.ops[-1] if low.ops else None
    fused = (isinstance(op, Conv) and op.name in names and op.activation == "linear"
             and not op.residual and id(inputs[names.index(op.name)]) not in low.order_of)
    if fused:  # the residual of the conv just before: one program
        op.residual = low.unshuffled(inputs[1 - names.index(op.name)], layer)
        return op.name
    return low.emit(Add(layer.name, low.unshuffled(inputs[0], layer),
                        low.unshuffled(inputs[1], layer)))


@LAYERS.add(keras.layers.Concatenate)
def _concatenate(low, layer, inputs):
    if layer.axis not in (-1, 3):
        raise LoweringError(f"layer {layer.name!r}: concatenation along the channels "
                            f"only (axis -1), not axis {layer.axis}")
    first, *others = (low.unshuffled(t, layer) for t in inputs)
    return low.emit(Concat(layer.name, first, tuple(others)))


@LAYERS.add(keras.layers.MaxPooling2D, keras.layers.AveragePooling2D)
def _pooling(low, layer, inputs):
    low.keep_order(layer, inputs[0])  # per channel: the packs keep their order
    return low.emit(pool_from(layer, low.producer(inputs[0])))


@LAYERS.add(keras.layers.UpSampling2D)
def _upsampling(low, layer, inputs):
    low.keep_order(layer, inputs[0])  # per channel: the packs keep their order
    return low.emit(upsample_from(layer, low.producer(inputs[0])))


@LAYERS.add(keras.layers.GlobalAveragePooling2D)
def _global_pooling(low, layer, inputs):  # the Dense after it averages
    low.pooled[id(layer.output)] = low.producer(inputs[0])


@LAYERS.add(keras.layers.Dense)
def _dense(low, layer, inputs):
    if id(inputs[0]) not in low.pooled:
        raise LoweringError(f"layer {layer.name!r}: Dense must follow a "
                            "GlobalAveragePooling2D on ES 2.0")
    probabilities = is_softmax(layer)
    layers = low.model.layers
    last = layers[-1] is layer or (is_softmax(layers[-1]) and layers[-2] is layer)
    if (not probabilities and activation_name(layer) != "linear") or not last:
        raise LoweringError(f"layer {layer.name!r}: Dense must be the last layer, "
                            "without activation or with softmax (on the CPU)")
    weight, bias = (w.astype(np.float32) for w in layer.get_weights())
    check_finite(layer.name, {"kernel": weight, "bias": bias})
    return low.emit(Dense(layer.name, low.pooled[id(inputs[0])], weight, bias, pool=True,
                          softmax=probabilities))


@LAYERS.add(AnchorResidual)
def _anchor_residual(low, layer, inputs):  # the DepthToSpace after it takes it
    if not low.luma_input or low.producer(inputs[0]) != low.input.name:
        raise LoweringError(f"layer {layer.name!r}: an AnchorResidual's first input "
                            "must be the luma net's input")
    low.anchored[id(layer.output)] = (low.unshuffled(inputs[1], layer), layer)


@LAYERS.add(D2S)
def _depth_to_space(low, layer, inputs):
    source, anchor = low.anchored.pop(id(inputs[0]), (None, None))
    source = source or low.producer(inputs[0])
    if anchor and (layer.block_size != 2 or low.model.outputs[0] is not layer.output):
        raise LoweringError(f"layer {anchor.name!r}: an AnchorResidual must feed the "
                            "net's last layer, a DepthToSpace of block 2")
    chroma = low.input.name if low.luma_input else None
    law = anchor.storage if anchor else "linear"
    if anchor:
        store_subpixels(low.ops, source, law, f"layer {anchor.name!r}")
    return low.emit(DepthToSpace(layer.name, source, layer.block_size, chroma_from=chroma,
                                 anchor=anchor and anchor.mode,
                                 anchor_scale=anchor.scale if anchor else 0.5,
                                 anchor_storage=law))


def from_keras(model, luma_input=None) -> Graph:
    """Lower a Keras functional model to a :class:`Graph`, one layer at a time by its handler
    in :data:`LAYERS` (a layer without one: :class:`workbench.ir.registry.NotTaken`).

    ``luma_input``: the net takes an RGB image and sees its full-range luma (the SR net).
    Default: True when the model has a 1-channel input.  A final DepthToSpace of a luma net
    becomes the SR demux (chroma from the input image; an AnchorResidual before it, its
    anchor).
    """
    if not isinstance(model, keras.Model):
        raise TypeError(f"model: a Keras model, an ONNX model or a model file's path, not "
                        f"{type(model).__name__}")
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        raise LoweringError(f"model {model.name!r}: one input and one output are supported")
    channels = model.inputs[0].shape[-1]
    image_out = len(model.outputs[0].shape) == 4  # (one channel in: an SR net's luma)
    low = _Lowering(model, channels == 1 and image_out if luma_input is None else luma_input)
    for layer in model.layers:
        tensor = LAYERS.of(layer)(low, layer, _inputs(layer))
        if tensor is not None:
            low.tensor_of[id(layer.output)] = tensor
    ops = low.ops
    size = tuple(model.inputs[0].shape[1:3])
    graph = Graph(low.input, ops, low.producer(model.outputs[0]), model.name,
                  None if None in size else size)
    dense = next((op for op in ops if isinstance(op, Dense)), None)
    if dense and graph.input_size is None:
        raise LoweringError(f"layer {dense.name!r}: a net with a Dense layer needs a fixed "
                            "input size (keras.Input((height, width, channels)))")
    low.found.fold(graph)
    shapes = graph.shapes(graph.input_size or (64, 64))  # every op can work out its shape
    for op in ops:
        if isinstance(op, DepthToSpace) and op.chroma_from:
            check_demux_size(op, shapes)
    return graph
