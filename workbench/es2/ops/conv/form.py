"""A convolution as this back end forms it (:class:`ConvForm`): the IR op plus how its
programs add their products, where it is split, the bits of its tensors and its borders; one
value, frozen once made (:func:`formed`, or ``dataclasses.replace`` of one)."""
from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass

from workbench import ir

LAST = -1  # a residual added after all of the order's terms (ConvForm.residual_after)


@dataclass
class ConvForm(ir.Conv):
    """A :class:`workbench.ir.Conv` whose programs add their products in ``order``
    (:data:`ORDERS`), its residual (if any) added after ``residual_after`` of the order's
    terms (:func:`place_residual`), as :func:`workbench.es2.drivers.tune` chose for a target's
    compiler; the emulator follows both.  ``split``: the runs its input packs are
    split over where one program would exceed the limits, ``row_split``: the bands each
    run's kernel rows are split over where one input pack a program is still too many (its
    stages: :mod:`workbench.es2.ops.conv.split`; chosen by :func:`prepare`, or by
    :func:`workbench.es2.drivers.fit` where a driver refuses).  ``out_bits``, ``in_bits``,
    ``residual_bits``: 16 where its output, input or residual is a 16-bit tensor
    (:func:`wide_tensors`; :meth:`bits`).  ``zero_border``: its
    input read through a zero border instead of masks
    (:func:`~workbench.es2.ops.conv.padding.bordered`; a field, for its textures), its producer's
    own (``input_bordered``) or a copy; ``border_out``: ``(left, top, right, bottom)``, its
    output drawn with that border of zeros for its reader
    (:func:`~workbench.es2.ops.conv.padding.producer_borders`); ``luma_copy``: its own copy
    (a luma input's, through a zero border) holds the luma as two bytes
    (:func:`~workbench.es2.ops.conv.padding.copies_luma`).  ``partial_bound``: the largest
    magnitude its partial sums reach on calibration images, with headroom (:func:`measured`;
    :func:`~workbench.es2.ops.conv.split.shift`).  (How a program holds its weights
    changes no arithmetic: a layer option of :func:`passes`, not a field.)  The defaults are
    a plain Conv's meaning: one stage, a chain, 8-bit tensors, no border.

    Frozen: each field is set once, by its ``__init__`` (``dataclasses.replace`` makes
    another).  (Not ``frozen=True``: a dataclass cannot freeze a subclass of a mutable one,
    and the IR's lowerings build an ``ir.Conv`` field by field.)"""
    order: str = "chain"
    residual_after: int = LAST
    split: int = 1
    row_split: int = 1
    out_bits: int = 8
    in_bits: int = 8
    residual_bits: int = 8
    zero_border: bool = False
    input_bordered: bool = False
    border_out: tuple | None = None
    luma_copy: bool = False
    partial_bound: float | None = None  # a bound of its partial sums measured on images

    def __setattr__(self, name, value):
        if name in vars(self):
            raise FrozenInstanceError(f"cannot assign to field {name!r} of a ConvForm "
                                      "(frozen: dataclasses.replace makes another)")
        super().__setattr__(name, value)

    def __delattr__(self, name):
        raise FrozenInstanceError(f"cannot delete field {name!r} of a ConvForm (frozen)")

    def bits(self, tensor="output") -> int:
        """The bits a value of its ``"output"``, ``"input"`` or ``"residual"`` is stored in:
        8 (one RGBA8 texture a pack) or 16 (two, :mod:`workbench.es2.fixed16`)."""
        return {"output": self.out_bits, "input": self.in_bits,
                "residual": self.residual_bits}[tensor]

    def textures_a_pack(self, tensor="output") -> int:
        """RGBA8 textures a pack of its ``tensor`` takes (:meth:`bits`): 1 or 2."""
        return self.bits(tensor) // 8


FORM = ("order", "residual_after", "row_split", "zero_border", "input_bordered",
        "border_out", "luma_copy")  # the layer options a ConvForm records


def formed(op: ir.Conv, **form) -> ConvForm:
    """``op`` as a :class:`ConvForm` with the fields ``form`` (:data:`FORM`: ``order``,
    ``residual_after``, ``row_split``, ``zero_border``, ``input_bordered``, ``border_out``,
    ``luma_copy``; :func:`~.passes.prepare`: ``split``), the others its own: a ConvForm's, or
    a plain Conv's defaults.  (Where a plain Conv arrives: :func:`~.passes.prepare` and calibration,
    which form the IR's, and the emulator, which also runs an IR graph: the reference's float
    graph, calibration's.)"""
    fields = {k: v for k, v in vars(op).items() if k not in form}
    return ConvForm(**fields, **form)
