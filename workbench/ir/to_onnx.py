"""An IR graph written as ONNX, in the node patterns PyTorch's exporter writes (NCHW).

For nets made in Keras that should enter as a PyTorch user's would (the tests of the ONNX
front end, ``notebooks/onnx_deploy.ipynb``): Conv (+ Add for a residual) + Clip(0, 1), Relu,
LeakyRelu, PRelu (a slope ``(C, 1, 1)``) or Sigmoid (the sigmoid-like activation as
``torch.clamp(0.05 x + torch.clamp(0.1 x, -0.05, 0.05) + torch.clamp(0.05 x, -0.125, 0.125)
+ 0.5, 0, 1)``), a pack shuffle as ``x[:, index]``
(Gather), MaxPool / AveragePool with explicit pads, Resize, Add, Concat, PixelShuffle (a
DepthToSpace in CRD mode, or its Reshape-Transpose-Reshape; the conv before it writes its
channels in that order), GlobalAveragePool + Flatten + Gemm (+ Softmax).  A luma net's
input and output are its luma (the RGB demux is the workbench's, outside the model); its
anchor as ``torch.clamp(F.interpolate(luma) + s * (pixel_shuffle(q) - 0.5), 0, 1)``, and its
8-bit storage law, if not linear, as the model's metadata ``workbench.anchor_storage``.
"""
from __future__ import annotations

import numpy as np

from workbench.ir.graph import Add, Concat, Conv, Dense, DepthToSpace, Graph, Pool, Upsample
from workbench.ir.graph import conv_pads, explicit_pads
from workbench.ir.lower_onnx import ANCHOR_STORAGE

ACTIVATIONS = ("linear", "bounded_relu", "relu", "sigmoid", "sigmoid_like")


def to_onnx(graph: Graph, opset=17, pixel_shuffle="crd", input_size=None):
    """``graph`` as an ``onnx.ModelProto`` of ``opset``.  ``pixel_shuffle``: how a
    depth-to-space is written: ``"crd"`` (``nn.PixelShuffle``'s DepthToSpace), ``"dcr"``
    (DepthToSpace, TensorFlow's order) or ``"reshape"`` (PixelShuffle's Reshape-Transpose-
    Reshape, which needs a fixed size).  ``input_size`` ``(height, width)`` fixes the input's
    size (default the graph's; else dynamic ``height`` and ``width``).  Activations other
    than :data:`ACTIVATIONS` have no PyTorch form here and are refused (:class:`ValueError`)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    size = tuple(input_size or graph.input_size or ()) or None
    if pixel_shuffle == "reshape" and size is None:
        raise ValueError("pixel_shuffle='reshape' writes constant shapes: give input_size")
    shapes = graph.shapes(size or (64, 64))
    nodes, inits, onnx_of = [], [], {graph.input.name: "input"}
    crd = {op.input: op.block for op in graph.ops
           if isinstance(op, DepthToSpace) and pixel_shuffle in ("crd", "reshape")}

    def const(name, value, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def node(kind, inputs, layer, **attrs):  # PyTorch's names: /layer/Kind, /layer/Kind_1
        name = f"/{layer}/{kind}"
        name += "".join(f"_{k}" for k in [sum(n.name.startswith(name) for n in nodes)] if k)
        out = f"{name}_output_0"
        nodes.append(helper.make_node(kind, inputs, [out], name=name, **attrs))
        return out

    def pads(op):
        if op.padding == "same":
            if size is None and op.stride != 1:
                raise ValueError(f"layer {op.name!r}: TensorFlow's 'same' padding at stride "
                                 f"{op.stride} depends on the input size: give input_size")
            hw = shapes[op.input][:2]
            top, left = conv_pads(hw, op.size, op.stride, "same")
            oh, ow = shapes[op.name][:2]
            bottom = (oh - 1) * op.stride + op.size - hw[0] - top
            right = (ow - 1) * op.stride + op.size - hw[1] - left
            return [top, left, max(bottom, 0), max(right, 0)]
        return list(explicit_pads(op.padding))

    def clip(x, layer, low, high):
        k = sum(n.op_type == "Clip" and n.name.startswith(f"/{layer}/") for n in nodes)
        return node("Clip", [x, const(f"{layer}.min{k or ''}", low),
                             const(f"{layer}.max{k or ''}", high)], layer)

    def scaled(x, layer, factor):
        k = sum(n.op_type == "Mul" and n.name.startswith(f"/{layer}/") for n in nodes)
        return node("Mul", [x, const(f"{layer}.scale{k or ''}", factor)], layer)

    def activation(out, op, order=slice(None)):  # order: of a conv's output channels
        act = getattr(op, "activation", "linear")
        if act.startswith("leaky_relu:"):  # nn.LeakyReLU(slope)
            return node("LeakyRelu", [out], op.name, alpha=float(act.split(":", 1)[1]))
        if act in ("prelu", "bounded_prelu"):  # nn.PReLU(channels): a slope (C, 1, 1)
            slope = op.activation_slope[order].reshape(-1, 1, 1)
            y = node("PRelu", [out, const(f"{op.name}.slope", slope)], op.name)
            if act == "prelu":
                return y
            zero = op.activation_zero[order].reshape(-1, 1, 1)  # ES 2.0's calibrated storage
            y = node("Add", [y, const(f"{op.name}.zero", zero)], op.name)
            return clip(y, op.name, 0.0, 1.0)
        if act not in ACTIVATIONS:
            raise ValueError(f"layer {op.name!r}: activation {act!r} has no PyTorch layer; "
                             f"written: {', '.join(ACTIVATIONS)}")
        if act == "bounded_relu":
            return clip(out, op.name, 0.0, 1.0)
        if act == "sigmoid_like":
            y = node("Add", [scaled(out, op.name, 0.05),
                             clip(scaled(out, op.name, 0.1), op.name, -0.05, 0.05)], op.name)
            y = node("Add", [y, clip(scaled(out, op.name, 0.05), op.name, -0.125, 0.125)],
                     op.name)
            y = node("Add", [y, const(f"{op.name}.half", 0.5)], op.name)
            return clip(y, op.name, 0.0, 1.0)
        if act in ("sigmoid", "relu"):
            return node(act.capitalize(), [out], op.name)
        return out

    def resize(x, scale, how, layer):  # F.interpolate(scale_factor=scale, mode=how)
        roi = const(f"{layer}.roi", np.zeros(0))
        scales = const(f"{layer}.scales", [1, 1, scale, scale])
        modes = ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                  "nearest_mode": "floor"} if how == "nearest" else
                 {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"})
        return node("Resize", [x, roi, scales], layer, **modes)

    def anchored(y, op):  # torch.clamp(up(luma) + s * (y - 0.5), 0, 1)
        y = node("Sub", [y, const(f"{op.name}.half", 0.5)], op.name)
        y = node("Mul", [const(f"{op.name}.anchor_scale", op.anchor_scale), y], op.name)
        y = node("Add", [resize("input", op.block, op.anchor, op.name), y], op.name)
        return clip(y, op.name, 0.0, 1.0)

    for op in graph.ops:
        x = onnx_of.get(op.input)
        if isinstance(op, Conv):
            op.zero_padded("ONNX's Conv")
            if op.input_order is not None:  # x[:, index]: channel i reads channel index[i]
                index = [4 * p + c for p in op.input_order for c in range(4)]
                x = node("Gather", [x, const(f"{op.name}.shuffle", index, np.int64)], op.name,
                         axis=1)
            kernel, bias, order = op.kernel, op.bias, slice(None)
            if op.name in crd:  # the PixelShuffle's order: channel c * b**2 + s from s * C + c
                b = crd[op.name]
                c = op.cout // b ** 2
                order = [s * c + cc for cc in range(c) for s in range(b ** 2)]
                kernel, bias = kernel[..., order], bias[order]
            w = const(f"{op.name}.weight", np.transpose(kernel, (3, 2, 0, 1)))
            y = node("Conv", [x, w, const(f"{op.name}.bias", bias)], op.name,
                     kernel_shape=[op.size] * 2, strides=[op.stride] * 2, pads=pads(op),
                     group=op.groups, dilations=[1, 1])
            if op.residual:
                y = node("Add", [y, onnx_of[op.residual]], op.name)
            onnx_of[op.name] = activation(y, op, order)
        elif isinstance(op, DepthToSpace):
            if pixel_shuffle == "reshape":
                n, c, b = 1, shapes[op.input][2] // op.block ** 2, op.block
                h, w = shapes[op.input][:2]
                y = node("Reshape", [x, const(f"{op.name}.shape6", [n, c, b, b, h, w],
                                              np.int64)], op.name)
                y = node("Transpose", [y], op.name, perm=[0, 1, 4, 2, 5, 3])
                onnx_of[op.name] = node("Reshape", [y, const(f"{op.name}.shape4",
                                                             [n, c, h * b, w * b], np.int64)],
                                        op.name)
            else:
                onnx_of[op.name] = node("DepthToSpace", [x], op.name, blocksize=op.block,
                                        mode=pixel_shuffle.upper())
            if op.anchor:
                onnx_of[op.name] = anchored(onnx_of[op.name], op)
        elif isinstance(op, Pool):
            kind = "MaxPool" if op.kind == "max" else "AveragePool"
            extra = {} if op.kind == "max" else {"count_include_pad": 0}
            onnx_of[op.name] = node(kind, [x], op.name, kernel_shape=[op.size] * 2,
                                    strides=[op.stride] * 2, pads=pads(op), **extra)
        elif isinstance(op, Upsample):
            onnx_of[op.name] = resize(x, op.scale, op.interpolation, op.name)
        elif isinstance(op, Add):
            onnx_of[op.name] = activation(node("Add", [x, onnx_of[op.other]], op.name), op)
        elif isinstance(op, Concat):
            onnx_of[op.name] = node("Concat", [onnx_of[t] for t in op.inputs], op.name, axis=1)
        elif isinstance(op, Dense):
            y = node("GlobalAveragePool", [x], op.name) if op.pool else x
            y = node("Flatten", [y], op.name, axis=1)
            y = node("Gemm", [y, const(f"{op.name}.weight", op.weight.T),
                              const(f"{op.name}.bias", op.bias)], op.name, transB=1)
            onnx_of[op.name] = node("Softmax", [y], op.name, axis=1) if op.softmax else y
        else:
            raise ValueError(f"layer {op.name!r}: no ONNX pattern for {type(op).__name__}")
    channels = 1 if graph.input.rgb else graph.input.channels
    h, w = size or ("height", "width")
    out = graph.op(graph.output)
    out_shape = (["batch", out.cout] if isinstance(out, Dense) else ["batch", None, None, None])
    nodes.append(helper.make_node("Identity", [onnx_of[graph.output]], ["output"],
                                  name="/output/Identity"))
    model = helper.make_model(
        helper.make_graph(nodes, graph.name,
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                         ["batch", channels, h, w])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, out_shape)],
                          inits),
        opset_imports=[helper.make_opsetid("", opset)], producer_name="workbench")
    laws = {getattr(op, "anchor_storage", "linear") for op in graph.ops} - {"linear"}
    if laws:  # an 8-bit storage law is not ONNX's: metadata that from_onnx reads back
        helper.set_model_props(model, {ANCHOR_STORAGE: laws.pop()})
    onnx.checker.check_model(model)
    return model
