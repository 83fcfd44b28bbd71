"""Unbounded tensors stored with a scale: an RGBA8 texture keeps [0, 1], so a tensor whose
activation leaves it (a ReLU's output, a linear add or projection) is stored as
``(x - offset) / scale``, per channel, with the range calibrated on sample images.

:func:`ranges` runs the IR on the images without any storage (the emulator in
:data:`~workbench.es2.emulate.REAL` arithmetic) and takes each channel's minimum and maximum;
:func:`stored_as` widens them by :data:`HEADROOM` and turns them into ``(scale, offset)``
per tensor: offset 0 where a channel never goes below 0 (a ReLU), else its widened minimum;
scale its widened span; a channel constant on every image (a dead ReLU) stored exactly.  A
sum adds stored values, so a conv's calibrated residual is stored at the scale of the conv's
output (tied, the larger span of the two wins; the offsets differ freely, the conv's bias
absorbs them; a residual stored otherwise is re-scaled where it is read); a two-input add
becomes a depthwise 1x1 conv of one input with the other as its residual, so that its weights
carry the first's scale.  The front ends' fold (:meth:`workbench.ir.lowering.Scales.fold`)
then moves each scale into the readers' weights, exactly; a value outside the calibrated range is clipped
by the store, as any value outside [0, 1].
"""
from __future__ import annotations

from copy import deepcopy
from itertools import takewhile

import numpy as np

from workbench import ir
from workbench.es2.emulate import REAL, tensors
from workbench.es2.record import record
from workbench.ir.lowering import Scales, sums_as_convs
from workbench.nets import activations


HEADROOM = 0.5  # a channel's stored range reaches this share of its measured span beyond each
#   measured end that is not 0 (values past it on unseen images are clipped); 0.5 is the old
#   1.5x margin for a channel that never goes below 0.  On the MobileNetV2-style net (20
#   images) the GPU top-1 = TF went 97.2 % (0) -> 98.0 (0.25) -> 98.4 (0.5) -> 97.6 (1: coarser
#   steps)


FLOOR = 1 / 256  # a channel's scale is at least this share of its tensor's widest: a nearly
#   dead channel (a span of 0.001 of the others') would otherwise multiply its producer's
#   weights, and a split producer's one partial-sum shift coarsens every channel's sums
#   (LeNet-style hidden Gemm, seeded: top-1 = ONNX Runtime's 0 % -> 100 %)


def unbounded(op) -> bool:
    """Whether ``op``'s activation leaves [0, 1] (an op without one keeps its input's)."""
    if op.activation is None:
        return False
    low, high = activations.of(op).output_range or (-np.inf, np.inf)
    return low < 0 or high > 1


def scaled(graph: ir.Graph) -> set[str]:
    """The ops whose outputs calibration stores with a scale: those with an unbounded
    activation."""
    return {op.name for op in graph.ops if unbounded(op)}


def images_clamped(graph: ir.Graph) -> ir.Graph:
    """``graph`` where the net's output image (more than one pixel), and what reaches it
    through depth-to-space alone (an ESPCN's last, linear conv), ends in ``clamp(x, 0, 1)``:
    an image keeps [0, 1] as it is stored, whatever its activation (a copy where one
    changes; the reference check reports the share of its values clipped)."""
    image, readers = {graph.output}, graph.readers()
    for op in reversed(graph.ops):
        if (op.name in image and record(op).name == "DepthToSpace" and not op.anchor
                and len(readers.get(op.input, [])) == 1):
            image.add(op.input)
    changed = {op.name for op in graph.ops if op.name in image and unbounded(op)}
    h, w, _ = graph.shapes(graph.input_size or (64, 64))[graph.output]
    if not changed or record(graph.op(graph.output)).stored is not None or h * w == 1:
        return graph  # (logits, or a vector of features: not an image)
    graph = deepcopy(graph)
    for op in graph.ops:
        if op.name in changed:
            op.activation, op.activation_slope = "bounded_relu", None
    return graph


def needed(graph: ir.Graph) -> bool:
    return bool(scaled(graph))


def ranges(graph: ir.Graph, images) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per channel ``(minimum, maximum)`` over ``images`` (HxWxC in [0, 1]) of the output of
    every op stored with a scale (:func:`scaled`), as computed without storage (float32)."""
    # up to the logits (not stored in 8 bits)
    head = list(takewhile(lambda op: record(op).stored is None, graph.ops))
    which = scaled(graph)
    found = {}
    for image in images:
        values = tensors(graph, image, REAL, head)
        for op in (op for op in head if op.name in which):
            v = values[op.name].reshape(-1, values[op.name].shape[-1])
            low, high = v.min(0), v.max(0)
            if op.name in found:
                low = np.minimum(found[op.name][0], low)
                high = np.maximum(found[op.name][1], high)
            found[op.name] = (low, high)
    return found


def stored_as(graph: ir.Graph, found,
              headroom=HEADROOM) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``(scale, offset)`` per channel of each calibrated tensor (``found``: :func:`ranges`),
    as :func:`tensor_storage` stores one alone; the larger scale of the two where a conv's
    residual ties two calibrated tensors (a residual stored otherwise, a bounded one, is
    re-scaled where it is read: ``Conv.residual_scale``)."""
    if not headroom >= 0:
        raise ValueError(f"headroom: the share of a channel's span kept past its calibrated "
                         f"range, 0 or more, not {headroom!r}")
    stored = {name: tensor_storage(low, high, headroom) for name, (low, high) in found.items()}
    scales = {name: scale for name, (scale, _) in stored.items()}
    tied = [(op.name, op.residual) for op in graph.ops
            if op.residual and op.name in found and op.residual in found]
    for _ in range(len(tied)):  # until every tie agrees (a chain of residual blocks)
        for a, b in tied:
            scales[a] = scales[b] = np.maximum(scales[a], scales[b])
    return {name: (scales[name], offset) for name, (_, offset) in stored.items()}


def tensor_storage(low, high, headroom=HEADROOM) -> tuple[np.ndarray, np.ndarray]:
    """``(scale, offset)`` per channel of one tensor whose calibration values span ``[low,
    high]`` (per channel, or scalars), so that ``(x - offset) / scale`` holds them in [0, 1]:
    the measured range with 0 in it, widened by ``headroom`` times its span past each end that
    is not 0 (offset its lower end, scale its span, at least :data:`FLOOR` of the tensor's
    widest).  A channel that never leaves a constant ``c`` (a dead ReLU: 0) is stored
    exactly, as 0 (offset ``c``), at the tensor's widest scale (so its producer's weights are
    not amplified)."""
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    bottom, top = np.minimum(low, 0), np.maximum(high, 0)
    span = top - bottom
    bottom, top = bottom - headroom * span * (bottom < 0), top + headroom * span * (top > 0)
    constant = high - low <= 1e-6 * np.maximum(1, np.maximum(np.abs(low), np.abs(high)))
    varying = (top - bottom)[~constant]
    widest = varying.max() if varying.size else max(float(np.abs(low).max()), 1.0)
    return (np.where(constant, widest, np.maximum(top - bottom, widest * FLOOR)),
            np.where(constant, low, bottom))


def require_foldable(graph: ir.Graph):
    """Refuse in one line, before any image is run, a graph whose scaled tensors no ranges
    could fold (a depth-to-space, the net's output or a bounded sum reading one): a copy
    folded with every scaled tensor stored as ``x + 1`` (an offset, which those refuse;
    the scale 1 that a sum with a bounded tensor may keep)."""
    shapes = graph.shapes(graph.input_size or (64, 64))
    _folded(graph, lambda g: {name: (np.ones(shapes[name][2]), np.full(shapes[name][2], -1.0))
                              for name in scaled(g)})


def calibrated(graph: ir.Graph, images, headroom=HEADROOM) -> tuple[ir.Graph, dict]:
    """``(graph, affine)``: a copy of ``graph`` whose unbounded tensors are stored as
    ``(x - offset) / scale`` with ranges calibrated on ``images`` (:func:`ranges`,
    :func:`stored_as`), their readers' weights carrying the scales
    (:meth:`workbench.ir.lowering.Scales.fold`), and every tensor's ``(scale, offset)`` so
    (a pooling's its input's); ``graph`` itself and ``{}`` where nothing is unbounded."""
    if not needed(graph):
        return graph, {}
    found = ranges(graph, images)
    return _folded(graph, lambda g: stored_as(g, found, headroom))


def _folded(graph: ir.Graph, stored_of) -> tuple[ir.Graph, dict]:
    """A copy of ``graph`` with its unbounded sums as convs, its unbounded tensors stored as
    ``stored_of(copy)`` says, folded; and every tensor's ``(scale, offset)``."""
    graph = deepcopy(graph)
    which = scaled(graph)
    sums_as_convs(graph, lambda op: op.name in which)
    scales = Scales(1 if graph.input.rgb else graph.input.channels)  # (a luma net: its luma)
    for name, (scale, offset) in stored_of(graph).items():
        scales.store(graph.op(name), scale, offset)
    return graph, scales.fold(graph)
