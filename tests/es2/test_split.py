"""Convolutions too wide for one ES 2.0 program, split over their input packs and, where one
pack is too many, their kernel rows (workbench.es2.ops.conv.split): llvmpipe's bytes against
the emulator, the output against TensorFlow, the cost against a hand count, the stored partial sums
against numpy's exact sums, a driver's refusal fitted by splitting rows."""
import keras
import numpy as np
import pytest

from workbench import es2, ir
from workbench.es2 import emulate, limits
from workbench.es2.ops.conv import split
from workbench.es2.ops import conv
from workbench.nets.layers import Act

from .test_bundle import bundled, outputs

pytestmark = pytest.mark.gl


def wide_model(width=64, residual=False, seed=0):
    """RGB -> 3x3 conv to ``width`` channels -> 3x3 conv over them (the wide one, with a
    linear residual add before its activation) -> 3x3 conv to 4 channels."""
    rng = np.random.default_rng(seed)
    x = inputs = keras.Input((None, None, 3))
    x = Act("bounded_relu")(keras.layers.Conv2D(width, 3, padding="same", name="first")(x))
    y = keras.layers.Conv2D(width, 3, padding="same", name="wide")(x)
    if residual:
        y = keras.layers.Add()([y, x])
    y = Act("bounded_relu")(y)
    y = Act("sigmoid_like")(keras.layers.Conv2D(4, 3, padding="same", name="last")(y))
    model = keras.Model(inputs, y)
    for layer in model.layers:
        if layer.get_weights():
            kernel, bias = layer.get_weights()
            fan_in = np.prod(kernel.shape[:3])
            layer.set_weights([rng.normal(0, 1.5 / np.sqrt(fan_in), kernel.shape).astype("f4"),
                               rng.normal(0.2, 0.1, bias.shape).astype("f4")])
    return model


def image(seed=1, shape=(19, 23, 3)):
    return np.random.default_rng(seed).integers(0, 256, shape).astype(np.float32) / 255


@pytest.mark.parametrize("residual", [False, True])
def test_a_3x3_conv_over_64_channels_is_split_and_runs_as_emulated(residual):
    """16 input packs x 9 taps = 144 fetches; ES 2.0 allows 64: 3 stages of 6, 5 and 5 packs
    (54, 45 + 1 and 45 + 2 (+ 1) fetches)."""
    model = wide_model(residual=residual)
    net = es2.compile(model)
    wide = net.graph.op("wide")
    rows = tuple(range(3))
    assert split.stages(wide) == [(tuple(range(6)), rows), (tuple(range(6, 11)), rows),
                                  (tuple(range(11, 16)), rows)]
    x = image()
    gpu, predicted = net.run(x, keep=True), net.emulate(x, keep=True)
    for name in predicted:
        np.testing.assert_array_equal(gpu[name], predicted[name], err_msg=name)
    # the partial sums add one rounding of 2**-(8 + shift) a stage to TF's float arithmetic
    reference = model(x[None]).numpy()[0]
    assert np.abs(predicted["last"][..., :4] / 255.0 - reference).max() < 1.5 / 255


def test_split_cost_counts_every_stage():
    net = es2.compile(wide_model(residual=True))
    cost = net.cost((10, 12))["wide"]
    # per output pack: two halves of stage 0 (6 packs) and of stage 1 (5 packs + its partial),
    # then the last stage (5 packs + both partial halves + the residual)
    per_pack = 2 * 9 * 6 + 2 * (9 * 5 + 1) + (9 * 5 + 2 + 1)
    assert cost.texel_fetches == 10 * 12 * 16 * per_pack
    assert cost.programs == 16 * 5 == len([p for p in net.passes if p.op == "wide"])
    assert cost.multiply_adds == 10 * 12 * 3 * 3 * 64 * 64
    assert cost.texture_bytes == 10 * 12 * 4 * (16 + 2 * 2 * 16)


def test_partial_sums_keep_their_bound_without_saturating():
    """The worst input for each output (1 where its weight is positive, else 0, and the
    reverse) through the stored partial sums: within one step of the exact sum."""
    rng = np.random.default_rng(2)
    for scale in (0.01, 1.0, 30.0):
        op = conv.ConvForm(
            "c", "x", rng.normal(0, scale, (1, 1, 64, 4)).astype(np.float32),
            np.zeros(4, np.float32))
        step = 2.0 ** -(8 + split.shift(op))
        bound = max(np.maximum(op.kernel, 0).sum((0, 1, 2)).max(),
                    np.maximum(-op.kernel, 0).sum((0, 1, 2)).max())
        assert bound * 2 ** split.shift(op) < 127 or split.shift(op) == 15
        for sign in (1, -1):
            worst = (sign * op.kernel[0, 0] > 0).astype(np.float32)  # (64, 4): per output
            exact = (op.kernel[0, 0] * worst).sum(0)  # each output's extreme sum
            sums = np.diag(exact).astype(np.float32)[None]  # 1 x 4 x 4: output o in column o
            got = np.diagonal(split.stored(op, sums, np.float32)[0])
            assert np.abs(got - exact).max() <= step / 2 + 1e-6 * np.abs(exact).max()


@pytest.mark.parametrize("device", ["gc2000", "videocore4"])
def test_device_limits_choose_the_stages(device):
    """gc2000 keeps literals in its 64 uniform slots: stages of 3 packs at 2 channels a
    program; videocore4 binds by its 8 texture units and 64 fetches, as ES 2.0."""
    net = es2.compile(wide_model(width=32, residual=True), device)
    expected = {"gc2000": 3, "videocore4": 2}[device]
    assert net.graph.op("wide").split == expected
    x = image(3, (12, 9, 3))
    gpu, predicted = net.run(x, keep=True), net.emulate(x, keep=True)
    for name in predicted:
        np.testing.assert_array_equal(gpu[name], predicted[name], err_msg=name)


def test_split_net_saves_loads_and_replays_in_the_bundle(tmp_path):
    net, report, checks = bundled(wide_model(width=32), tmp_path / "wide")
    again = es2.load(net.save(tmp_path / "saved"))
    assert again.graph.op("wide").split == net.graph.op("wide").split == 2
    for entry, check in zip(report["inputs"], checks):
        out = outputs(entry, check["expected"])
        x = check["input"][..., :3] / np.float32(255)
        np.testing.assert_array_equal(out, again.run(x, keep=True)[net.graph.output])
        assert entry["bytes_equal_emulator"] == 1.0
    levels = emulate.to_packs(again.emulate(image()))
    np.testing.assert_array_equal(levels, net.run(image(), keep=True)[net.graph.output])


def window_model(size, width, seed=0):
    """RGB (-> a 3x3 conv to ``width`` channels, stored bounded, where ``width`` > 3) -> a
    ``size`` x ``size`` 'same' conv to 4 channels ("wide"), sigmoid_like."""
    rng = np.random.default_rng(seed)
    x = inputs = keras.Input((None, None, 3))
    if width > 3:
        x = Act("bounded_relu")(keras.layers.Conv2D(width, 3, padding="same", name="first")(x))
    y = Act("sigmoid_like")(keras.layers.Conv2D(4, size, padding="same", name="wide")(x))
    model = keras.Model(inputs, y)
    for layer in model.layers:
        if layer.get_weights():
            kernel, bias = layer.get_weights()
            layer.set_weights([rng.normal(0, 2 / np.sqrt(np.prod(kernel.shape[:3])),
                                          kernel.shape).astype("f4"),
                               rng.normal(0.2, 0.1, bias.shape).astype("f4")])
    return model


def runs_as_emulated_and_as_tf(net, model, x):
    """Every tensor's bytes on llvmpipe are the emulator's; the wide layer's output is TF's
    (on the emulator's stored input) within half a level plus half a step of each stored
    partial sum (sigmoid_like's slope is under 1)."""
    gpu, predicted = net.run(x, keep=True), net.emulate(x, keep=True)
    for name in predicted:
        np.testing.assert_array_equal(gpu[name], predicted[name], err_msg=name)
    wide = net.graph.op("wide")
    stored = predicted[wide.input][..., :wide.cin] / 255.0
    layer = model.get_layer("wide")
    reference = keras.Model(layer.input, model.output)(stored[None]).numpy()[0]
    rounding = (split.count(wide) - 1) * 2.0 ** -(9 + split.shift(wide))
    assert np.abs(predicted["wide"][..., :4] / 255.0 - reference).max() \
        <= 0.5 / 255 + rounding + 1e-5


def test_a_9x9_conv_over_one_pack_splits_its_rows(tmp_path):
    """81 fetches of one input pack (ES 2.0 allows 64), refused until now: its rows in 2
    stages, 5 rows (45 fetches) and 4 (36 + 2)."""
    model = window_model(9, 3)
    whole = conv.formed(ir.from_model(model).op("wide"))  # one stage
    with pytest.raises(limits.LimitError, match="texel fetches per fragment = 81"):
        conv.check(whole, None, limits.ES2)  # what compile said of it before
    net = es2.compile(model)
    wide = net.graph.op("wide")
    assert (wide.split, wide.row_split) == (1, 2)
    assert split.stages(wide) == [((0,), tuple(range(5))), ((0,), tuple(range(5, 9)))]
    x = image(4, (17, 13, 3))
    runs_as_emulated_and_as_tf(net, model, x)
    cost = net.cost((10, 12))["wide"]
    assert cost.programs == 3 == len([p for p in net.passes if p.op == "wide"])
    assert cost.texel_fetches == 10 * 12 * (2 * 9 * 5 + 9 * 4 + 2)
    again = es2.load(net.save(tmp_path / "saved"))
    assert again.graph.op("wide").row_split == 2
    np.testing.assert_array_equal(again.run(x, keep=True)["wide"], net.run(x, keep=True)["wide"])
    np.testing.assert_array_equal(again.emulate(x), net.emulate(x))


@pytest.mark.parametrize("device, expected", [(None, (2, 1)), ("gc2000", (2, 3))])
def test_a_7x7_conv_over_two_packs(device, expected):
    """ES 2.0: one input pack a stage (49 fetches) fits; gc2000's 64 constant slots take a
    partial stage of 3 rows of one pack at 2 channels (51 slots), not of 4 (65): its 2 packs
    in 2 runs of 3 bands of rows, 6 stages."""
    model = window_model(7, 8)
    net = es2.compile(model, device)
    wide = net.graph.op("wide")
    assert (wide.split, wide.row_split) == expected
    assert split.count(wide) == expected[0] * expected[1]
    runs_as_emulated_and_as_tf(net, model, image(5, (12, 9, 3)))


def test_a_driver_refusal_is_fitted_by_splitting_rows():
    """A 6x6 'same' conv over a whole pack with sigmoid_like: Vivante's compiler refuses it at
    354 instructions (> 256) even at one output channel a program; fit=True then splits its
    rows over 2 stages, recorded on the graph, so the emulator follows.  (The op table's 5x5
    was refused at 257 until the windows' coordinates came from the vertex shader.)"""
    from workbench.gl import drivers

    if drivers.available() is not None:
        pytest.skip(drivers.available())
    model = window_model(6, 4)
    net = es2.compile(model, "gc2000", fit=True)
    assert "kernel rows split over 2 stages" in net.changes[-1]
    assert "exceeds maximum 256" in net.changes[-1]
    wide = net.graph.op("wide")
    assert (wide.split, wide.row_split) == (1, 2)
    x = image(5, (12, 9, 3))
    gpu, predicted = net.run(x, keep=True), net.emulate(x, keep=True)
    for name in predicted:  # (a tensor's own channels)
        c = net.graph.channels(name)
        np.testing.assert_array_equal(gpu[name][..., :c], predicted[name][..., :c], err_msg=name)
