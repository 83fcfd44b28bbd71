"""The multi-node patterns of an ONNX graph, one small frozen dataclass each, found in one pass
over the nodes before anything is lowered (:func:`find`).  A pattern says which nodes it
matched; its handler (:data:`workbench.ir.onnx.fused.PATTERNS`) lowers it whole when the walk
reaches its last node, reading the constants' values and refusing what they rule out.  The
nodes of a pattern other than its last are not lowered on their own.

Found by the nodes' types, their wiring and which inputs are constants, as the walk would
meet them: a fusion holds only where the fused tensor has no other reader and its op is the
newest one made (a PyTorch export's order)."""
from __future__ import annotations

from dataclasses import dataclass, replace

# A luma net's anchor residual, clamp(up(luma) + s * (depth_to_space(q) - 0.5), 0, 1)
ANCHOR = "clamp(up(input) + s * (pixel_shuffle(q) - 0.5), 0, 1) after the last DepthToSpace"
ACTIVATIONS = ("Relu", "Clip", "Sigmoid", "HardSigmoid", "Tanh", "LeakyRelu", "PRelu")
# PixelShuffle's Transpose of (N, C, b, b, H, W) (CRD) or (N, b, b, C, H, W) (DCR): its mode
# and the axis of the first block size in the first Reshape's shape
SHUFFLES = {(0, 1, 4, 2, 5, 3): ("CRD", 2), (0, 3, 4, 1, 5, 2): ("DCR", 1)}


@dataclass(frozen=True)
class Block:
    """An op-making node (a Conv, an Add of two tensors, a Gemm or MatMul of a flattened map)
    and the nodes fused into it, in order: BatchNormalization and Add of a constant (a Conv's,
    a Gemm's), an Add of a tensor (a Conv's ``residual``, that Add), one activation, a
    Softmax (a Gemm's); Identity anywhere."""
    node: object
    fused: tuple = ()
    residual: object = None

    @property
    def nodes(self) -> tuple:
        return (self.node, *self.fused)

    @property
    def activated(self) -> bool:
        return any(n.op_type in ACTIVATIONS for n in self.fused)


@dataclass(frozen=True)
class Shuffle:
    """A depth-to-space: a DepthToSpace node or PixelShuffle's Reshape-Transpose-Reshape
    (``shuffle``), and the conv ``Block`` just before it where there is one (a CRD one needs
    it, without a residual): its handler makes the conv, a CRD one's output channels in its
    order, an anchor residual's storing its sub-pixels by the anchor's law."""
    shuffle: tuple
    mode: str
    conv: Block | None = None

    @property
    def nodes(self) -> tuple:
        return (*(self.conv.nodes if self.conv else ()), *self.shuffle)


@dataclass(frozen=True)
class Anchor:
    """A luma net's anchor residual, ``clamp(up(input) + s * (demux(q) - 0.5), 0, 1)``:
    the Resize of the input, the depth-to-space, Sub, Mul, Add, Clip."""
    resize: object
    demux: Shuffle
    sub: object
    mul: object
    add: object
    clip: object

    @property
    def nodes(self) -> tuple:
        return (self.resize, *self.demux.nodes, self.sub, self.mul, self.add, self.clip)


@dataclass(frozen=True)
class Classifier:
    """GlobalAveragePool (or ReduceMean over H, W), Flatten / Reshape / Squeeze / Identity,
    Gemm (or MatMul), then Adds of a constant, a Softmax, Identity (``fused``): a pooled
    Dense.  Without a Gemm (the pooled vector is the net's output, or its Softmax): a pooled
    Dense of the identity."""
    pool: object
    reshapes: tuple = ()
    gemm: object = None
    fused: tuple = ()

    @property
    def nodes(self) -> tuple:
        return (self.pool, *self.reshapes, *filter(None, (self.gemm,)), *self.fused)

    def pooled(self) -> dict[str, bool]:
        """Its tensors before the Gemm -> whether flattened (by ReduceMean's keepdims=0, or
        a reshape other than Identity)."""
        flat = self.pool.op_type == "ReduceMean" and any(
            a.name == "keepdims" and a.i == 0 for a in self.pool.attribute)
        tensors = {self.pool.output[0]: flat}
        for r in self.reshapes:
            flat = flat or r.op_type != "Identity"
            tensors[r.output[0]] = flat
        return tensors


@dataclass(frozen=True)
class Normalisation:
    """Mul / Div / Sub / Add of constants on the input, in order: folded into its readers."""
    steps: tuple

    @property
    def nodes(self) -> tuple:
        return self.steps


def output(pattern) -> str:
    return pattern.nodes[-1].output[0]


def find(model) -> list:
    """The patterns of ``model`` (a :class:`~workbench.ir.onnx.reader.Model`), each node in
    at most one."""
    return _Finder(model).run()


class _Finder:
    def __init__(self, model):
        self.model, self.const, self.uses = model, model.constants(), model.uses
        self.found = []        # the patterns, in the order found
        self.last = None       # what made the newest op (a pattern, or a node)
        self.normalised = {model.input_name: None}  # the input, normalised: -> its pattern
        self.upsampled = {}    # a luma net's upsampled input -> the Resize
        self.anchor = {}       # a partial anchor's tensor -> (demux, its nodes so far)
        self.pooled = {}       # a pooling before its Gemm -> the Classifier so far
        self.shuffling = {}    # PixelShuffle's first Reshape (and Transpose) -> its nodes

    def run(self) -> list:
        for node in self.model.nodes:
            if not all(i in self.const for i in node.input if i):
                getattr(self, node.op_type, self.other)(node)
        out = self.model.proto.graph.output[0].name
        if out in self.pooled:  # a pooling without a Gemm: the output
            self.new(self.pooled.pop(out))
        return self.found

    # --- the bookkeeping ---------------------------------------------------------------
    def new(self, pattern):
        self.found.append(pattern)
        self.last = pattern

    def drop(self, pattern):
        self.found = [p for p in self.found if p is not pattern]

    def grow(self, old, new):
        self.found = [new if p is old else p for p in self.found]
        if self.last is old:
            self.last = new

    def newest(self, tensor, kinds):
        """The newest op's pattern where it makes ``tensor``, read here alone, from a node
        of ``kinds``."""
        p = self.last
        head = getattr(p, "node", getattr(p, "gemm", None))
        if (isinstance(p, (Block, Classifier)) and head is not None and head.op_type in kinds
                and output(p) == tensor and self.uses[tensor] == 1):
            return p
        return None

    def fuse(self, node, kinds):
        p = self.newest(node.input[0], kinds)
        if p and not getattr(p, "activated", False) and not (
                node.op_type == "BatchNormalization" and p.residual):
            self.grow(p, replace(p, fused=p.fused + (node,)))

    def steps(self, tensor) -> int:
        """How many nodes of an anchor residual made ``tensor`` (0: none)."""
        return len(self.anchor.get(tensor, ((), ()))[1])

    def constant_of(self, node) -> str | None:
        """The tensor input of a node of a tensor and a constant."""
        a, b = node.input[:2]
        return a if b in self.const else b if a in self.const else None

    # --- the node types ----------------------------------------------------------------
    def other(self, node):  # Concat, pooling, ...: an op of its own; unknown: refused
        self.last = node

    def Conv(self, node):
        self.new(Block(node))

    def BatchNormalization(self, node):
        self.fuse(node, ("Conv",))

    def activation(self, node):
        anchor = self.anchor.pop(node.input[0], None)
        if anchor and len(anchor[1]) == 4:  # resize ... add: its Clip (checked when lowered)
            demux, (resize, sub, mul, add) = anchor
            self.drop(demux)
            self.found.append(Anchor(resize, demux, sub, mul, add, node))
        else:
            self.fuse(node, ("Conv", "Add", "Gemm", "MatMul"))

    Relu = Clip = Sigmoid = HardSigmoid = Tanh = LeakyRelu = PRelu = activation

    def arithmetic(self, node):
        """Sub, Mul, Div (and Add) of a constant: the input's normalisation, or a step of
        an anchor residual."""
        tensor = self.constant_of(node)
        if tensor in self.normalised:  # a chain through tensors read once
            steps = self.normalised[tensor] if self.uses[tensor] == 1 else None
            self.drop(steps)
            steps = Normalisation((*(steps.steps if steps else ()), node))
            self.found.append(steps)
            self.normalised[node.output[0]] = steps
        elif (node.op_type == "Sub" and tensor == node.input[0] and self.uses[tensor] == 1
              and isinstance(self.last, Shuffle) and output(self.last) == tensor
              and self.model.luma):
            self.anchor[node.output[0]] = (self.last, [node])
        elif node.op_type == "Mul" and self.steps(tensor) == 1:  # after the Sub
            demux, nodes = self.anchor.pop(tensor)
            self.anchor[node.output[0]] = (demux, nodes + [node])

    Sub = Mul = Div = arithmetic

    def Add(self, node):
        a, b = node.input[:2]
        if self.constant_of(node) in self.normalised:
            return self.arithmetic(node)
        scaled = next((t for t in (a, b) if self.steps(t) == 2), None)  # after the Mul
        resize = self.upsampled.get(b if scaled == a else a)
        if scaled and resize:
            demux, nodes = self.anchor.pop(scaled)
            self.anchor[node.output[0]] = (demux, [resize, *nodes, node])
        elif self.constant_of(node):
            self.fuse(node, ("Conv", "Gemm", "MatMul"))
        elif not ({a, b} & (self.anchor.keys() | self.upsampled.keys())):
            conv = self.newest(a, ("Conv",)) or self.newest(b, ("Conv",))
            if conv and a != b and not conv.activated and not conv.residual:
                self.grow(conv, replace(conv, fused=conv.fused + (node,), residual=node))
            else:
                self.new(Block(node))

    def Resize(self, node):
        if self.model.luma and node.input[0] in self.normalised:
            self.upsampled[node.output[0]] = node
        else:
            self.last = node

    def GlobalAveragePool(self, node):
        self.pooled[node.output[0]] = Classifier(node)

    ReduceMean = GlobalAveragePool

    def reshape(self, node):
        """Flatten, Reshape, Squeeze, Identity: of a pooling (before its Gemm), or the
        Reshapes of PixelShuffle (around its Transpose)."""
        pooled = self.pooled.pop(node.input[0], None)
        shuffling = self.shuffling.pop(node.input[0], ())
        made = self.newest(node.input[0], ("Conv", "Add", "Gemm", "MatMul"))
        if node.op_type == "Identity" and made:
            self.grow(made, replace(made, fused=made.fused + (node,)))
        elif pooled and (node.op_type == "Identity" or not pooled.pooled()[node.input[0]]):
            self.pooled[node.output[0]] = replace(pooled, reshapes=pooled.reshapes + (node,))
        elif node.op_type == "Reshape" and len(shuffling) == 2:
            first, transpose = shuffling
            self.shuffle(Shuffle((first, transpose, node), SHUFFLES[perm(transpose)][0]))
        elif node.op_type == "Reshape":
            self.shuffling[node.output[0]] = (node,)

    Flatten = Reshape = Squeeze = Identity = reshape

    def Transpose(self, node):
        first = self.shuffling.pop(node.input[0], ())
        if len(first) == 1 and perm(node) in SHUFFLES:
            self.shuffling[node.output[0]] = (*first, node)

    def Shape(self, node):  # a constant, from a tensor's size
        pass

    def DepthToSpace(self, node):
        mode = next((a.s.decode() for a in node.attribute if a.name == "mode"), "DCR")
        self.shuffle(Shuffle((node,), mode))

    def shuffle(self, shuffle):
        conv = self.newest(shuffle.shuffle[0].input[0], ("Conv",))
        if conv and not (shuffle.mode == "CRD" and conv.residual):
            self.drop(conv)
            shuffle = replace(shuffle, conv=conv)
        self.new(shuffle)

    def Gemm(self, node):
        pooled = self.pooled.pop(node.input[0], None)
        if pooled and pooled.pooled()[node.input[0]]:
            self.new(replace(pooled, gemm=node))
        else:  # of a flattened map, or of a Gemm (checked when lowered)
            self.new(Block(node))

    MatMul = Gemm

    def Softmax(self, node):
        pooled = self.pooled.pop(node.input[0], None)
        if pooled:  # a pooling without a Gemm
            return self.new(replace(pooled, fused=(node,)))
        p = self.newest(node.input[0], ("Gemm", "MatMul"))
        if p and not any(n.op_type == "Softmax" for n in p.fused):
            self.grow(p, replace(p, fused=p.fused + (node,)))


def perm(transpose) -> tuple:
    return next((tuple(a.ints) for a in transpose.attribute if a.name == "perm"), ())
