"""Keras models written as the ONNX graph ``torch.onnx.export`` writes for the equivalent
PyTorch module in eval mode (issue 43, item 4): how tools/zoo_train.py writes the zoo's nets
(``workbench.nets.zoo``; models/cifar10_resnet.onnx and cifar10_mobilenet_v2.onnx), so that
the ONNX front end is judged on exports as they come.

Outside the package, and not through the IR's writer (``workbench.ir.to_onnx``): that writes
an IR graph, already lowered (ReLU6 folded into a scale and Clip(0, 1), residuals fused into
their convs), while an exporter writes each layer as it is (ReLU6 a Clip(0, 6)).

Layouts.  ONNX: input ``"input"`` (1, 3, size, size) float32 (channel-first), output
``"output"``; the same numbers as the Keras model on channel-last images
(``onnx(x.transpose(0, 3, 1, 2)) == keras(x)``).  A ZeroPadding2D before a ``"valid"``
conv (the zoo's ``padding="torch"``) folds into the Conv's ``pads``, as the exporter writes
``padding=1``; a ``"same"`` conv at stride 2 has asymmetric pads (valid ONNX, but not a
pattern torch writes).

Imported as ``torch_style_onnx`` by the scripts beside it (their folder is ``sys.path[0]``)
and as ``tools.torch_style_onnx`` by the tests (the project's root on ``sys.path``).
"""
from __future__ import annotations

import keras
import numpy as np

OPSET = 17


def _graph(model):
    """``[(layer, input layer names)]`` in topological order, and how many layers read
    each layer's output; refuses a layer called more than once (shared weights)."""
    order, readers = [], {}
    for layer in model.layers:
        nodes = layer._inbound_nodes
        if len(nodes) != 1:
            raise ValueError(f"layer {layer.name!r} is called {len(nodes)} times; "
                             "to_onnx_torch_style takes layers called once")
        sources = [t._keras_history.operation.name for t in nodes[0].input_tensors]
        order.append((layer, sources))
        for name in sources:
            readers[name] = readers.get(name, 0) + 1
    return order, readers


def _out_hw(size, kernel, stride, padding):
    """Output size and (before, after) padding of one spatial axis, Keras' rules."""
    if padding == "valid":
        return (size - kernel) // stride + 1, (0, 0)
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, (total // 2, total - total // 2)


TAKEN = ("InputLayer", "ZeroPadding2D (before a conv)", "Conv2D (any groups; activation "
         "linear, relu or relu6)", "DepthwiseConv2D", "BatchNormalization (folded into the "
         "conv before it)", "ReLU (max_value None or m, no slope or threshold)",
         "Activation (linear, relu, relu6, softmax)", "Add", "GlobalAveragePooling2D",
         "Dense (activation linear or softmax)", "Softmax", "Dropout")


def to_onnx_torch_style(model, path=None, opset=OPSET):
    """Write ``model`` as the ONNX graph ``torch.onnx.export(module.eval(), x, path,
    opset_version=17, input_names=["input"], output_names=["output"])`` writes for the
    equivalent PyTorch module; returns the ``onnx.ModelProto`` (and saves it to ``path``
    when given).

    Input ``"input"`` (1, 3, H, W) float32, NCHW, fixed size; output ``"output"``.  Nodes
    named ``/{keras layer}/{Op}`` as the exporter names them after the module path.
    BatchNorm after a conv is folded into the conv's weights and bias (the exporter's
    eval-mode constant folding); a BatchNorm elsewhere is a BatchNormalization node.
    ``ReLU(max_value=6)`` / relu6 is ``Clip`` with min 0 and max 6 as inputs; ReLU ``Relu``;
    weights OIHW, a depthwise conv ``group=C``; ZeroPadding2D folds into the next conv's
    ``pads`` (``nn.Conv2d(padding=p)``); GlobalAveragePooling2D is ``GlobalAveragePool`` +
    ``Flatten`` (``torch.flatten(x, 1)``); Dense ``Gemm`` with ``transB=1``; softmax
    ``Softmax(axis=1)``.  A layer it does not take raises a one-line ValueError naming it
    (see :data:`TAKEN`)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if len(model.inputs) != 1 or len(model.outputs) != 1:
        raise ValueError(f"model {model.name!r}: to_onnx_torch_style takes one input and "
                         "one output")
    _, height, width, channels = model.inputs[0].shape
    if height is None or width is None:
        raise ValueError(f"model {model.name!r}: the input size must be fixed "
                         "(keras.Input((height, width, 3)))")
    order, readers = _graph(model)
    nodes, weights = [], {}           # weights: initialiser name -> numpy array (mutable)
    tensor = {}                       # keras layer name -> (onnx name, rank, pads or None)
    conv_of = {}                      # onnx tensor -> its Conv node (for BN folding)
    shape = {}                        # keras layer name -> (H, W) of 4-D outputs

    def const(name, value):
        weights[name] = np.asarray(value, np.float32)
        return name

    def node(kind, inputs, layer, **attrs):
        name = f"/{layer}/{kind}"
        name += "".join(f"_{k}" for k in [sum(n.name.startswith(name) for n in nodes)] if k)
        out = f"{name}_output_0"
        nodes.append(helper.make_node(kind, inputs, [out], name=name, **attrs))
        return out

    def activate(x, act, layer):
        if act == "linear":
            return x
        if act == "relu":
            return node("Relu", [x], layer.name)
        if act == "relu6":
            return node("Clip", [x, const(f"{layer.name}.min", 0.0),
                                 const(f"{layer.name}.max", 6.0)], layer.name)
        if act == "softmax":
            return node("Softmax", [x], layer.name, axis=1)
        raise ValueError(f"layer {layer.name!r}: activation {act!r} is not taken "
                         "(linear, relu, relu6, softmax)")

    def refuse(layer, why=""):
        raise ValueError(f"layer {layer.name!r} ({type(layer).__name__}) is not taken by "
                         f"to_onnx_torch_style{why}; taken: {'; '.join(TAKEN)}")

    for layer, sources in order:
        kind = type(layer).__name__
        ins = [tensor[s] for s in sources]
        act = getattr(getattr(layer, "activation", None), "__name__", "linear")
        if kind not in ("Conv2D", "DepthwiseConv2D") and any(p is not None for *_, p in ins):
            refuse(layer, ": it reads a ZeroPadding2D, which folds only into a conv")
        if isinstance(layer, keras.layers.InputLayer):
            tensor[layer.name] = ("input", 4, None)
            shape[layer.name] = (height, width)
        elif isinstance(layer, keras.layers.ZeroPadding2D):
            (top, bottom), (left, right) = layer.padding
            x, rank, pads = ins[0]
            h, w = shape[sources[0]]
            tensor[layer.name] = (x, rank, [top, left, bottom, right])
            shape[layer.name] = (h + top + bottom, w + left + right)
        elif kind in ("Conv2D", "DepthwiseConv2D"):
            if tuple(layer.dilation_rate) != (1, 1) or layer.data_format != "channels_last":
                refuse(layer, ": dilation or channels_first")
            x, rank, pads = ins[0]
            h, w = shape[sources[0]]                               # padded size, if padded
            if pads is not None and layer.padding != "valid":
                refuse(layer, ": ZeroPadding2D before a 'same' conv")
            (oh, ph), (ow, pw) = [_out_hw(n, k, s, layer.padding) for n, k, s in
                                  zip((h, w), layer.kernel_size, layer.strides)]
            pads = pads or [ph[0], pw[0], ph[1], pw[1]]
            kernel = np.asarray(layer.kernel)                      # HWIO or HW C M
            if kind == "DepthwiseConv2D":
                k_h, k_w, c, m = kernel.shape
                oihw = kernel.transpose(2, 3, 0, 1).reshape(c * m, 1, k_h, k_w)
                group = c
            else:
                oihw = kernel.transpose(3, 2, 0, 1)
                group = layer.groups
            inputs = [x, const(f"{layer.name}.weight", oihw)]
            if layer.use_bias:
                inputs.append(const(f"{layer.name}.bias", layer.bias))
            y = node("Conv", inputs, layer.name, dilations=[1, 1], group=group,
                     kernel_shape=list(layer.kernel_size), pads=pads,
                     strides=list(layer.strides))
            conv_of[y] = (nodes[-1], layer)
            shape[layer.name] = (oh, ow)
            if act != "linear":
                conv_of.pop(y)
                y = activate(y, act, layer)
            tensor[layer.name] = (y, 4, None)
        elif isinstance(layer, keras.layers.BatchNormalization):
            x, rank, _ = ins[0]
            if layer.axis not in (-1, [-1], rank - 1, [rank - 1]):
                refuse(layer, f": axis {layer.axis}, not the channels")
            n = layer.input.shape[-1]
            gamma = np.asarray(layer.gamma) if layer.scale else np.ones(n, np.float32)
            beta = np.asarray(layer.beta) if layer.center else np.zeros(n, np.float32)
            mean, var = np.asarray(layer.moving_mean), np.asarray(layer.moving_variance)
            scale = gamma / np.sqrt(var + layer.epsilon)
            if x in conv_of and readers.get(sources[0]) == 1:
                conv, conv_layer = conv_of.pop(x)
                w_name = conv.input[1]
                weights[w_name] = weights[w_name] * scale[:, None, None, None]
                if len(conv.input) < 3:
                    conv.input.append(const(f"{conv_layer.name}.bias", np.zeros(n)))
                b_name = conv.input[2]
                weights[b_name] = (weights[b_name] - mean) * scale + beta
                tensor[layer.name] = (x, rank, None)
            else:
                stats = [const(f"{layer.name}.{k}", v) for k, v in
                         (("weight", gamma), ("bias", beta), ("running_mean", mean),
                          ("running_var", var))]
                tensor[layer.name] = (node("BatchNormalization", [x, *stats], layer.name,
                                           epsilon=float(layer.epsilon)), rank, None)
            shape[layer.name] = shape.get(sources[0])
        elif isinstance(layer, keras.layers.ReLU):
            if layer.negative_slope or layer.threshold:
                refuse(layer, ": a negative_slope or a threshold")
            x, rank, _ = ins[0]
            if layer.max_value is None:
                y = node("Relu", [x], layer.name)
            else:
                y = node("Clip", [x, const(f"{layer.name}.min", 0.0),
                                  const(f"{layer.name}.max", float(layer.max_value))],
                         layer.name)
            tensor[layer.name], shape[layer.name] = (y, rank, None), shape.get(sources[0])
        elif isinstance(layer, keras.layers.Activation):
            x, rank, _ = ins[0]
            if act == "softmax" and rank != 2:
                refuse(layer, ": a softmax over a 4-D tensor")
            tensor[layer.name] = (activate(x, act, layer), rank, None)
            shape[layer.name] = shape.get(sources[0])
        elif isinstance(layer, keras.layers.Add):
            y = ins[0][0]
            for x, _, _ in ins[1:]:
                y = node("Add", [y, x], layer.name)
            tensor[layer.name], shape[layer.name] = (y, ins[0][1], None), shape[sources[0]]
        elif isinstance(layer, keras.layers.GlobalAveragePooling2D):
            if layer.keepdims:
                refuse(layer, ": keepdims=True")
            y = node("GlobalAveragePool", [ins[0][0]], layer.name)
            tensor[layer.name] = (node("Flatten", [y], layer.name, axis=1), 2, None)
        elif isinstance(layer, keras.layers.Dense):
            x, rank, _ = ins[0]
            if rank != 2:
                refuse(layer, ": a Dense on a 4-D tensor")
            inputs = [x, const(f"{layer.name}.weight", np.asarray(layer.kernel).T)]
            if layer.use_bias:
                inputs.append(const(f"{layer.name}.bias", layer.bias))
            y = node("Gemm", inputs, layer.name, alpha=1.0, beta=1.0, transB=1)
            tensor[layer.name] = (activate(y, act, layer), 2, None)
        elif isinstance(layer, keras.layers.Softmax):
            x, rank, _ = ins[0]
            if rank != 2 or layer.axis not in (-1, 1):
                refuse(layer, ": a softmax other than over the classes of (N, classes)")
            tensor[layer.name] = (node("Softmax", [x], layer.name, axis=1), 2, None)
        elif isinstance(layer, keras.layers.Dropout):
            tensor[layer.name], shape[layer.name] = ins[0], shape.get(sources[0])
        else:
            refuse(layer)

    out_layer = model.outputs[0]._keras_history.operation.name
    out, rank, pads = tensor[out_layer]
    if pads is not None:
        refuse(model.get_layer(out_layer), ": padding at the output")
    # the exporter's output name: rename the last node's output
    for n in nodes:
        for i, name in enumerate(n.output):
            if name == out:
                n.output[i] = "output"
        for i, name in enumerate(n.input):
            if name == out:
                n.input[i] = "output"
    out_shape = [1, model.outputs[0].shape[-1]] if rank == 2 else \
        [1, model.outputs[0].shape[-1], *shape[out_layer]]
    used = {i for n in nodes for i in n.input}
    graph = helper.make_graph(
        nodes, model.name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                       [1, channels, height, width])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()
         if k in used])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="workbench tools/torch_style_onnx.py "
                              "(torch.onnx.export's patterns)")
    proto.ir_version = 8  # what torch 2.x writes at opset 17
    onnx.checker.check_model(proto)
    if path is not None:
        onnx.save(proto, str(path))
    return proto
