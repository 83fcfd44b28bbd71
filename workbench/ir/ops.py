"""The IR's op types (:data:`OP_TYPES`), each a dataclass of tensor names and numpy weights;
:mod:`.graph` holds them in a :class:`~workbench.ir.graph.Graph` after its
:class:`~workbench.ir.graph.Input`, and states the storage convention they follow.

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
* :class:`Dense` -- the logits: GlobalAveragePooling2D + Dense; a softmax after it runs on the
  CPU.  How its sums are stored is each back end's choice (ES 2.0: 16-bit fixed point or
  float, :class:`workbench.es2.ops.dense.Gemv`).

Each back end reports an op's :class:`workbench.ir.cost.Cost`.  What any consumer may ask
any op (what it reads, its activation, whether it makes an RGB picture, whether it samples
nearest) every op answers (:class:`Op`): nothing outside the op records probes an op for
another kind's attribute (``tests/test_architecture.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.ir.graph import PACK, conv_out_hw, conv_pads, packs
from workbench.nets import storage


class Op:
    """The questions any consumer may ask any IR op, answered for an op that has none of
    what they ask about; the op types that have it answer with their fields (a dataclass
    field of the same name) or properties."""
    activation: str | None = None  # the activation after it (Conv, Add)
    residual: str | None = None    # a tensor added before the activation (Conv)
    storage: str = "linear"        # its output as its texture holds it (Conv: "sqrt")
    anchor_storage: str = "linear"  # its input as it reads it (the SR demux)

    @property
    def reads(self) -> list[str]:
        """Every tensor it reads."""
        return [self.input, *([self.residual] if self.residual else [])]

    @property
    def rgb_output(self) -> bool:
        """Whether its output is an RGB picture (the SR demux)."""
        return False

    @property
    def nearest(self) -> bool:
        """Whether it upsamples nearest (an upsampling, the SR demux's anchor)."""
        return False


@dataclass
class Conv(Op):
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
    residual_scale: np.ndarray | None = None  # the residual read times this, per output
    #   channel: its stored scale over the sum's (ir.lowering.Scales); None: added as stored

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

    def residual_as_stored(self, consumer: str):
        """Raise a ValueError naming the layer where its residual is re-scaled
        (``residual_scale``), which ``consumer`` (a back end adding it as stored) cannot do."""
        if self.residual_scale is not None:
            raise ValueError(f"layer {self.name!r}: its residual {self.residual!r} is stored at "
                             f"another scale than the sum and re-scaled where it is added; "
                             f"{consumer} adds it as stored")

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
        k = self.size
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
class DepthToSpace(Op):
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

    @property
    def reads(self) -> list[str]:
        return [self.input, *([self.chroma_from] if self.chroma_from else [])]

    @property
    def rgb_output(self) -> bool:
        return bool(self.chroma_from)

    @property
    def nearest(self) -> bool:
        return self.anchor == "nearest"

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


class SameChannelsPacks(Op):
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

    @property
    def nearest(self) -> bool:
        return self.interpolation == "nearest"

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

    @property
    def reads(self) -> list[str]:
        return [self.input, self.other]

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

    @property
    def reads(self) -> list[str]:
        return list(self.inputs)

    def out_shape(self, shapes, hw):
        h, w, _ = shapes[self.input]
        return (h, w, sum(shapes[t][2] for t in self.inputs))

    def sources(self, shapes) -> list[tuple[str, int]]:
        """``(tensor, channel)`` of each output channel, in order."""
        return [(t, c) for t in self.inputs for c in range(shapes[t][2])]


@dataclass
class Dense(Op):
    """Fully connected layer (logits).

    ``weight`` is ``(cin, cout)``.  ``pool``: the input is averaged over all its pixels first
    (a GlobalAveragePooling2D fused in, so the average is never rounded to 8 bits).
    ``softmax``: the net's output is the softmax of the logits, computed on the CPU from the
    logits the GPU stored (:func:`softmax`).  Stored as each back end chooses (ES 2.0: its
    prepared form, :class:`workbench.es2.ops.dense.Gemv`, in 16-bit fixed point or float).
    """

    name: str
    input: str
    weight: np.ndarray
    bias: np.ndarray
    pool: bool = False
    softmax: bool = False

    @property
    def cin(self):
        return self.weight.shape[0]

    @property
    def cout(self):
        return self.weight.shape[1]

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
