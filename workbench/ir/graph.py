"""The intermediate representation: a Keras model lowered to a list of ops with numpy weights.

Every back end (ES 2.0 shaders, the numpy emulator) reads this and nothing else.

Storage convention: a tensor of C channels is kept as ``ceil(C / 4)`` RGBA textures
("packs"); channel ``c`` is component ``c % 4`` of pack ``c // 4``.  Spatial layout is
row-major like numpy: row ``r`` of a tensor is texture row ``r`` (GL's ``gl_FragCoord.y``).

Ops:

* :class:`Input` -- the image (``rgb=True``: an RGB picture, 1 pack) or a C-channel tensor.
* :class:`Conv` -- convolution + bias (+ residual) + activation (a PRelu's slopes, one per
  output channel, in ``activation_slope``), BatchNorm folded in.
  ``kernel`` is ``(k, k, cin // groups, cout)`` as ``tf.nn.conv2d``; ``luma_input`` means the
  input is the RGB image and the conv sees its full-range luma; ``residual`` names a tensor
  of the output's shape added before the activation; ``input_order`` is the binding order of
  the input packs (a channel shuffle is a property of this connection, never a copy).
* :class:`DepthToSpace` -- ``tf.nn.depth_to_space``; with ``chroma_from`` it is the SR demux:
  1 luma channel out, recombined with the chroma of that RGB tensor sampled bilinearly; with
  ``anchor`` the luma is ``clip(a + anchor_scale * (q - 0.5), 0, 1)``, ``q`` the sub-pixel and
  ``a`` that tensor's luma upsampled (``"nearest"``, or ``"bilinear"`` as the chroma).
  ``anchor_storage="sqrt"``: ``q`` is read companded (:mod:`workbench.nets.storage`) from a
  :class:`Conv` whose ``storage`` is ``"sqrt"``: that Conv's output is the companded value
  (the texture's), the demux decodes it.  A float back end may skip both (they cancel).
* :class:`Pool` -- max or average pooling, k x k windows at a stride, per channel.
* :class:`Upsample` -- x2 (or xN) nearest or bilinear upsampling, per channel.
* :class:`Add` -- the sum of two tensors (then an activation); :class:`Concat` -- their
  channels one after the other.
* :class:`Dense` -- the logits: GlobalAveragePooling2D + Dense as one blocked GEMV, in 16-bit
  fixed point (or float); a softmax after it runs on the CPU.

Each op reports its own :class:`workbench.ir.cost.Cost`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.nets import storage

PACK = 4
LUMA = np.array([0.299, 0.587, 0.114], np.float32)


def packs(channels: int) -> int:
    return -(-channels // PACK)


def input_hw(hw, what="the input size") -> tuple[int, int]:
    """``hw`` as ``(height, width)`` of positive ints; anything else a ValueError in one line
    naming ``what`` (a negative or zero size gave negative counts and empty nets)."""
    try:
        height, width = (int(v) for v in hw)
        if (height, width) != tuple(hw):
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"{what}: (height, width) as two whole numbers, not {hw!r}") from None
    if height < 1 or width < 1:
        raise ValueError(f"{what}: {height}x{width} is not a picture (both sides >= 1)")
    return height, width


def conv_out_hw(hw, size, stride, padding):
    """Output (height, width) of a convolution, as ``tf.nn.conv2d`` computes it.
    ``padding``: ``"same"`` (TensorFlow's), ``"valid"``, or explicit zero padding
    ``(top, left, bottom, right)`` (as ONNX and PyTorch put it)."""
    if padding == "same":
        return tuple(-(-n // stride) for n in hw)
    top, left, bottom, right = explicit_pads(padding)
    return tuple((n + before + after - size) // stride + 1
                 for n, before, after in zip(hw, (top, left), (bottom, right)))


def explicit_pads(padding) -> tuple[int, int, int, int]:
    """``(top, left, bottom, right)`` of ``"valid"`` (zeros) or of an explicit padding."""
    if padding == "valid":
        return (0, 0, 0, 0)
    if isinstance(padding, str):
        raise ValueError(f"padding {padding!r}: 'same' depends on the input size")
    return tuple(int(p) for p in padding)


def conv_pads(hw, size, stride, padding):
    """Zero padding (top, left) before the first row and column, as TensorFlow's 'SAME' puts
    it; (0, 0) for 'valid'; the first two of an explicit padding."""
    if padding != "same":
        return explicit_pads(padding)[:2]
    return tuple(max((o - 1) * stride + size - n, 0) // 2
                 for o, n in zip(conv_out_hw(hw, size, stride, padding), hw))


def uniform_values(uniforms: dict, shapes) -> dict[str, tuple[int, int]]:
    """Values of a program's 2-vector uniforms for the tensor shapes of one input size.

    ``uniforms``: name -> spec; ``("size", tensor)`` is that tensor's (width, height);
    ``("pad", input, kernel, stride, padding)`` the (left, top) zero padding of a convolution
    reading ``input``.  Both back ends' generators state their uniforms this way, so that the
    runners never look at ops.
    """
    def value(kind, tensor, *conv):
        h, w = shapes[tensor][:2]
        if kind == "size":
            return (w, h)
        top, left = conv_pads((h, w), *conv)
        return (left, top)
    return {name: value(*spec) for name, spec in uniforms.items()}


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
    padding: str | tuple = "same"  # "same", "valid" or (top, left, bottom, right)
    groups: int = 1
    activation: str = "linear"
    residual: str | None = None
    luma_input: bool = False
    input_order: tuple[int, ...] | None = None
    storage: str = "linear"  # "sqrt": the output is the 8-bit texture's companded value
    pad_value: np.ndarray | None = None  # what a tap in the padding reads, per input channel
    #   (logical order), as its texture stores it: a tensor stored with an offset holds its real
    #   zero there (ir.lowering.Scales); None: 0
    activation_slope: np.ndarray | None = None  # "prelu": its slope below 0, per output channel
    activation_zero: np.ndarray | None = None  # "bounded_prelu" (ES 2.0's calibrated storage):
    #   what a real 0 stores as, per output channel, added after the PRelu (nets.activations)

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
        return conv_out_hw(hw, self.size, self.stride, self.padding)

    def pads(self, hw):
        return conv_pads(hw, self.size, self.stride, self.padding)

    def out_shape(self, shapes, hw):
        return (*self.out_hw(shapes[self.input][:2]), self.cout)

    def out_packs(self):
        return packs(self.cout)

    def zero_padded(self, consumer: str):
        """Raise a ValueError naming the layer where its padding holds a ``pad_value`` that
        ``consumer`` (a back end padding with zeros only) cannot give it."""
        if self.pad_value is not None:
            raise ValueError(f"layer {self.name!r}: its padding holds the stored value of a "
                             f"real 0 (its input is stored with an offset); {consumer} pads "
                             "with zeros only")

    def in_group(self, out_channel) -> range:
        """The input channels output channel ``out_channel`` reads: its group's."""
        cin_g, group = self.kernel.shape[2], out_channel // (self.cout // self.groups)
        return range(group * cin_g, (group + 1) * cin_g)

    def logical_packs(self, pack) -> list[int]:
        """The input's packs of 4 channels (in channel order, before any shuffle) that output
        pack ``pack`` reads, in order: those of its channels' groups (a group may fill part
        of a pack, as a depthwise conv's one channel)."""
        outs = range(pack * PACK, min(pack * PACK + PACK, self.cout))
        return sorted({c // PACK for o in outs for c in self.in_group(o)})

    def input_packs(self, pack):
        """Physical input packs (texture indices) read by output pack ``pack``, in order."""
        if self.luma_input:
            return [0]
        order = self.input_order or range(packs(self.cin))
        return [order[i] for i in self.logical_packs(pack)]

    def tap_weights(self, pack) -> np.ndarray:
        """The weights output pack ``pack`` applies to each input pack it reads,
        ``(k, k, len(logical_packs), 4, 4)``: ``[dy, dx, j, i, o]`` multiplies component ``i``
        of its ``j``-th input pack into its output component ``o`` (0 where that input
        channel is outside the output's group, or beyond the input's channels)."""
        k, cin_g = self.size, self.kernel.shape[2]
        logical = [0] if self.luma_input else self.logical_packs(pack)
        w = np.zeros((k, k, len(logical), PACK, PACK), np.float32)
        for o in range(pack * PACK, min(pack * PACK + PACK, self.cout)):
            group = self.in_group(o)
            for j, first in enumerate(logical):
                for i in range(PACK):
                    c = PACK * first + i
                    if c in group:
                        w[:, :, j, i, o - pack * PACK] = self.kernel[:, :, c - group.start, o]
        return w


@dataclass
class DepthToSpace:
    name: str
    input: str
    block: int
    chroma_from: str | None = None
    anchor: str | None = None  # "nearest" or "bilinear": the sub-pixels correct that upsampling
    anchor_scale: float = 0.5
    anchor_storage: str = "linear"  # "sqrt": the sub-pixels are read companded (and decoded)

    def __post_init__(self):
        if self.anchor not in (None, "nearest", "bilinear"):
            raise ValueError(f"layer {self.name!r}: anchor must be 'nearest', 'bilinear' or "
                             f"None, not {self.anchor!r}")
        if self.anchor and not self.chroma_from:
            raise ValueError(f"layer {self.name!r}: an anchor needs the image (chroma_from)")
        storage.check(self.anchor_storage, f"layer {self.name!r}: anchor_storage")
        if self.anchor_storage != "linear" and not self.anchor:
            raise ValueError(f"layer {self.name!r}: anchor_storage needs an anchor")

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


class SameChannelsPacks:
    """For an op whose output packs follow its output's channels (its ``out_shape``)."""

    def out_packs(self, shapes):
        return packs(shapes[self.name][2])


@dataclass
class Pool(SameChannelsPacks):
    """Max or average pooling of each channel over ``size`` x ``size`` windows at ``stride``,
    as ``tf.nn.max_pool2d`` / ``tf.nn.avg_pool2d``: 'same' padding leaves the padded taps out
    (of the max, and of the average's count).  ``kind``: ``"max"`` or ``"average"``."""
    name: str
    input: str
    kind: str
    size: int
    stride: int
    padding: str | tuple = "valid"  # as Conv.padding

    def out_shape(self, shapes, hw):
        h, w, c = shapes[self.input]
        return (*conv_out_hw((h, w), self.size, self.stride, self.padding), c)


@dataclass
class Upsample(SameChannelsPacks):
    """x``scale`` upsampling of each channel, ``interpolation`` ``"nearest"`` (each pixel
    repeated) or ``"bilinear"`` (half-pixel centres, edges clamped: ``tf.image.resize``)."""
    name: str
    input: str
    scale: int
    interpolation: str = "nearest"

    def out_shape(self, shapes, hw):
        h, w, c = shapes[self.input]
        return (h * self.scale, w * self.scale, c)


@dataclass
class Add(SameChannelsPacks):
    """``input + other`` (two tensors of one shape), then ``activation``, which must keep the
    sum in [0, 1] for 8-bit storage (the conv-fused residual is :attr:`Conv.residual`)."""
    name: str
    input: str
    other: str
    activation: str = "linear"
    activation_slope: np.ndarray | None = None  # as Conv's

    def out_shape(self, shapes, hw):
        return shapes[self.input]


@dataclass
class Concat(SameChannelsPacks):
    """The channels of ``input`` then of each of ``others`` (tensors of one size)."""
    name: str
    input: str
    others: tuple[str, ...]

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.input, *self.others)

    def out_shape(self, shapes, hw):
        h, w, _ = shapes[self.input]
        return (h, w, sum(shapes[t][2] for t in self.inputs))

    def sources(self, shapes) -> list[tuple[str, int]]:
        """``(tensor, channel)`` of each output channel, in order."""
        return [(t, c) for t in self.inputs for c in range(shapes[t][2])]


FIXED16_RANGE = (-128.0, 128.0)   # 8 integer bits (sign included), 8 fractional bits
FIXED16_STEP = 1.0 / 256


@dataclass
class Dense:
    """Fully connected layer (logits).

    ``weight`` is ``(cin, cout)``.  ``pool``: the input is averaged over all its pixels first
    (a GlobalAveragePooling2D fused in, so the average is never rounded to 8 bits).
    ``number``: ``"fixed16"`` keeps partial sums and logits in 16-bit fixed point (range
    [-128, 128), steps of 1/256; the weights scaled by ``2**weight_shift``), ``"float"`` in
    float32 (how ES 2.0 runs it: :mod:`workbench.es2.ops.dense`).  ``softmax``: the net's
    output is the softmax of the logits, computed on the CPU from the logits the GPU stored
    (:func:`softmax`).
    """

    name: str
    input: str
    weight: np.ndarray
    bias: np.ndarray
    pool: bool = False
    number: str = "fixed16"
    softmax: bool = False

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

    def out_shape(self, shapes, hw):
        return (1, 1, self.cout)

    def pixels(self, shapes):
        h, w, _ = shapes[self.input]
        return h * w if self.pool else 1


def softmax(logits) -> np.ndarray:
    """The softmax of a logits vector, float32 (computed in float64, largest logit first
    subtracted)."""
    z = np.asarray(logits, np.float64)
    e = np.exp(z - z.max())
    return (e / e.sum()).astype(np.float32)


# The op types by name, as a saved net's manifest names them.
OP_TYPES = {t.__name__: t for t in (Conv, DepthToSpace, Pool, Upsample, Add, Concat, Dense)}


def reads(op) -> list[str]:
    """Every tensor ``op`` reads: its input, and a residual, chroma, other or others."""
    extra = [getattr(op, f, None) for f in ("residual", "chroma_from", "other")]
    return [op.input, *(t for t in extra if t), *getattr(op, "others", ())]


@dataclass
class Graph:
    input: Input
    ops: list
    output: str
    name: str = "net"
    input_size: tuple | None = None   # (height, width) when the net needs a fixed size
    origin: dict | None = None  # tensor -> the source model's tensor it stands for (ONNX)

    def __post_init__(self):
        """A companded tensor (a Conv's ``storage``) is read by one op that decodes it: the
        SR demux with the same ``anchor_storage``."""
        readers, by_name = {}, {op.name: op for op in self.ops}
        for op in self.ops:
            for tensor in reads(op):
                readers.setdefault(tensor, []).append(op)
        for op in self.ops:
            law = getattr(op, "storage", "linear")
            storage.check(law, f"layer {op.name!r}: storage")
            if law != "linear" and ([getattr(r, "anchor_storage", None) for r in
                                     readers.get(op.name, [])] != [law]
                                    or readers[op.name][0].input != op.name):
                raise ValueError(f"layer {op.name!r}: storage {law!r} needs one reader, "
                                 f"an SR demux with anchor_storage {law!r}")
            decodes = getattr(op, "anchor_storage", "linear")
            if decodes != "linear" and getattr(by_name.get(op.input), "storage",
                                               "linear") != decodes:
                raise ValueError(f"layer {op.name!r}: anchor_storage {decodes!r} needs its "
                                 f"input stored so (a Conv with storage {decodes!r})")

    def op(self, name):
        return next(op for op in self.ops if op.name == name)

    def shapes(self, hw) -> dict[str, tuple[int, int, int]]:
        """(height, width, channels) of every tensor for an input of ``hw = (h, w)``."""
        shapes = {self.input.name: self.input.out_shape({}, input_hw(hw))}
        for op in self.ops:
            shapes[op.name] = op.out_shape(shapes, None)
        return shapes

    def input_image(self, image) -> np.ndarray:
        """``image`` (HxW or HxWxC: floats in [0, 1], or uint8 0..255 as ``np.asarray`` of a
        PIL image gives, converted) as float32 HxWxC, checked against the net's input
        channels and, for a fixed-size net, its input size.  Values outside [0, 1], NaN and
        other integer types are refused in one line (they would clip to a near-white or
        black image without a word)."""
        try:
            raw = np.asarray(image)
        except ValueError as error:  # a ragged nested list
            raise ValueError(f"image: not an array of pixels (HxW or HxWxC): {error}") from None
        if raw.dtype == np.uint8:
            image = raw.astype(np.float32) / np.float32(255)
        elif raw.dtype.kind in "fb":
            image = raw.astype(np.float32)
        else:
            raise ValueError(f"image of dtype {raw.dtype}: give floats in [0, 1] or uint8 "
                             "(0..255)")
        if image.size and not np.isfinite(image).all():
            raise ValueError(f"image has {int((~np.isfinite(image)).sum())} NaN or infinite "
                             "values: the net takes floats in [0, 1]")
        if image.size and (image.min() < 0 or image.max() > 1):
            raise ValueError(f"image values span [{image.min():g}, {image.max():g}]: the net "
                             "takes floats in [0, 1] (uint8 0..255 is converted; from 0..255 "
                             "floats divide by 255, from [-1, 1] take (x + 1) / 2)")
        if image.ndim == 2:
            image = image[..., None]
        c = self.input.channels
        if image.ndim != 3 or image.shape[2] != c:
            raise ValueError(f"image of shape {image.shape}: the net's input has {c} channels")
        hw = image.shape[:2]
        if self.input_size and tuple(hw) != tuple(self.input_size):
            raise ValueError(f"image of {hw[1]}x{hw[0]} pixels: net {self.name!r} takes "
                             f"{self.input_size[1]}x{self.input_size[0]}")
        return image

    @property
    def rgb_output(self) -> bool:
        """Whether the output is an RGB picture: the SR demux, which puts the net's luma
        sub-pixels and the input's chroma back together (its ``chroma_from``)."""
        return bool(getattr(self.op(self.output), "chroma_from", None))

    def channels(self, name) -> int:
        """Channels of tensor ``name`` (they do not depend on the input size)."""
        return self.shapes(self.input_size or (1024, 1024))[name][2]
