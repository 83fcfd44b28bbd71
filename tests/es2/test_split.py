"""Convolutions too wide for one ES 2.0 program, split over their input packs
(workbench.es2.ops.split): llvmpipe's bytes against the emulator, the output against TensorFlow,
the cost against a hand count, the stored partial sums against numpy's exact sums."""
import keras
import numpy as np
import pytest

from workbench import es2, ir
from workbench.es2 import emulate
from workbench.es2.ops import split
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
    assert split.stages(wide) == [tuple(range(6)), tuple(range(6, 11)), tuple(range(11, 16))]
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
        op = ir.Conv(
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
