"""Lowering an ONNX model, as PyTorch's exporter writes it, to the IR (:class:`Graph`).

Layout: ONNX tensors are NCHW, the IR's HWC; weights are transposed on the way (a Conv's
``W`` ``(cout, cin / group, kh, kw)`` becomes the IR's ``(kh, kw, cin / group, cout)``, a
Gemm's ``B`` the IR's ``(cin, cout)``).  Constant subgraphs (initializers, Constant, Identity,
a Shape of a tensor of known size and what is computed from it) are evaluated by ONNX's
reference evaluator.  BatchNormalization folds into the Conv before it, an activation into the
Conv or Add before it (HardSigmoid's ``alpha x + beta`` into the conv's weights), a CRD
depth-to-space (``nn.PixelShuffle``: one DepthToSpace node, or its Reshape-Transpose-Reshape)
into the order of the conv's output channels.  ``Clip(0, m)`` (ReLU6) and Mul / Div / Sub /
Add of constants on the input are folded into the weights (:class:`~workbench.ir.lowering.
Scales`).  Relu, LeakyRelu and PRelu are unbounded (ES 2.0 stores them with a calibrated
scale, :mod:`workbench.es2.calibrate`); :attr:`Graph.origin` names the ONNX tensor each op
stands for, so that a check can run ONNX Runtime beside the emulator and name a layer whose values
leave [0, 1] (:func:`workbench.es2.onnx_check.ranges`).

Each node type has one builder in :data:`BUILDERS`; anything else is refused naming the node,
its op type and the supported list.
"""
from __future__ import annotations

import re
from collections import Counter

import numpy as np

from workbench.ir.graph import (
    Add,
    Concat,
    Conv,
    Dense,
    DepthToSpace,
    Graph,
    Input,
    Pool,
    Upsample,
    input_hw,
)
from workbench.ir.lowering import (LoweringError, check_demux_size, check_finite,
                                   fold_batchnorm, store_subpixels)
from workbench.ir.lowering import Scales, leaky_relu, prelu
from workbench.nets import storage

OPSET_MIN = 11

SUPPORTED = ("Conv (group, pads, strides; dilation 1)", "BatchNormalization (after a Conv)",
             "Relu / LeakyRelu / PRelu (slope (C, 1, 1)) / Clip(0, m) / Sigmoid / HardSigmoid "
             "(after a Conv or Add; Clip(0, m) stored as y / m)",
             "Mul / Div / Sub / Add of constants on the input (folded into the convs)",
             "Add (two tensors; a constant into the Conv or Gemm before it)",
             "Concat (channels)", "MaxPool / AveragePool (2x2, 3x3)",
             "GlobalAveragePool / ReduceMean over H, W (then Flatten and Gemm)",
             "Resize (x2 nearest, linear)", "DepthToSpace (DCR, CRD)",
             "Reshape-Transpose-Reshape (PixelShuffle)",
             "Resize of a luma net's input + Sub + Mul + Add + Clip after its DepthToSpace "
             "(an anchor residual)", "Flatten / Reshape / Squeeze (logits)",
             "Gemm / MatMul (+ Add), last", "Softmax (on the logits)",
             "Constant, Identity, Shape and constant arithmetic (folded)")


def opset_max() -> int:
    """The newest opset this ``onnx`` package knows (ONNX Runtime runs it too)."""
    import onnx

    return onnx.defs.onnx_opset_version()


def is_onnx(model) -> bool:
    """Whether ``model`` is an ONNX model: an ``onnx.ModelProto`` or an object holding one
    as ``proto`` (:class:`workbench.nets.onnx_model.OnnxModel`)."""
    return type(getattr(model, "proto", model)).__name__ == "ModelProto"


def from_onnx(model, luma_input=None, dense="fixed16", input_size=None) -> Graph:
    """Lower an ONNX model (an ``onnx.ModelProto``, an :class:`~workbench.nets.onnx_model.
    OnnxModel` or a path) to a :class:`Graph`.  ``luma_input`` and ``dense`` as
    :func:`workbench.ir.from_keras`; ``input_size`` ``(height, width)`` fixes a dynamic input
    size (a net with a Gemm, or a Shape node, needs one)."""
    if isinstance(model, str) or hasattr(model, "__fspath__"):
        from workbench.nets import onnx_model

        model = onnx_model.load(model)
    if not is_onnx(model):
        raise TypeError(f"model: an ONNX ModelProto, an OnnxModel or an .onnx file's path, not "
                        f"{type(model).__name__}")
    proto = getattr(model, "proto", model)
    input_size = input_size or getattr(model, "input_size", None)
    return _Lowering(proto, luma_input, dense, input_size).graph(getattr(model, "name", None))


def _attributes(node) -> dict:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _safe_name(name: str) -> str:
    """An ONNX name as a layer name the back ends can use in file and GLSL names."""
    return re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or "op"


class _Lowering:
    def __init__(self, proto, luma_input, dense, input_size):
        if dense not in ("fixed16", "float"):
            raise ValueError(f"dense must be 'fixed16' or 'float', not {dense!r}")
        self.proto, self.dense = proto, dense
        graph = proto.graph
        opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
                     None)
        if opset is None or not OPSET_MIN <= opset <= opset_max():
            raise LoweringError(f"model {graph.name!r}: opset {opset}; supported: "
                                f"{OPSET_MIN} to {opset_max()} (re-export with opset_version="
                                f"{max(OPSET_MIN, 17)})")
        self.opset = opset
        from onnx import numpy_helper

        self.const = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        inputs = [i for i in graph.input if i.name not in self.const]
        if len(inputs) != 1 or len(graph.output) != 1:
            raise LoweringError(f"model {graph.name!r}: one input and one output are supported, "
                                f"not {len(inputs)} and {len(graph.output)}")
        dims = [d.dim_value if d.HasField("dim_value") else None
                for d in inputs[0].type.tensor_type.shape.dim]
        if len(dims) != 4 or dims[1] is None:
            raise LoweringError(f"input {inputs[0].name!r}: an NCHW image with a fixed number "
                                f"of channels, not shape {dims}")
        if input_size is not None:
            input_size = input_hw(input_size, "input_size")
        size = tuple(input_size) if input_size else (
            None if None in dims[2:] else tuple(dims[2:]))
        if input_size and None not in dims[2:] and tuple(dims[2:]) != tuple(input_size):
            raise LoweringError(f"input {inputs[0].name!r} is {dims[3]}x{dims[2]}, not the "
                                f"input_size {input_size[1]}x{input_size[0]}")
        self.luma = dims[1] == 1 if luma_input is None else luma_input
        self.input = Input("image", 3 if self.luma else dims[1], rgb=self.luma)
        self.size = size
        self.tensor_of = {inputs[0].name: self.input.name}  # ONNX tensor -> IR tensor
        self.found = Scales(1 if self.luma else dims[1])  # Clip(0, m), input normalisation
        self.normalised = {inputs[0].name}  # the input, and it normalised
        self.origin = {self.input.name: inputs[0].name}     # IR tensor -> ONNX tensor
        self.special = {}   # ONNX tensor -> ("pooled" | "flat", IR tensor) or ("reshape6", ...)
        props = {p.key: p.value for p in proto.metadata_props}
        self.anchor_storage = props.get(ANCHOR_STORAGE, "linear")  # an 8-bit storage law
        storage.check(self.anchor_storage, f"model {graph.name!r}: metadata {ANCHOR_STORAGE}")
        self.ops, self.names = [], set()
        self.uses = Counter(i for n in graph.node for i in n.input if i)
        self.uses.update(o.name for o in graph.output)

    # --- helpers ---------------------------------------------------------------------
    def name(self, node) -> str:
        base = _safe_name(node.name or node.output[0])
        name, k = base, 1
        while name in self.names or name == self.input.name:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    def refuse(self, node, why):
        raise LoweringError(f"node {node.name or node.output[0]!r} ({node.op_type}): {why}")

    def tensor(self, node, onnx_name) -> str:
        if onnx_name in self.const:
            self.refuse(node, f"input {onnx_name!r} is a constant; the GPU takes tensors here")
        if self.special.get(onnx_name, (None,))[0] in ("anchor", "centred", "scaled",
                                                       "anchored"):
            self.refuse(node, f"input {onnx_name!r} is part of an anchor residual, {ANCHOR}")
        if onnx_name not in self.tensor_of:
            self.refuse(node, f"input {onnx_name!r} comes from a node the ES 2.0 back end "
                        "cannot take it from (a global pooling feeds only Flatten and Gemm)")
        return self.tensor_of[onnx_name]

    def constant(self, node, index, what):
        if index >= len(node.input) or not node.input[index]:
            return None
        if node.input[index] not in self.const:
            self.refuse(node, f"{what} ({node.input[index]!r}) must be a constant")
        return self.const[node.input[index]]

    def produce(self, node, op, onnx_name=None):
        """Append ``op``; its output stands for ``onnx_name`` (default: the node's)."""
        self.ops.append(op)
        self.set(onnx_name or node.output[0], op.name)

    def set(self, onnx_name, ir_name):
        self.tensor_of[onnx_name] = ir_name
        self.origin[ir_name] = onnx_name

    def last(self, node, onnx_name, kinds, what):
        """The op just lowered, which must make ``onnx_name`` (used by this node alone),
        be one of ``kinds`` and have no activation yet."""
        op = self.ops[-1] if self.ops else None
        if (not isinstance(op, kinds) or self.tensor_of.get(onnx_name) != op.name
                or getattr(op, "activation", "linear") != "linear"):
            self.refuse(node, f"{what} must directly follow a "
                        f"{' or '.join(k.__name__ for k in kinds)} without activation")
        if self.uses[onnx_name] > 1:
            self.refuse(node, f"its input {onnx_name!r} is also used elsewhere; {what} "
                        "can only be fused into the op that makes it")
        return op

    def shape(self, onnx_name) -> list[int] | None:
        """The NCHW shape of a tensor (batch 1), where the input size is known (a pooled
        tensor's always: ``(1, C, 1, 1)``, flattened ``(1, C)``)."""
        kind, *rest = self.special.get(onnx_name, (None,))
        if kind in ("pooled", "flat"):
            c = Graph(self.input, self.ops, rest[0]).channels(rest[0])
            return [1, c, 1, 1] if kind == "pooled" else [1, c]
        if self.size is None or onnx_name not in self.tensor_of:
            return None
        ir_name = self.tensor_of[onnx_name]
        h, w, c = Graph(self.input, self.ops, ir_name).shapes(self.size)[ir_name]
        if ir_name == self.input.name and self.luma:
            c = 1
        return [1, c, h, w]

    # --- the walk ----------------------------------------------------------------------
    def graph(self, name=None) -> Graph:
        for node in self.proto.graph.node:
            if all(i in self.const for i in node.input if i):
                self.fold(node)
            elif node.op_type in BUILDERS:
                BUILDERS[node.op_type](self, node, _attributes(node))
            else:
                self.refuse(node, f"not supported; supported: {', '.join(SUPPORTED)}")
        out = self.proto.graph.output[0].name
        if out not in self.tensor_of:
            raise LoweringError(f"output {out!r}: not a tensor the GPU makes (a constant, or "
                                "a pooling without its Gemm)")
        graph = Graph(self.input, self.ops, self.tensor_of[out], name or self.proto.graph.name
                      or "onnx_net", self.size, self.origin)
        dense = next((op for op in self.ops if isinstance(op, Dense)), None)
        if dense and (graph.output != dense.name or self.ops[-1] is not dense):
            raise LoweringError(f"layer {dense.name!r}: the Gemm must be the last op (its "
                                "softmax may follow)")
        if dense and self.size is None:
            raise LoweringError(f"layer {dense.name!r}: a net with a Gemm needs a fixed input "
                                "size; export with one, or give input_size "
                                "(--input-size HxW)")
        shapes = graph.shapes(self.size or (64, 64))
        for op in self.ops:
            if isinstance(op, DepthToSpace) and op.chroma_from:
                check_demux_size(op, shapes)
        self.found.fold(graph)
        return graph

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
            self.refuse(node, f"cannot fold its constants ({type(e).__name__}: {e})")
        self.const.update(zip([o for o in node.output if o], values))


# --- builders, one per node type ---------------------------------------------------------

def _padding(low, node, size, stride, attrs, rank_pads=None) -> str | tuple:
    """The IR padding of a Conv or pooling node: ``"valid"``, ``"same"`` (TensorFlow's,
    where the pads are its), or ``(top, left, bottom, right)``."""
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto == "VALID":
        return "valid"
    if auto == "SAME_UPPER":
        return "same"
    if auto == "SAME_LOWER" and not (stride == 1 and size % 2):
        low.refuse(node, "auto_pad SAME_LOWER pads differently from TensorFlow's SAME; "
                   "export with explicit pads")
    if auto == "SAME_LOWER":
        return "same"
    top, left, bottom, right = (int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
    if not any((top, left, bottom, right)):
        return "valid"
    same = (size - 1) // 2, size // 2
    if stride == 1 and (top, bottom) == same and (left, right) == same:
        return "same"
    return (top, left, bottom, right)


def _square(low, node, attrs, key, default):
    values = list(attrs.get(key, default))
    if len(values) != 2 or values[0] != values[1]:
        low.refuse(node, f"{key} {values}: square 2-D only")
    return int(values[0])


def _conv(low, node, attrs):
    source = low.tensor(node, node.input[0])
    weight = low.constant(node, 1, "the weight")
    if weight.ndim != 4:
        low.refuse(node, f"a {weight.ndim - 2}-D convolution; images take 2-D")
    bias = low.constant(node, 2, "the bias")
    size = _square(low, node, attrs, "kernel_shape", weight.shape[2:])
    stride = _square(low, node, attrs, "strides", (1, 1))
    if _square(low, node, attrs, "dilations", (1, 1)) != 1:
        low.refuse(node, "dilation other than 1")
    groups = int(attrs.get("group", 1))
    kernel = np.transpose(weight, (2, 3, 1, 0)).astype(np.float32)
    bias = np.zeros(kernel.shape[3], np.float32) if bias is None else bias.astype(np.float32)
    name = low.name(node)
    check_finite(name, {"kernel": kernel, "bias": bias})
    op = Conv(name, source, kernel, bias, stride, _padding(low, node, size, stride, attrs),
              groups)
    op.luma_input = low.luma and source == low.input.name
    low.produce(node, op)


def _batchnorm(low, node, attrs):
    conv = low.last(node, node.input[0], (Conv,), "BatchNormalization")
    if conv.residual:
        low.refuse(node, "BatchNormalization after a residual sum")
    gamma, beta, mean, var = (low.constant(node, i, what) for i, what in
                              enumerate(("scale", "B", "mean", "var"), 1))
    fold_batchnorm(conv, conv.name, gamma, beta, mean, var, attrs.get("epsilon", 1e-5))
    low.set(node.output[0], conv.name)


def _activation(low, node, attrs):
    """Relu, LeakyRelu, PRelu, Clip(0, m), Sigmoid, HardSigmoid fused into the Conv or Add
    before it; the Clip of an anchor residual into its depth-to-space."""
    if low.special.get(node.input[0], (None,))[0] == "anchored":
        _, demux, how, s = low.special[node.input[0]]
        bounds = [low.constant(node, i, what) for i, what in ((1, "min"), (2, "max"))]
        if node.op_type != "Clip" or [None if v is None else float(v) for v in bounds] != [0, 1]:
            low.refuse(node, f"an anchor residual ends in Clip(0, 1): {ANCHOR}")
        demux.anchor, demux.anchor_scale = how, s
        demux.anchor_storage = low.anchor_storage
        store_subpixels(low.ops, demux.input, low.anchor_storage,
                        f"node {node.name or node.output[0]!r} ({node.op_type})")
        low.set(node.output[0], demux.name)
        return
    op = low.last(node, node.input[0], (Conv, Add), "an activation")
    kind = node.op_type
    if kind == "Clip":  # min and max: inputs from opset 11, attributes before
        lo, hi = (low.constant(node, i, what) if i < len(node.input) else attrs.get(what)
                  for i, what in ((1, "min"), (2, "max")))
        # Clip(0): a Relu (calibrated where ES 2.0 stores it)
        low.found.clip(op, lo, hi, f"node {node.name or node.output[0]!r} (Clip)")
        low.set(node.output[0], op.name)
        return
    if kind == "HardSigmoid":
        if not isinstance(op, Conv):
            low.refuse(node, "HardSigmoid folds into a Conv's weights; it follows an Add")
        alpha, beta = attrs.get("alpha", 0.2), attrs.get("beta", 0.5)
        op.kernel = (op.kernel * np.float32(alpha)).astype(np.float32)
        op.bias = (op.bias * np.float32(alpha) + np.float32(beta)).astype(np.float32)
        if op.residual:
            low.refuse(node, "HardSigmoid after a residual sum")
    if kind == "LeakyRelu":
        op.activation = leaky_relu(attrs.get("alpha", 0.01),
                                   f"node {node.name or node.output[0]!r} (LeakyRelu)")
        low.set(node.output[0], op.name)
        return
    if kind == "PRelu":
        prelu(op, low.constant(node, 1, "the slope"), Graph(low.input, low.ops, op.name)
              .channels(op.name), f"node {node.name or node.output[0]!r} (PRelu)", -3)
        low.set(node.output[0], op.name)
        return
    op.activation = {"Sigmoid": "sigmoid", "Relu": "relu"}.get(kind, "bounded_relu")
    low.set(node.output[0], op.name)


def _normalised(low, node) -> bool:
    """Mul, Div, Sub or Add of a constant on the input (or on it normalised so far): the
    input's normalisation, folded into the convs that read it (:class:`~workbench.ir.
    lowering.Scales`)."""
    a, b = node.input[:2]
    if not ({a, b} & low.normalised and {a, b} & low.const.keys()):
        return False
    tensor, value = (a, low.const[b]) if b in low.const else (b, low.const[a])
    if node.op_type in ("Sub", "Div") and tensor != a:
        low.refuse(node, f"a constant {node.op_type} the input; only the input "
                   f"{node.op_type} a constant folds into the convs")
    if low.uses[tensor] > 1:
        low.refuse(node, f"the input's normalisation: {tensor!r} is also read elsewhere; "
                   "normalise the input once, for every reader")
    low.found.normalise(node.op_type.lower(), value,
                        f"node {node.name or node.output[0]!r} ({node.op_type})", -3)
    low.normalised.add(node.output[0])
    low.tensor_of[node.output[0]] = low.input.name
    return True


def _arithmetic(low, node, attrs):
    """Mul, Div, Sub: the input's normalisation, or a step of an anchor residual."""
    if not _normalised(low, node):
        _anchor_step(low, node, attrs)


def _add(low, node, attrs):
    if _normalised(low, node) or _anchor_sum(low, node):
        return
    a, b = node.input[:2]
    if a in low.const or b in low.const:
        tensor, value = (b, low.const[a]) if a in low.const else (a, low.const[b])
        op = low.last(node, tensor, (Conv, Dense), "an Add of a constant")
        v, n = np.asarray(value, np.float32), op.bias.size
        axis = -1 if isinstance(op, Dense) else -3  # the channels: (N, C) or (N, C, H, W)
        if not (v.size == 1 or (v.size == n and v.ndim >= -axis and v.shape[axis] == n)):
            low.refuse(node, f"a constant of shape {v.shape}: only one value per channel "
                       "adds into the bias")
        op.bias = (op.bias + v.reshape(-1)).astype(np.float32)
        low.set(node.output[0], op.name)
        return
    names = [low.tensor(node, t) for t in (a, b)]
    op = low.ops[-1] if low.ops else None
    if (isinstance(op, Conv) and op.name in names and op.activation == "linear"
            and not op.residual and low.uses[(a, b)[names.index(op.name)]] == 1
            and names[0] != names[1]):
        op.residual = names[1 - names.index(op.name)]  # the conv just before: one program
        low.set(node.output[0], op.name)
        return
    low.produce(node, Add(low.name(node), *names))


def _concat(low, node, attrs):
    if attrs.get("axis") not in (1, -3):
        low.refuse(node, f"concatenation along the channels only (axis 1), not axis "
                   f"{attrs.get('axis')}")
    first, *others = (low.tensor(node, t) for t in node.input)
    low.produce(node, Concat(low.name(node), first, tuple(others)))


def _pool(low, node, attrs):
    source = low.tensor(node, node.input[0])
    size = _square(low, node, attrs, "kernel_shape", ())
    stride = _square(low, node, attrs, "strides", (1, 1))
    if size not in (2, 3):
        low.refuse(node, f"{size}x{size} windows; pooling takes 2x2 or 3x3")
    if _square(low, node, attrs, "dilations", (1, 1)) != 1:
        low.refuse(node, "dilation other than 1")
    padding = _padding(low, node, size, stride, attrs)
    if attrs.get("ceil_mode", 0):
        low.refuse(node, "ceil_mode=1; export with ceil_mode=False")
    if node.op_type == "AveragePool" and attrs.get("count_include_pad", 0) \
            and padding != "valid":
        low.refuse(node, "count_include_pad=1 averages the zero padding in; export with "
                   "count_include_pad=False (the GPU averages the taps inside)")
    if len(node.output) > 1 and node.output[1]:
        low.refuse(node, "MaxPool's indices output")
    kind = "max" if node.op_type == "MaxPool" else "average"
    low.produce(node, Pool(low.name(node), source, kind, size, stride, padding))


def _global_pool(low, node, attrs):
    if node.op_type == "ReduceMean":
        axes = attrs.get("axes")
        if axes is None and len(node.input) > 1:
            axes = low.constant(node, 1, "axes")
        if sorted(int(a) % 4 for a in (axes if axes is not None else ())) != [2, 3]:
            low.refuse(node, f"ReduceMean over axes {axes}; only over H and W (2, 3)")
    flat = node.op_type == "ReduceMean" and not attrs.get("keepdims", 1)
    low.special[node.output[0]] = ("flat" if flat else "pooled", low.tensor(node, node.input[0]))


def _flatten(low, node, attrs):
    """Flatten, Reshape or Squeeze: of a pooled tensor (before the Gemm); a Reshape may also
    be part of a PixelShuffle (see :func:`_transpose`)."""
    kind, *rest = low.special.get(node.input[0], (None,))
    if kind == "pooled":
        low.special[node.output[0]] = ("flat", *rest)
        return
    if node.op_type == "Reshape" and node.input[0] in low.tensor_of:
        shape = low.constant(node, 1, "the shape")
        if len(shape) == 6:
            low.special[node.output[0]] = ("reshape6", low.tensor_of[node.input[0]],
                                           [int(s) for s in shape])
            return
    if node.op_type == "Reshape" and kind == "shuffled":
        _depth_to_space(low, node, *rest)
        return
    low.refuse(node, "reshapes only a global pooling's result (before the Gemm) or as "
               "PixelShuffle does")


def _transpose(low, node, attrs):
    """The middle of PixelShuffle's Reshape-Transpose-Reshape: CRD from ``(N, C, b, b, H,
    W)`` with ``perm (0, 1, 4, 2, 5, 3)``, DCR from ``(N, b, b, C, H, W)`` with ``(0, 3, 4,
    1, 5, 2)``."""
    kind, *rest = low.special.get(node.input[0], (None,))
    perm = tuple(attrs.get("perm", ()))
    if kind == "reshape6":
        source, shape = rest
        modes = {(0, 1, 4, 2, 5, 3): ("CRD", 2), (0, 3, 4, 1, 5, 2): ("DCR", 1)}
        if perm in modes:
            mode, at = modes[perm]
            block = shape[at]
            if shape[at + 1] == block:
                low.special[node.output[0]] = ("shuffled", source, block, mode)
                return
    low.refuse(node, f"Transpose {perm}: only PixelShuffle's (with its Reshapes) is supported")


def _depth_to_space_node(low, node, attrs):
    mode = attrs.get("mode", b"DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    _depth_to_space(low, node, low.tensor(node, node.input[0]), int(attrs["blocksize"]), mode)


def _depth_to_space(low, node, source, block, mode):
    """The IR's depth-to-space (DCR); CRD reorders the conv before it, whose output channel
    ``(dy * block + dx) * C + c`` becomes its old ``c * block**2 + dy * block + dx``."""
    if mode == "CRD":
        conv = low.ops[-1] if low.ops else None
        onnx_source = low.origin.get(source)
        if (not isinstance(conv, Conv) or conv.name != source or conv.residual
                or low.uses[onnx_source] > 1):
            low.refuse(node, "a CRD depth-to-space (PixelShuffle) must directly follow a Conv "
                       "(its output channels are reordered)")
        c = conv.cout // block ** 2
        order = [cc * block ** 2 + s for s in range(block ** 2) for cc in range(c)]
        conv.kernel, conv.bias = conv.kernel[..., order].copy(), conv.bias[order].copy()
        if conv.activation_slope is not None:
            conv.activation_slope = conv.activation_slope[order].copy()
    chroma = low.input.name if low.luma else None
    low.produce(node, DepthToSpace(low.name(node), source, block, chroma_from=chroma))


def _resize(low, node, attrs):
    """x``s`` nearest or linear: checked against the IR's upsampling on a probe by ONNX's
    reference evaluator (the coordinate modes that agree with it pass)."""
    source = low.tensor(node, node.input[0])
    scales = low.constant(node, 2, "scales")
    sizes = low.constant(node, 3, "sizes")
    if (scales is None or scales.size == 0) and sizes is not None:
        shape = low.shape(node.input[0])
        if shape is None:
            low.refuse(node, "sizes of a tensor of dynamic size; export with scale_factor")
        scales = np.asarray(sizes, np.float64) / shape
    scales = [float(s) for s in np.asarray(scales).reshape(-1)]
    if attrs.get("axes") is not None:  # opset 18: scales of these axes only
        full = [1.0] * 4
        for axis, value in zip(attrs["axes"], scales):
            full[axis % 4] = value
        scales = full
    if len(scales) != 4 or scales[:2] != [1, 1] or scales[2] != scales[3] \
            or scales[2] != int(scales[2]) or scales[2] < 2:
        low.refuse(node, f"scales {scales}: one whole factor on H and W")
    mode = attrs.get("mode", b"nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    how = {"nearest": "nearest", "linear": "bilinear"}.get(mode)
    scale = int(scales[2])
    if how is None or not _resize_agrees(node, attrs, scale, how, low.proto.opset_import):
        low.refuse(node, f"mode {mode!r} with coordinate_transformation_mode "
                   f"{attrs.get('coordinate_transformation_mode', b'half_pixel')!r} is not "
                   "the IR's nearest (pixel repeated) or bilinear (half-pixel centres, as "
                   "align_corners=False)")
    if low.luma and source == low.input.name:  # a luma net's upsampled input: an anchor
        low.special[node.output[0]] = ("anchor", how, scale)
        return
    low.produce(node, Upsample(low.name(node), source, scale, how))


# A luma net's anchor residual, clamp(up(luma) + s * (depth_to_space(q) - 0.5), 0, 1), node
# by node: each step a special tensor of the demux, the Clip completes it.
ANCHOR = "clamp(up(input) + s * (pixel_shuffle(q) - 0.5), 0, 1) after the last DepthToSpace"
# Model metadata (``metadata_props``) that asks for the anchor's sub-pixels to be stored by a
# law of workbench.nets.storage on the GPU ("sqrt"); to_onnx writes it, a PyTorch user may add it.
ANCHOR_STORAGE = "workbench.anchor_storage"


def _anchor_step(low, node, attrs):
    """Sub (the sub-pixels - 0.5) or Mul (times a constant s) of the anchor residual."""
    a, b = node.input[:2]
    kind, *rest = low.special.get(a, low.special.get(b, (None,)))
    value = low.const.get(b if a not in low.const else a)
    demux = low.ops[-1] if low.ops else None
    if value is not None and np.asarray(value).size == 1:
        value = float(np.asarray(value).reshape(()))
        if (node.op_type == "Sub" and isinstance(demux, DepthToSpace) and demux.chroma_from
                and low.tensor_of.get(a) == demux.name and low.uses[a] == 1 and value == 0.5):
            low.special[node.output[0]] = ("centred", demux)
            return
        if node.op_type == "Mul" and kind == "centred":
            low.special[node.output[0]] = ("scaled", rest[0], value)
            return
    low.refuse(node, f"{node.op_type} is supported only in a luma net's anchor residual, "
               f"{ANCHOR}, or of a constant on the input")


def _anchor_sum(low, node) -> bool:
    """The anchor residual's Add of the upsampled input and the scaled sub-pixels."""
    parts = {low.special.get(t, (None,))[0]: low.special.get(t) for t in node.input[:2]}
    if set(parts) != {"anchor", "scaled"}:
        if parts.keys() & {"anchor", "scaled", "centred"}:
            low.refuse(node, f"an anchor residual must be {ANCHOR}")
        return False
    (_, how, scale), (_, demux, s) = parts["anchor"], parts["scaled"]
    if scale != demux.block:
        low.refuse(node, f"the anchor is upsampled x{scale}, the depth-to-space x{demux.block}")
    low.special[node.output[0]] = ("anchored", demux, how, s)
    return True


def _resize_agrees(node, attrs, scale, how, opsets) -> bool:
    """Whether the Resize node's modes give the IR's upsampling on a 5x6 probe."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    probe = np.random.default_rng(0).random((1, 1, 5, 6)).astype(np.float32)
    resize = onnx.helper.make_node("Resize", ["x", "", "scales"], ["y"], **{
        k: v for k, v in attrs.items() if k != "axes" and (k != "antialias" or v)})
    graph = onnx.helper.make_graph(
        [resize], "probe", [onnx.helper.make_tensor_value_info("x", 1, probe.shape)],
        [onnx.helper.make_tensor_value_info("y", 1, None)],
        [onnx.numpy_helper.from_array(np.array([1, 1, scale, scale], np.float32), "scales")])
    got = ReferenceEvaluator(onnx.helper.make_model(graph, opset_imports=opsets)).run(
        None, {"x": probe})[0][0, 0]
    return bool(np.allclose(got, upsample_reference(probe[0, 0], scale, how), atol=1e-6))


def upsample_reference(x, scale, how) -> np.ndarray:
    """A 2-D array upsampled as :class:`workbench.ir.Upsample` means it (float64):
    ``"nearest"`` repeats each value; ``"bilinear"`` samples at half-pixel centres with the
    edges clamped (``tf.image.resize``)."""
    if how == "nearest":
        return np.repeat(np.repeat(x, scale, 0), scale, 1)

    def weights(n):  # (n * scale, n) interpolation matrix along one axis
        src = np.clip((np.arange(n * scale) + 0.5) / scale - 0.5, 0, n - 1)
        low = np.floor(src).astype(int)
        high, frac = np.minimum(low + 1, n - 1), src - low
        m = np.zeros((n * scale, n))
        m[np.arange(n * scale), low] += 1 - frac
        m[np.arange(n * scale), high] += frac
        return m
    return weights(x.shape[0]) @ np.asarray(x, np.float64) @ weights(x.shape[1]).T


def _gemm(low, node, attrs):
    """Gemm (or MatMul) of a pooled, flattened tensor by a constant weight: the IR's Dense
    with its global pooling fused in."""
    kind, source = low.special.get(node.input[0], (None, None))[:2]
    if kind != "flat":
        low.refuse(node, "a Gemm must read a global average pooling (GlobalAveragePool or "
                   "ReduceMean over H, W, then Flatten)")
    weight = low.constant(node, 1, "the weight").astype(np.float32)
    if attrs.get("transA", 0):
        low.refuse(node, "transA=1")
    if attrs.get("transB", 0):
        weight = weight.T
    weight = weight * np.float32(attrs.get("alpha", 1.0))
    bias = low.constant(node, 2, "the bias") if node.op_type == "Gemm" else None
    bias = np.zeros(weight.shape[1], np.float32) if bias is None else \
        np.broadcast_to(np.asarray(bias, np.float32).reshape(-1) * np.float32(
            attrs.get("beta", 1.0)), weight.shape[1:]).astype(np.float32)
    name = low.name(node)
    check_finite(name, {"weight": weight, "bias": bias})
    low.produce(node, Dense(name, source, weight.astype(np.float32), bias, pool=True,
                            number=low.dense))


def _softmax(low, node, attrs):
    op = low.ops[-1] if low.ops else None
    if (not isinstance(op, Dense) or low.tensor_of.get(node.input[0]) != op.name
            or op.softmax or attrs.get("axis", -1 if low.opset >= 13 else 1) not in (1, -1)):
        low.refuse(node, "a softmax must follow the Gemm (the logits), over the classes")
    op.softmax = True
    low.set(node.output[0], op.name)


def _identity(low, node, attrs):
    if node.input[0] in low.const:
        low.const[node.output[0]] = low.const[node.input[0]]
    elif node.input[0] in low.special:
        low.special[node.output[0]] = low.special[node.input[0]]
    else:
        low.set(node.output[0], low.tensor(node, node.input[0]))


def _shape(low, node, attrs):
    shape = low.shape(node.input[0])
    if shape is None:
        low.refuse(node, f"the size of {node.input[0]!r} is dynamic; export with a fixed input "
                   "size, or give input_size (--input-size HxW)")
    start, end = attrs.get("start", 0), attrs.get("end", None)
    low.const[node.output[0]] = np.array(shape[start:end], np.int64)


BUILDERS = {
    "Conv": _conv, "BatchNormalization": _batchnorm,
    "Relu": _activation, "Clip": _activation, "Sigmoid": _activation, "HardSigmoid": _activation,
    "LeakyRelu": _activation, "PRelu": _activation,
    "Add": _add, "Concat": _concat, "MaxPool": _pool, "AveragePool": _pool,
    "GlobalAveragePool": _global_pool, "ReduceMean": _global_pool,
    "Flatten": _flatten, "Reshape": _flatten, "Squeeze": _flatten, "Transpose": _transpose,
    "DepthToSpace": _depth_to_space_node, "Resize": _resize,
    "Sub": _arithmetic, "Mul": _arithmetic, "Div": _arithmetic,
    "Gemm": _gemm, "MatMul": _gemm, "Softmax": _softmax,
    "Identity": _identity, "Shape": _shape,
}
