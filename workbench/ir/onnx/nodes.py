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

SUPPORTED = ("Conv (group, pads, strides, any kernel shape and dilation)",
             "Pad (zeros, before a Conv)", "BatchNormalization (after a Conv)",
             "Relu / LeakyRelu / PRelu (slope (C, 1, 1)) / Clip(0, m) / Sigmoid / HardSigmoid "
             "(after a Conv or Add; Clip(0, m) stored as y / m) / Tanh (after a Conv, stored "
             "as (y + 1) / 2)",
             "Mul / Div / Sub / Add of constants on the input (folded into the convs)",
             "Add (two tensors; a constant into the Conv or Gemm before it)",
             "Concat (channels)", "MaxPool / AveragePool (2x2, 3x3; ceil_mode)",
             "GlobalAveragePool / ReduceMean over H, W (then Flatten and Gemm, or the output)",
             "Resize (x2 nearest, linear)", "DepthToSpace (DCR, CRD)",
             "Reshape-Transpose-Reshape (PixelShuffle)",
             "Resize of a luma net's input + Sub + Mul + Add + Clip after its DepthToSpace "
             "(an anchor residual)", "Flatten / Reshape / Squeeze (a map to (N, C*H*W))",
             "Transpose (an NHWC input's, to NHWC before a Flatten)",
             "Gemm / MatMul (+ Add) of a flattened map or a Gemm (+ activation)",
             "Softmax (on the logits)",
             "Constant, Identity, Dropout, Shape and constant arithmetic (folded)")


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


def explicit(node, attrs, extra=(0, 0, 0, 0)) -> dict:
    """``attrs`` with the explicit ``pads`` grown by ``extra`` (top, left, bottom, right);
    an ``auto_pad`` other than VALID cannot grow (refused)."""
    auto = text(attrs.get("auto_pad", b"NOTSET"))
    if auto not in ("NOTSET", "VALID") and any(extra):
        refuse(node, f"auto_pad {auto} with a non-square or dilated kernel, a Pad before it "
               "or ceil_mode=1; export with explicit pads")
    top, left, bottom, right = (0, 0, 0, 0) if auto == "VALID" else attrs.get("pads",
                                                                             (0, 0, 0, 0))
    pads = [int(p) + e for p, e in zip((top, left, bottom, right), extra)]
    return {**attrs, "auto_pad": b"NOTSET", "pads": pads} if any(extra) else attrs


def square_kernel(weight, dilations):
    """A Conv's ``weight`` ``(cout, cin / group, kh, kw)`` of any shape and dilation as a
    square kernel, exactly: its taps spread ``dilations`` apart with zero taps between, then
    zero rows (or columns) half before, half after the shorter side; and how many, ``(top,
    left, bottom, right)``, which its pads grow by (the zero taps read the padding)."""
    sizes = [(k - 1) * d + 1 for k, d in zip(weight.shape[2:], dilations)]
    kernel = np.zeros((*weight.shape[:2], *sizes), np.float32)
    kernel[:, :, ::dilations[0], ::dilations[1]] = weight
    before = [(max(sizes) - n) // 2 for n in sizes]
    after = [max(sizes) - n - b for n, b in zip(sizes, before)]
    return np.pad(kernel, ((0, 0), (0, 0), *zip(before, after))), (*before, *after)


def square(node, attrs, key, default) -> int:
    values = list(attrs.get(key, default))
    if len(values) != 2 or values[0] != values[1]:
        refuse(node, f"{key} {values}: square 2-D only")
    return int(values[0])


def conv(low, node, attrs) -> Conv:
    """The IR Conv of a Conv node (not yet made: its block fuses into it first): a kernel of
    any shape and dilation made square (:func:`square_kernel`), a zero Pad before it folded
    into its pads."""
    x, pad = low.padded.get(node.input[0], (node.input[0], (0, 0, 0, 0)))
    source = low.tensor(node, x)
    weight = low.constant(node, 1, "the weight")
    if weight.ndim != 4:
        refuse(node, f"a {weight.ndim - 2}-D convolution; images take 2-D")
    bias = low.constant(node, 2, "the bias")
    stride = square(node, attrs, "strides", (1, 1))
    weight, grown = square_kernel(weight, [int(d) for d in attrs.get("dilations", (1, 1))])
    attrs = explicit(node, attrs, np.add(grown, pad))
    size = weight.shape[2]
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


def gemm_weights(low, node, attrs):
    """``(weight (cin, cout), bias (cout,))`` of a Gemm or MatMul by a constant weight."""
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
    return weight.astype(np.float32), bias


def dense(low, node, attrs, source) -> Dense:
    """Gemm (or MatMul) of a pooled, flattened tensor ``source`` by a constant weight: the
    IR's Dense with its global pooling fused in."""
    weight, bias = gemm_weights(low, node, attrs)
    name = low.name(node)
    check_finite(name, {"weight": weight, "bias": bias})
    return Dense(name, source, weight, bias, pool=True)


def gemm(low, node, attrs, last) -> Conv | Dense:
    """Gemm (or MatMul) of a flattened map (:func:`_reshape`; a Gemm's output is a 1x1 map):
    a Conv whose kernel spans the map, its one 'valid' window the whole map (exact), the
    weight's rows from the flattening's order (CHW; HWC after a Transpose to NHWC); ``last``
    (the logits) a Dense over a 1x1 map (pooled: one pixel, as every back end takes it),
    after such a Conv where the map is larger."""
    source, order, (h, w, c) = low.flattened(node, node.input[0])
    weight, bias = gemm_weights(low, node, attrs)
    if weight.shape[0] != h * w * c:
        refuse(node, f"a weight of {weight.shape[0]} rows for a flattened {c}x{h}x{w} map")
    name = low.name(node)
    check_finite(name, {"weight": weight, "bias": bias})
    low.vectors.add(name)
    if last and h == w == 1:
        return Dense(name, source, weight, bias, pool=True)
    kernel = weight.reshape(h, w, c, -1) if order == "hwc" else \
        weight.reshape(c, h, w, -1).transpose(1, 2, 0, 3)
    kernel, grown = square_kernel(kernel.transpose(3, 2, 0, 1), (1, 1))
    op = Conv(name, source, np.transpose(kernel, (2, 3, 1, 0)).copy(), bias, 1,
              padding(node, kernel.shape[2], 1, {"pads": grown}))
    op.luma_input = low.luma and source == low.input.name
    if not last:
        return op
    low.ops.append(op)  # the logits, stored: read by a Dense of the identity
    low.origin[op.name] = node.output[0]
    cout = op.cout
    dense_name = low.name(node)
    low.vectors.add(dense_name)
    return Dense(dense_name, op.name, np.eye(cout, dtype=np.float32),
                 np.zeros(cout, np.float32), pool=True)


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
    zero_pads = padding(node, size, stride, attrs) == "valid"
    if attrs.get("ceil_mode", 0) and text(attrs.get("auto_pad", b"NOTSET")) == "NOTSET":
        attrs = explicit(node, attrs, ceil_pads(low, node, size, stride, attrs))
    pads = padding(node, size, stride, attrs)
    if node.op_type == "AveragePool" and attrs.get("count_include_pad", 0) \
            and not zero_pads:
        refuse(node, "count_include_pad=1 averages the zero padding in; export with "
               "count_include_pad=False (the GPU averages the taps inside)")
    if len(node.output) > 1 and node.output[1]:
        refuse(node, "MaxPool's indices output")
    kind = "max" if node.op_type == "MaxPool" else "average"
    low.produce(Pool(low.name(node), source, kind, size, stride, pads), node)


def ceil_pads(low, node, size, stride, attrs) -> tuple:
    """The padding that ``ceil_mode=1`` adds after the input (bottom, right) for its last
    windows, which start inside the input or its leading padding (PyTorch's and ONNX
    Runtime's rule): the padded taps are left out of the max and of the average's count,
    as ONNX Runtime leaves them out."""
    shape = low.shape(node.input[0])
    if shape is None:
        refuse(node, "ceil_mode=1 over a tensor of dynamic size; export with a fixed input "
               "size, or give input_size (--input-size HxW)")
    top, left, bottom, right = (int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
    extra = []
    for n, before, after in zip(shape[2:], (top, left), (bottom, right)):
        span = n + before + after - size
        out = -(-span // stride) + 1
        if (out - 1) * stride >= n + before:  # a last window that starts in the padding
            out -= 1
        extra.append(max((out - 1) * stride + size - n - before - after, 0))
    return (0, 0, *extra)


def _pad(low, node, attrs):
    """A constant Pad of zeros over H and W: folded into the pads of the Conv that reads it
    (``low.padded``); any other reader refuses it."""
    low.tensor(node, node.input[0])
    mode = text(attrs.get("mode", b"constant"))
    pads = attrs.get("pads")
    pads = low.constant(node, 1, "the pads") if pads is None else pads
    value = attrs.get("value", low.constant(node, 2, "the constant value"))
    axes = low.constant(node, 3, "the axes")
    if axes is not None:  # opset 18: the pads of these axes only
        full = np.zeros(8, np.int64)
        for i, axis in enumerate(np.asarray(axes).reshape(-1) % 4):
            full[axis], full[axis + 4] = pads[i], pads[i + len(axes)]
        pads = full
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    if mode != "constant":
        refuse(node, f"mode {mode!r}; only a zero Pad folds (into the Conv after it)")
    if value is not None and float(np.asarray(value).reshape(-1)[0]) != 0:
        refuse(node, f"pads with {float(np.asarray(value).reshape(-1)[0])}; only a zero Pad "
               "folds (into the Conv after it, whose padding is zeros)")
    if len(pads) != 8 or any(pads[i] for i in (0, 1, 4, 5)) or min(pads) < 0:
        refuse(node, f"pads {pads}; only H and W, by >= 0")
    low.padded[node.output[0]] = (node.input[0], (pads[2], pads[3], pads[6], pads[7]))


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


def reshaped(low, node, attrs, shape) -> list[int]:
    """The shape that a Flatten, Reshape or Squeeze node makes of ``shape``."""
    if node.op_type == "Flatten":
        axis = int(attrs.get("axis", 1)) % len(shape)
        return [int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))]
    if node.op_type == "Squeeze":
        axes = attrs.get("axes", low.constant(node, 1, "the axes"))
        axes = [i for i, n in enumerate(shape) if n == 1] if axes is None else \
            [int(a) % len(shape) for a in np.asarray(axes).reshape(-1)]
        return [n for i, n in enumerate(shape) if i not in axes]
    target = [int(t) for t in low.constant(node, 1, "the shape")]
    target = [shape[i] if t == 0 and not attrs.get("allowzero", 0) else t
              for i, t in enumerate(target)]
    if target.count(-1) == 1:
        target[target.index(-1)] = int(np.prod(shape)) // -int(np.prod(target))
    return target


def _reshape(low, node, attrs):
    """Flatten, Reshape, Squeeze not found in a pattern: of a map to (1, C*H*W), which only
    a Gemm reads (``low.flat``); PixelShuffle's first Reshape refused where its Transpose is
    not PixelShuffle's."""
    x = node.input[0]
    if node.op_type == "Reshape" and x in low.tensor_of and \
            len(low.constant(node, 1, "the shape")) == 6:
        return
    source = low.hwc.get(x, low.tensor_of.get(x))
    if source is None:
        refuse_reshape(node)
    h, w, c = low.map_shape(node, source)
    shape = [1, h, w, c] if x in low.hwc else [1, c, h, w]
    if reshaped(low, node, attrs, shape) != [1, h * w * c]:
        refuse_reshape(node)
    low.flat[node.output[0]] = (source, "hwc" if x in low.hwc else "chw", (h, w, c))


def refuse_reshape(node):
    refuse(node, "reshapes only a map to (N, C*H*W) (flattened for a Gemm), a global "
           "pooling's result (before the Gemm) or as PixelShuffle does")


def _transpose(low, node, attrs):
    """To NHWC (perm 0, 2, 3, 1): before a flattening (tf2onnx's Keras Flatten, ``low.hwc``),
    or an NHWC model's output; PixelShuffle's is a pattern's."""
    perm = tuple(attrs.get("perm", ()))
    x, out = node.input[0], node.output[0]
    if perm != (0, 2, 3, 1) or x not in low.tensor_of:
        refuse_transpose(node, perm)
    low.hwc[out] = low.tensor_of[x]
    if low.model.nhwc and out == low.model.proto.graph.output[0].name:
        low.set(out, low.tensor_of[x])


def refuse_transpose(node, perm):
    refuse(node, f"Transpose {perm}: only PixelShuffle's (with its Reshapes) and to NHWC "
           "(0, 2, 3, 1) before a Flatten or as an NHWC model's output are supported")


def refuse_gemm(node):
    refuse(node, "a Gemm must read a flattened map (Flatten, or Reshape to (N, -1)), a Gemm "
           "or a global average pooling (GlobalAveragePool or ReduceMean over H, W)")


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
    "Transpose": _transpose, "Softmax": _softmax, "Pad": _pad,
}
