"""Ordinary exports through the ONNX front end (issue 56): opset 7-10 files (converted),
flatten + Gemm heads over small maps (LeNet, the PyTorch CIFAR tutorial, MNIST), a global
pooling without a Gemm (SqueezeNet), tf2onnx's NHWC input, non-square and dilated kernels, a
zero Pad before a Conv, ceil_mode pooling: each computes what ONNX Runtime computes (the
emulator, which the GPU matches byte for byte), or is refused in one line naming the node."""
import numpy as np
import onnx
import pytest
from PIL import Image

from tests.ir import onnx_graphs
from tests.ir.onnx_graphs import Builder
from workbench import es2, ir
from workbench.es2 import mediump
from workbench.es2.emulate import REAL, tensors
from workbench.ir.lowering import LoweringError
from workbench.ir.onnx.reader import OpsetConverted
from workbench.nets.onnx_model import OnnxModel


def images(count, size, channels=3, seed=0):
    """Smooth gradients plus noise on 8-bit levels, in [0, 1] (as photos are)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size] / np.float32(size)
    out = []
    for _ in range(count):
        f = rng.uniform(0.5, 3, (channels, 2))
        smooth = [0.5 + 0.4 * np.sin(2 * np.pi * (a * x + b * y) + rng.uniform(0, 6))
                  for a, b in f]
        image = np.stack(smooth, -1) + rng.normal(0, 0.08, (size, size, channels))
        out.append((np.round(np.clip(image, 0, 1) * 255) / 255).astype(np.float32))
    return out


def agreement(model, size, channels=3, count=6, **compile_args):
    """The compiled net (calibrated on 4 other images), ONNX Runtime's outputs and the
    emulator's, on ``count`` images."""
    net = es2.compile(model, calibration=images(4, size, channels, seed=1), **compile_args)
    xs = images(count, size, channels, seed=2)
    theirs = np.stack([np.ravel(model(x[None])) for x in xs])
    ours = np.stack([np.ravel(net.emulate(x)) for x in xs])
    return net, theirs, ours


def linear(b, x, cin, cout, matmul=False, logits=False):
    """nn.Linear at PyTorch's default init (weights of deviation 1 / sqrt(3 fan_in)); the
    ``logits`` 8x wider (a trained classifier's spread, not near-ties)."""
    return b.linear(x, cin, cout, matmul, gain=3 ** -0.5 * (8 if logits else 1))


def in_float(model, size, channels=3, **lower_args):
    """The IR's output in float32 without storage (the lowering alone; a Dense computed
    here), and ONNX Runtime's, on one image."""
    graph = ir.from_onnx(model, **lower_args)
    x = images(1, size, channels, seed=5)[0]
    *head, last = graph.ops
    if not isinstance(last, ir.Dense):
        return tensors(graph, x, REAL)[graph.output], model(x[None])[0]
    v = tensors(graph, x, REAL, head)[last.input]
    logits = v[..., :last.cin].mean((0, 1)) @ last.weight + last.bias
    return ir.softmax(logits) if last.softmax else logits, np.ravel(model(x[None]))


def assert_lowered_exactly(model, size, channels=3, **lower_args):
    ours, theirs = in_float(model, size, channels, **lower_args)
    np.testing.assert_allclose(np.ravel(ours), np.ravel(theirs), rtol=1e-4, atol=1e-5)


def assert_same_classes(theirs, ours, tolerance):
    """The same top-1 on every image; logits within ``tolerance`` of their range."""
    np.testing.assert_array_equal(ours.argmax(1), theirs.argmax(1))
    assert np.abs(ours - theirs).max() <= tolerance * np.ptp(theirs)


# --- the nets, as torch.onnx.export (or tf2onnx) writes them ------------------------------

def lenet(opset=17, matmul=False, view=False, seed=0, dropout=False):
    """The PyTorch CIFAR tutorial's net: 5x5 conv (3 -> 6) + ReLU, 2x2 max pooling, 5x5 conv
    (6 -> 16) + ReLU, 2x2 max pooling, flattened (16x5x5: Flatten, or x.view(N, -1)), Linear
    400 -> 120 + ReLU (+ Dropout, as old exports keep it), 120 -> 84 + ReLU, 84 -> 10 (Gemm,
    or MatMul + Add)."""
    b = Builder(opset, seed)
    x = b.node("Relu", [b.conv("input", 3, 6, 5, pad=0)])
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("Relu", [b.conv(x, 6, 16, 5, pad=0)])
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.view_flat(x) if view else b.node("Flatten", [x], axis=1)
    x = b.node("Relu", [linear(b, x, 400, 120, matmul)], layer="fc1")
    x = b.node("Dropout", [x], ratio=0.5) if dropout else x
    x = b.node("Relu", [linear(b, x, 120, 84, matmul)], layer="fc2")
    return b.model(3, (32, 32), linear(b, x, 84, 10, matmul), "lenet", rank=2)


def mnist(opset=17, softmax=True):
    """A small MNIST net, 1x28x28: 3x3 conv (1 -> 8) + ReLU, 2x2 max pooling, 3x3 conv
    (8 -> 16) + ReLU, 2x2 max pooling, Flatten (16x7x7), one Linear 784 -> 10, LogSoftmax
    left out (a Softmax, or the logits)."""
    b = Builder(opset, 3)
    x = b.node("Relu", [b.conv("input", 1, 8, 3)])
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("Relu", [b.conv(x, 8, 16, 3)])
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = linear(b, b.node("Flatten", [x], axis=1), 784, 10, logits=True)
    return b.model(1, (28, 28), b.node("Softmax", [x], axis=1) if softmax else x, "mnist",
                   rank=2)


def squeezenet(opset=17, softmax=True):
    """SqueezeNet 1.1's shape at 30x30: 3x3 stride-2 conv + ReLU, 3x3 stride-2 max pooling
    with ceil_mode=1 (14 -> 7, where floor gives 6), a fire module (1x1 squeeze + ReLU; 1x1
    and 3x3 expands + ReLU, concatenated), 1x1 conv to 10 classes + ReLU, GlobalAveragePool,
    Flatten, Softmax (or the pooled 1x10x1x1 itself): no Gemm."""
    b = Builder(opset, 5)
    x = b.node("Relu", [b.conv("input", 3, 16, 3, stride=2, pad=0)])
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    s = b.node("Relu", [b.conv(x, 16, 8, 1)])
    x = b.node("Concat", [b.node("Relu", [b.conv(s, 8, 16, 1)]),
                          b.node("Relu", [b.conv(s, 8, 16, 3)])], axis=1)
    x = b.node("GlobalAveragePool", [b.node("Relu", [b.conv(x, 32, 10, 1)])])
    if not softmax:
        return b.model(3, (30, 30), x, "squeezenet")
    out = b.node("Softmax", [b.node("Flatten", [x], axis=1)], axis=1)
    return b.model(3, (30, 30), out, "squeezenet", rank=2)


def nhwc(model, rank=4):
    """``model`` with its input N, H, W, C (tf2onnx's), its output of rank 4 too."""
    (_, c, h, w), out = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim], \
        model.graph.output[0]
    model.graph.input[0].CopyFrom(onnx.helper.make_tensor_value_info(
        "input", onnx.TensorProto.FLOAT, ["unk__0", h, w, c]))
    if rank == 4:
        out.CopyFrom(onnx.helper.make_tensor_value_info(out.name, onnx.TensorProto.FLOAT,
                                                        ["unk__0", h, w, 3]))
    return model


def tf2onnx_net(opset=13):
    """A Keras convnet as tf2onnx writes it: an NHWC input, Transpose to NCHW, 3x3 convs +
    ReLU, max pooling, Transpose back to NHWC, Reshape(-1, H*W*C) (Keras' Flatten),
    MatMul + Add (Dense), Softmax, Identity."""
    b = Builder(opset, 7)
    x = b.node("Transpose", ["input"], perm=[0, 3, 1, 2])
    x = b.node("Relu", [b.conv(x, 3, 8, 3)])
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("Relu", [b.conv(x, 8, 16, 3)])
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("Transpose", [x], perm=[0, 2, 3, 1])
    x = b.node("Reshape", [x, b.const([-1, 8 * 8 * 16], np.int64)])
    x = b.node("Softmax", [linear(b, x, 8 * 8 * 16, 10, matmul=True, logits=True)], axis=1)
    return nhwc(b.model(3, (32, 32), b.node("Identity", [x]), "tf2onnx", rank=2), rank=2)


def tf2onnx_image_net(opset=13):
    """An image net as tf2onnx writes it: NHWC in, 3x3 conv + Sigmoid, 3x3 conv to RGB +
    Sigmoid, Transpose to NHWC out."""
    b = Builder(opset, 8)
    x = b.node("Transpose", ["input"], perm=[0, 3, 1, 2])
    x = b.node("Sigmoid", [b.conv(b.node("Sigmoid", [b.conv(x, 3, 8, 3)]), 8, 3, 3)])
    out = b.node("Transpose", [x], perm=[0, 2, 3, 1])
    return nhwc(b.model(3, (16, 16), out, "tf2onnx_image"))


def conv_of(b, x, cin, cout, kernel, pads, dilation=(1, 1), stride=1):
    """A Conv of a ``kernel`` (kh, kw) shaped weight with explicit pads."""
    fan_in = cin * kernel[0] * kernel[1]
    w = b.rng.normal(0, 0.8 / np.sqrt(fan_in), (cout, cin, *kernel))
    return b.node("Conv", [x, b.const(w), b.const(b.rng.uniform(-0.1, 0.1, cout))],
                  kernel_shape=list(kernel), pads=list(pads), dilations=list(dilation),
                  strides=[stride] * 2)


def kernels_net(opset=17):
    """An image net at 32x32 of Inception's and DeepLab's convs: 1x3 and 3x1 (pads 0, 1 and
    1, 0), 3x2, a 3x3 of dilation 2, nn.ZeroPad2d(1) (a Pad node) before a 3x3 without
    padding, ZeroPad2d((0, 1, 0, 1)) before a stride-2 3x3; Sigmoid and Hardtanh(0, 1)
    between, Sigmoid to RGB: 16x16x3."""
    b = Builder(opset, 11)
    x = b.node("Sigmoid", [conv_of(b, "input", 3, 8, (1, 3), (0, 1, 0, 1))])
    x = b.clip01(conv_of(b, x, 8, 8, (3, 1), (1, 0, 1, 0)))
    x = b.node("Sigmoid", [conv_of(b, x, 8, 8, (3, 2), (1, 0, 1, 1))])
    x = b.node("Sigmoid", [conv_of(b, x, 8, 8, (3, 3), (2, 2, 2, 2), dilation=(2, 2))])
    x = b.node("Pad", [x, b.const([0, 0, 1, 1, 0, 0, 1, 1], np.int64)], mode="constant")
    x = b.clip01(conv_of(b, x, 8, 8, (3, 3), (0, 0, 0, 0)))
    x = b.node("Pad", [x, b.const([0, 0, 0, 0, 0, 0, 1, 1], np.int64), b.const(0.0)])
    out = b.node("Sigmoid", [conv_of(b, x, 8, 3, (3, 3), (0, 0, 0, 0), stride=2)])
    return b.model(3, (32, 32), out, "kernels")


# --- accepted -----------------------------------------------------------------------------

@pytest.mark.parametrize("variant", [{}, {"matmul": True, "view": True}])
def test_lenet_flatten_and_gemm_head(variant):
    model = OnnxModel(lenet(**variant))
    assert_lowered_exactly(model, 32)
    net, theirs, ours = agreement(model, 32)
    kinds = [type(op).__name__ for op in ir.from_onnx(model).ops]
    assert kinds == ["Conv", "Pool", "Conv", "Pool", "Conv", "Conv", "Dense"]
    assert ir.from_onnx(model).ops[4].size == 5  # fc1: a conv over the whole 5x5 map
    assert_same_classes(theirs, ours, 0.06)  # the hidden Gemms' split sums (see the report)


def test_an_opset_9_file_is_converted_and_says_so():
    with pytest.warns(OpsetConverted, match="'lenet': converted from opset 9 to 13"):
        model = OnnxModel(lenet(opset=9, dropout=True))
        assert_lowered_exactly(model, 32)
        net, theirs, ours = agreement(model, 32, count=3)
    assert_same_classes(theirs, ours, 0.06)


def test_mnist_one_gemm_over_the_map():
    """The logits over a 16x7x7 map: a 7x7 conv (stored at a calibrated scale) read by a
    Dense of the identity."""
    model = OnnxModel(mnist())
    assert_lowered_exactly(model, 28, 1, luma_input=False)
    net, theirs, ours = agreement(model, 28, channels=1, luma_input=False)
    conv, dense = net.graph.ops[-2:]
    assert isinstance(conv, ir.Conv) and conv.size == 7 and conv.padding == "valid"
    assert isinstance(dense, ir.Dense) and dense.softmax
    np.testing.assert_array_equal(ours.argmax(1), theirs.argmax(1))
    assert np.abs(ours - theirs).max() <= 0.02  # probabilities


def test_a_one_channel_classifier_is_a_grey_image_and_bundles(tmp_path):
    """One input channel: a grey image for a classifier (logits out), the luma of an RGB
    image only for an image net; the bundle command deploys the MNIST net as it is."""
    from workbench.run.cli import main

    assert not ir.from_onnx(OnnxModel(mnist())).input.rgb
    assert ir.from_onnx(OnnxModel(onnx_graphs.sr_net(17))).input.rgb
    onnx.save(mnist(), tmp_path / "mnist.onnx")
    pictures = tmp_path / "digits"
    pictures.mkdir()
    for i, x in enumerate(images(10, 28, 1, seed=3)):
        Image.fromarray((x[..., 0] * 255).round().astype(np.uint8)).save(pictures / f"{i}.png")
    assert main(["bundle", "--model", str(tmp_path / "mnist.onnx"), "--out",
                 str(tmp_path / "b"), "--calibration", str(pictures)]) == 0
    assert (tmp_path / "b" / "run.py").is_file()


@pytest.mark.parametrize("softmax", [True, False])
def test_squeezenet_pooled_output_without_gemm(softmax):
    model = OnnxModel(squeezenet(softmax=softmax))
    assert_lowered_exactly(model, 30)
    graph = ir.from_onnx(model)
    assert graph.ops[1].padding == (0, 0, 1, 1)  # ceil_mode=1: one more window
    net, theirs, ours = agreement(model, 30)
    dense = net.graph.ops[-1]
    assert isinstance(dense, ir.Dense) and dense.pool and dense.softmax == softmax
    assert_same_classes(theirs, ours, 0.04)


def test_tf2onnx_nhwc_input_and_flatten():
    model = OnnxModel(tf2onnx_net())
    assert model.nhwc
    assert_lowered_exactly(model, 32)
    net, theirs, ours = agreement(model, 32)
    assert net.graph.input.channels == 3 and net.graph.input_size == (32, 32)
    np.testing.assert_array_equal(ours.argmax(1), theirs.argmax(1))
    assert np.abs(ours - theirs).max() <= 0.02
    model = OnnxModel(tf2onnx_image_net())
    assert_lowered_exactly(model, 16)
    x = images(1, 16, seed=3)[0]
    assert model(x[None])[0].shape == (16, 16, 3)
    assert mediump.psnr(model(x[None])[0], es2.compile(model).emulate(x)) >= 40


def test_non_square_dilated_kernels_and_zero_pads():
    model = OnnxModel(kernels_net())
    assert_lowered_exactly(model, 32)
    graph = ir.from_onnx(model)
    assert [op.size for op in graph.ops] == [3, 3, 3, 5, 3, 3]
    assert graph.ops[0].padding == "same" and graph.ops[2].padding == (1, 0, 1, 2)
    assert graph.ops[4].padding == "same" and graph.ops[5].padding == (0, 0, 1, 1)
    xs = images(3, 32, seed=2)
    net = es2.compile(model)
    assert min(mediump.psnr(model(x[None])[0], net.emulate(x)) for x in xs) >= 40


@pytest.mark.parametrize("kind", ["MaxPool", "AveragePool"])
def test_ceil_mode_pooling(kind):
    """ceil_mode=1 where it adds a window (15 -> 8 at stride 2; the padded taps left out, as
    ONNX Runtime leaves them out) and where it does not (16 -> 8)."""
    for size in (15, 16):
        b = Builder(17, 2)
        x = b.node("Sigmoid", [b.conv("input", 3, 8, 3)])
        extra = {"count_include_pad": 1} if kind == "AveragePool" else {}
        x = b.node(kind, [x], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1, **extra)
        model = OnnxModel(b.model(3, (size, size), b.clip01(b.conv(x, 8, 3, 1)), "pool"))
        assert_lowered_exactly(model, size)
        net = es2.compile(model)
        assert net.graph.shapes((size, size))[net.graph.output][:2] == (8, 8)
        x = images(1, size, seed=4)[0]
        assert mediump.psnr(model(x[None])[0], net.emulate(x)) >= 40


# --- refused, in one line naming the node -------------------------------------------------

def refusal(proto) -> str:
    with pytest.raises(LoweringError) as err:
        ir.from_onnx(proto)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_what_is_refused_is_named(monkeypatch):
    old = lenet(opset=9)
    old.opset_import[0].version = 6
    assert "opset 6; supported: 7 to" in refusal(old)

    def fails(model, target):
        raise RuntimeError("No Adapter For Upsample\n(the converter's trace)")

    monkeypatch.setattr(onnx.version_converter, "convert_version", fails)
    assert "'lenet': opset 9 could not be converted to 13 (RuntimeError: No Adapter For " \
        "Upsample)" in refusal(lenet(opset=9))
    monkeypatch.undo()

    def padded(**attrs):
        b = Builder(17)
        x = b.node("Pad", ["input", b.const([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
                           *([b.const(0.5)] if attrs.pop("value", 0) else [])],
                   layer="pad", **attrs)
        return refusal(b.model(3, (16, 16), b.clip01(b.conv(x, 3, 4, 3, pad=0)), "pad"))

    assert "/pad/Pad" in padded(mode="reflect") and "mode 'reflect'" in padded(mode="reflect")
    assert "pads with 0.5" in padded(value=1)
    b = Builder(17)  # a Pad read by a pooling
    x = b.node("Pad", ["input", b.const([0, 0, 1, 1, 0, 0, 1, 1], np.int64)])
    out = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2], layer="pool")
    assert "/pool/MaxPool" in refusal(b.model(3, (16, 16), out, "pool"))
    b = Builder(17)  # ceil mode and count_include_pad over padding: not the GPU's average
    out = b.node("AveragePool", ["input"], kernel_shape=[3, 3], strides=[2, 2],
                 pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1)
    assert "count_include_pad=1" in refusal(b.model(3, (16, 16), out, "avg"))
    b = Builder(17)  # a hidden Gemm + ReLU as the output: stored at a calibrated scale
    x = b.node("Relu", [b.linear(b.node("Flatten", ["input"]), 3 * 8 * 8, 4)], layer="out")
    proto = b.model(3, (8, 8), x, "relu_out", rank=2)
    with pytest.raises(ValueError, match=r"^layer 'gemm_Gemm_1'[^\n]*$"):
        es2.compile(proto, calibration=images(2, 8))
    b = Builder(17)
    out = b.node("Transpose", [b.conv("input", 3, 4, 3)], perm=[0, 2, 1, 3], layer="t")
    assert "/t/Transpose" in refusal(b.model(3, (8, 8), out, "t"))


def test_tanh_is_stored_as_its_half_and_read_back():
    """Conv + Tanh (values in [-1, 1]) stored as sigmoid(2 z) = (tanh z + 1) / 2, its reader
    (a padded 3x3 conv: its padding the stored value of a real 0, 0.5) folding 2 x - 1 back:
    the output within two 8-bit levels of ONNX Runtime's on every image."""
    b = Builder(17, 12)
    x = b.node("Tanh", [conv_of(b, "input", 3, 8, (3, 3), (1, 1, 1, 1))])
    out = b.node("Sigmoid", [conv_of(b, x, 8, 3, (3, 3), (1, 1, 1, 1))])
    model = OnnxModel(b.model(3, (16, 16), out, "tanh"))
    assert_lowered_exactly(model, 16)
    net = es2.compile(model)
    assert net.graph.ops[1].pad_value is not None
    for x in images(4, 16, seed=4):
        assert np.abs(net.emulate(x) - model(x[None])[0]).max() <= 2 / 255
