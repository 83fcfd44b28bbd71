"""An ONNX model with ONNX Runtime (CPU) as its reference, called as a Keras model is.

PyTorch's exporter writes NCHW tensors; the workbench's images are NHWC.  :class:`OnnxModel`
takes and gives NHWC (a 2-D output, a classifier's logits, as it is), so that every check
written for a Keras model (``model(x, training=False)``, ``model.predict(x)``) runs an ONNX
net against ONNX Runtime unchanged.  A model whose input is NHWC already (tf2onnx's: read
only by Transposes to NCHW, :func:`channels_last`) takes it as it is.
"""
from __future__ import annotations

import contextlib
from functools import cached_property
from pathlib import Path

import numpy as np


class OnnxRuntimeError(ValueError):
    """ONNX Runtime refused to run the model (its error's first line, naming the model)."""


class OnnxModel:
    """``proto`` (an ``onnx.ModelProto``), run by an ONNX Runtime CPU session; ``name`` the
    file's stem or the graph's name; ``input_size`` ``(height, width)`` for a model whose
    input size is dynamic (the lowering's, :func:`workbench.ir.from_onnx`), refused in one
    line where the input fixes its height or width otherwise; ``source`` its file, which
    messages name (else ``name``)."""

    def __init__(self, proto, name=None, input_size=None, source=None):
        self.proto = proto
        self.name = name or proto.graph.name or "onnx_net"
        self.source = str(source or self.name)
        self.input_size = tuple(input_size) if input_size else None
        self._session = None
        if self.input_size:
            self._check_size()

    def _check_size(self):
        """Refuse an ``input_size`` that a fixed height or width of the input contradicts."""
        head = first_input(self.proto.graph)
        dims = [d.dim_value if d.HasField("dim_value") else None
                for d in head.type.tensor_type.shape.dim] if head is not None else []
        if len(dims) != 4:
            return  # (the lowering names what it takes)
        fixed = dims[1:3] if self.nhwc else dims[2:]
        for what, given, own in zip(("height", "width"), self.input_size, fixed):
            if own is not None and own != given:
                h, w = self.input_size
                raise ValueError(f"{self.source}: input {head.name!r} has a fixed {what} of "
                                 f"{own}; the input size {h}x{w} (height x width) gives {given}")

    @contextlib.contextmanager
    def _refusals(self):
        """ONNX Runtime's errors as :class:`OnnxRuntimeError`: one line naming the model."""
        try:
            yield
        except Exception as err:
            if not type(err).__module__.startswith("onnxruntime"):
                raise
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            first = first.split(" : ")[-1].strip()  # ("[ONNXRuntimeError] : 2 : CODE : why")
            raise OnnxRuntimeError(f"{self.source}: ONNX Runtime cannot run it "
                                   f"({type(err).__name__}: {first})") from None

    @property
    def session(self):
        """The ONNX Runtime session, made at first use (quiet: warnings only)."""
        if self._session is None:
            self._session = self._make_session(self.proto)
        return self._session

    def _make_session(self, proto):
        import onnxruntime

        onnxruntime.set_default_logger_severity(3)  # (what it logs before a session's own level)
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 4  # (its errors are raised; logged, they would show)
        with self._refusals():
            return onnxruntime.InferenceSession(proto.SerializeToString(), options,
                                                providers=["CPUExecutionProvider"])

    @cached_property
    def nhwc(self) -> bool:
        """Whether the model's input is NHWC (:func:`channels_last`)."""
        graph = self.proto.graph
        return bool(channels_last(graph, first_input(graph).name))

    def __call__(self, x, training=False):
        """The output for NHWC float32 ``x`` (NHWC, or 2-D logits as they are; an NHWC
        model's output as it is)."""
        with self._refusals():
            out = _run(self.session, None, x, self.nhwc)[0]
        return np.transpose(out, (0, 2, 3, 1)) if out.ndim == 4 and not self.nhwc else out

    def predict(self, x, batch_size=32, verbose=0):
        """:meth:`__call__` in batches of ``batch_size`` (Keras' signature)."""
        x = np.asarray(x, np.float32)
        return np.concatenate([self(x[i:i + batch_size]) for i in range(0, len(x), batch_size)])

    def tensors(self, x, names) -> dict[str, np.ndarray]:
        """The values of the graph's tensors ``names`` for NHWC ``x`` (each NHWC, or as it is
        when not 4-D): ONNX Runtime run on a copy of the graph that outputs them."""
        import onnx

        proto = onnx.ModelProto()
        proto.CopyFrom(self.proto)
        del proto.graph.output[:]
        proto.graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                                 for n in names)
        session = self._make_session(proto)
        with self._refusals():
            values = _run(session, list(names), x, self.nhwc)
        return {n: np.transpose(v, (0, 2, 3, 1)) if v.ndim == 4 else v
                for n, v in zip(names, values)}


def first_input(graph):
    """The ONNX ``graph``'s first input that is not an initializer (older exporters list the
    weights among the inputs), its ``ValueInfoProto``; None if there is none."""
    inits = {t.name for t in graph.initializer}
    return next((i for i in graph.input if i.name not in inits), None)


def channels_last(graph, name) -> list:
    """The Transpose nodes (perm 0, 3, 1, 2) that alone read ``graph``'s 4-D input ``name``
    where it is NHWC (tf2onnx's layout); [] where it is not."""
    readers = [n for n in graph.node if name in n.input]
    perms = [tuple(a.ints) for n in readers if n.op_type == "Transpose"
             for a in n.attribute if a.name == "perm"]
    return readers if readers and perms == [(0, 3, 1, 2)] * len(readers) else []


def _run(session, names, x, nhwc=False) -> list[np.ndarray]:
    """``session.run`` of ``names`` (None: the outputs) on NHWC ``x`` (as NCHW unless the
    model is ``nhwc``), in runs of the input's batch size where the model fixes it
    (``torch.onnx.export`` writes batch 1)."""
    x = np.asarray(x, np.float32)
    x = np.ascontiguousarray(x if nhwc else np.transpose(x, (0, 3, 1, 2)))
    head = session.get_inputs()[0]
    step = head.shape[0] if isinstance(head.shape[0], int) and head.shape[0] > 0 else len(x)
    try:
        runs = [session.run(names, {head.name: x[i:i + step]}) for i in range(0, len(x), step)]
    except Exception:  # a symbolic batch that a Reshape still fixes at 1 (PyTorch's exports)
        if step == 1:
            raise
        runs = [session.run(names, {head.name: x[i:i + 1]}) for i in range(len(x))]
    return [np.concatenate(parts) for parts in zip(*runs)]


def load(path, input_size=None) -> OnnxModel:
    """An ``.onnx`` file as an :class:`OnnxModel` (``input_size`` as there); a file that is
    not a readable ONNX model is named in one line (:class:`ValueError`)."""
    import onnx

    path = Path(path)
    try:
        proto = onnx.load(path)
        onnx.checker.check_model(proto)
    except Exception as e:  # protobuf's DecodeError, onnx's ValidationError, ...
        first = (str(e).strip().splitlines() or [""])[0]
        raise ValueError(f"{path}: not a readable ONNX model ({type(e).__name__}: "
                         f"{first})") from None
    return OnnxModel(proto, path.stem, input_size, path)
