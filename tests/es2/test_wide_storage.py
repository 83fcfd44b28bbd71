"""Tensors stored at 16 bits (workbench.es2.fixed16, ops.conv.wide_tensors): a tensor kept with
a scale (a ReLU6's y / 6, a calibrated linear projection or ReLU) that only convolutions read is
stored in two RGBA8 textures a pack; the GPU's codes against the emulator's, the net's logits
against TensorFlow's (closer than with 8 bits), the cost by a hand count, a save and load, and
where it is not used (mediump, scaled_bits=8)."""
import keras
import numpy as np
import pytest

from workbench import es2
from workbench.es2 import emulate, fixed16, limits

pytestmark = pytest.mark.gl


def bottleneck_model(seed=0):
    """A MobileNetV2-style block at 16x16: a ReLU6 stem, a linear 3x3 conv, an inverted
    residual (1x1 expansion, 3x3 depthwise, linear 1x1 projection, linear add), a ReLU head,
    global average pooling and a dense layer."""
    rng = np.random.default_rng(seed)
    x = inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu6", name="stem")(x)
    p = keras.layers.Conv2D(8, 3, padding="same", name="project1")(x)
    y = keras.layers.Conv2D(16, 1, activation="relu6", name="expand")(p)
    y = keras.layers.DepthwiseConv2D(3, padding="same", activation="relu6", name="dw")(y)
    y = keras.layers.Conv2D(8, 1, name="project2")(y)
    y = keras.layers.Add(name="add")([y, p])
    y = keras.layers.Conv2D(8, 1, activation="relu", name="head")(y)
    y = keras.layers.GlobalAveragePooling2D()(y)
    y = keras.layers.Dense(10, name="logits")(y)
    model = keras.Model(inputs, y)
    for layer in model.layers:
        if layer.get_weights():
            kernel, bias = layer.get_weights()
            fan_in = np.prod(kernel.shape[:-1]) if kernel.ndim == 4 and "dw" not in layer.name \
                else np.prod(kernel.shape[:2])
            layer.set_weights([rng.normal(0, 1.5 / np.sqrt(fan_in), kernel.shape).astype("f4"),
                               rng.normal(0.1, 0.1, bias.shape).astype("f4")])
    return model


def images(count=4, seed=1):
    return list(np.random.default_rng(seed).integers(0, 256, (count, 16, 16, 3))
                .astype(np.float32) / 255)


@pytest.fixture(scope="module")
def model():
    return bottleneck_model()


@pytest.fixture(scope="module")
def nets(model):
    """The block compiled with 16-bit and with 8-bit scaled tensors, calibrated alike."""
    calibration = images(8, seed=2)
    return {bits: es2.compile(model, calibration=calibration, scaled_bits=bits)
            for bits in (16, 8)}


def wide(net):
    return {op.name for op in net.graph.ops if fixed16.tensor_bits(op) == 16}


def test_the_scaled_tensors_only_convolutions_read_are_16_bit(nets):
    graph = nets[16].graph
    readers = {t: [type(op).__name__ for op in graph.ops if t in op.reads] for t in wide(nets[16])}
    # every tensor of the block but the head's, which the pooled dense layer reads
    assert {"stem", "project1", "expand", "dw"} <= wide(nets[16])
    assert "head" not in wide(nets[16]) and len(wide(nets[16])) == 5
    assert all(r and set(r) <= {"Conv", "ConvForm"} for r in readers.values()), readers
    assert wide(nets[8]) == set()
    for p in nets[16].passes:  # a 16-bit tensor's texture holds 2 values: hi, lo, hi, lo
        tensor, texture = p.outputs[0]
        if tensor in wide(nets[16]):  # (not a split's partial sums)
            assert "gl_FragColor = enc2(clamp(" in p.source, p.name
            assert texture < 2 * -(-graph.channels(tensor) // 4), p.name


def test_the_gpu_stores_the_emulators_codes(nets):
    """Op by op from the GPU's own inputs: every 8-bit tensor the emulator's bytes, every
    16-bit one within one code of 2**-15 (llvmpipe's float32 sums differ from the emulator's
    in the last bit of a few values, which a finer step can show)."""
    net = nets[16]
    for x in images(2):
        gpu = net.run(x, keep=True)
        assert emulate.unpredicted(net.graph, gpu) == {}
        apart = emulate.steps_apart(net.graph, gpu, emulate.stepwise(net.graph, gpu))
        for name, steps in apart.items():  # in this small block: not one 8-bit level apart
            assert steps.max() <= (1 if name in wide(net) else 0), (name, steps.max())
        for name in wide(net):  # two textures a pack
            assert gpu[name].shape[2] == 2 * 4 * -(-net.graph.channels(name) // 4)


def test_16_bit_tensors_keep_the_values_to_a_step_of_2_to_the_minus_15(nets):
    """Against the same graph computed without any storage (float32; its calibrated scales
    folded alike): a 16-bit tensor stays within a few 2**-15 steps (each op adds one
    rounding), where 8 bits are off by up to half a level (1 / 510) and more; the logits,
    read from the 8-bit head through the fixed16 dense layer, no further from TensorFlow's."""
    x = images(1, seed=3)[0]
    for bits, net in nets.items():
        real = emulate.tensors(net.graph, x, emulate.REAL)
        stored = emulate.tensors(net.graph, x)
        error = {name: float(np.abs(stored[name] - np.clip(real[name], 0, 1)).max())
                 for name in wide(nets[16])}
        if bits == 16:
            assert error["stem"] <= 2.0 ** -16 + 1e-7, error  # one rounding
            assert max(error.values()) < 8 * 2.0 ** -15, error
        else:
            assert error["stem"] >= 1 / 600 and max(error.values()) > 1 / 255, error


def test_cost_counts_both_textures_of_every_pack(nets):
    """``expand``: a 1x1 conv from 8 to 16 channels.  8 bits: 4 programs of 2 fetches; 16
    bits: 8 draws (a pack's program once a half) of 4 (two textures an input pack)."""
    hw = (16, 16)
    cost = {bits: net.cost(hw)["expand"] for bits, net in nets.items()}
    assert (cost[8].programs, cost[16].programs) == (4, 8)
    assert cost[8].texel_fetches == 256 * 4 * 2 and cost[16].texel_fetches == 256 * 8 * 4
    assert cost[16].texture_bytes == 2 * cost[8].texture_bytes == 2 * 256 * 4 * 4
    drawn = [p.source for p in nets[16].passes if p.op == "expand"]
    assert len(drawn) == 8 and len(set(drawn)) == 4  # a program draws both halves (u_half)


def test_a_saved_net_keeps_its_16_bit_tensors(nets, tmp_path):
    nets[16].save(tmp_path / "net")
    loaded = es2.load(tmp_path / "net")
    assert wide(loaded) == wide(nets[16])
    x = images(1)[0]
    expected = nets[16].emulate(x, keep=True)
    for name, data in loaded.emulate(x, keep=True).items():
        np.testing.assert_array_equal(data, expected[name], err_msg=name)


def test_mediump_shaders_and_scaled_bits_8_store_8_bits(model):
    mediump = es2.compile(model, limits.Target.of(None, "mediump"), calibration=images(2),
                          scaled_bits=16)
    assert wide(mediump) == set()
    with pytest.raises(ValueError, match="scaled_bits must be 8 or 16"):
        es2.compile(model, scaled_bits=12)


def test_16_bit_codes_round_trip_by_integer_arithmetic():
    """The emulator's stored values are the nearest multiples of 2**-15 (1 one step below
    1), and its bytes the high and low byte of that code plus 32768, channel by channel."""
    v = np.random.default_rng(0).random((3, 5, 7)).astype(np.float32)
    v[0, 0, :3] = (0.0, 1.0, 0.5)
    stored = fixed16.stored_tensor(v)
    code = np.minimum(np.floor(v.astype(np.float64) * 32768 + 0.5), 32767)
    np.testing.assert_array_equal(stored, (code / 32768).astype(np.float32))
    data = fixed16.tensor_bytes(stored)
    assert data.shape == (3, 5, 16)
    q = code + 32768
    np.testing.assert_array_equal(data[..., 0:14:2], q // 256)
    np.testing.assert_array_equal(data[..., 1:14:2], q % 256)
    zero = np.broadcast_to([128, 0], (3, 5, 2))  # the 8th channel, past the 7: 0's code
    np.testing.assert_array_equal(data[..., 14:16], zero)
    np.testing.assert_array_equal(fixed16.tensor_values(data, 7), stored)


def test_a_small_constant_file_writes_16_bits_a_half_or_a_channel_at_a_time(model):
    """gc2000's 64 constant slots: the writers' programs hold 2 or 1 output channels (one a
    half of the texture, colour-masked); llvmpipe still gives the emulator's codes."""
    net = es2.compile(model, "gc2000", calibration=images(8, seed=2))
    assert wide(net)
    parts = [p for p in net.passes if p.outputs[0][0] in wide(net) and ".c" in p.name]
    assert parts and all(p.channels in (None, (0, 1), (2, 3)) for p in parts)
    for x in images(2):
        assert emulate.unpredicted(net.graph, net.run(x, keep=True)) == {}


def test_the_bundle_and_the_page_run_a_16_bit_net(model, nets, tmp_path):
    """run.py (what a user copies to a device) gives the moderngl runner's bytes; the page in
    Chromium its top-1 and probabilities within a few fixed-point steps."""
    from tests.conftest import skip_module_without_chromium
    from tests.es2.test_bundle import bundled, outputs
    from workbench import web

    net, report, checks = bundled(model, tmp_path / "bundle", calibration=images(8, seed=2))
    assert wide(net) == wide(nets[16])
    for entry, check in zip(report["inputs"], checks):
        x = check["input"][..., :3] / np.float32(255)
        np.testing.assert_array_equal(outputs(entry, check["expected"]),
                                      net.run(x, keep=True)[net.graph.output])
    skip_module_without_chromium()
    web.export(net, tmp_path / "page")
    xs = images(3, seed=5)
    with web.session(tmp_path / "page") as page:
        probabilities = np.stack([page.run(x)["probabilities"] for x in xs])
    logits = np.stack([net.run(x) for x in xs]).astype(np.float64)
    gl = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)  # the page's softmax
    np.testing.assert_array_equal(probabilities.argmax(1), gl.argmax(1))
    assert np.abs(probabilities - gl).max() <= 0.01


@pytest.mark.parametrize("gain", [1.0, 300.0])
def test_a_tensor_stays_8_bit_where_its_readers_split_would_undo_16_bits(gain):
    """A 3x3 conv over 16 channels reads 4 packs: 36 fetches at 8 bits, 72 at 16 (over the
    64 of ES 2.0: two stages).  Its partial sums keep steps of 2**-(8 + shift): with weights
    ``gain`` times larger the shift falls below 0 (steps coarser than a level) and the linear
    tensor it reads stays 8-bit; with ordinary weights it is stored at 16 bits."""
    from workbench.es2.ops import conv
    from workbench.es2.ops.conv import split

    rng = np.random.default_rng(7)
    x = inputs = keras.Input((16, 16, 3))
    y = keras.layers.Conv2D(16, 1, name="linear")(x)
    y = keras.layers.Conv2D(4, 3, padding="same", activation="sigmoid", name="reader")(y)
    model = keras.Model(inputs, y)
    for layer, scale in ((model.get_layer("linear"), 1.0), (model.get_layer("reader"), gain)):
        kernel, bias = layer.get_weights()
        layer.set_weights([(rng.normal(0, 0.3, kernel.shape) * scale).astype("f4"), bias])
    # (force: at gain 300 the 8-bit linear tensor leaves the net 33 dB from TF; the check says so)
    net = es2.compile(model, calibration=images(4), force=True)
    reader = net.graph.op("reader")
    assert (split.shift(reader) < 0) == (gain > 1)
    assert "linear" in conv.wide_tensors(net.graph)  # a candidate either way
    assert (wide(net) == {"linear"}) == (gain == 1.0), wide(net)
    assert split.count(reader) == (2 if gain == 1.0 else 1)
