"""The walk over an ONNX graph's nodes, in order: a node of constants is evaluated, a
pattern (:mod:`.patterns`) lowered by its handler at its last node, any other node by its
node type's handler (:data:`workbench.ir.onnx.nodes.NODES`); what they share: the ONNX
tensor -> IR tensor map, the ops made so far, the names, the refusals."""
from __future__ import annotations

from workbench.ir.graph import Graph, Input
from workbench.ir.lowering import LoweringError, Scales, check_demux_size
from workbench.ir.onnx import patterns
from workbench.ir.onnx.fused import PATTERNS
from workbench.ir.onnx.nodes import NODES, SUPPORTED, refuse_gemm
from workbench.ir.onnx.patterns import ANCHOR
from workbench.ir.onnx.reader import attributes, refuse, safe_name, where
from workbench.ir.ops import Dense, DepthToSpace
from workbench.ir.registry import NotTaken


class Lowering:
    """The state of one lowering of ``model`` (a :class:`~workbench.ir.onnx.reader.Model`)."""

    def __init__(self, model):
        self.model, self.const, self.uses = model, model.const, model.uses
        self.luma, self.size, self.opset = model.luma, model.size, model.opset
        self.input = Input("image", 3 if self.luma else model.channels, rgb=self.luma)
        self.tensor_of = {model.input_name: self.input.name}  # ONNX tensor -> IR tensor
        self.origin = {self.input.name: model.input_name}     # IR tensor -> ONNX tensor
        self.found = Scales(1 if self.luma else model.channels)  # Clip(0, m), normalisation
        self.ops, self.names = [], set()
        self.patterns = patterns.find(model)
        self.pooled = {t: (p, flat) for p in self.patterns
                       if isinstance(p, patterns.Classifier) for t, flat in p.pooled().items()}
        self.anchored = {n.output[0] for p in self.patterns if isinstance(p, patterns.Anchor)
                         for n in (p.resize, p.sub, p.mul, p.add)}  # and a lone Resize's
        self.padded = {}  # a zero Pad's output -> (its input, (top, left, bottom, right))
        self.hwc = {}     # a map transposed to NHWC -> its IR tensor
        self.flat = {}    # a flattened map -> (its IR tensor, "chw" / "hwc", (h, w, c))
        self.vectors = set()  # the IR ops made of Gemms (their tensors 2-D in ONNX)

    # --- helpers ---------------------------------------------------------------------
    def name(self, node) -> str:
        base = safe_name(node.name or node.output[0])
        name, k = base, 1
        while name in self.names or name == self.input.name:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    def tensor(self, node, onnx_name) -> str:
        if onnx_name in self.const:
            refuse(node, f"input {onnx_name!r} is a constant; the GPU takes tensors here")
        if onnx_name in self.anchored:
            refuse(node, f"input {onnx_name!r} is part of an anchor residual, {ANCHOR}")
        if onnx_name in self.padded:
            refuse(node, f"input {onnx_name!r} is padded by a Pad, which folds only into "
                   "the Conv that reads it")
        if onnx_name in self.flat or onnx_name in self.hwc:
            refuse(node, f"input {onnx_name!r} is a map flattened (or transposed to NHWC); "
                   "only a Gemm or MatMul reads it (after a Flatten / Reshape)")
        if onnx_name not in self.tensor_of:
            refuse(node, f"input {onnx_name!r} comes from a node the ES 2.0 back end "
                   "cannot take it from (a global pooling feeds only Flatten and Gemm)")
        return self.tensor_of[onnx_name]

    def constant(self, node, index, what):
        if index >= len(node.input) or not node.input[index]:
            return None
        if node.input[index] not in self.const:
            refuse(node, f"{what} ({node.input[index]!r}) must be a constant")
        return self.const[node.input[index]]

    def produce(self, op, *nodes):
        """Append ``op``, which stands for the outputs of ``nodes`` (the last one in
        :attr:`Graph.origin`)."""
        self.ops.append(op)
        for node in nodes:
            self.set(node.output[0], op.name)

    def set(self, onnx_name, ir_name):
        self.tensor_of[onnx_name] = ir_name
        self.origin[ir_name] = onnx_name

    def last(self, node, onnx_name, kinds, what):
        """The op just lowered, which must make ``onnx_name`` (used by this node alone),
        be one of ``kinds`` and have no activation yet; else a refusal of ``node``."""
        op = self.ops[-1] if self.ops else None
        follow = (f"{what} must directly follow a "
                  f"{' or '.join(k.__name__ for k in kinds)} without activation")
        if (not isinstance(op, kinds) or self.tensor_of.get(onnx_name) != op.name
                or op.activation != "linear"):
            refuse(node, follow)
        if self.uses[onnx_name] > 1:
            refuse(node, f"its input {onnx_name!r} is also used elsewhere; {what} "
                   "can only be fused into the op that makes it")
        return op

    def shape(self, onnx_name) -> list[int] | None:
        """The NCHW shape of a tensor (batch 1), where the input size is known (a pooled
        tensor's always: ``(1, C, 1, 1)``, flattened ``(1, C)``)."""
        if onnx_name in self.pooled:
            classifier, flat = self.pooled[onnx_name]
            source = self.tensor(classifier.pool, classifier.pool.input[0])
            c = Graph(self.input, self.ops, source).channels(source)
            return [1, c] if flat else [1, c, 1, 1]
        if self.size is None or onnx_name not in self.tensor_of:
            return None
        h, w, c = self.map_shape(None, self.tensor_of[onnx_name])
        return [1, c, h, w]

    def map_shape(self, node, ir_name) -> tuple[int, int, int]:
        """``(h, w, c)`` of an IR tensor (a luma input's: 1 channel), which ``node`` needs
        (a fixed input size)."""
        if self.size is None:
            refuse(node, "flattens a map of dynamic size; export with a fixed input size, or "
                   "give input_size (--input-size HxW)")
        h, w, c = Graph(self.input, self.ops, ir_name).shapes(self.size)[ir_name]
        return h, w, 1 if ir_name == self.input.name and self.luma else c

    def flattened(self, node, onnx_name):
        """``(IR tensor, order, (h, w, c))`` of the flattened map a Gemm reads: a Flatten's
        or Reshape's (:data:`flat`), or a Gemm's output (a 1x1 map)."""
        if onnx_name in self.flat:
            return self.flat[onnx_name]
        ir_name = self.tensor_of.get(onnx_name)
        if ir_name is None or ir_name not in self.vectors:
            refuse_gemm(node)
        return ir_name, "chw", self.map_shape(node, ir_name)

    def channels(self, op) -> int:
        """The output channels of ``op``, not yet made."""
        return Graph(self.input, [*self.ops, op], op.name).channels(op.name)

    # --- the walk ----------------------------------------------------------------------
    def graph(self, name=None) -> Graph:
        tails = {id(p.nodes[-1]): p for p in self.patterns}
        inside = {id(n) for p in self.patterns for n in p.nodes}
        for node in self.model.nodes:
            if self.model.folds(node):
                self.model.fold(node)
            elif id(node) in tails:
                PATTERNS[type(tails[id(node)])](self, tails[id(node)])
            elif id(node) in inside:
                continue
            elif node.op_type in NODES:
                NODES[node.op_type](self, node, attributes(node))
            else:
                raise NotTaken(f"{where(node)}: not taken by the ONNX front end; taken: "
                               f"{', '.join(SUPPORTED)}")
        return self.finish(name)

    def finish(self, name) -> Graph:
        proto = self.model.proto
        out = proto.graph.output[0].name
        if out not in self.tensor_of:
            raise LoweringError(f"output {out!r}: not a tensor the GPU makes (a constant, or "
                                "a flattened map without its Gemm)")
        if self.tensor_of[out] == self.input.name:
            raise LoweringError(f"output {out!r}: the input itself (directly or through "
                                "Identity); no op for the GPU to run")
        graph = Graph(self.input, self.ops, self.tensor_of[out], name or proto.graph.name
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
