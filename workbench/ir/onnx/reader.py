"""Reading an ONNX model for the lowering: its opset, initialisers, input, node attributes,
which tensors are constants, and the evaluation of a node of constants."""
from __future__ import annotations

import re
import warnings
from collections import Counter

import numpy as np

from workbench.ir.graph import input_hw
from workbench.ir.lowering import LoweringError
from workbench.nets import storage
from workbench.nets.onnx_model import channels_last

OPSET_MIN = 11     # the lowest opset the lowering reads; older models are converted
OPSET_CONVERT = 7  # the oldest opset converted (onnx.version_converter), to OPSET_TARGET
OPSET_TARGET = 13
# Model metadata (``metadata_props``) that asks for the anchor's sub-pixels to be stored by a
# law of workbench.nets.storage on the GPU ("sqrt"); to_onnx writes it, a PyTorch user may add it.
ANCHOR_STORAGE = "workbench.anchor_storage"


def opset_max() -> int:
    """The newest opset this ``onnx`` package knows (ONNX Runtime runs it too)."""
    import onnx

    return onnx.defs.onnx_opset_version()


def is_onnx(model) -> bool:
    """Whether ``model`` is an ONNX model: an ``onnx.ModelProto`` or an object holding one
    as ``proto`` (:class:`workbench.nets.onnx_model.OnnxModel`)."""
    return type(getattr(model, "proto", model)).__name__ == "ModelProto"


def attributes(node) -> dict:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def text(value) -> str:
    """A string attribute (bytes in ONNX) as text."""
    return value.decode() if isinstance(value, bytes) else value


def safe_name(name: str) -> str:
    """An ONNX name as a layer name the back ends can use in file and GLSL names."""
    return re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or "op"


def where(node) -> str:
    """A node as a refusal names it: ``node 'name' (OpType)``."""
    return f"node {node.name or node.output[0]!r} ({node.op_type})"


def refuse(node, why):
    raise LoweringError(f"{where(node)}: {why}")


class OpsetConverted(UserWarning):
    """An ONNX model of an opset older than :data:`OPSET_MIN` was converted to
    :data:`OPSET_TARGET` before lowering."""


def opset_of(proto):
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)


def converted(proto):
    """``proto`` itself, or converted to :data:`OPSET_TARGET` where its opset is in
    [:data:`OPSET_CONVERT`, :data:`OPSET_MIN`) (one warning saying so); any other opset, or a
    failed conversion, refused in one line."""
    import onnx

    opset, name = opset_of(proto), proto.graph.name
    if opset is not None and OPSET_MIN <= opset <= opset_max():
        return proto
    if opset is None or not OPSET_CONVERT <= opset < OPSET_MIN:
        raise LoweringError(f"model {name!r}: opset {opset}; supported: {OPSET_CONVERT} to "
                            f"{opset_max()} (re-export with opset_version={OPSET_TARGET})")
    try:
        proto = onnx.version_converter.convert_version(proto, OPSET_TARGET)
    except Exception as e:  # the converter's own error, in one line
        first = (str(e).strip().splitlines() or [""])[0]
        raise LoweringError(f"model {name!r}: opset {opset} could not be converted to "
                            f"{OPSET_TARGET} ({type(e).__name__}: {first}); re-export with "
                            f"opset_version={OPSET_TARGET}") from None
    warnings.warn(f"model {name!r}: converted from opset {opset} to {OPSET_TARGET}",
                  OpsetConverted, stacklevel=4)
    return proto


class Model:
    """What the lowering reads of ``proto``: ``const`` (name -> value: the initialisers,
    then each folded node's outputs), the input (``input_name``, ``channels``, ``size``,
    ``luma``), ``uses`` (readers per tensor, the graph's output counted) and the anchor's
    storage law (:data:`ANCHOR_STORAGE`)."""

    def __init__(self, proto, luma_input, input_size):
        from onnx import numpy_helper

        proto = converted(proto)
        self.proto, graph = proto, proto.graph
        self.opset = opset_of(proto)
        self.const = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        inputs = [i for i in graph.input if i.name not in self.const]
        if len(inputs) != 1 or len(graph.output) != 1:
            raise LoweringError(f"model {graph.name!r}: one input and one output are supported, "
                                f"not {len(inputs)} and {len(graph.output)}")
        dims = [d.dim_value if d.HasField("dim_value") else None
                for d in inputs[0].type.tensor_type.shape.dim]
        transposes = channels_last(graph, inputs[0].name) if len(dims) == 4 else []
        self.nhwc = bool(transposes)
        if transposes:  # NHWC: the Transposes' readers read the input itself
            dims = [dims[0], dims[3], dims[1], dims[2]]
        # inference's identities: a Dropout (an old export's) whose mask nothing reads
        read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        skipped = [(n, n.input[0]) for n in graph.node if n.op_type == "Dropout"
                   and n.output[0] not in {o.name for o in graph.output}
                   and not set(n.output[1:]) & read]
        skipped += [(t, inputs[0].name) for t in transposes]
        self.nodes = _bypassed(list(graph.node), skipped)
        if len(dims) != 4 or dims[1] is None:
            raise LoweringError(f"input {inputs[0].name!r}: an NCHW image (or NHWC, read by "
                                f"a Transpose) with a fixed number of channels, not shape "
                                f"{dims}")
        if input_size is not None:
            input_size = input_hw(input_size, "input_size")
        if input_size and None not in dims[2:] and tuple(dims[2:]) != tuple(input_size):
            raise LoweringError(f"input {inputs[0].name!r} is {dims[3]}x{dims[2]}, not the "
                                f"input_size {input_size[1]}x{input_size[0]}")
        self.size = tuple(input_size) if input_size else (
            None if None in dims[2:] else tuple(dims[2:]))
        self.input_name, self.channels = inputs[0].name, dims[1]
        out = graph.output[0].type.tensor_type
        image_out = len(out.shape.dim) == 4 if out.HasField("shape") else any(
            n.op_type in ("DepthToSpace", "Resize", "Upsample") for n in graph.node)
        # one channel: the luma of an RGB image for an image net (SR), else a grey image
        self.luma = dims[1] == 1 and image_out if luma_input is None else luma_input
        props = {p.key: p.value for p in proto.metadata_props}
        self.anchor_storage = props.get(ANCHOR_STORAGE, "linear")  # an 8-bit storage law
        storage.check(self.anchor_storage, f"model {graph.name!r}: metadata {ANCHOR_STORAGE}")
        self.uses = Counter(i for n in self.nodes for i in n.input if i)
        self.uses.update(o.name for o in graph.output)

    def constants(self) -> set[str]:
        """The tensors that are constants before any value is known: the initialisers, a
        Shape's output and the outputs of nodes of constants only."""
        known = set(self.const)
        for node in self.nodes:
            if node.op_type == "Shape" or all(i in known for i in node.input if i):
                known.update(o for o in node.output if o)
        return known

    def folds(self, node) -> bool:
        return all(i in self.const for i in node.input if i)

    def fold(self, node):
        """Evaluate a node of constants (ONNX's reference evaluator)."""
        import onnx
        from onnx.reference import ReferenceEvaluator

        inputs = [i for i in node.input if i]
        graph = onnx.helper.make_graph(
            [node], "fold", [], [onnx.helper.make_tensor_value_info(o, 0, None)
                                 for o in node.output if o],
            [onnx.numpy_helper.from_array(np.asarray(self.const[i]), i) for i in inputs])
        model = onnx.helper.make_model(graph, opset_imports=self.proto.opset_import)
        try:
            values = ReferenceEvaluator(model).run(None, {})
        except Exception as e:  # the evaluator's own error, in one line
            refuse(node, f"cannot fold its constants ({type(e).__name__}: {e})")
        self.const.update(zip([o for o in node.output if o], values))


def _bypassed(nodes, skipped) -> list:
    """``nodes`` without the nodes of ``skipped`` (pairs: a node, the tensor its readers read
    instead), their readers changed (copies)."""
    import onnx

    renamed = {node.output[0]: name for node, name in skipped}
    gone = {id(node) for node, _ in skipped}
    out = []
    for node in nodes:
        if id(node) in gone:
            continue
        if renamed.keys() & set(node.input):
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.input[:] = [renamed.get(i, i) for i in node.input]
            node = copy
        out.append(node)
    return out
