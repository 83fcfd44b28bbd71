"""What a calibration decides of a net's convolutions: the measured bound of their partial
sums (:func:`measured`) and the tensors they store at 16 bits (:func:`wide_tensors`,
:func:`widened`), on a graph before compile prepares it (:func:`~.passes.prepare`): its
convolutions the IR's, or the :class:`~.form.ConvForm` these made of them."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from workbench import ir
from workbench.es2.ops.conv import split
from workbench.es2.ops.conv.emulator import partial_bound
from workbench.es2.ops.conv.form import formed


PARTIAL_HEADROOM = 4  # the partial sums' measured bound times this (2 bits) for unseen images


def measured(graph: ir.Graph, images) -> ir.Graph:
    """``graph`` with each convolution of more than one input pack or kernel row formed with
    ``partial_bound``: :data:`PARTIAL_HEADROOM` times the bound of its partial sums
    (:func:`~workbench.es2.ops.conv.emulator.partial_bound`) on ``images`` (as stored:
    the emulator's FAST arithmetic), where it is below its weights' bound; a wide layer's
    split then keeps finer steps (a 9216 -> 128 Gemm as a conv: its weights' bound is far
    above what its sums reach)."""
    from workbench.es2 import emulate

    convs = [op for op in graph.ops if isinstance(op, ir.Conv) and (op.cin > ir.PACK
                                                                    or op.size > 1)]
    found = dict.fromkeys((op.name for op in convs), 0.0)
    head = graph.ops[:max((graph.ops.index(op) for op in convs), default=-1) + 1]
    for image in images:
        values = emulate.tensors(graph, image, emulate.FAST, head)
        for op in convs:
            found[op.name] = max(found[op.name], partial_bound(op, values[op.input]))
    bounds = {name: PARTIAL_HEADROOM * b for name, b in found.items()
              if PARTIAL_HEADROOM * b < split.weight_bound(graph.op(name))}
    return replace(graph, ops=[formed(op, partial_bound=bounds[op.name]) if op.name in bounds
                               else op for op in graph.ops])


def wide_tensors(graph: ir.Graph, limits=None) -> set[str]:
    """The tensors stored at 16 bits (:mod:`workbench.es2.fixed16`) where a compile asks it:
    each one held with a scale (``graph.scaled``: a calibrated ReLU's or linear tensor, a
    ReLU6's y / 6; 8-bit steps of its range are what cost a net of the ecosystem its agreement)
    that a convolution writes and only convolutions read, as input or residual (not the net's
    output); with ``limits``, not one whose 16 bits a reader's split would undo
    (:func:`split_undoes`)."""
    readers = graph.readers()
    wide = {op.name for op in graph.ops
            if isinstance(op, ir.Conv) and op.name in graph.scaled and op.storage == "linear"
            and op.name != graph.output and readers.get(op.name)
            and all(isinstance(r, ir.Conv) and not r.luma_input for r in readers[op.name])}
    if limits is None:
        return wide
    undone = {r.name for r in graph.ops if isinstance(r, ir.Conv) and _bits(r, wide)
              and split_undoes(r, wide, limits)}  # each reader asked once
    return {t for t in wide if not undone & {r.name for r in readers[t]}}


def split_undoes(reader: ir.Conv, wide, limits) -> bool:
    """Whether reading the tensors ``wide`` at 16 bits (twice the fetches and texture units)
    splits ``reader`` over more stages (:func:`workbench.es2.ops.conv.split.stages_needed`) whose
    partial sums keep steps coarser than an 8-bit level (:func:`~.split.shift` < 0: its folded
    weights are large): each stage's rounding then costs more than the 16 bits keep (a ReLU
    classifier's 3x3 convs, shift -3: GPU top-1 = ONNX Runtime's 99.5 -> 97 %).  (``reader``:
    as calibration has it, before :func:`~.passes.prepare`: the IR's, or formed with its
    ``partial_bound``.)"""
    reader = formed(reader)
    if split.shift(reader) >= 0:
        return False
    stages = [int(np.prod(split.stages_needed(op, limits)))
              for op in (reader, replace(reader, **_bits(reader, wide)))]
    return stages[1] > stages[0]


def widened(graph: ir.Graph, wide) -> ir.Graph:
    """A copy of ``graph`` whose convolutions write, read and add the tensors ``wide`` (:func:
    `wide_tensors`) at 16 bits (:class:`ConvForm`'s ``out_bits``, ``in_bits``,
    ``residual_bits``)."""
    return replace(graph, ops=[formed(op, **_bits(op, wide))
                               if isinstance(op, ir.Conv) and _bits(op, wide) else op
                               for op in graph.ops])


def _bits(op: ir.Conv, wide) -> dict:
    """The :class:`ConvForm` fields of ``op`` that the 16-bit tensors ``wide`` set to 16."""
    found = {"out_bits": op.name in wide, "in_bits": op.input in wide,
             "residual_bits": op.residual in wide}
    return {field: 16 for field, is_wide in found.items() if is_wide}
