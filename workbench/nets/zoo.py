"""Two nets of the ecosystem, small, for 32x32 CIFAR-10: a MobileNetV2-style net and a
ResNet-style net, as Keras models, and :func:`to_onnx_torch_style`, which writes such a Keras
model as the ONNX graph ``torch.onnx.export`` writes for the equivalent PyTorch module in
eval mode (issue 43, item 4).

Layouts.  Keras models: input RGB in [0, 1], (N, size, size, 3) float32 (channel-last);
output class probabilities (N, classes) (a ``Softmax`` after the ``logits`` Dense).  ONNX:
input ``"input"`` (1, 3, size, size) float32 (channel-first), output ``"output"``
(1, classes); the same numbers (``onnx(x.transpose(0, 3, 1, 2)) == keras(x)``).

Padding.  PyTorch pads a 3x3 conv by 1 on every side (``padding=1``); Keras' ``"same"`` at
stride 2 on an even size pads only the bottom and right, which no ``nn.Conv2d`` does.  With
``padding="torch"`` (the default) the nets pad the stride-2 3x3 layers with
``ZeroPadding2D(1)`` and a ``"valid"`` conv, as ``keras.applications.MobileNetV2`` does, so
that Keras and the PyTorch module compute the same thing; :func:`to_onnx_torch_style` folds
the padding into the Conv's ``pads``, as the exporter writes ``padding=1``.  With
``padding="keras"`` every 3x3 layer is ``"same"`` (the Keras lowering of the ES 2.0 back end
takes no ZeroPadding2D); the ONNX Conv then has asymmetric pads (valid ONNX, but not a
pattern torch writes).

:func:`train_briefly` trains either net on the CIFAR-10 training images for a few hundred
steps; :func:`multiply_adds` counts a net's multiply-adds an image.
"""
from __future__ import annotations

import time

import keras
import numpy as np

OPSET = 17


def _divisible(value, divisor=8):
    """MobileNet's channel rounding: to a multiple of ``divisor``, never down by > 10 %."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _conv(x, filters, kernel, stride, padding, name, depthwise=False):
    """A bias-free conv (or depthwise conv) with PyTorch's or Keras' padding."""
    pad = "same"
    if kernel > 1 and stride > 1 and padding == "torch":
        x = keras.layers.ZeroPadding2D(kernel // 2, name=f"{name}_pad")(x)
        pad = "valid"
    if depthwise:
        return keras.layers.DepthwiseConv2D(kernel, stride, padding=pad, use_bias=False,
                                            name=name)(x)
    return keras.layers.Conv2D(filters, kernel, stride, padding=pad, use_bias=False,
                               name=name)(x)


def _bn(x, name):
    return keras.layers.BatchNormalization(epsilon=1e-5, momentum=0.9, name=f"{name}_bn")(x)


def _check_padding(padding):
    if padding not in ("torch", "keras"):
        raise ValueError(f"padding={padding!r}: 'torch' (ZeroPadding2D + valid at stride 2) "
                         "or 'keras' ('same' everywhere)")


# (expansion t, channels c before `width`, blocks n, stride s of the first), as MobileNetV2's
# table, cut to 7 blocks and 3 stride-2 stages for 32x32 images
MOBILENET_V2_BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 2, 2), (6, 64, 1, 2),
                       (6, 96, 1, 1))


def mobilenet_v2_style(input_size=32, classes=10, width=0.35, seed=0, *, stem=32, head=128,
                       stem_stride=1, blocks=MOBILENET_V2_BLOCKS, padding="torch",
                       name="mobilenet_v2_style"):
    """A MobileNetV2-style net (Sandler et al. 2018) for small images.

    Stem: 3x3 conv to ``_divisible(stem * width)`` channels (stride ``stem_stride``), BN,
    ReLU6.  Then inverted residual blocks per ``blocks`` row ``(t, c, n, s)``: ``n`` blocks of
    ``_divisible(c * width)`` output channels, the first at stride ``s``; each block is a 1x1
    expansion conv to ``t`` x its input channels + BN + ReLU6 (no expansion where t = 1, as in
    MobileNetV2), a 3x3 depthwise conv + BN + ReLU6, a 1x1 linear projection + BN (no
    activation), and where stride is 1 and the channels match, ``Add`` of the block's input
    (a linear residual: no activation after it).  Then a 1x1 conv to ``head`` channels + BN +
    ReLU6, global average pooling, ``Dense(classes)`` (``logits``) and ``Softmax``.

    With the defaults (width 0.35): channels 16 | 8 | 8, 8 | 16, 16 | 24 | 32 | 128 at
    32, 32, 16, 8, 4, 4, 4 pixels, 7 blocks, 2 residual adds.  Layer names ``stem``,
    ``b{i}_expand`` / ``b{i}_dw`` / ``b{i}_project`` (+ ``_bn``, ``_relu6``, ``_pad``),
    ``b{i}_add``, ``head``, ``pool``, ``logits``, ``softmax``; blocks count from 1.
    ``padding``: see the module's docstring.  ``seed`` seeds the initial weights."""
    _check_padding(padding)
    keras.utils.set_random_seed(seed)

    def relu6(x, label):
        return keras.layers.ReLU(max_value=6.0, name=f"{label}_relu6")(x)

    x = inputs = keras.Input((input_size, input_size, 3), name="rgb")
    channels = _divisible(stem * width)
    x = relu6(_bn(_conv(x, channels, 3, stem_stride, padding, "stem"), "stem"), "stem")
    i = 0
    for t, c, n, s in blocks:
        out = _divisible(c * width)
        for k in range(n):
            i += 1
            label, stride, y = f"b{i}", s if k == 0 else 1, x
            if t != 1:
                y = _conv(y, channels * t, 1, 1, padding, f"{label}_expand")
                y = relu6(_bn(y, f"{label}_expand"), f"{label}_expand")
            y = _conv(y, None, 3, stride, padding, f"{label}_dw", depthwise=True)
            y = relu6(_bn(y, f"{label}_dw"), f"{label}_dw")
            y = _bn(_conv(y, out, 1, 1, padding, f"{label}_project"), f"{label}_project")
            if stride == 1 and channels == out:
                y = keras.layers.Add(name=f"{label}_add")([y, x])
            x, channels = y, out
    x = relu6(_bn(_conv(x, head, 1, 1, padding, "head"), "head"), "head")
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    x = keras.layers.Dense(classes, name="logits")(x)
    outputs = keras.layers.Softmax(name="softmax")(x)
    return keras.Model(inputs, outputs, name=name)


def resnet_style(input_size=32, classes=10, widths=(32, 64), blocks=1, seed=0, *,
                 padding="torch", name="resnet_style"):
    """A ResNet-style net of basic blocks (He et al. 2016, the CIFAR variant: no max pool).

    Stem: 3x3 conv to ``widths[0]`` + BN + ReLU.  Then per stage ``s`` (``widths[s]``
    channels) ``blocks`` basic blocks: 3x3 conv + BN + ReLU, 3x3 conv + BN, ``Add`` with the
    shortcut, ReLU.  Every stage but the first starts at stride 2 with a 1x1 stride-2 conv +
    BN as its shortcut (torchvision's ``downsample``); other shortcuts are the identity.
    Then global average pooling, ``Dense(classes)`` (``logits``) and ``Softmax``.

    With the defaults: 3x3 convs over 32 channels at 32x32 and over 64 at 16x16, 2 blocks.
    Layer names ``stem``, ``s{stage}b{block}_conv1`` / ``_conv2`` / ``_down`` (+ ``_bn``,
    ``_relu``, ``_pad``), ``s{stage}b{block}_add`` / ``_relu``, ``pool``, ``logits``,
    ``softmax``; stages and blocks count from 1.  ``padding``: see the module's docstring."""
    _check_padding(padding)
    keras.utils.set_random_seed(seed)

    def relu(x, label):
        return keras.layers.ReLU(name=f"{label}_relu")(x)

    x = inputs = keras.Input((input_size, input_size, 3), name="rgb")
    x = relu(_bn(_conv(x, widths[0], 3, 1, padding, "stem"), "stem"), "stem")
    channels = widths[0]
    for s, width in enumerate(widths, start=1):
        for b in range(1, blocks + 1):
            label = f"s{s}b{b}"
            stride = 2 if s > 1 and b == 1 else 1
            y = relu(_bn(_conv(x, width, 3, stride, padding, f"{label}_conv1"),
                         f"{label}_conv1"), f"{label}_conv1")
            y = _bn(_conv(y, width, 3, 1, padding, f"{label}_conv2"), f"{label}_conv2")
            shortcut = x
            if stride != 1 or channels != width:
                shortcut = _bn(_conv(x, width, 1, stride, padding, f"{label}_down"),
                               f"{label}_down")
            x = relu(keras.layers.Add(name=f"{label}_add")([y, shortcut]), label)
            channels = width
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    x = keras.layers.Dense(classes, name="logits")(x)
    outputs = keras.layers.Softmax(name="softmax")(x)
    return keras.Model(inputs, outputs, name=name)


# --- the Keras graph, walked --------------------------------------------------------------
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


def multiply_adds(model) -> int:
    """Multiply-adds an image of the model's convs, depthwise convs and dense layers (batch
    norm, activations, adds and pooling not counted: BN folds into the convs)."""
    total = 0
    for layer in model.layers:
        if isinstance(layer, (keras.layers.Conv2D, keras.layers.DepthwiseConv2D)):
            _, h, w, c_out = layer.output.shape
            k_h, k_w = layer.kernel_size
            c_in = layer.input.shape[-1]
            if isinstance(layer, keras.layers.DepthwiseConv2D):
                total += h * w * k_h * k_w * c_out
            else:
                total += h * w * k_h * k_w * c_in // layer.groups * c_out
        elif isinstance(layer, keras.layers.Dense):
            total += int(np.prod(layer.kernel.shape))
    return int(total)


# --- ONNX in PyTorch's export patterns -----------------------------------------------------
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
                              producer_name="workbench.nets.zoo (torch.onnx.export's patterns)")
    proto.ir_version = 8  # what torch 2.x writes at opset 17
    onnx.checker.check_model(proto)
    if path is not None:
        onnx.save(proto, str(path))
    return proto


# --- brief training on CIFAR-10 ------------------------------------------------------------
def cifar10_test(per_class=50, root=None):
    """``(images, labels)``: the first ``per_class`` test images of each CIFAR-10 class (500
    by default), float32 (N, 32, 32, 3) in [0, 1].  Without CIFAR-10 in the data folder, a
    one-line FileNotFoundError naming what is missing (see
    :func:`workbench.data.datasets.classification_root`)."""
    from workbench.data import datasets

    folder = datasets.classification_root("cifar10", root)
    images, labels, _ = datasets.classification_arrays(folder, "test", 32, limit=per_class)
    return images, labels


def train_briefly(model, steps=400, batch=64, seed=0, learning_rate=3e-3, calibrate=True,
                  limit=None, test_per_class=50, root=None, verbose=0):
    """Train ``model`` (a net of this module: probabilities out, a ``logits`` layer before
    them) on CIFAR-10's training images for ``steps`` steps of ``batch`` (Adam at
    ``learning_rate`` with cosine decay to 1 %, no augmentation; ``limit``: the first
    ``limit`` training images of each class, default all), then (``calibrate``) reset
    its BatchNorm statistics to those of 500 training images in inference mode
    (:func:`workbench.nets.classify.calibrate_batchnorm`: the moving averages of a run this
    short still lag the weights).  Returns ``(model, result)``: ``result`` has ``top1`` (on
    :func:`cifar10_test`, 500 images), ``top1_before_calibration``, ``steps``, ``seconds``
    (the ``fit`` call: tracing and the shuffle buffer's first fill included) and ``loss``
    (the run's mean training loss).  Without CIFAR-10, a one-line
    FileNotFoundError naming what is missing."""
    from workbench.data import datasets
    from workbench.nets import classify

    folder = datasets.classification_root("cifar10", root)
    test_images, test_labels = cifar10_test(test_per_class, root)
    keras.utils.set_random_seed(seed)
    data, _ = datasets.image_folder(folder, "train", 32, batch=batch, limit=limit,
                                    shuffle=True, repeat=True, seed=seed)
    logits = keras.Model(model.input, model.get_layer("logits").output)
    rate = keras.optimizers.schedules.CosineDecay(learning_rate, steps, alpha=0.01)
    classify.compile_classifier(logits, "adam", rate)
    start = time.perf_counter()
    history = logits.fit(data.take(steps), epochs=1, shuffle=False, verbose=verbose)
    seconds = time.perf_counter() - start

    def top1():
        predicted = model.predict(test_images, batch_size=250, verbose=0).argmax(1)
        return float(np.mean(predicted == test_labels))

    before = top1()
    if calibrate:
        calibration = np.concatenate([x for x, _ in data.take(-(-500 // batch))])[:500]
        classify.calibrate_batchnorm(model, calibration)
    return model, {"top1": top1() if calibrate else before, "top1_before_calibration": before,
                   "steps": steps, "batch": batch, "seconds": round(seconds, 1),
                   "loss": round(float(history.history["loss"][-1]), 4)}
