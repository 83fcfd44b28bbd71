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
* :class:`Dense` -- the logits: GlobalAveragePooling2D + Dense as one blocked GEMV, in 16-bit
  fixed point (or float); softmax stays on the CPU.

Each op reports its own :class:`workbench.cost.Cost`.
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


def texture_bytes(width, height, dtype) -> int:
    """Memory of an RGBA texture: 4 bytes a texel for RGBA8 ("f1"), 16 for RGBA32F ("f4")."""
    return width * height * (4 if dtype == "f1" else 16)


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


FIXED16_RANGE = (-128.0, 128.0)   # 8 integer bits (sign included), 8 fractional bits
FIXED16_STEP = 1.0 / 256


@dataclass
class Dense:
    """Fully connected layer (logits), on ES 2.0 as a blocked GEMV.

    ``weight`` is ``(cin, cout)``.  ``pool``: the input is averaged over all its pixels first
    (a GlobalAveragePooling2D fused in, so the average is never rounded to 8 bits).
    ``number``: ``"fixed16"`` stores partial sums and logits in 16-bit fixed point (range
    [-128, 128), steps of 1/256) packed in two 8-bit channels, 2 values per RGBA texel;
    ``"float"`` in RGBA32F textures.  Stages: one multiply program per block of ``block``
    input packs writes one row of partial sums; reduction passes add ``reduce`` rows at a
    time; the last adds the bias.  Weights (scaled by ``2**weight_shift`` in fixed16) and
    bias live in a texture: row c = input channel c, the last row = bias.
    """

    name: str
    input: str
    weight: np.ndarray
    bias: np.ndarray
    pool: bool = False
    number: str = "fixed16"
    block: int = 4
    reduce: int = 8

    @property
    def cin(self):
        return self.weight.shape[0]

    @property
    def cout(self):
        return self.weight.shape[1]

    @property
    def pairs(self):
        """Texels per row: two outputs per texel."""
        return -(-self.cout // 2)

    @property
    def weight_shift(self):
        """Power of two the fixed16 weights are scaled by, to use the range fully."""
        if self.number != "fixed16":
            return 0
        biggest = float(np.abs(self.weight).max()) or 1.0
        return int(np.clip(np.floor(np.log2(127.0 / biggest)), 0, 7))

    def blocks(self):
        """Input packs of each multiply program."""
        n = packs(self.cin)
        return [list(range(b, min(b + self.block, n))) for b in range(0, n, self.block)]

    def reductions(self):
        """Row counts: of the partial sums, then after each reduction pass (ends at 1)."""
        rows = [len(self.blocks())]
        while rows[-1] > 1 or len(rows) == 1:
            rows.append(-(-rows[-1] // self.reduce))
        return rows

    def out_shape(self, shapes, hw):
        return (1, 1, self.cout)

    def pixels(self, shapes):
        h, w, _ = shapes[self.input]
        return h * w if self.pool else 1

    def fetches_per_fragment(self, shapes):
        """Of the multiply stage (weights + input texels), the heaviest stage."""
        return max(4 * len(b) + len(b) * self.pixels(shapes) for b in self.blocks())

    def textures(self, shapes):
        """Textures of this op: ``{(name, index): (width, height, dtype)}``."""
        dtype = "f1" if self.number == "fixed16" else "f4"
        rows = self.reductions()
        out = {(f"{self.name}/weights", 0): (self.pairs, self.cin + 1, dtype)}
        for k, r in enumerate(rows[:-1]):
            out[(f"{self.name}/partial{k}", 0)] = (self.pairs, r, dtype)
        out[(self.name, 0)] = (self.pairs, 1, dtype)
        return out

    def cost(self, shapes):
        rows = self.reductions()
        fetches = self.pairs * sum(4 * len(b) + len(b) * self.pixels(shapes) for b in self.blocks())
        fetches += self.pairs * sum(r * min(self.reduce, prev) + (1 if r == 1 else 0)
                                    for prev, r in zip(rows, rows[1:]))
        nbytes = sum(texture_bytes(*t) for t in self.textures(shapes).values())
        return Cost(multiply_adds=self.cin * self.cout, texel_fetches=fetches, texture_bytes=nbytes,
                    programs=len(self.blocks()) + len(rows) - 1)


@dataclass
class Graph:
    input: Input
    ops: list
    output: str
    name: str = "net"
    input_size: tuple | None = None   # (height, width) when the net needs a fixed size

    def op(self, name):
        return next(op for op in self.ops if op.name == name)

    def shapes(self, hw) -> dict[str, tuple[int, int, int]]:
        """(height, width, channels) of every tensor for an input of ``hw = (h, w)``."""
        shapes = {self.input.name: self.input.out_shape({}, tuple(hw))}
        for op in self.ops:
            shapes[op.name] = op.out_shape(shapes, None)
        return shapes

    def input_image(self, image) -> np.ndarray:
        """``image`` (HxW or HxWxC, values in [0, 1]) as float32 HxWxC, checked against the
        net's input channels."""
        image = np.asarray(image, np.float32)
        if image.ndim == 2:
            image = image[..., None]
        c = self.input.channels
        if image.ndim != 3 or image.shape[2] != c:
            raise ValueError(f"image of shape {image.shape}: the net's input has {c} channels")
        return image

    def channels(self, name) -> int:
        """Channels of tensor ``name`` (they do not depend on the input size)."""
        return self.shapes(self.input_size or (1024, 1024))[name][2]

    def textures(self, hw) -> dict[tuple[str, int], tuple[int, int, str]]:
        """Every texture the net needs for input size ``hw``: ``(tensor, index) -> (width,
        height, dtype)``; dtype ``"f1"`` is RGBA8, ``"f4"`` RGBA32F."""
        shapes = self.shapes(hw)
        out = {}
        for op in [self.input] + self.ops:
            if hasattr(op, "textures"):
                out.update(op.textures(shapes))
            else:
                h, w, c = shapes[op.name]
                out.update({(op.name, p): (w, h, "f1") for p in range(packs(c))})
        return out

    def peak_texture_bytes(self, hw) -> int:
        """Texture memory when each texture is freed after its last reader (the input and the
        output are kept): the most that is alive at once while the ops run in order."""
        nbytes = {}
        for (name, _), texture in self.textures(hw).items():
            owner = name.split("/")[0]
            nbytes[owner] = nbytes.get(owner, 0) + texture_bytes(*texture)
        last = {self.input.name: len(self.ops), self.output: len(self.ops)}
        for i, op in enumerate(self.ops):
            for name in (op.input, getattr(op, "residual", None), getattr(op, "chroma_from", None)):
                if name:
                    last[name] = max(last.get(name, i), i)
        born = {self.input.name: -1, **{op.name: i for i, op in enumerate(self.ops)}}
        return max(sum(b for name, b in nbytes.items() if born[name] <= i <= last.get(name, born[name]))
                   for i in range(len(self.ops)))

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


def from_keras(model, luma_input=None, dense="fixed16") -> Graph:
    """Lower a Keras functional model to a :class:`Graph`.

    ``luma_input``: the net takes an RGB image and sees its full-range luma (the SR net).
    Default: True when the model has a 1-channel input.  A final DepthToSpace of a luma net
    becomes the SR demux (chroma from the input image).  ``dense``: number format of a
    final Dense layer, ``"fixed16"`` or ``"float"`` (see :class:`Dense`).
    """
    if dense not in ("fixed16", "float"):
        raise ValueError(f"dense must be 'fixed16' or 'float', not {dense!r}")
    from workbench.layers import Act, DepthToSpace as D2S, GroupConv2D, Quantize8, Shuffle

    if len(model.inputs) != 1 or len(model.outputs) != 1:
        raise LoweringError(f"model {model.name!r}: one input and one output are supported")
    channels = model.inputs[0].shape[-1]
    luma_input = channels == 1 if luma_input is None else luma_input
    graph_input = Input("image", 3 if luma_input else channels, rgb=luma_input)
    ops, tensor_of, order_of = [], {}, {}  # keras tensor id -> IR tensor, its pack order
    pooled = {}  # keras tensor id of a global average pooling -> the IR tensor it averages

    def producer(keras_tensor):
        if id(keras_tensor) not in tensor_of:
            raise LoweringError(f"tensor {keras_tensor.name!r} feeds a layer the ES 2.0 back end "
                                "cannot take it from (a global pooling must feed a Dense layer)")
        return tensor_of[id(keras_tensor)]

    def last_conv(keras_tensor, layer, what):
        name = producer(keras_tensor)
        op = ops[-1] if ops else None
        if (not isinstance(op, Conv) or op.name != name or op.activation != "linear"
                or id(keras_tensor) in order_of):
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
            op.input_order = order_of.get(id(inputs[0]))
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
        elif isinstance(layer, Shuffle):
            previous = order_of.get(id(inputs[0]), range(len(layer.order)))
            order_of[id(layer.output)] = tuple(previous[i] for i in layer.order)
            tensor_of[id(layer.output)] = producer(inputs[0])
        elif isinstance(layer, Quantize8):  # training-time rounding; RGBA8 storage does it
            if id(inputs[0]) in order_of:
                order_of[id(layer.output)] = order_of[id(inputs[0])]
            tensor_of[id(layer.output)] = producer(inputs[0])
        elif isinstance(layer, keras.layers.Add):
            if len(inputs) != 2:
                raise LoweringError(f"layer {layer.name!r}: Add of exactly two tensors supported")
            names = [producer(t) for t in inputs]
            op = ops[-1] if ops else None
            if not isinstance(op, Conv) or op.name not in names:
                raise LoweringError(f"layer {layer.name!r}: one input of Add must be the "
                                    "convolution just before it")
            last_conv(inputs[names.index(op.name)], layer, "Add")
            other = inputs[1 - names.index(op.name)]
            if id(other) in order_of:
                raise LoweringError(f"layer {layer.name!r}: the residual input of Add must not "
                                    "be shuffled (add the unit's input before its shuffle)")
            op.residual = producer(other)
            tensor_of[id(layer.output)] = op.name
        elif isinstance(layer, keras.layers.GlobalAveragePooling2D):
            pooled[id(layer.output)] = producer(inputs[0])
        elif isinstance(layer, keras.layers.Dense):
            if id(inputs[0]) not in pooled:
                raise LoweringError(f"layer {layer.name!r}: Dense must follow a "
                                    "GlobalAveragePooling2D on ES 2.0")
            if _keras_activation(layer) != "linear" or layer is not model.layers[-1]:
                raise LoweringError(f"layer {layer.name!r}: Dense must be the last layer, "
                                    "without activation (logits; softmax on the CPU)")
            weight, bias = (w.astype(np.float32) for w in layer.get_weights())
            op = Dense(layer.name, pooled[id(inputs[0])], weight, bias, pool=True, number=dense)
            ops.append(op)
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
    size = tuple(model.inputs[0].shape[1:3])
    graph = Graph(graph_input, ops, producer(model.outputs[0]), model.name,
                  None if None in size else size)
    for op in ops:
        if isinstance(op, Dense):
            if graph.input_size is None:
                raise LoweringError(f"layer {op.name!r}: a net with a Dense layer needs a fixed "
                                    "input size (keras.Input((height, width, channels)))")
            op.block = _dense_block(op, graph.shapes(graph.input_size))
    graph.shapes(graph.input_size or (64, 64))  # every op can work out its shape
    return graph


def _dense_block(op, shapes):
    """The most input packs one multiply program can read within the ES 2.0 fetch and
    texture-unit limits (its weights: 4 fetches per pack; its input: 1 per pack and pixel;
    one unit for the weights texture)."""
    from workbench.limits import ES2, LimitError

    per_pack = 4 + op.pixels(shapes)
    block = min(ES2.fetches_per_fragment // per_pack, ES2.texture_units - 1)
    if block < 1:
        raise LimitError(f"layer {op.name!r}: texel fetches per fragment = {per_pack} for one "
                         f"input pack ({op.pixels(shapes)} pixels to average) exceeds the ES 2.0 "
                         f"limit of {ES2.fetches_per_fragment}")
    return block
