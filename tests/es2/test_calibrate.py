"""Unbounded tensors stored with a calibrated scale (workbench.es2.calibrate): a ReLU's output,
a linear bottleneck, a linear residual add; against TensorFlow, llvmpipe against the emulator."""
import keras
import numpy as np
import pytest

from workbench import es2, ir
from workbench.es2 import calibrate, emulate

L = keras.layers
IMAGES = np.round(np.random.default_rng(0).random((12, 16, 16, 3)) * 255).astype(np.float32) / 255


def resnet_style(width=8):
    """Stem conv + BN + ReLU; two basic blocks (conv + ReLU, conv, Add with the block's input,
    ReLU); GAP, dense, softmax."""
    keras.utils.set_random_seed(1)
    x = inputs = keras.Input((16, 16, 3))
    x = L.ReLU(name="stem_relu")(L.BatchNormalization()(L.Conv2D(width, 3, padding="same",
                                                                 name="stem")(x)))
    for k in range(2):
        y = L.Conv2D(width, 3, padding="same", activation="relu", name=f"a{k}")(x)
        y = L.Conv2D(width, 3, padding="same", name=f"b{k}")(y)
        x = L.ReLU()(L.Add()([y, x]))
    x = L.Dense(5)(L.GlobalAveragePooling2D()(x))
    return keras.Model(inputs, L.Softmax()(x))


def mobilenet_v2_style(width=8):
    """Inverted residuals: 1x1 expansion + ReLU6, depthwise 3x3 + ReLU6, a linear 1x1
    projection, a linear residual Add (no activation), as MobileNetV2."""
    keras.utils.set_random_seed(2)
    x = inputs = keras.Input((16, 16, 3))
    x = L.ReLU(6.0)(L.Conv2D(width, 3, padding="same")(x))
    p = L.Conv2D(width, 1, name="project0")(x)
    for k in range(2):
        y = L.ReLU(6.0)(L.Conv2D(3 * width, 1)(p))
        y = L.ReLU(6.0)(L.DepthwiseConv2D(3, padding="same")(y))
        p = L.Add(name=f"sum{k}")([p, L.Conv2D(width, 1, name=f"project{k + 1}")(y)])
    x = L.ReLU(6.0)(L.Conv2D(2 * width, 1)(p))
    x = L.Dense(5)(L.GlobalAveragePooling2D()(x))
    return keras.Model(inputs, L.Softmax()(x))


def residual_of_another_scale():
    """A ResNet block whose input is a ReLU6 output (stored as x / 6) added to a linear
    branch (calibrated, stored at its own scale), and a sigmoid (stored as it is) added to a
    linear conv: each sum's residual stored at another scale than the sum."""
    keras.utils.set_random_seed(3)
    x = inputs = keras.Input((16, 16, 3))
    r = L.ReLU(6.0, name="relu6")(L.Conv2D(8, 3, padding="same", name="stem")(x))
    y = L.Conv2D(8, 3, padding="same", name="branch")(r)
    y = L.ReLU()(L.Add(name="block")([y, r]))
    a = L.Conv2D(8, 3, padding="same", activation="sigmoid", name="bounded")(y)
    w = L.Conv2D(8, 3, padding="same", name="wide")(y)
    y = L.ReLU()(L.Add(name="sum")([w, a]))
    return keras.Model(inputs, L.Softmax()(L.Dense(5)(L.GlobalAveragePooling2D()(y))))


@pytest.mark.parametrize("build", [resnet_style, mobilenet_v2_style])
def test_calibrated_nets_follow_tf(build):
    """Calibrated on the first 8 images: the probabilities within a few hundredths of TF's
    and the same top-1 on all 12."""
    model = build()
    net = es2.compile(model, calibration=list(IMAGES[:8]))
    assert all(op.activation == "bounded_relu" for op in net.graph.ops
               if op.activation is not None)
    reference = model(IMAGES).numpy()
    emulated = np.stack([net.emulate(x) for x in IMAGES])
    assert np.abs(emulated - reference).max() < 0.02
    np.testing.assert_array_equal(emulated.argmax(1), reference.argmax(1))


@pytest.mark.gl
@pytest.mark.parametrize("build", [resnet_style, mobilenet_v2_style, residual_of_another_scale])
def test_calibrated_nets_run_as_emulated(build):
    net = es2.compile(build(), calibration=list(IMAGES[:8]))
    for x in IMAGES[:2]:
        assert emulate.unpredicted(net.graph, net.run(x, keep=True)) == {}


def test_a_linear_projection_is_stored_with_its_calibrated_range():
    """project0 (a linear 1x1 conv, the residual of the block after it): per channel, offset
    = its minimum over the calibration images (TF's values) and scale at least its span, both
    widened by the headroom (the sum it is tied to may be wider still), so the stored levels
    times the scale plus the offset are TF's values within half a level (of its own storage
    and of its input's)."""
    model = mobilenet_v2_style()
    net = es2.compile(model, calibration=list(IMAGES[:8]))
    values = keras.Model(model.inputs, model.get_layer("project0").output)(IMAGES[:8]).numpy()
    low, high = values.min((0, 1, 2)), values.max((0, 1, 2))
    assert np.all(low < 0) and np.all(high > 0)
    graph = ir.from_model(model)
    found = calibrate.ranges(graph, list(IMAGES[:8]))
    scale, offset = calibrate.stored_as(graph, found)["project0"]
    h = calibrate.HEADROOM
    np.testing.assert_allclose(offset, low - h * (high - low), atol=1e-5)
    assert np.all(scale >= (high - low) * (1 + 2 * h) - 1e-5)
    stored = np.stack([emulate.tensors(net.graph, x)["project0"] for x in IMAGES[:8]])
    # half a level of its own storage, and of its input's (a ReLU6 stored as y / 6) through
    # its weights (8-bit levels; 16-bit storage, the default, keeps much closer)
    inherited = np.abs(model.get_layer("project0").get_weights()[0]).sum((0, 1, 2)) * 6
    np.testing.assert_allclose(stored * scale + offset, values,
                               atol=0.5 / 255 * (scale + inherited).max() + 1e-4)


def test_a_residual_sum_shares_its_inputs_scale():
    """A conv's residual is added as stored, so the sum and the residual get one scale (the
    larger span); the offsets differ and go into the conv's bias."""
    graph = ir.from_model(resnet_style())
    found = calibrate.ranges(graph, list(IMAGES[:8]))
    scales = calibrate.stored_as(graph, found)
    for op in graph.ops:
        if getattr(op, "residual", None):
            np.testing.assert_array_equal(scales[op.name][0], scales[op.residual][0])
            assert np.all(scales[op.name][0] >= found[op.name][1] - 1e-6)


def test_a_residual_stored_at_another_scale_is_rescaled_where_it_is_read():
    """Each such sum is taken (they were refused: "its parts must be stored at the scale of
    its result"): the residual read times its scale over the sum's, per channel
    (``residual_scale``); the probabilities within 0.02 of TF's, the same top-1."""
    model = residual_of_another_scale()
    net = es2.compile(model, calibration=list(IMAGES[:8]))
    scaled = {op.name: op.residual_scale for op in net.graph.ops
              if getattr(op, "residual_scale", None) is not None}
    assert set(scaled) == {"branch", "sum"}  # (the conv that adds each sum)
    reference = model(IMAGES).numpy()
    emulated = np.stack([net.emulate(x) for x in IMAGES])
    assert np.abs(emulated - reference).max() < 0.02
    np.testing.assert_array_equal(emulated.argmax(1), reference.argmax(1))


@pytest.mark.gl
def test_a_signed_tensor_read_by_a_padded_conv_pads_with_its_real_zero():
    """A linear conv's signed output stored as (x - offset) / scale: a 3x3 'same' conv
    reading it pads with the stored value of a real 0 (``pad_value``, ``-offset / scale``), so
    the border is TF's too; llvmpipe's bytes = the emulator's."""
    keras.utils.set_random_seed(4)
    x = inputs = keras.Input((16, 16, 3))
    y = L.Conv2D(8, 1, name="linear")(x)
    y = L.Conv2D(8, 3, padding="same", activation="sigmoid", name="padded")(y)
    model = keras.Model(inputs, L.Conv2D(4, 3, padding="same", activation="sigmoid")(y))
    net = es2.compile(model, calibration=list(IMAGES[:4]))
    scale, offset = calibrate.stored_as(ir.from_model(model), calibrate.ranges(
        ir.from_model(model), list(IMAGES[:4])))["linear"]
    np.testing.assert_allclose(net.graph.op("padded").pad_value, -offset / scale, rtol=1e-6)
    pad = net.graph.op("padded").pad_value  # 0 for a channel that never goes below 0
    assert np.all(pad >= 0) and np.any(pad > 0)
    emulated = np.stack([net.emulate(x) for x in IMAGES])
    assert np.abs(emulated - model(IMAGES).numpy()).max() < 2 / 255  # two 8-bit stores deep
    for image in IMAGES[:2]:
        assert emulate.unpredicted(net.graph, net.run(image, keep=True)) == {}


def leaky_net():
    """A LeakyReLU conv (signed, stored with a calibrated offset) read by a 3x3 'same' conv
    (its padding the stored real 0), then the logits."""
    keras.utils.set_random_seed(5)
    x = inputs = keras.Input((16, 16, 3))
    y = L.LeakyReLU(0.1, name="leaky")(L.Conv2D(8, 3, padding="same", name="c1")(x))
    y = L.Conv2D(8, 3, padding="same", activation="leaky_relu", name="c2")(y)
    y = L.ReLU()(L.Conv2D(8, 3, padding="same", name="c3")(y))
    return keras.Model(inputs, L.Softmax()(L.Dense(5)(L.GlobalAveragePooling2D()(y))))


@pytest.mark.gl
def test_leaky_relu_nets_deploy_as_keras_and_onnx():
    """Keras' LeakyReLU layer (slope 0.1) and activation (0.2), and the same net as ONNX
    LeakyRelu nodes (ir.to_onnx): through ES 2.0 within a few hundredths of TF's
    probabilities with its top-1, bytes = emulator; ES 3.1 (float storage) = TF."""
    from workbench import es31
    from workbench.ir.to_onnx import to_onnx
    from workbench.nets.onnx_model import OnnxModel

    model = leaky_net()
    graph = ir.from_model(model)
    assert [op.activation for op in graph.ops[:3]] == ["leaky_relu:0.1", "leaky_relu:0.2",
                                                       "relu"]
    reference = model(IMAGES).numpy()
    np.testing.assert_allclose(np.stack([es31.compile(model).run(x) for x in IMAGES[:2]]),
                               reference[:2], atol=1e-5)
    onnx_model = OnnxModel(to_onnx(graph))
    assert {n.op_type for n in onnx_model.proto.graph.node} >= {"LeakyRelu", "Relu"}
    for source in (model, onnx_model):
        net = es2.compile(source, calibration=list(IMAGES[:8]))
        assert net.graph.ops[1].pad_value is not None  # c2 reads the signed c1
        emulated = np.stack([net.emulate(x) for x in IMAGES])
        assert np.abs(emulated - reference).max() < 0.03
        np.testing.assert_array_equal(emulated.argmax(1), reference.argmax(1))
        assert emulate.unpredicted(net.graph, net.run(IMAGES[0], keep=True)) == {}


def dead_channels_net():
    """A 3x3 conv over 32 channels (split over programs: its partial sums stored in 16-bit
    fixed point) whose last 8 output channels never leave 0 (a ReLU after a bias of -50),
    then a linear 1x1 conv whose channels are all negative, read by a padded 3x3 conv."""
    keras.utils.set_random_seed(6)
    x = inputs = keras.Input((16, 16, 3))
    x = L.Conv2D(32, 3, padding="same", activation="relu", name="wide")(x)
    split = L.Conv2D(32, 3, padding="same", activation="relu", name="split")
    x = split(x)
    kernel, bias = split.get_weights()
    split.set_weights([kernel, np.concatenate([bias[:24], np.full(8, -50.0, np.float32)])])
    x = L.Conv2D(8, 1, name="negative", bias_initializer=keras.initializers.Constant(-3.0))(x)
    x = L.Conv2D(8, 3, padding="same", activation="relu", name="reader")(x)
    return keras.Model(inputs, L.Softmax()(L.Dense(5)(L.GlobalAveragePooling2D()(x))))


def test_every_calibration_value_lies_in_its_stored_range():
    """Whatever the sign of a channel (all negative here, a dead ReLU, a ReLU, a signed
    linear one), ``(x - offset) / scale`` keeps every calibration value in [0, 1], with
    the headroom past each end that is not 0; a dead channel is stored as exactly 0 at the
    tensor's widest scale, not amplified by 1 / (its span)."""
    graph = ir.from_model(dead_channels_net())
    found = calibrate.ranges(graph, list(IMAGES[:4]))
    assert np.all(found["negative"][1] < 0) and np.all(found["split"][1][24:] == 0)
    for name, (scale, offset) in calibrate.stored_as(graph, found).items():
        low, high = ((v - offset) / scale for v in found[name])
        assert np.all(low >= -1e-9) and np.all(high <= 1 + 1e-9), name
    scale, offset = calibrate.stored_as(graph, found)["split"]
    np.testing.assert_array_equal(offset[24:], 0)
    np.testing.assert_array_equal(scale[24:], scale[:24].max())
    scale, offset = calibrate.stored_as(graph, found, headroom=0)["negative"]
    np.testing.assert_allclose(offset + scale, 0, atol=1e-12)  # its top: 0, its bottom: min
    np.testing.assert_allclose(offset, found["negative"][0])


def test_a_net_with_dead_channels_follows_tf():
    """Dead channels in a split conv's output: the net's probabilities within a few
    hundredths of TensorFlow's (with the old 1e-6 scale the split conv's weights were
    multiplied by 10^6, and its partial sums destroyed)."""
    model = dead_channels_net()
    net = es2.compile(model, calibration=list(IMAGES[:8]))
    assert net.graph.op("split").split > 1
    reference = model(IMAGES).numpy()
    emulated = np.stack([net.emulate(x) for x in IMAGES])
    assert np.abs(emulated - reference).max() < 0.02
    assert np.abs(net.graph.op("split").kernel).max() < 100
