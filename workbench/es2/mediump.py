"""What a GPU whose ``mediump`` is float16 does to a net, predicted by the emulator
(:func:`workbench.es2.emulate.run` with ``arithmetic="float16"``; its docstring states the
assumptions), op by op against ``highp``; and the warning ``es2.compile(...,
mediump_warn_db=...)`` gives.

PSNR here is over every value of a tensor with peak 1 (tensors hold [0, 1]); for a dense
layer's logits the peak is the reference logits' range (max - min).
"""
from __future__ import annotations

import warnings

import numpy as np

from workbench import ir
from workbench.es2 import emulate
from workbench.es2.record import record
from workbench.es2.fixed16 import FixedPointOverflow

PROBE_SIZE = 32


class MediumpWarning(UserWarning):
    """A net predicted to lose precision on a GPU whose mediump is float16."""


def psnr(reference, value, peak=1.0):
    """PSNR in dB of ``value`` against ``reference`` with ``peak``; ``inf`` when equal,
    ``-inf`` when ``value`` holds NaN or infinity (a float16 overflow)."""
    value = np.asarray(value, np.float64)
    if not np.isfinite(value).all():
        return float("-inf")
    mse = np.mean((np.asarray(reference, np.float64) - value) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(peak ** 2 / mse))


def peak(graph: ir.Graph, name, reference):
    """The PSNR peak of tensor ``name``: 1 for 8-bit levels, or the range of values
    stored otherwise (a dense layer's logits)."""
    if name != graph.input.name and record(graph.op(name)).stored:
        return float(np.ptp(reference)) or 1.0
    return 1.0


def probe_image(graph: ir.Graph, size=PROBE_SIZE, seed=0):
    """A deterministic smooth random image for ``graph``: the net's input size (else ``size``
    square), its channels; random values on a grid 8 times coarser, upsampled bilinearly."""
    h, w = graph.input_size or (size, size)
    coarse = np.random.default_rng(seed).random((-(-h // 8), -(-w // 8), graph.input.channels))
    return emulate.bilinear(coarse.astype(np.float32), 8)[:h, :w]


def per_op(graph: ir.Graph, image):
    """``{op name: PSNR dB}`` of every op's output predicted for mediump against highp's on
    ``image`` (HxWxC in [0, 1]), in execution order.  Each op runs on its own precision's
    inputs, so a loss in one op carries on into the next, as on the GPU."""
    high = emulate.tensors(graph, image, "float32")
    medium = emulate.tensors(graph, image, "float16")
    return {op.name: psnr(high[op.name], medium[op.name], peak(graph, op.name, high[op.name]))
            for op in graph.ops}


def warn_below(graph: ir.Graph, threshold_db, image=None):
    """Warn (:class:`MediumpWarning`) naming the first op whose predicted mediump output
    falls below ``threshold_db`` PSNR against highp on ``image`` (default
    :func:`probe_image`).  Returns the per-op PSNR (``{}`` if the probe overflowed the
    fixed-point range, which is also warned)."""
    image = probe_image(graph) if image is None else image
    try:
        scores = per_op(graph, image)
    except FixedPointOverflow as e:
        warnings.warn(f"mediump prediction not made: on the probe image {e}", MediumpWarning,
                      stacklevel=3)
        return {}
    worst = next(((name, db) for name, db in scores.items() if db < threshold_db), None)
    if worst:
        h, w = np.shape(image)[:2]
        warnings.warn(
            f"net {graph.name!r}: on a GPU whose mediump is float16, op {worst[0]!r} is "
            f"predicted at {worst[1]:.1f} dB PSNR against highp on a {w}x{h} probe image, below "
            f"mediump_warn_db={threshold_db:g} (the output {graph.output!r}: "
            f"{scores[graph.output]:.1f} dB); see workbench.es2.mediump", MediumpWarning,
            stacklevel=3)
    return scores
