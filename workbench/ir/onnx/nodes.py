"""The handlers of single ONNX nodes, :data:`NODES` (op type -> ``handler(low, node,
attrs)``, ``low`` a :class:`~workbench.ir.onnx.walk.Lowering`), and the builders of the ops
the patterns' handlers (:mod:`.fused`) also make.  A node that only a pattern takes (a
BatchNormalization, an activation, a Gemm, ...) is refused here, in one line saying where
it belongs."""
from __future__ import annotations

import numpy as np

from workbench.ir.lowering import check_finite
from workbench.ir.onnx.patterns import ACTIVATIONS, ANCHOR
from workbench.ir.onnx.reader import refuse, text
from workbench.ir.onnx.resize import resize_agrees, resize_scales
from workbench.ir.ops import Add, Concat, Conv, Dense, Pool, Upsample

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


# --- the builders ------------------------------------------------------------------------

def padding(node, size, stride, attrs) -> str | tuple:
    """The IR padding of a Conv or pooling node: ``"valid"``, ``"same"`` (TensorFlow's,
    where the pads are its), or ``(top, left, bottom, right)``."""
    auto = text(attrs.get("auto_pad", b"NOTSET"))
    if auto == "VALID":
        return "valid"
    if auto == "SAME_UPPER":
        return "same"
    if auto == "SAME_LOWER" and not (stride == 1 and size % 2):
        refuse(node, "auto_pad SAME_LOWER pads differently from TensorFlow's SAME; "
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


def square(node, attrs, key, default) -> int:
    values = list(attrs.get(key, default))
    if len(values) != 2 or values[0] != values[1]:
        refuse(node, f"{key} {values}: square 2-D only")
    return int(values[0])


def conv(low, node, attrs) -> Conv:
    """The IR Conv of a Conv node (not yet made: its block fuses into it first)."""
    source = low.tensor(node, node.input[0])
    weight = low.constant(node, 1, "the weight")
    if weight.ndim != 4:
        refuse(node, f"a {weight.ndim - 2}-D convolution; images take 2-D")
    bias = low.constant(node, 2, "the bias")
    size = square(node, attrs, "kernel_shape", weight.shape[2:])
    stride = square(node, attrs, "strides", (1, 1))
    if square(node, attrs, "dilations", (1, 1)) != 1:
        refuse(node, "dilation other than 1")
    groups = int(attrs.get("group", 1))
    kernel = np.transpose(weight, (2, 3, 1, 0)).astype(np.float32)
    bias = np.zeros(kernel.shape[3], np.float32) if bias is None else bias.astype(np.float32)
    name = low.name(node)
    check_finite(name, {"kernel": kernel, "bias": bias})
    op = Conv(name, source, kernel, bias, stride, padding(node, size, stride, attrs), groups)
    op.luma_input = low.luma and source == low.input.name
    return op


def add(low, node) -> Add:
    """The IR Add of two tensors."""
    return Add(low.name(node), *(low.tensor(node, t) for t in node.input[:2]))


def upsampling(low, node, attrs) -> tuple[int, str]:
    """A Resize node's whole factor and the IR's upsampling (``"nearest"``, ``"bilinear"``)
    it is: checked against it on a probe by ONNX's reference evaluator (the coordinate modes
    that agree with it pass)."""
    scales = resize_scales(node, attrs, low.constant(node, 2, "scales"),
                           low.constant(node, 3, "sizes"), low.shape(node.input[0]))
    if scales[:2] != [1, 1] or scales[2] != scales[3] \
            or scales[2] != int(scales[2]) or scales[2] < 2:
        refuse(node, f"scales {scales}: one whole factor on H and W")
    mode = text(attrs.get("mode", b"nearest"))
    how = {"nearest": "nearest", "linear": "bilinear"}.get(mode)
    scale = int(scales[2])
    if how is None or not resize_agrees(attrs, scale, how, low.model.proto.opset_import):
        refuse(node, f"mode {mode!r} with coordinate_transformation_mode "
               f"{attrs.get('coordinate_transformation_mode', b'half_pixel')!r} is not "
               "the IR's nearest (pixel repeated) or bilinear (half-pixel centres, as "
               "align_corners=False)")
    return scale, how


def check_global_pool(low, node, attrs):
    """GlobalAveragePool, or a ReduceMean over H and W only."""
    if node.op_type == "ReduceMean":
        axes = attrs.get("axes")
        if axes is None and len(node.input) > 1:
            axes = low.constant(node, 1, "axes")
        if sorted(int(a) % 4 for a in (axes if axes is not None else ())) != [2, 3]:
            refuse(node, f"ReduceMean over axes {axes}; only over H and W (2, 3)")


def dense(low, node, attrs, source) -> Dense:
    """Gemm (or MatMul) of a pooled, flattened tensor ``source`` by a constant weight: the
    IR's Dense with its global pooling fused in."""
    weight = low.constant(node, 1, "the weight").astype(np.float32)
    if attrs.get("transA", 0):
        refuse(node, "transA=1")
    if attrs.get("transB", 0):
        weight = weight.T
    weight = weight * np.float32(attrs.get("alpha", 1.0))
    bias = low.constant(node, 2, "the bias") if node.op_type == "Gemm" else None
    bias = np.zeros(weight.shape[1], np.float32) if bias is None else \
        np.broadcast_to(np.asarray(bias, np.float32).reshape(-1) * np.float32(
            attrs.get("beta", 1.0)), weight.shape[1:]).astype(np.float32)
    name = low.name(node)
    check_finite(name, {"weight": weight, "bias": bias})
    return Dense(name, source, weight.astype(np.float32), bias, pool=True)


# --- the nodes on their own --------------------------------------------------------------

def _concat(low, node, attrs):
    if attrs.get("axis") not in (1, -3):
        refuse(node, f"concatenation along the channels only (axis 1), not axis "
               f"{attrs.get('axis')}")
    first, *others = (low.tensor(node, t) for t in node.input)
    low.produce(Concat(low.name(node), first, tuple(others)), node)


def _pool(low, node, attrs):
    source = low.tensor(node, node.input[0])
    size = square(node, attrs, "kernel_shape", ())
    stride = square(node, attrs, "strides", (1, 1))
    if size not in (2, 3):
        refuse(node, f"{size}x{size} windows; pooling takes 2x2 or 3x3")
    if square(node, attrs, "dilations", (1, 1)) != 1:
        refuse(node, "dilation other than 1")
    pads = padding(node, size, stride, attrs)
    if attrs.get("ceil_mode", 0):
        refuse(node, "ceil_mode=1; export with ceil_mode=False")
    if node.op_type == "AveragePool" and attrs.get("count_include_pad", 0) \
            and pads != "valid":
        refuse(node, "count_include_pad=1 averages the zero padding in; export with "
               "count_include_pad=False (the GPU averages the taps inside)")
    if len(node.output) > 1 and node.output[1]:
        refuse(node, "MaxPool's indices output")
    kind = "max" if node.op_type == "MaxPool" else "average"
    low.produce(Pool(low.name(node), source, kind, size, stride, pads), node)


def _resize(low, node, attrs):
    source = low.tensor(node, node.input[0])
    scale, how = upsampling(low, node, attrs)
    if low.luma and source == low.input.name:  # an anchor, its residual not found:
        low.anchored.add(node.output[0])  # its readers refuse
        return
    low.produce(Upsample(low.name(node), source, scale, how), node)


def _identity(low, node, attrs):
    if node.input[0] in low.const:
        low.const[node.output[0]] = low.const[node.input[0]]
    else:
        low.set(node.output[0], low.tensor(node, node.input[0]))


def _shape(low, node, attrs):
    shape = low.shape(node.input[0])
    if shape is None:
        refuse(node, f"the size of {node.input[0]!r} is dynamic; export with a fixed input "
               "size, or give input_size (--input-size HxW)")
    start, end = attrs.get("start", 0), attrs.get("end", None)
    low.const[node.output[0]] = np.array(shape[start:end], np.int64)


def _global_pool(low, node, attrs):  # its reader is not a Gemm: refused where it reads
    check_global_pool(low, node, attrs)


# Nodes that only a pattern takes: where found alone, the reason it is not one.

def _batchnorm(low, node, attrs):
    conv = low.last(node, node.input[0], (Conv,), "BatchNormalization")
    if conv.residual:
        refuse(node, "BatchNormalization after a residual sum")
    refuse(node, "BatchNormalization must directly follow a Conv without activation")


def _activation(low, node, attrs):
    if node.input[0] in low.anchored:
        refuse(node, f"an anchor residual ends in Clip(0, 1): {ANCHOR}")
    low.last(node, node.input[0], (Conv, Add), "an activation")
    refuse(node, "an activation must directly follow a Conv or Add without activation")


def refuse_arithmetic(node):
    refuse(node, f"{node.op_type} is supported only in a luma net's anchor residual, "
           f"{ANCHOR}, or of a constant on the input")


def _add(low, node, attrs):
    a, b = node.input[:2]
    if {a, b} & low.anchored:
        refuse(node, f"an anchor residual must be {ANCHOR}")
    if a in low.const or b in low.const:
        low.last(node, b if a in low.const else a, (Conv, Dense), "an Add of a constant")
    refuse(node, "an Add of a constant must directly follow a Conv or Dense without "
           "activation")


def _reshape(low, node, attrs):
    """Flatten, Reshape, Squeeze not found in a pattern; PixelShuffle's first Reshape
    refused where its Transpose is not PixelShuffle's."""
    if node.op_type == "Reshape" and node.input[0] in low.tensor_of and \
            len(low.constant(node, 1, "the shape")) == 6:
        return
    refuse_reshape(node)


def refuse_reshape(node):
    refuse(node, "reshapes only a global pooling's result (before the Gemm) or as "
           "PixelShuffle does")


def _transpose(low, node, attrs):
    refuse_transpose(node, tuple(attrs.get("perm", ())))


def refuse_transpose(node, perm):
    refuse(node, f"Transpose {perm}: only PixelShuffle's (with its "
           "Reshapes) is supported")


def _gemm(low, node, attrs):
    refuse(node, "a Gemm must read a global average pooling (GlobalAveragePool or "
           "ReduceMean over H, W, then Flatten)")


def _softmax(low, node, attrs):
    refuse(node, "a softmax must follow the Gemm (the logits), over the classes")


NODES = {
    "Concat": _concat, "MaxPool": _pool, "AveragePool": _pool, "Resize": _resize,
    "Identity": _identity, "Shape": _shape,
    "GlobalAveragePool": _global_pool, "ReduceMean": _global_pool,
    "BatchNormalization": _batchnorm, "Add": _add,
    **dict.fromkeys(ACTIVATIONS, _activation),
    **dict.fromkeys(("Sub", "Mul", "Div"), lambda low, node, attrs: refuse_arithmetic(node)),
    **dict.fromkeys(("Flatten", "Reshape", "Squeeze"), _reshape),
    "Transpose": _transpose, "Gemm": _gemm, "MatMul": _gemm, "Softmax": _softmax,
}
