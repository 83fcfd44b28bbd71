"""What both front ends (Keras, :mod:`.lower`; ONNX, :mod:`.lower_onnx`) share, without
Keras or TensorFlow: the refusal, the weight checks, batch-norm folding and the SR demux's
checks."""
from __future__ import annotations

import numpy as np

from workbench.ir.graph import Conv


class LoweringError(ValueError):
    """A model (Keras or ONNX) that cannot be turned into the IR; the message names the
    layer or node."""


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
