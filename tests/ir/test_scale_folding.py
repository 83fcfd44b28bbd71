"""ReLU6 / Clip(0, m) / Keras ReLU(max_value=m) and the input's normalisation folded at
lowering (issue 43, :class:`workbench.ir.lowering.Scales`): a layer that ends in Clip(0, m)
stores y / m, its readers multiply m back in, so a net of convs, BatchNorm, depthwise convs,
max and average pooling, a residual, a concatenation of tensors of different scales and
GAP + Dense computes what TensorFlow / ONNX Runtime compute (8-bit storage aside), and on the
GPU (llvmpipe) its bytes are the emulator's.  Where a reader cannot fold a scale, one line says
which layer and why."""
from dataclasses import dataclass, replace

import keras
import numpy as np
import pytest

from tests.ir import onnx_graphs
from tests.ir.onnx_graphs import NEWEST
from workbench import es2, es31, ir
from workbench.es2 import calibrate, emulate, onnx_check
from workbench.ir import lowering
from workbench.ir.ops import Op
from workbench.ir.to_onnx import to_onnx
from workbench.nets import activations
from workbench.nets.layers import DepthToSpace
from workbench.nets.onnx_model import OnnxModel

L = keras.layers
SIZE, CLASSES = 16, 5
IMAGES = (np.random.default_rng(4).integers(0, 256, (40, SIZE, SIZE, 3)) / 255).astype(np.float32)
STEP = 1 / 255


def _weights(model, seed=1):
    """Random weights that spread each ReLU6's values over [0, 6] (Keras' initial ones stay
    mostly below 1, where a missing scale would go unnoticed)."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        w = layer.get_weights()
        if isinstance(layer, (L.Conv2D, L.DepthwiseConv2D)):
            fan_in = np.prod(w[0].shape[:2 if isinstance(layer, L.DepthwiseConv2D) else 3])
            w[0] = rng.normal(0, 1.2 / np.sqrt(fan_in), w[0].shape)
            w[1:] = [rng.uniform(0.5, 2.0, v.shape) * (6 if v.size == 4 else 1) for v in w[1:]]
        elif isinstance(layer, L.BatchNormalization):  # gamma, beta, mean, variance
            w = [rng.uniform(*bounds, v.shape) for bounds, v in
                 zip([(0.8, 1.5), (0.2, 1.0), (-0.2, 0.2), (0.2, 1.0)], w)]
        elif isinstance(layer, L.Dense):
            w[0] = rng.normal(0, 0.4, w[0].shape)
        layer.set_weights(w)
    return model


def keras_net(form):
    """Rescaling x4; conv + BatchNorm + ReLU6 (``form``: ``"layer"`` ReLU(6.0), ``"activation"``
    Activation("relu6")); a conv with a residual of it + ReLU(6); depthwise 3x3 with
    ``activation="relu6"``; max pooling; average pooling + 1x1 conv + ReLU(max_value=3);
    the two concatenated (scales 6 and 3); conv + BatchNorm + ReLU(max_value=4); GAP, Dense,
    softmax."""
    keras.utils.set_random_seed(5)
    relu6 = L.ReLU(6.0, name="stem_act") if form == "layer" else L.Activation(
        "relu6", name="stem_act")
    x = inputs = keras.Input((SIZE, SIZE, 3))
    x = L.Rescaling(4.0)(x)
    a = relu6(L.BatchNormalization()(L.Conv2D(8, 3, padding="same", use_bias=False,
                                              name="stem")(x)))
    r = L.ReLU(6.0, name="res_act")(L.Add()([L.Conv2D(8, 3, padding="same", name="res")(a),
                                             a]))
    d = L.DepthwiseConv2D(3, padding="same", activation="relu6", name="dw")(r)
    p = L.MaxPooling2D(2)(d)
    q = L.Conv2D(4, 1, name="branch")(L.AveragePooling2D(3, 1, padding="same")(p))
    c = L.Concatenate()([p, L.ReLU(max_value=3.0, name="branch_act")(q)])
    y = L.BatchNormalization()(L.Conv2D(12, 3, padding="same", name="head")(c))
    y = L.ReLU(max_value=4.0, name="head_act")(y)
    logits = L.Dense(CLASSES)(L.GlobalAveragePooling2D()(y))
    return _weights(keras.Model(inputs, L.Softmax()(logits)))


# the IR op -> (the Keras layer whose output it stores, its scale m)
STORED = {"stem": ("stem_act", 6), "res": ("res_act", 6), "dw": ("dw", 6),
          "branch": ("branch_act", 3), "head": ("head_act", 4)}


@pytest.fixture(scope="module", params=["layer", "activation"])
def keras_relu6(request):
    model = keras_net(request.param)
    return model, es2.compile(model, scaled_bits=8)  # (the levels of 8-bit storage)


def test_relu6_is_stored_as_y_over_6_and_the_emulator_follows_tf(keras_relu6):
    model, net = keras_relu6
    kinds = [(type(op).__name__, getattr(op, "activation", None))
             for op in ir.from_keras(model).ops]
    assert kinds == [("Conv", "bounded_relu")] * 3 + [("Pool", None)] * 2 + [
        ("Conv", "bounded_relu"), ("Concat", None), ("Conv", "bounded_relu"), ("Dense", None)]
    assert net.graph.op("res").residual == "stem"  # the Add, fused: its parts both y / 6
    tf_values = dict(zip(STORED, keras.Model(model.inputs, [
        model.get_layer(layer).output for layer, _ in STORED.values()])(IMAGES[:8])))
    kept = [net.emulate(x, keep=True) for x in IMAGES[:8]]
    for op, (_, m) in STORED.items():
        tf = tf_values[op].numpy()
        assert tf.max() > 0.9 * m  # the range beyond [0, 1] is used
        ours = np.stack([k[op][..., :tf.shape[-1]] for k in kept]) * (STEP * m)
        error = np.abs(ours - tf).max() / (STEP * m)  # in steps of this layer's storage
        # the first layer reads the exact input: half a step; later ones add their inputs'
        assert error <= (0.5 + 1e-3 if op == "stem" else 6), (op, error)
    reference = model(IMAGES, training=False).numpy()
    emulated = np.stack([net.emulate(x) for x in IMAGES])
    assert np.mean(emulated.argmax(1) == reference.argmax(1)) >= 0.995
    np.testing.assert_allclose(emulated, reference, atol=0.01)


@pytest.mark.gl
def test_relu6_on_the_gpu_bytes_equal_the_emulator_and_top1_equals_tf(keras_relu6):
    model, net = keras_relu6
    for image in IMAGES[:4]:
        assert emulate.unpredicted(net.graph, net.run(image, keep=True)) == {}
    gpu = np.stack([net.run(image) for image in IMAGES])
    reference = model(IMAGES, training=False).numpy()
    assert np.mean(gpu.argmax(1) == reference.argmax(1)) >= 0.995
    np.testing.assert_allclose(gpu, reference, atol=0.01)


def _small(*layers, size=SIZE, channels=3):
    """A model of ``layers`` one after the other, seeded weights."""
    keras.utils.set_random_seed(3)
    x = inputs = keras.Input((size, size, channels))
    for layer in layers:
        x = layer(x)
    return keras.Model(inputs, x)


def test_relu_max_value_1_is_the_bounded_relu_with_no_scale():
    model = _small(L.Conv2D(4, 3, padding="same", name="c"), L.ReLU(max_value=1.0))
    op = ir.from_keras(model).ops[0]
    assert op.activation == "bounded_relu"
    np.testing.assert_array_equal(op.kernel, model.get_layer("c").get_weights()[0])
    np.testing.assert_allclose(es2.compile(model).emulate(IMAGES[0]),
                               model(IMAGES[:1]).numpy()[0], atol=0.5 * STEP + 1e-6)


def refusal(model) -> str:
    with pytest.raises(ir.LoweringError) as err:
        ir.from_model(model)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_an_unbounded_relu_is_left_for_the_back_end_to_calibrate():
    """Lowered as it is (``relu``): ES 2.0 stores it with a calibrated scale
    (tests/es2/test_calibrate.py), ES 3.1 in float."""
    for relu in (L.ReLU(name="r"), L.Activation("relu", name="r")):
        assert ir.from_model(_small(L.Conv2D(4, 3, name="c"), relu)).op("c").activation == "relu"
    assert ir.from_model(_small(L.Conv2D(4, 3, activation="relu", name="c"))).op(
        "c").activation == "relu"


def _two_branches(after_add):
    keras.utils.set_random_seed(3)
    x = keras.Input((SIZE, SIZE, 3))
    a, b = (L.Conv2D(4, 3, padding="same", activation="relu6", name=n)(x) for n in "ab")
    y = L.Add(name="sum")([a, b])
    y = L.Conv2D(3, 1, activation="sigmoid")(after_add(y) if after_add else y)
    return _weights(keras.Model(x, y))


def test_a_sum_of_scaled_tensors_is_refused_unless_clipped_at_their_scale():
    message = refusal(_two_branches(None))
    assert message.startswith("layer 'sum' (Add) reads 'a', stored as x / 6: a sum adds "
                              "stored values")
    assert "of its result, x (the clip after it)" in message
    # the same sum clipped at 6: (a / 6 + b / 6) clamped to [0, 1] is clip(a + b, 0, 6) / 6
    model = _two_branches(L.ReLU(6.0))
    net = es2.compile(model)
    assert net.graph.op("sum").activation == "bounded_relu"
    reference = model(IMAGES[:4]).numpy()
    assert np.abs(np.stack([net.emulate(x) for x in IMAGES[:4]]) - reference).max() < 3 * STEP


def test_a_scaled_output_or_depth_to_space_is_refused():
    message = refusal(_small(L.Conv2D(4, 3, padding="same", name="c"), L.ReLU(6.0)))
    assert message.startswith("layer 'c', the net's output, is stored as x / 6")
    message = refusal(_small(L.Conv2D(4, 3, padding="same", name="c", activation="relu6"),
                             DepthToSpace(2, name="d2s")))
    assert message.startswith("layer 'd2s' (DepthToSpace) reads 'c', stored as x / 6: a "
                              "depth-to-space has no weights")


@dataclass
class Negate(Op):
    """An IR op type of the test's own: no scale folding rule knows it."""
    name: str
    input: str

    def out_shape(self, shapes, hw):
        return shapes[self.input]


def test_an_op_type_without_a_folding_rule_is_refused_in_one_line():
    """Issue 59: the fold took an op it did not know for an Add (here: AttributeError,
    'other')."""
    graph = ir.Graph(ir.Input("image", 3), [Negate("neg", "image")], "neg")
    with pytest.raises(lowering.NoScaleRule) as err:
        lowering.Scales(3).fold(graph)
    assert str(err.value).startswith("layer 'neg': Negate has no scale folding rule; a gap in "
                                     "the workbench")
    assert "\n" not in str(err.value) and not isinstance(err.value, ValueError)  # not the user's


def test_an_activation_without_a_stored_form_is_refused_in_one_line(monkeypatch):
    """Issue 59: calibration stored an unbounded activation it did not know (a HardSwish's
    kind) as a clamped ReLU; it is refused before any image is run."""
    swish = replace(activations.get("relu"), name="fake_swish", output_range=(-0.4, np.inf),
                    stored_as=None)
    monkeypatch.setitem(activations._REGISTRY, swish.name, swish)
    conv = ir.Conv("c", "image", np.ones((1, 1, 3, 4), np.float32), np.zeros(4, np.float32),
                   activation="fake_swish")
    head = ir.Conv("head", "c", np.ones((1, 1, 4, 3), np.float32), np.zeros(3, np.float32),
                   activation="sigmoid")
    graph = ir.Graph(ir.Input("image", 3), [conv, head], "head")
    assert calibrate.scaled(graph) == {"c"}
    with pytest.raises(lowering.NoScaleRule) as err:
        calibrate.require_foldable(graph)
    assert str(err.value).startswith("layer 'c': activation 'fake_swish' has no form stored "
                                     "at a scale; a gap in the workbench")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("padding", ["valid", "same"])
def test_an_input_offset_folds_into_the_bias_and_the_padding(padding):
    """Rescaling(2, offset=-1) (the [-1, 1] input) and a Normalization: the offset goes into
    the bias; where the conv pads, its padding holds the stored value of a real 0
    (``pad_value``), so the border is TF's too (ES 2.0: emulator and GPU; ES 3.1, which pads
    with zeros only, refuses in one line)."""
    for normalise in (L.Rescaling(2.0, offset=-1.0),
                      L.Normalization(mean=[0.4, 0.5, 0.6], variance=[0.04, 0.09, 0.16])):
        model = _small(normalise, L.Conv2D(4, 3, padding=padding, name="c"),
                       L.Activation("sigmoid"))
        net = es2.compile(model)
        pad = net.graph.op("c").pad_value
        assert (pad is None) == (padding == "valid")
        if pad is not None:  # the image level that stands for a real 0
            mean, std = ((0.5, 0.5) if isinstance(normalise, L.Rescaling)
                         else (np.array([0.4, 0.5, 0.6]), np.array([0.2, 0.3, 0.4])))
            np.testing.assert_allclose(pad, np.broadcast_to(mean, 3), atol=1e-6)
            with pytest.raises(ValueError, match="layer 'c': its padding holds the stored "
                               "value of a real 0 .* the ES 3.1 back end pads with zeros"):
                es31.compile(model)
            with pytest.raises(ValueError, match="layer 'c': .* ONNX's Conv pads with zeros"):
                to_onnx(ir.from_model(model))
        ours = net.emulate(IMAGES[0])
        assert np.abs(ours - model(IMAGES[:1]).numpy()[0]).max() <= 0.5 * STEP + 1e-6
        np.testing.assert_array_equal(net.run(IMAGES[0], keep=True)["c"],
                                      net.emulate(IMAGES[0], keep=True)["c"])


# --- ONNX ----------------------------------------------------------------------------------

def onnx_net(opset, normalise=None, first_pad=1, head=4, seed=3):
    """As PyTorch exports nn.ReLU6 (Clip(0, 6)): the input normalised (``"div"``: x / 0.25 per
    channel, ``"mul"``: x * 4, ``"meanstd"``: (x - mean) / std, its padding then the mean),
    conv + BatchNorm + Clip(0, 6), depthwise 3x3 + Clip(0, 6), max pooling, 1x1 +
    Clip(0, 3), the two concatenated, 3x3 + Clip(0, ``head``), GlobalAveragePool, Linear,
    Softmax."""
    b = onnx_graphs.Builder(opset, seed=seed, gain=2.0)
    x = "input"
    if normalise == "div":
        x = b.node("Div", [x, b.const(np.full((1, 3, 1, 1), 0.25))])
    elif normalise == "mul":
        x = b.node("Mul", [b.const(4.0), x])
    elif normalise == "meanstd":
        x = b.node("Sub", [x, b.const(np.reshape([0.485, 0.456, 0.406], (1, 3, 1, 1)))])
        x = b.node("Div", [x, b.const(np.reshape([0.229, 0.224, 0.225], (1, 3, 1, 1)))])

    def clip(t, m):
        return b.node("Clip", [t, b.const(0.0), b.const(float(m))])
    a = clip(b.batchnorm(b.conv(x, 3, 8, 3, pad=first_pad, bias=False), 8), 6)
    d = clip(b.conv(a, 8, 8, 3, group=8), 6)
    p = b.node("MaxPool", [d], kernel_shape=[2, 2], strides=[2, 2])
    c = b.node("Concat", [p, clip(b.conv(p, 8, 4, 1), 3)], axis=1)
    y = b.node("Flatten", [b.node("GlobalAveragePool", [clip(b.conv(c, 12, 12, 3), head)])],
               axis=1)
    return b.model(3, (SIZE, SIZE), b.node("Softmax", [b.linear(y, 12, CLASSES)], axis=1),
                   "relu6_net", rank=2)


def _clip_outputs(model):
    return [n.output[0] for n in model.proto.graph.node if n.op_type == "Clip"]


@pytest.mark.parametrize("opset", [11, NEWEST])
@pytest.mark.parametrize("normalise,first_pad", [(None, 1), ("div", 1), ("mul", 1),
                                                 ("meanstd", 0), ("meanstd", 1)])
def test_onnx_clip_0_m_and_input_normalisation_follow_onnxruntime(opset, normalise, first_pad):
    model = OnnxModel(onnx_net(opset, normalise, first_pad))
    net = es2.compile(model)
    assert [getattr(op, "activation", None) for op in ir.from_onnx(model).ops] == [
        "bounded_relu", "bounded_relu", None, "bounded_relu", None, "bounded_relu", None]
    first = model.tensors(IMAGES[:8], _clip_outputs(model)[:1])[_clip_outputs(model)[0]]
    assert first.max() > 2  # the range beyond 1 is used
    stored = np.stack([emulate.tensors(net.graph, x)[net.graph.ops[0].name] for x in IMAGES[:8]])
    stored = stored * 6  # y / 6, as its reader fetches it (model.tensors: NHWC, as Keras)
    assert np.abs(stored - first).max() <= 6 * STEP * (0.5 + 1e-3)  # exact, but for rounding
    reference = model.predict(IMAGES)
    emulated = np.stack([net.emulate(x) for x in IMAGES])
    assert np.mean(emulated.argmax(1) == reference.argmax(1)) >= 0.995
    np.testing.assert_allclose(emulated, reference, atol=0.01)


def test_the_range_check_leaves_the_scaled_layers_out():
    """A scaled layer stores y / m, not the ONNX tensor: it leaves ``Graph.origin``, so the
    8-bit range check (``es2.load_net``'s) measures the others only and refuses nothing."""
    model = OnnxModel(onnx_net(NEWEST, "div", head=1))
    net = es2.compile(model)
    rows = onnx_check.require(model, net, list(IMAGES[:4]))
    assert [row["layer"] for row in rows] == [net.graph.ops[5].name]  # the Clip(0, 1) head
    assert rows[0]["clipped %"] < 1 and rows[0]["max"] <= 1


def test_the_range_check_of_a_net_of_scaled_layers_only():
    model = OnnxModel(onnx_net(NEWEST, "div"))
    assert onnx_check.require(model, es2.compile(model), list(IMAGES[:4])) == []


@pytest.mark.gl
def test_onnx_relu6_on_the_gpu_bytes_equal_the_emulator():
    model = OnnxModel(onnx_net(NEWEST, "div"))
    net = es2.compile(model)
    for image in IMAGES[:3]:
        assert emulate.unpredicted(net.graph, net.run(image, keep=True)) == {}
    gpu = np.stack([net.run(image) for image in IMAGES])
    reference = model.predict(IMAGES)
    assert np.mean(gpu.argmax(1) == reference.argmax(1)) >= 0.995


def onnx_refusal(proto) -> str:
    with pytest.raises(ir.LoweringError) as err:
        ir.from_onnx(proto)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_onnx_refusals_name_the_layer_and_why():
    b = onnx_graphs.Builder(NEWEST)
    six = [b.node("Clip", [b.conv("input", 3, 4, 3), b.const(0.0), b.const(6.0)])
           for _ in range(2)]
    out = b.node("Clip", [b.node("Add", six, layer="sum"), b.const(0.0), b.const(1.0)])
    message = onnx_refusal(b.model(3, None, out, "sum"))
    assert message.startswith("layer 'sum_Add_4' (Add) reads ") and "stored as x / 6: a sum " \
        "adds stored values" in message
    b = onnx_graphs.Builder(NEWEST)
    out = b.node("Clip", [b.conv("input", 3, 4, 3), b.const(-1.0), b.const(6.0)])
    assert "a clip from -1.0" in onnx_refusal(b.model(3, None, out, "clip"))
    b = onnx_graphs.Builder(NEWEST)
    out = b.node("Clip", [b.conv(b.node("Sub", [b.const(1.0), "input"]), 3, 4, 3),
                          b.const(0.0), b.const(1.0)])
    assert "a constant Sub the input" in onnx_refusal(b.model(3, None, out, "flip"))


@pytest.mark.gl
def test_relu6_on_es31_equals_tf(keras_relu6):
    """ES 3.1 keeps float32 tensors: y / 6 clamped to [0, 1], times 6 in the next layer, is
    TensorFlow's ReLU6 but for float rounding."""
    from workbench import es31

    model, _ = keras_relu6
    net = es31.compile(model)
    np.testing.assert_allclose(np.stack([net.run(x) for x in IMAGES[:4]]),
                               model(IMAGES[:4], training=False).numpy(), atol=1e-5)


def test_the_relu6_net_written_as_onnx_computes_tf_and_gives_the_same_shaders(keras_relu6):
    """The scales live in the IR's weights, so the ONNX writer follows unchanged: ONNX Runtime
    on the written model = TensorFlow on the Keras one (float rounding), and the ONNX front end
    reads back the same shaders."""
    from workbench.ir.to_onnx import to_onnx

    model, net = keras_relu6
    written = OnnxModel(to_onnx(ir.from_keras(model), NEWEST))
    np.testing.assert_allclose(written.predict(IMAGES[:8]),
                               model(IMAGES[:8], training=False).numpy(), atol=1e-5)
    assert [p.source for p in es2.compile(written, scaled_bits=8).passes] == [
        p.source for p in net.passes]
