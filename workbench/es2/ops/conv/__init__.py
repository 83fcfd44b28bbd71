"""The ES 2.0 record of :class:`workbench.ir.Conv`: convolution + bias (+ residual) +
activation, one program per output pack of 4 channels (or, with draw buffers, per run of packs
that read the same inputs; or, for a compiler with a small constant file, per 2 or 1 output
channels under a colour mask), its emulator, limits, cost and tiling.

The shader sums as its emulator (:mod:`workbench.es2.ops.conv.emulator`) does, in one of the
summation orders (:mod:`workbench.es2.ops.conv.orders`); a tap in the padding is masked
(:mod:`workbench.es2.ops.conv.padding`); a program holds its weights as literals or uniforms
(:mod:`workbench.es2.ops.conv.weights`); a program too wide for the target is split over its input
packs and, where one pack is too many, its kernel rows (:mod:`workbench.es2.ops.conv.split`, which
also plans the split).  Its modules: :mod:`.form` (:class:`ConvForm`), :mod:`.passes` (its
programs for a target, its limits), :mod:`.program` (one program's GLSL), :mod:`.cost` (cost,
textures, tiling), :mod:`.calibration` (what a calibration decides of it).
"""
from __future__ import annotations

from workbench import ir
from workbench.es2 import fixed16
from workbench.es2.emulate import FAST, REAL, quantize
from workbench.es2.ops.conv.calibration import measured, wide_tensors, widened
from workbench.es2.ops.conv.cost import cost, origin, textures, tile
from workbench.es2.ops.conv.emulator import emulate
from workbench.es2.ops.conv.form import FORM, ConvForm, formed
from workbench.es2.ops.conv.orders import ORDERS
from workbench.es2.ops.conv.passes import (channels_per_program, check, check_program,
                                           layer_options, passes, prepare, programs)
from workbench.es2.ops.conv.program import program
from workbench.es2.record import OpRecord, register

__all__ = ["FORM", "ORDERS", "ConvForm", "apply", "channels_per_program", "emulate", "formed",
           "measured", "passes", "program", "programs", "wide_tensors", "widened"]


def apply(op: ir.Conv, tensors, arithmetic):
    """The stored output, as the next op fetches it (8 or 16 bits); ``op``: a
    :class:`ConvForm`, or a plain Conv of an IR graph (:func:`emulate`)."""
    op, res = formed(op), tensors[op.residual] if op.residual else None
    out = emulate(op, tensors[op.input], res, fast=arithmetic in (REAL, FAST))
    if op.out_bits == 16:
        return fixed16.stored_tensor(out, arithmetic)
    return quantize(out, arithmetic)


RECORD = register(ir.Conv, OpRecord(
    "Conv", passes=passes, apply=apply, check=check, cost=cost, tile=tile, textures=textures,
    check_program=check_program, layer_options=layer_options, prepare=prepare,
    prepared=ConvForm, origin=origin, bits=ConvForm.bits))
