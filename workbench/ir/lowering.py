"""What both front ends (Keras, :mod:`.lower`; ONNX, :mod:`.onnx`) share, without
Keras or TensorFlow: the refusal, the weight checks, batch-norm folding, the SR demux's
checks, and the scales folded at lowering (:class:`Scales`)."""
from __future__ import annotations

import numpy as np

from workbench.ir.graph import explicit_pads
from workbench.ir.ops import Add, Concat, Conv, Dense, DepthToSpace, Pool, Upsample
from workbench.ir.registry import LoweringError, Table
from workbench.nets import activations


def check_finite(name, arrays):
    """Refuse NaN or infinite weights, ``{what: values}`` of layer ``name`` (in the shaders
    they would become ``nan`` literals that fail to compile)."""
    for what, values in arrays.items():
        bad = int(np.size(values) - np.isfinite(values).sum())
        if bad:
            raise LoweringError(f"layer {name!r}: {what} has {bad} NaN or infinite "
                                "values (diverged training?); fix or retrain the weights")


def fold_batchnorm(conv, name, gamma, beta, mean, var, epsilon):
    """Fold batch normalisation ``name`` (inference: ``gamma * (x - mean) / sqrt(var +
    epsilon) + beta`` per channel) into ``conv``'s kernel and bias."""
    check_finite(name, {"gamma": gamma, "beta": beta, "moving_mean": mean,
                        "moving_variance": var})
    with np.errstate(divide="ignore", invalid="ignore"):  # checked just below
        k = gamma / np.sqrt(np.maximum(var + epsilon, 0))
        conv.kernel = (conv.kernel * k).astype(np.float32)
        conv.bias = ((conv.bias - mean) * k + beta).astype(np.float32)
    check_finite(name, {"the folded kernel": conv.kernel, "the folded bias": conv.bias})


def store_subpixels(ops, source, law, where):
    """The SR demux reads its sub-pixels ``source`` stored by ``law`` (:mod:`workbench.nets.
    storage`): the conv among ``ops`` that makes them stores them so.  ``where`` names the
    layer or node in the error."""
    if law == "linear":
        return
    conv = next((op for op in ops if op.name == source), None)
    if not isinstance(conv, Conv):
        raise LoweringError(f"{where}: storage {law!r} needs its sub-pixels from a convolution")
    conv.storage = law


def check_demux_size(op, shapes):
    """The SR demux samples the chroma of the input image at its own input's pixels: the two
    must have one size (no stride or 'valid' padding on the way)."""
    have, want = shapes[op.input][:2], shapes[op.chroma_from][:2]
    if have != want:
        raise LoweringError(
            f"layer {op.name!r}: a luma net's depth-to-space must read a tensor of the input "
            f"image's size, but {op.input!r} is {have[1]}x{have[0]} for a {want[1]}x{want[0]} "
            "input (a stride or 'valid' padding before it); use stride 1 and 'same' padding")


# --- scales folded at lowering -------------------------------------------------------------
# Tensors stored with a scale, folded at lowering, exactly: ReLU6 / ``Clip(0, m)`` and the
# input's normalisation.  Both front ends record what they find in a :class:`Scales` and call
# :meth:`Scales.fold` on the graph they lowered; no back end sees a scale (ES 2.0's
# calibration of unbounded tensors, :mod:`workbench.es2.calibrate`, folds its own the same way).
#
# The IR keeps a tensor as its texture stores it, in [0, 1].  A Conv (or Add) followed by
# ReLU6 / ``Clip(0, m)`` computes ``y`` in [0, m]: it keeps the bounded ReLU and its kernel and
# bias are divided by ``m``, so it stores ``y / m``.  Every tensor then stands for
# ``real = scale * stored + offset`` (per channel; an offset from the input's normalisation,
# ``x * s + o``, or a calibrated signed range), and each reader folds that back: a Conv into
# its kernel's input-channel rows and its bias (where it pads, its padding then holds the
# stored value of a real 0, ``Conv.pad_value``), a Dense into its weight rows and bias; max
# and average pooling and upsampling keep it (they commute with a positive affine map), a
# Concat concatenates the channels'.  A sum (an Add, a Conv's residual) adds stored values: its
# parts must be stored at the scale of its own output (an Add's; a residual's offset goes into
# the Conv's bias, and a residual stored at another scale than the sum is re-scaled where the
# program reads it: ``Conv.residual_scale``, its scale over the sum's, per channel).  A
# depth-to-space and the net's output must be stored as they are (scale 1, offset 0);
# anything else is refused in one line.  Each op type has its rule in :data:`FOLDS`, and each
# activation its stored form in its registry entry (``Activation.stored_as``,
# :mod:`workbench.nets.activations`); an op type or an activation without one is a gap in the
# workbench, refused in one line (:class:`NoScaleRule`), never folded as another.


class NoScaleRule(NotImplementedError):
    """An op type or an activation that the scale folding (:class:`Scales`) has no rule for:
    a gap in the workbench, not in the model (the command line reports it as a bug); the
    message names the layer."""


FOLDS = Table("the scale folding (workbench.ir.lowering.Scales.fold)")
"""IR op type -> its rule ``rule(op, read, out)``: fold what ``op`` reads (``read(tensor)``:
its ``(scale, offset)``, one of each a channel) into its weights, or refuse naming the layer;
``out`` is its own output's ``(scale, offset)`` as stored (:meth:`Scales.store`; ``(1.0,
0.0)``); returns what its output stands for."""


def channel_vector(value, channels, axis, where) -> np.ndarray:
    """A constant of one value, or one per channel along ``axis`` (ONNX's NCHW: -3, Keras'
    NHWC: -1), as a float64 vector of ``channels`` values."""
    v = np.asarray(value, np.float64)
    if v.size == 1:
        return np.full(channels, float(v.reshape(())))
    if v.size != channels or v.ndim < -axis or v.shape[axis] != channels:
        raise LoweringError(f"{where}: a constant of shape {v.shape}: one value, or one per "
                            f"channel of the {channels}")
    return v.reshape(-1)


class Scales:
    """What a front end found: ``stored``, op -> ``(scale, offset)`` (each one value, or one
    a channel) of an op whose output is stored as ``(y - offset) / scale`` (``(m, 0)`` for
    the ``Clip(0, m)`` it ends in; an ES 2.0 calibration's, :mod:`workbench.es2.calibrate`),
    and the input's normalisation, ``real = scale * image + offset``."""

    def __init__(self, channels):
        self.stored, self.read = {}, {}
        self.scale, self.offset = np.ones(channels), np.zeros(channels)

    def read_as(self, op, scale, offset):
        """``op``'s own weights and activation already store ``(y - offset) / scale`` (a
        Tanh as ``sigmoid(2 z)``): its readers read ``scale * stored + offset``."""
        self.read[op.name] = (scale, offset)

    def store(self, op, scale, offset=0.0):
        """``op`` (a Conv or an Add) stores ``(y - offset) / scale``, clamped to [0, 1], with
        the activation its own names as its ``stored_as`` (the scale and offset in its
        weights; a PRelu or leaky ReLU keeps its slopes, the offset added after it,
        ``activation_zero``: :meth:`fold`); an activation without one, :class:`NoScaleRule`."""
        stored = activations.of(op).stored_as
        if stored is None:
            raise NoScaleRule(f"layer {op.name!r}: activation {op.activation!r} has no form "
                              "stored at a scale; a gap in the workbench (give it one: its "
                              "stored_as in workbench.nets.activations)")
        if stored == "bounded_prelu":
            op.activation_slope = activations.slopes(op, np.size(scale))
        op.activation = stored
        self.stored[op.name] = (scale, offset)

    def clip(self, op, low, high, where):
        """``op`` (a Conv or an Add) ends in ``Clip(low, high)``: ReLU6, ``ReLU(max_value=
        m)``, ONNX's ``Clip``.  ``high`` None: a ReLU (unbounded: ES 2.0 calibrates its
        scale, :mod:`workbench.es2.calibrate`)."""
        if low is None or float(low) != 0:
            raise LoweringError(f"{where}: a clip from {low}; the 8-bit storage keeps [0, m] "
                                "as [0, 1]: clip at 0")
        if high is not None and not float(high) > 0:
            raise LoweringError(f"{where}: Clip(0, {high}) keeps nothing; its maximum must "
                                "be above 0")
        op.activation = "relu" if high is None else "bounded_relu"
        if high is not None and float(high) != 1:
            self.store(op, float(high))

    def normalise(self, how, value, where, axis):
        """The input (already normalised so far) ``how`` (``"mul"``, ``"div"``, ``"add"``,
        ``"sub"``) the constant ``value`` (one, or one per channel along ``axis``)."""
        v = channel_vector(value, self.scale.size, axis, where)
        if how in ("mul", "div"):
            if not np.all(v > 0) or not np.all(np.isfinite(v)):
                raise LoweringError(f"{where}: the input scaled by {v.tolist()}; only by "
                                    "positive finite values (a max pooling would turn into "
                                    "a min)")
            v = v if how == "mul" else 1 / v
            self.scale, self.offset = self.scale * v, self.offset * v
        else:
            self.offset = self.offset + (v if how == "add" else -v)

    def fold(self, graph):
        """Fold every scale and offset into the readers in ``graph``'s ops (the ops change in
        place), or refuse naming the layer; a scaled tensor leaves ``graph.origin`` (it no
        longer holds the source model's values).  Returns each tensor's ``(scale, offset)``,
        a value a channel: it stands for ``scale * stored + offset``."""
        shapes = graph.shapes(graph.input_size or (64, 64))
        affine = {graph.input.name: (self.scale, self.offset)}

        def read(tensor):  # (scale, offset), one of each a channel (a luma net's input: 1)
            n = 1 if tensor == graph.input.name and graph.input.rgb else shapes[tensor][2]
            return tuple(np.broadcast_to(np.asarray(v, np.float64), n) for v in affine[tensor])

        for op in graph.ops:
            rule = FOLDS.get(type(op))
            if rule is None:
                raise NoScaleRule(f"layer {op.name!r}: {type(op).__name__} has no scale "
                                  "folding rule; a gap in the workbench (give it one in "
                                  "workbench.ir.lowering.FOLDS)")
            out = rule(op, read, self.stored.get(op.name, (1.0, 0.0)))
            affine[op.name] = self.read.get(op.name, out)
        scaled = {t for t in affine if t != graph.input.name and
                  (np.any(read(t)[0] != 1) or np.any(read(t)[1] != 0))}
        if graph.output in scaled:
            raise LoweringError(f"layer {graph.output!r}, the net's output, is stored as "
                                f"{_describe(*read(graph.output))}, not the model's values: "
                                "end the net in a bounded activation (Clip(0, 1), a sigmoid) "
                                "or a Dense")
        for name in scaled & set(graph.origin or ()):
            del graph.origin[name]
        graph.scaled = graph.scaled | scaled
        return {t: read(t) for t in affine}


@FOLDS.add(Pool, Upsample)
def _fold_kept(op, read, out):
    """Pooling and upsampling commute with a positive affine map: the input's."""
    return read(op.input)


@FOLDS.add(Concat)
def _fold_concat(op, read, out):
    return tuple(map(np.concatenate, zip(*map(read, op.inputs))))


@FOLDS.add(Dense)
def _fold_dense(op, read, out):
    s, o = read(op.input)
    op.bias = (op.bias + o @ op.weight).astype(np.float32)
    op.weight = (op.weight * s[:, None]).astype(np.float32)
    return out


@FOLDS.add(Conv)
def _fold_conv(op, read, out):
    """``y = conv + residual``: the input's scale into the kernel, its offset and the
    residual's into the bias; the output's ``(y - o) / m`` into both."""
    _fold_into_conv(op, *read(op.input))
    m, offset = np.asarray(out[0], np.float64), out[1]
    if op.activation == "bounded_prelu":  # (prelu(y) - o) / s = prelu(y / s) - o / s
        op.activation_zero = np.broadcast_to(-offset / m, op.cout).astype(np.float32)
        offset = 0.0
    bias = op.bias.astype(np.float64) - offset
    if op.residual:  # stored at another scale than the sum: re-scaled as read
        s, o = read(op.residual)
        if np.any(s != m):
            op.residual_scale = np.broadcast_to(s / m, op.cout).astype(np.float32)
        bias = bias + o
    op.kernel = (op.kernel / m).astype(np.float32)
    op.bias = (bias / m).astype(np.float32)
    return out


@FOLDS.add(DepthToSpace)
def _fold_depth_to_space(op, read, out):  # the demux's chroma is the picture itself
    _plain(op, read, op.input, *([op.chroma_from] if op.anchor else []),
           why="a depth-to-space has no weights to fold it into; clip at 1 before it "
           "(Clip(0, 1))")
    return out


@FOLDS.add(Add)
def _fold_add(op, read, out):
    m = np.asarray(out[0], np.float64)
    _plain(op, read, op.input, op.other, scale=m, why=_SUM.format(m=_describe(m, 0)))
    return out


def _plain(op, read, *tensors, why, scale=1.0):
    """Refuse, naming ``op`` and ``why``, a tensor of ``tensors`` not stored as ``x *
    scale``."""
    for t in tensors:
        s, o = read(t)
        if np.any(s != scale) or np.any(o != 0):
            raise LoweringError(f"layer {op.name!r} ({type(op).__name__}) reads {t!r}, "
                                f"stored as {_describe(s, o)}: {why}")


def leaky_relu(slope, where) -> str:
    """The activation name of a leaky ReLU of ``slope`` (a LoweringError naming ``where``
    for a slope outside [0, 1))."""
    try:
        return activations.leaky_relu(float(slope)).name
    except ValueError as err:
        raise LoweringError(f"{where}: {err}") from None


def prelu(op, slope, channels, where, axis):
    """Give ``op`` (of ``channels`` output channels) a PRelu of ``slope``: one value
    (``leaky_relu`` where it lies in [0, 1), else one a channel) or one per channel along
    ``axis`` (ONNX's NCHW: -3, Keras' NHWC: -1); any other shape (a slope varying over space)
    a LoweringError naming ``where``."""
    try:
        v = channel_vector(slope, channels, axis, where)
    except LoweringError:
        raise LoweringError(f"{where}: a PRelu slope of shape {np.shape(slope)}; one value or "
                            f"one per channel of the {channels}, shared over space (Keras' "
                            "shared_axes=[1, 2], ONNX's (C, 1, 1))") from None
    if np.size(slope) == 1 and 0 <= v[0] < 1:
        op.activation = leaky_relu(v[0], where)
        return
    check_finite(op.name, {"the PRelu's slope": v})
    op.activation, op.activation_slope = "prelu", v.astype(np.float32)


def sums_as_convs(graph, which):
    """Each two-input Add of ``graph`` for which ``which(op)`` holds becomes a depthwise 1x1
    conv of its ``input`` (weights 1, bias 0) with ``other`` as its residual: the same sum,
    with weights and a bias that a fold can carry scales in (in place)."""
    shapes = graph.shapes(graph.input_size or (64, 64))

    def conv(op):
        c = shapes[op.name][2]
        return Conv(op.name, op.input, np.ones((1, 1, 1, c), np.float32), np.zeros(c, np.float32),
                    groups=c, activation=op.activation, residual=op.other,
                    activation_slope=op.activation_slope)

    graph.ops = [conv(op) if isinstance(op, Add) and which(op) else op for op in graph.ops]


_SUM = ("a sum adds stored values, so its parts must be stored at the scale of its result, "
        "{m} (the clip after it); clip both at the same m")


def _num(v) -> str:
    return f"{float(v):.4g}"


def _describe(scale, offset) -> str:
    """How a tensor ``x`` is stored: ``x / 6``, ``x / (1.5, 2)``, ``(x - 0.1) / 0.5``."""
    def one(v):
        v = np.unique(np.asarray(v, np.float64))
        more = ", ..." if v.size > 4 else ""
        return _num(v[0]) if v.size == 1 else f"({', '.join(map(_num, v[:4]))}{more})"
    text = "x" if np.all(scale == 1) else f"x / {one(scale)}"
    return text if np.all(offset == 0) else f"(x - {one(offset)}) / {one(scale)}"


def _fold_into_conv(op, scale, offset):
    """``op`` reads ``scale * stored + offset``: the scale into its kernel's input-channel
    rows, the offset into its bias; where the conv pads, its padding then holds the stored
    value of a real 0 (``pad_value``, ``-offset / scale``), so a tap there still adds 0."""
    if np.all(scale == 1) and np.all(offset == 0):
        return
    if np.any(offset):
        padded = (op.size > 1) if op.padding == "same" else any(explicit_pads(op.padding))
        if padded and not op.luma_input:
            op.pad_value = (-_logical(op, offset) / _logical(op, scale)).astype(np.float32)
        elif padded:
            raise LoweringError(f"layer {op.name!r}: a luma net's input normalised with an "
                                "offset before a conv that pads: normalise by a scale alone")
    scale, offset = (_per_tap(op, v) for v in (scale, offset))
    if np.any(offset):
        op.bias = (op.bias + np.einsum("yxio,io->o", op.kernel, offset)).astype(np.float32)
    op.kernel = (op.kernel * scale).astype(np.float32)


def _logical(op, values) -> np.ndarray:
    """Per-channel ``values`` of the tensor ``op`` reads, in the conv's logical channel order
    (after its pack order ``input_order``)."""
    values = np.broadcast_to(values, op.cin)
    if op.input_order and not op.luma_input:
        padded = np.resize(values, 4 * len(op.input_order)).reshape(-1, 4)
        values = padded[list(op.input_order)].reshape(-1)
    return values[:op.cin]


def _per_tap(op, values) -> np.ndarray:
    """``(cin / groups, cout)``: the value of the input channel that ``kernel[:, :, i, o]``
    multiplies (its group's, after the conv's pack order ``input_order``)."""
    values = _logical(op, values)
    group = np.arange(op.cout) // (op.cout // op.groups)
    cin_g = op.kernel.shape[2]
    return values[group[None, :] * cin_g + np.arange(cin_g)[:, None]]
