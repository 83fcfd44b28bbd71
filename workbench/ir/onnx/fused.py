"""The handlers of the patterns (:mod:`.patterns`), :data:`PATTERNS` (pattern type ->
``handler(low, pattern)``): each makes its ops whole, the fused nodes folded in, and refuses
what the constants' values rule out, naming the node."""
from __future__ import annotations

import numpy as np

from workbench.ir.lowering import fold_batchnorm, leaky_relu, prelu
from workbench.ir.onnx import nodes
from workbench.ir.onnx.patterns import (ACTIVATIONS, ANCHOR, SHUFFLES, Anchor, Block, Classifier,
                                        Normalisation, Shuffle, output, perm)
from workbench.ir.onnx.reader import attributes, refuse, where
from workbench.ir.ops import Conv, Dense, DepthToSpace


# --- what fuses into an op ---------------------------------------------------------------

def _batchnorm(low, op, node, attrs, previous):
    gamma, beta, mean, var = (low.constant(node, i, what) for i, what in
                              enumerate(("scale", "B", "mean", "var"), 1))
    fold_batchnorm(op, op.name, gamma, beta, mean, var, attrs.get("epsilon", 1e-5))


def _add(low, op, node, attrs, previous):
    """An Add of a constant into the bias; of a tensor (besides ``previous``, the op's
    output so far), the conv's residual."""
    a, b = node.input[:2]
    if a not in low.const and b not in low.const:
        op.residual = low.tensor(node, b if a == previous else a)
        return
    v, n = np.asarray(low.const[a if a in low.const else b], np.float32), op.bias.size
    axis = -1 if op.name in low.vectors or isinstance(op, Dense) else -3  # (N, C), (N, C, H, W)
    if not (v.size == 1 or (v.size == n and v.ndim >= -axis and v.shape[axis] == n)):
        refuse(node, f"a constant of shape {v.shape}: only one value per channel adds into "
               "the bias")
    op.bias = (op.bias + v.reshape(-1)).astype(np.float32)


def _activation(low, op, node, attrs, previous):
    """Relu, LeakyRelu, PRelu, Clip(0, m), Sigmoid, HardSigmoid, Tanh of a Conv or Add."""
    kind = node.op_type
    if kind == "Clip":  # min and max: inputs from opset 11, attributes before
        lo, hi = (low.constant(node, i, what) if i < len(node.input) else attrs.get(what)
                  for i, what in ((1, "min"), (2, "max")))
        # Clip(0): a Relu (calibrated where ES 2.0 stores it)
        low.found.clip(op, lo, hi, f"node {node.name or node.output[0]!r} (Clip)")
    elif kind == "HardSigmoid":
        if not isinstance(op, Conv):
            refuse(node, "HardSigmoid folds into a Conv's weights; it follows an Add")
        alpha, beta = attrs.get("alpha", 0.2), attrs.get("beta", 0.5)
        op.kernel = (op.kernel * np.float32(alpha)).astype(np.float32)
        op.bias = (op.bias * np.float32(alpha) + np.float32(beta)).astype(np.float32)
        if op.residual:
            refuse(node, "HardSigmoid after a residual sum")
        op.activation = "bounded_relu"
    elif kind == "Tanh":  # (tanh(z) + 1) / 2 = sigmoid(2 z): stored so, read as 2 x - 1
        if not isinstance(op, Conv) or op.residual:
            refuse(node, "Tanh folds into a Conv's weights (stored as sigmoid(2 z), its "
                   "(y + 1) / 2); it follows an Add or a residual sum")
        op.kernel, op.bias = (op.kernel * 2).astype(np.float32), (op.bias * 2).astype(np.float32)
        op.activation = "sigmoid"
        low.found.read_as(op, 2.0, -1.0)
    elif kind == "LeakyRelu":
        op.activation = leaky_relu(attrs.get("alpha", 0.01), where(node))
    elif kind == "PRelu":
        prelu(op, low.constant(node, 1, "the slope"), low.channels(op), where(node),
              -1 if op.name in low.vectors else -3)
    else:
        op.activation = {"Sigmoid": "sigmoid", "Relu": "relu"}[kind]


def _softmax(low, op, node, attrs, previous):
    axis = attrs.get("axis", -1 if low.opset >= 13 else 1)
    if not isinstance(op, Dense) or axis not in (1, -1) or (
            axis == -1 and previous in low.pooled and not low.pooled[previous][1]):
        refuse(node, "a softmax must follow the Gemm (the logits), over the classes")
    op.softmax = True


FUSE = {"BatchNormalization": _batchnorm, "Add": _add, "Softmax": _softmax,
        "Identity": lambda low, op, node, attrs, previous: None,
        **dict.fromkeys(ACTIVATIONS, _activation)}


def fuse(low, op, head, fused):
    """Fold the nodes ``fused`` (after the node ``head``) into ``op``, in order."""
    previous = head.output[0]
    for node in fused:
        FUSE[node.op_type](low, op, node, attributes(node), previous)
        previous = node.output[0]


# --- the patterns ------------------------------------------------------------------------

def block_op(low, block: Block):
    node = block.node
    if node.op_type in ("Gemm", "MatMul"):  # the logits where nothing follows
        last = output(block) == low.model.proto.graph.output[0].name and not block.activated
        op = nodes.gemm(low, node, attributes(node), last)
    else:
        op = nodes.conv(low, node, attributes(node)) if node.op_type == "Conv" else \
            nodes.add(low, node)
    fuse(low, op, node, block.fused)
    return op


def _block(low, block: Block):
    low.produce(block_op(low, block), *block.nodes)


def shuffle_op(low, shuffle: Shuffle, storage="linear") -> DepthToSpace:
    """The IR's depth-to-space (DCR; not yet made), after the conv of its pattern, made here
    storing its output by ``storage`` (an anchor's law); a CRD one's output channel ``(dy *
    block + dx) * C + c`` is its old ``c * block**2 + dy * block + dx``."""
    first, last = shuffle.shuffle[0], shuffle.shuffle[-1]
    if len(shuffle.shuffle) == 3:  # Reshape (N, C, b, b, H, W) or (N, b, b, C, H, W)
        shape = low.constant(first, 1, "the shape")
        if len(shape) != 6:
            nodes.refuse_reshape(first)
        order = perm(shuffle.shuffle[1])
        at = SHUFFLES[order][1]
        block = int(shape[at])
        if shape[at + 1] != block:
            nodes.refuse_transpose(shuffle.shuffle[1], order)
    else:
        block = int(attributes(first)["blocksize"])
    if shuffle.mode == "CRD" and shuffle.conv is None:
        low.tensor(first, first.input[0])
        refuse(last, "a CRD depth-to-space (PixelShuffle) must directly follow a Conv "
               "(its output channels are reordered)")
    if shuffle.conv:
        conv = block_op(low, shuffle.conv)
        if shuffle.mode == "CRD":
            c = conv.cout // block ** 2
            order = [cc * block ** 2 + s for s in range(block ** 2) for cc in range(c)]
            conv.kernel, conv.bias = conv.kernel[..., order].copy(), conv.bias[order].copy()
            if conv.activation_slope is not None:
                conv.activation_slope = conv.activation_slope[order].copy()
        conv.storage = storage
        low.produce(conv, *shuffle.conv.nodes)
    source = low.tensor(first, first.input[0])
    chroma = low.input.name if low.luma else None
    return DepthToSpace(low.name(last), source, block, chroma_from=chroma)


def _shuffle(low, shuffle: Shuffle):
    low.produce(shuffle_op(low, shuffle), shuffle.shuffle[-1])


def _scalar(low, node):
    """The constant of an anchor residual's Sub or Mul: one value."""
    a, b = node.input[:2]
    value = np.asarray(low.const[b if a not in low.const else a])
    if value.size != 1:
        nodes.refuse_arithmetic(node)
    return float(value.reshape(()))


def _anchor(low, anchor: Anchor):
    scale, how = nodes.upsampling(low, anchor.resize, attributes(anchor.resize))
    law = low.model.anchor_storage
    demux = shuffle_op(low, anchor.demux, law)
    if _scalar(low, anchor.sub) != 0.5:
        nodes.refuse_arithmetic(anchor.sub)
    s = _scalar(low, anchor.mul)
    if scale != demux.block:
        refuse(anchor.add, f"the anchor is upsampled x{scale}, the depth-to-space "
               f"x{demux.block}")
    bounds = [low.constant(anchor.clip, i, what) for i, what in ((1, "min"), (2, "max"))]
    if anchor.clip.op_type != "Clip" or [None if v is None else float(v) for v in bounds] \
            != [0, 1]:
        refuse(anchor.clip, f"an anchor residual ends in Clip(0, 1): {ANCHOR}")
    if law != "linear" and anchor.demux.conv is None:  # its conv stores them (shuffle_op)
        refuse(anchor.clip, f"storage {law!r} needs its sub-pixels from a convolution just "
               "before the depth-to-space")
    demux.anchor, demux.anchor_scale, demux.anchor_storage = how, s, law
    low.produce(demux, anchor.demux.shuffle[-1], anchor.clip)


def _classifier(low, classifier: Classifier):
    pool = classifier.pool
    nodes.check_global_pool(low, pool, attributes(pool))
    source = low.tensor(pool, pool.input[0])
    head = classifier.gemm or classifier.nodes[-1 - len(classifier.fused)]
    if classifier.gemm:
        op = nodes.dense(low, head, attributes(head), source)
    else:  # the pooled vector itself: a Dense of the identity
        c = low.shape(head.output[0])[1]
        op = Dense(low.name(pool), source, np.eye(c, dtype=np.float32),
                   np.zeros(c, np.float32), pool=True)
    fuse(low, op, head, classifier.fused)
    low.produce(op, head, *classifier.fused)


def _normalisation(low, normalisation: Normalisation):
    """Mul, Div, Sub or Add of a constant on the input (or on it normalised so far): folded
    into the convs that read it (:class:`~workbench.ir.lowering.Scales`)."""
    for node in normalisation.steps:
        a, b = node.input[:2]
        tensor, value = (a, low.const[b]) if b in low.const else (b, low.const[a])
        if node.op_type in ("Sub", "Div") and tensor != a:
            refuse(node, f"a constant {node.op_type} the input; only the input "
                   f"{node.op_type} a constant folds into the convs")
        if low.uses[tensor] > 1:
            refuse(node, f"the input's normalisation: {tensor!r} is also read elsewhere; "
                   "normalise the input once, for every reader")
        low.found.normalise(node.op_type.lower(), value, where(node), -3)
        low.tensor_of[node.output[0]] = low.input.name


PATTERNS = {Block: _block, Shuffle: _shuffle, Anchor: _anchor, Classifier: _classifier,
            Normalisation: _normalisation}
