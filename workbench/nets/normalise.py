"""The exporter's input normalisation, given as torchvision writes it: ``mean`` and ``std``
per channel on pixels in [0, 1], the net reading ``(x - mean) / std``.

:func:`normalised` prepends it to the model, so that the model then takes [0, 1] pixels as
every image of the workbench is: for an ONNX model a ``Sub`` and a ``Div`` on its input (as
a PyTorch user would export them), for a Keras model a ``Normalization`` layer; the front
ends fold either into the first layer's weights, exactly, and the reference runtime runs the
same model.
"""
from __future__ import annotations

import numpy as np


def parse(text, what) -> tuple[float, ...]:
    """``"0.485,0.456,0.406"`` -> floats; one line naming ``what`` for anything else."""
    try:
        values = tuple(float(v) for v in str(text).split(","))
    except ValueError:
        raise ValueError(f"{what} {text!r}: one number, or one per channel, comma-separated "
                         "(e.g. 0.485,0.456,0.406)") from None
    return values


def vector(values, channels, what) -> np.ndarray:
    """``values`` (one, or one per channel) as a float32 vector of ``channels``; refused in
    one line where it has another length or is not finite (``std``: not positive)."""
    v = np.atleast_1d(np.asarray(values, np.float64)).ravel()
    if v.size == 1:
        v = np.repeat(v, channels)
    if v.size != channels:
        raise ValueError(f"{what}: {v.size} values for a net of {channels} input channels; "
                         "give one, or one per channel")
    if not np.all(np.isfinite(v)) or (what == "std" and not np.all(v > 0)):
        raise ValueError(f"{what}: {v.tolist()}; finite values" +
                         (", each above 0" if what == "std" else ""))
    return v.astype(np.float32)


def normalised(model, mean=None, std=None):
    """``model`` reading ``(x - mean) / std`` of its [0, 1] input (mean 0, std 1 where not
    given); ``model`` itself where neither is given.  A Keras model or an
    :class:`~workbench.nets.onnx_model.OnnxModel`."""
    if mean is None and std is None:
        return model
    if hasattr(model, "proto"):
        return _onnx(model, mean, std)
    return _keras(model, mean, std)


def _onnx(model, mean, std):
    import onnx
    from onnx import helper, numpy_helper

    from workbench.nets.onnx_model import OnnxModel, first_input

    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    graph = proto.graph
    head = first_input(graph)
    nhwc = model.nhwc
    dims = head.type.tensor_type.shape.dim
    channels = dims[3 if nhwc else 1].dim_value
    shape = (1, 1, 1, channels) if nhwc else (1, channels, 1, 1)
    m = vector(0.0 if mean is None else mean, channels, "mean").reshape(shape)
    s = vector(1.0 if std is None else std, channels, "std").reshape(shape)
    name = head.name
    centred, scaled = f"{name}/workbench_mean", f"{name}/workbench_std"
    for node in graph.node:
        node.input[:] = [scaled if i == name else i for i in node.input]
    graph.initializer.extend([numpy_helper.from_array(m, f"{name}/mean"),
                              numpy_helper.from_array(s, f"{name}/std")])
    nodes = [helper.make_node("Sub", [name, f"{name}/mean"], [centred], name="/normalise/Sub"),
             helper.make_node("Div", [centred, f"{name}/std"], [scaled], name="/normalise/Div")]
    rest = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes + rest)
    return OnnxModel(proto, model.name, model.input_size)


def _keras(model, mean, std):
    import keras

    channels = model.input_shape[-1]
    m = vector(0.0 if mean is None else mean, channels, "mean")
    s = vector(1.0 if std is None else std, channels, "std")
    inputs = keras.Input(model.input_shape[1:])
    x = keras.layers.Normalization(mean=m, variance=s.astype(np.float64) ** 2,
                                   name="normalise")(inputs)
    outputs = model._run_through_graph(x, operation_fn=_copy)  # (Keras' own graph walk)
    return keras.Model(inputs, outputs, name=model.name)


def _copy(layer):
    """A new layer of ``layer``'s config and weights, called where ``layer`` was: the model
    rebuilt flat on a new input (the front end reads each layer's own input, so the layers
    cannot be shared with the original, nor the model nested)."""
    new = type(layer).from_config(layer.get_config())

    def call(*args, **kwargs):
        out = new(*args, **kwargs)
        new.set_weights(layer.get_weights())
        return out
    return call
