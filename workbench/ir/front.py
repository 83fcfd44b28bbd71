"""The front ends: a Keras model (:func:`workbench.ir.from_keras`) or an ONNX model
(:func:`workbench.ir.from_onnx`) lowered to the IR by one call; a Beatmup chunk file
(:func:`from_beatmup`) through its Keras model."""
from __future__ import annotations

from workbench.ir.graph import Graph
from workbench.ir.onnx import from_onnx, is_onnx


def from_keras(model, luma_input=None) -> Graph:
    """:func:`workbench.ir.lower.from_keras`, imported at the first call: Keras loads
    TensorFlow, which an ONNX model or a saved net never needs."""
    from workbench.ir.lower import from_keras as lower

    return lower(model, luma_input=luma_input)


def from_model(model, luma_input=None) -> Graph:
    """``model`` (a Keras model, an ``onnx.ModelProto`` or an
    :class:`~workbench.nets.onnx_model.OnnxModel`, or the path of a file
    :func:`workbench.load_model` reads) as a :class:`Graph`."""
    if isinstance(model, str) or hasattr(model, "__fspath__"):
        from workbench.nets.models import load_model

        model = load_model(model)
    lower = from_onnx if is_onnx(model) else from_keras
    return lower(model, luma_input=luma_input)


def from_beatmup(path) -> Graph:
    """The net of Beatmup's chunk file at ``path`` (its weights as they are; input: the RGB
    picture after its input step, :func:`workbench.nets.beatmup_model.sample`)."""
    from workbench.nets import beatmup_model

    return from_keras(beatmup_model.load(path))
