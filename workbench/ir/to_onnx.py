"""An IR graph written as ONNX, in the node patterns PyTorch's exporter writes (NCHW).

For nets made in Keras that should enter as a PyTorch user's would (the tests of the ONNX
front end, ``notebooks/onnx_deploy.ipynb``): Conv (+ Add for a residual) + its activation in
the form its registry entry writes (:attr:`workbench.nets.activations.Activation.onnx`):
Clip(0, 1), Relu, LeakyRelu, PRelu (a slope ``(C, 1, 1)``) or Sigmoid (the sigmoid-like as
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

from workbench.ir.graph import Graph, conv_pads, explicit_pads
from workbench.ir.onnx import ANCHOR_STORAGE
from workbench.ir.ops import Add, Concat, Conv, Dense, DepthToSpace, Pool, Upsample
from workbench.ir.registry import Table
from workbench.nets import activations

# The ONNX writer's op table: IR op type -> writer(w, op, x) -> the ONNX name of the op's
# output; ``w`` the _Writer of the model, ``x`` the ONNX name of the op's input.
WRITERS = Table("the ONNX writer (workbench.ir.to_onnx)")


class _Writer:
    """The nodes and initializers of one model, and the PyTorch patterns the writers share."""

    def __init__(self, graph, size, pixel_shuffle):
        self.size, self.pixel_shuffle = size, pixel_shuffle
        self.shapes = graph.shapes(size or (64, 64))
        self.nodes, self.inits, self.onnx_of = [], [], {graph.input.name: "input"}
        self.crd = {op.input: op.block for op in graph.ops if isinstance(op, DepthToSpace)
                    and pixel_shuffle in ("crd", "reshape")}

    def const(self, name, value, dtype=np.float32):
        from onnx import numpy_helper
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def node(self, kind, inputs, layer, **attrs):  # PyTorch's names: /layer/Kind, /layer/Kind_1
        from onnx import helper
        name = f"/{layer}/{kind}"
        name += "".join(f"_{k}" for k in [sum(n.name.startswith(name) for n in self.nodes)]
                        if k)
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node(kind, inputs, [out], name=name, **attrs))
        return out

    def pads(self, op):
        if op.padding == "same":
            if self.size is None and op.stride != 1:
                raise ValueError(f"layer {op.name!r}: TensorFlow's 'same' padding at stride "
                                 f"{op.stride} depends on the input size: give input_size")
            hw = self.shapes[op.input][:2]
            top, left = conv_pads(hw, op.size, op.stride, "same")
            oh, ow = self.shapes[op.name][:2]
            bottom = (oh - 1) * op.stride + op.size - hw[0] - top
            right = (ow - 1) * op.stride + op.size - hw[1] - left
            return [top, left, max(bottom, 0), max(right, 0)]
        return list(explicit_pads(op.padding))

    def clip(self, x, layer, low, high):
        k = sum(n.op_type == "Clip" and n.name.startswith(f"/{layer}/") for n in self.nodes)
        return self.node("Clip", [x, self.const(f"{layer}.min{k or ''}", low),
                                  self.const(f"{layer}.max{k or ''}", high)], layer)

    def scaled(self, x, layer, factor):
        k = sum(n.op_type == "Mul" and n.name.startswith(f"/{layer}/") for n in self.nodes)
        return self.node("Mul", [x, self.const(f"{layer}.scale{k or ''}", factor)], layer)

    def activation(self, out, op, order=None):  # order: of a conv's output channels
        """``op``'s activation on ``out``: its registered ONNX form (``Activation.onnx``)."""
        act = activations.of(op, order) if op.activation else activations.get("linear")
        if act.onnx is None:
            kinds = sorted({n.split(":")[0] for n in activations.names("onnx")}
                           | {"leaky_relu", "prelu"})
            raise ValueError(f"layer {op.name!r}: activation {act.name!r} has no PyTorch layer; "
                             f"written: {', '.join(kinds)}")  # (leaky_relu, prelu: any slope)
        return act.onnx(self, out, op.name)

    def resize(self, x, scale, how, layer):  # F.interpolate(scale_factor=scale, mode=how)
        roi = self.const(f"{layer}.roi", np.zeros(0))
        scales = self.const(f"{layer}.scales", [1, 1, scale, scale])
        modes = ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                  "nearest_mode": "floor"} if how == "nearest" else
                 {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"})
        return self.node("Resize", [x, roi, scales], layer, **modes)

    def anchored(self, y, op):  # torch.clamp(up(luma) + s * (y - 0.5), 0, 1)
        y = self.node("Sub", [y, self.const(f"{op.name}.half", 0.5)], op.name)
        y = self.node("Mul", [self.const(f"{op.name}.anchor_scale", op.anchor_scale), y],
                      op.name)
        y = self.node("Add", [self.resize("input", op.block, op.anchor, op.name), y], op.name)
        return self.clip(y, op.name, 0.0, 1.0)


@WRITERS.add(Conv)
def _conv(w, op, x):
    op.zero_padded("ONNX's Conv")
    op.residual_as_stored("the ONNX writer")
    if op.input_order is not None:  # x[:, index]: channel i reads channel index[i]
        index = [4 * p + c for p in op.input_order for c in range(4)]
        x = w.node("Gather", [x, w.const(f"{op.name}.shuffle", index, np.int64)], op.name,
                   axis=1)
    kernel, bias, order = op.kernel, op.bias, slice(None)
    if op.name in w.crd:  # the PixelShuffle's order: channel c * b**2 + s from s * C + c
        b = w.crd[op.name]
        c = op.cout // b ** 2
        order = [s * c + cc for cc in range(c) for s in range(b ** 2)]
        kernel, bias = kernel[..., order], bias[order]
    weight = w.const(f"{op.name}.weight", np.transpose(kernel, (3, 2, 0, 1)))
    y = w.node("Conv", [x, weight, w.const(f"{op.name}.bias", bias)], op.name,
               kernel_shape=[op.size] * 2, strides=[op.stride] * 2, pads=w.pads(op),
               group=op.groups, dilations=[1, 1])
    if op.residual:
        y = w.node("Add", [y, w.onnx_of[op.residual]], op.name)
    return w.activation(y, op, order)


@WRITERS.add(DepthToSpace)
def _depth_to_space(w, op, x):
    if w.pixel_shuffle == "reshape":
        n, c, b = 1, w.shapes[op.input][2] // op.block ** 2, op.block
        h, width = w.shapes[op.input][:2]
        y = w.node("Reshape", [x, w.const(f"{op.name}.shape6", [n, c, b, b, h, width],
                                          np.int64)], op.name)
        y = w.node("Transpose", [y], op.name, perm=[0, 1, 4, 2, 5, 3])
        y = w.node("Reshape", [y, w.const(f"{op.name}.shape4", [n, c, h * b, width * b],
                                          np.int64)], op.name)
    else:
        y = w.node("DepthToSpace", [x], op.name, blocksize=op.block,
                   mode=w.pixel_shuffle.upper())
    return w.anchored(y, op) if op.anchor else y


@WRITERS.add(Pool)
def _pool(w, op, x):
    kind = "MaxPool" if op.kind == "max" else "AveragePool"
    extra = {} if op.kind == "max" else {"count_include_pad": 0}
    return w.node(kind, [x], op.name, kernel_shape=[op.size] * 2, strides=[op.stride] * 2,
                  pads=w.pads(op), **extra)


@WRITERS.add(Upsample)
def _upsample(w, op, x):
    return w.resize(x, op.scale, op.interpolation, op.name)


@WRITERS.add(Add)
def _add(w, op, x):
    return w.activation(w.node("Add", [x, w.onnx_of[op.other]], op.name), op)


@WRITERS.add(Concat)
def _concat(w, op, x):
    return w.node("Concat", [w.onnx_of[t] for t in op.inputs], op.name, axis=1)


@WRITERS.add(Dense)
def _dense(w, op, x):
    y = w.node("GlobalAveragePool", [x], op.name) if op.pool else x
    y = w.node("Flatten", [y], op.name, axis=1)
    y = w.node("Gemm", [y, w.const(f"{op.name}.weight", op.weight.T),
                        w.const(f"{op.name}.bias", op.bias)], op.name, transB=1)
    return w.node("Softmax", [y], op.name, axis=1) if op.softmax else y


def to_onnx(graph: Graph, opset=17, pixel_shuffle="crd", input_size=None):
    """``graph`` as an ``onnx.ModelProto`` of ``opset``.  ``pixel_shuffle``: how a
    depth-to-space is written: ``"crd"`` (``nn.PixelShuffle``'s DepthToSpace), ``"dcr"``
    (DepthToSpace, TensorFlow's order) or ``"reshape"`` (PixelShuffle's Reshape-Transpose-
    Reshape, which needs a fixed size).  ``input_size`` ``(height, width)`` fixes the input's
    size (default the graph's; else dynamic ``height`` and ``width``).  Each activation is
    written in its registered form (:attr:`workbench.nets.activations.Activation.onnx`); one
    without is refused (:class:`ValueError`)."""
    import onnx
    from onnx import TensorProto, helper

    size = tuple(input_size or graph.input_size or ()) or None
    if pixel_shuffle == "reshape" and size is None:
        raise ValueError("pixel_shuffle='reshape' writes constant shapes: give input_size")
    writer = _Writer(graph, size, pixel_shuffle)
    nodes, inits, onnx_of = writer.nodes, writer.inits, writer.onnx_of
    for op in graph.ops:
        onnx_of[op.name] = WRITERS.of(op)(writer, op, onnx_of.get(op.input))
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
    laws = {op.anchor_storage for op in graph.ops} - {"linear"}
    if laws:  # an 8-bit storage law is not ONNX's: metadata that from_onnx reads back
        helper.set_model_props(model, {ANCHOR_STORAGE: laws.pop()})
    onnx.checker.check_model(model)
    return model
