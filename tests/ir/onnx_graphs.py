"""ONNX graphs written by hand in the node patterns PyTorch's exporter writes (NCHW, names
``/layer/Op``), at a chosen opset: the inputs of the ONNX front end's tests, independent of
the workbench's own writer (:mod:`workbench.ir.to_onnx`).  Random weights, seeded; biases
put the activations mid-range so that 8-bit storage is exercised, not saturated."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NEWEST = onnx.defs.onnx_opset_version()
OPSETS = (11, 13, 17, NEWEST)


class Builder:
    def __init__(self, opset, seed=0, gain=1.0):
        self.opset, self.nodes, self.inits = opset, [], []
        self.rng, self.gain = np.random.default_rng(seed), gain  # gain: of conv weights

    def const(self, value, dtype=np.float32):
        name = f"onnx::c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def node(self, op, inputs, layer=None, outputs=1, **attrs):
        name = f"/{layer or op.lower()}/{op}_{len(self.nodes)}"
        outs = [f"{name}_output_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs[0] if outputs == 1 else outs

    # layers, as torch.nn exports them ----------------------------------------------------
    def conv(self, x, cin, cout, k, stride=1, pad=None, group=1, bias=True, layer=None):
        pad = (k - 1) // 2 if pad is None else pad
        fan_in = cin // group * k * k
        w = self.rng.normal(0, 0.6 * self.gain / np.sqrt(fan_in), (cout, cin // group, k, k))
        inputs = [x, self.const(w)] + ([self.const(self.rng.uniform(0.1, 0.4, cout))]
                                       if bias else [])
        return self.node("Conv", inputs, layer, kernel_shape=[k, k], strides=[stride] * 2,
                         pads=[pad] * 4 if np.isscalar(pad) else list(pad), group=group,
                         dilations=[1, 1])

    def batchnorm(self, x, c):
        stats = [self.rng.uniform(0.8, 1.2, c), self.rng.uniform(0.1, 0.3, c),
                 self.rng.uniform(-0.1, 0.1, c), self.rng.uniform(0.5, 1.5, c)]
        return self.node("BatchNormalization", [x, *map(self.const, stats)], epsilon=1e-5)

    def clip01(self, x):
        return self.node("Clip", [x, self.const(0.0), self.const(1.0)])

    def resize(self, x, mode):
        modes = ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                  "nearest_mode": "floor"} if mode == "nearest" else
                 {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"})
        roi = self.const(np.zeros(0)) if self.opset < 13 else ""
        return self.node("Resize", [x, roi, self.const([1, 1, 2, 2])], **modes)

    def mean_hw(self, x):
        """``x.mean((2, 3))``: ReduceMean with axes as attribute (< 18) or input."""
        if self.opset < 18:
            return self.node("ReduceMean", [x], axes=[2, 3], keepdims=0)
        return self.node("ReduceMean", [x, self.const([2, 3], np.int64)], keepdims=0)

    def view_flat(self, x):
        """``x.view(x.size(0), -1)``: Shape, Gather, Unsqueeze, Concat, Reshape."""
        n = self.node("Gather", [self.node("Shape", [x]), self.const(0, np.int64)], axis=0)
        n = (self.node("Unsqueeze", [n], axes=[0]) if self.opset < 13 else
             self.node("Unsqueeze", [n, self.const([0], np.int64)]))
        shape = self.node("Concat", [n, self.const([-1], np.int64)], axis=0)
        return self.node("Reshape", [x, shape])

    def linear(self, x, cin, cout, matmul=False, gain=3.0):
        w = self.rng.normal(0, gain / np.sqrt(cin), (cout, cin))
        b = self.rng.normal(0, 0.1, cout)
        if matmul:
            return self.node("Add", [self.node("MatMul", [x, self.const(w.T)]), self.const(b)])
        return self.node("Gemm", [x, self.const(w), self.const(b)], transB=1)

    def model(self, channels, size, out, name, rank=4):
        h, w = size or ("height", "width")
        graph = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                             ["batch", channels, h, w])],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, [None] * rank)],
            self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        onnx.checker.check_model(model)
        return model


def sr_net(opset, shuffle="node", size=None, seed=0):
    """A luma x2 SR net: 5x5 conv + BatchNorm + Hardtanh(0, 1); depthwise 3x3 + ReLU; 1x1
    with a residual add + Hardtanh; 3x3 to 4 sub-pixels + Sigmoid; nn.PixelShuffle(2) as
    DepthToSpace CRD (``shuffle="node"``) or Reshape-Transpose-Reshape (needs ``size``)."""
    b = Builder(opset, seed)
    x = b.clip01(b.batchnorm(b.conv("input", 1, 16, 5), 16))
    y = b.node("Relu", [b.conv(x, 16, 16, 3, group=16)])
    y = b.clip01(b.node("Add", [b.conv(y, 16, 16, 1), x]))
    y = b.node("Sigmoid", [b.conv(y, 16, 4, 3)])
    if shuffle == "node":
        out = b.node("DepthToSpace", [y], blocksize=2, mode="CRD")
    else:
        h, w = size
        y = b.node("Reshape", [y, b.const([1, 1, 2, 2, h, w], np.int64)])
        y = b.node("Transpose", [y], perm=[0, 1, 4, 2, 5, 3])
        out = b.node("Reshape", [y, b.const([1, 1, 2 * h, 2 * w], np.int64)])
    return b.model(1, size, out, "sr_net")


def unet(opset, seed=0):
    """An RGB image net at 16x16: a stride-2 3x3 conv with PyTorch's symmetric padding +
    Hardsigmoid; 3x3 max pooling at stride 2, padding 1; nearest x2 back; concatenated with
    the conv; 1x1 + Sigmoid; 2x2 average pooling; bilinear x2; added to the 1x1's output +
    Hardtanh; 1x1 to RGB + Hardtanh."""
    b = Builder(opset, seed)
    a = b.node("HardSigmoid", [b.conv("input", 3, 8, 3, stride=2)], alpha=1 / 6, beta=0.5)
    p = b.node("MaxPool", [a], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cat = b.node("Concat", [a, b.resize(p, "nearest")], axis=1)
    s = b.node("Sigmoid", [b.conv(cat, 16, 8, 1)])
    avg = b.node("AveragePool", [s], kernel_shape=[2, 2], strides=[2, 2])
    y = b.clip01(b.node("Add", [b.resize(avg, "linear"), s]))
    return b.model(3, (16, 16), b.clip01(b.conv(y, 8, 3, 1)), "unet")


def classifier(opset, head="gemm", flatten="flatten", pooling="global", act="clip", seed=0,
               gain=1.0):
    """A 16x16 RGB classifier of 5 classes: 3x3 conv + BatchNorm + activation (``"clip"``
    Hardtanh(0, 1), ``"relu"`` ReLU); 2x2 max pooling; 3x3 conv + activation; 3x3 average
    pooling (stride 1, padding 1, count_include_pad=False); pooling (``"global"``
    GlobalAveragePool, ``"mean"`` x.mean((2, 3))), flattening (``"flatten"`` Flatten,
    ``"view"`` x.view(x.size(0), -1)), the logits (``"gemm"`` Linear, ``"matmul"`` MatMul +
    Add), softmax.  ``gain`` scales the conv weights."""
    b = Builder(opset, seed, gain)
    activate = b.clip01 if act == "clip" else (lambda t: b.node("Relu", [t]))
    x = activate(b.batchnorm(b.conv("input", 3, 8, 3, bias=False), 8))
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = activate(b.conv(x, 8, 16, 3))
    x = b.node("AveragePool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
               count_include_pad=0)
    if pooling == "global":
        x = b.node("GlobalAveragePool", [x])
        x = b.node("Flatten", [x], axis=1) if flatten == "flatten" else b.view_flat(x)
    else:
        x = b.mean_hw(x)
    x = b.linear(x, 16, 5, matmul=head == "matmul")
    return b.model(3, (16, 16), b.node("Softmax", [x], axis=1), "classifier", rank=2)


def espcn(opset=10, size=16, seed=0, scale=3):
    """The PyTorch super-resolution tutorial's ESPCN (x3 on luma), as ``torch.onnx.export``
    writes it at opset 10: 5x5 conv 1 -> 64 + ReLU, 3x3 64 -> 64 + ReLU, 3x3 64 -> 32 + ReLU,
    a linear 3x3 32 -> 9, nn.PixelShuffle(3) as Reshape (batch 1 fixed) - Transpose -
    Reshape; the input's batch symbolic.  Weights seeded so that the output is the input's
    nearest upsampling plus a trained net's kind of small corrections (mostly in [0, 1])."""
    b = Builder(opset, seed)

    def conv(x, cin, cout, k, noise, bias):
        w = b.rng.normal(0, noise / np.sqrt(cin * k * k), (cout, cin, k, k))
        w[slice(None) if cout == scale ** 2 else 0, 0, k // 2, k // 2] += 1.0  # the input on
        return b.node("Conv", [x, b.const(w), b.const(b.rng.uniform(-bias, bias, cout))],
                      kernel_shape=[k, k], strides=[1, 1], pads=[k // 2] * 4,
                      dilations=[1, 1], group=1)

    x = b.node("Relu", [conv("input", 1, 64, 5, 0.5, 0.05)])
    x = b.node("Relu", [conv(x, 64, 64, 3, 0.05, 0.05)])
    x = b.node("Relu", [conv(x, 64, 32, 3, 0.05, 0.05)])
    y = conv(x, 32, scale ** 2, 3, 0.05, 0.02)
    y = b.node("Reshape", [y, b.const([1, 1, scale, scale, size, size], np.int64)])
    y = b.node("Transpose", [y], perm=[0, 1, 4, 2, 5, 3])
    out = b.node("Reshape", [y, b.const([1, 1, scale * size, scale * size], np.int64)])
    return b.model(1, (size, size), out, "espcn")
