"""PRelu, a learned slope per channel below 0 (issue 43): Keras' PReLU (shared over space) and
ONNX's PRelu lower to the activation "prelu" with ``activation_slope``; ES 2.0 stores it with
a calibrated scale and offset ("bounded_prelu": the offset after the PRelu, where a positive
scale commutes with it), and the stored levels are TF's / ONNX Runtime's values within half
a level; the ONNX writer writes PRelu, ES 3.1 runs it, a saved net keeps its slopes; llvmpipe's
bytes = the emulator's."""
import keras
import numpy as np
import pytest

from tests.ir import onnx_graphs
from workbench import es2, ir
from workbench.es2 import calibrate
from workbench.ir.lowering import LoweringError
from workbench.nets import activations
from workbench.nets.onnx_model import OnnxModel

L = keras.layers
IMAGES = np.round(np.random.default_rng(0).random((12, 16, 16, 3)) * 255).astype(np.float32) / 255
SLOPES = np.linspace(0.1, 0.9, 8).astype(np.float32)


def prelu_net():
    """conv -> PReLU (a slope per channel, 0.1..0.9) -> 3x3 'same' conv (its padding the stored
    real 0) -> PReLU (one slope: a leaky ReLU) -> 1x1 conv + the first PReLU's output ->
    PReLU (slopes 0.9..0.1; a residual sum) -> the logits."""
    keras.utils.set_random_seed(6)
    x = inputs = keras.Input((16, 16, 3))
    a = L.PReLU(shared_axes=[1, 2], name="p1")(L.Conv2D(8, 3, padding="same", name="c1")(x))
    y = L.PReLU(shared_axes=[1, 2, 3], name="p2")(L.Conv2D(8, 3, padding="same", name="c2")(a))
    y = L.PReLU(shared_axes=[1, 2], name="p3")(L.Add()([L.Conv2D(8, 1, name="c3")(y), a]))
    model = keras.Model(inputs, L.Softmax()(L.Dense(5)(L.GlobalAveragePooling2D()(y))))
    for name, alpha in (("p1", SLOPES), ("p2", [0.25]), ("p3", SLOPES[::-1])):
        model.get_layer(name).set_weights([np.reshape(alpha, (1, 1, -1))])
    return model


def outputs(model, name, images):
    return keras.Model(model.input, model.get_layer(name).output)(images).numpy()


def test_the_forms_agree_with_keras_prelu():
    """numpy, TF, keras.ops and Keras' own PReLU layer; the stored form is the PRelu plus the
    zero, clipped to [0, 1]; a leaky ReLU is the same numpy form with one slope."""
    x = np.random.default_rng(1).normal(0, 2, (2, 3, 5, 8)).astype(np.float32)
    layer = L.PReLU(shared_axes=[1, 2])
    layer.build((None, 3, 5, 8))
    layer.set_weights([SLOPES.reshape(1, 1, 8)])
    want = layer(x).numpy()
    act = activations.prelu(SLOPES)
    for form in (act.np_fn, act.tf_fn, act.ops_fn):
        np.testing.assert_allclose(np.asarray(form(x)), want, rtol=1e-6, atol=1e-7)
    zero = np.linspace(0, 0.5, 8).astype(np.float32)
    stored = activations.prelu(SLOPES, zero)
    for form in (stored.np_fn, stored.tf_fn, stored.ops_fn):
        np.testing.assert_allclose(np.asarray(form(x)), np.clip(want + zero, 0, 1), atol=1e-7)
    assert stored.output_range == (0.0, 1.0) and act.output_range[0] == -np.inf
    np.testing.assert_array_equal(activations.leaky_relu(0.3).np_fn(x),
                                  activations.prelu(np.float32(0.3)).np_fn(x))


def test_keras_prelu_is_stored_within_half_a_level_of_tf():
    """Per-channel slopes lower as "prelu", one slope as a leaky ReLU; ES 2.0 stores each as
    "bounded_prelu" (slopes kept, the calibrated offset after the activation): p1's stored
    levels times its scale plus its offset are TF's values within half a level (its input, the
    image, is exact in 8 bits); the probabilities within a few hundredths of TF's, its top-1."""
    model = prelu_net()
    graph = ir.from_model(model)
    c1, c2, c3 = graph.ops[:3]
    assert (c1.activation, c2.activation, c3.activation) == ("prelu", "leaky_relu:0.25", "prelu")
    np.testing.assert_array_equal(c1.activation_slope, SLOPES)
    np.testing.assert_array_equal(c3.activation_slope, SLOPES[::-1])
    assert c3.residual == "c1"
    real = outputs(model, "p1", IMAGES[:8])
    assert (real < 0).mean() > 0.1  # the slopes matter
    net = es2.compile(model, calibration=list(IMAGES[:8]), scaled_bits=8)
    assert [op.activation for op in net.graph.ops[:3]] == ["bounded_prelu"] * 3
    np.testing.assert_array_equal(net.graph.ops[1].activation_slope, np.full(8, 0.25, np.float32))
    assert net.graph.ops[1].pad_value is not None  # c2 reads the signed c1 with padding
    scale, offset = calibrate.stored_as(graph, calibrate.ranges(graph, list(IMAGES[:8])))["c1"]
    levels = np.stack([net.emulate(x, keep=True)["c1"][..., :8] for x in IMAGES[:8]])
    np.testing.assert_allclose(levels / 255.0 * scale + offset, real,
                               atol=0.5 / 255 * scale.max() + 1e-5)
    reference = model(IMAGES).numpy()
    emulated = np.stack([net.emulate(x) for x in IMAGES])
    assert np.abs(emulated - reference).max() < 0.03
    np.testing.assert_array_equal(emulated.argmax(1), reference.argmax(1))


def test_the_onnx_writer_writes_prelu_as_onnx_runtime_runs_it():
    from workbench.ir.to_onnx import to_onnx

    model = prelu_net()
    onnx_model = OnnxModel(to_onnx(ir.from_model(model)))
    kinds = [n.op_type for n in onnx_model.proto.graph.node]
    assert kinds.count("PRelu") == 2 and kinds.count("LeakyRelu") == 1
    np.testing.assert_allclose(onnx_model(IMAGES[:4]), model(IMAGES[:4]).numpy(), atol=1e-5)
    again = ir.from_model(onnx_model)  # and back: the same slopes
    np.testing.assert_array_equal(again.ops[0].activation_slope, SLOPES)


def test_a_saved_net_keeps_its_slopes(tmp_path):
    net = es2.compile(prelu_net(), calibration=list(IMAGES[:8]), scaled_bits=8)
    net.save(tmp_path / "net")
    loaded = es2.load(tmp_path / "net")
    for mine, theirs in zip(net.graph.ops[:3], loaded.graph.ops[:3]):
        assert theirs.activation == "bounded_prelu"
        np.testing.assert_array_equal(theirs.activation_slope, mine.activation_slope)
        np.testing.assert_array_equal(theirs.activation_zero, mine.activation_zero)
    assert [p.source for p in loaded.passes] == [p.source for p in net.passes]
    np.testing.assert_array_equal(loaded.emulate(IMAGES[0]), net.emulate(IMAGES[0]))


def onnx_prelu_net(slope):
    """conv -> PRelu(``slope``) -> 3x3 conv (pads 1) -> Sigmoid, as PyTorch writes them."""
    b = onnx_graphs.Builder(17, seed=3, gain=2.0)
    prelu = b.node("PRelu", [b.conv("input", 3, 8, 3, layer="c1"), b.const(slope)], layer="p1")
    out = b.node("Sigmoid", [b.conv(prelu, 8, 4, 3, layer="c2")], layer="out")
    return OnnxModel(b.model(3, (16, 16), out, "prelu")), prelu


@pytest.mark.parametrize("shape", [(8, 1, 1), (1, 8, 1, 1), ()])
def test_onnx_prelu_is_stored_within_half_a_level_of_onnx_runtime(shape):
    """A slope (C, 1, 1) or (1, C, 1, 1) lowers as "prelu", a scalar as a leaky ReLU; through
    ES 2.0 the PRelu's stored levels are ONNX Runtime's values within half a level, the output
    within a few levels."""
    slope = SLOPES.reshape(shape) if shape else np.float32(0.2)
    model, prelu = onnx_prelu_net(slope)
    conv = ir.from_model(model).ops[0]
    if shape:
        assert conv.activation == "prelu"
        np.testing.assert_array_equal(conv.activation_slope, SLOPES)
    else:
        assert conv.activation == activations.leaky_relu(np.float32(0.2)).name
    net = es2.compile(model, calibration=list(IMAGES[:8]), scaled_bits=8)
    real = model.tensors(IMAGES[:8], [prelu])[prelu]
    assert (real < 0).mean() > 0.1
    graph = ir.from_model(model)
    scale, offset = calibrate.stored_as(graph, calibrate.ranges(graph, list(IMAGES[:8])))[conv.name]
    levels = np.stack([net.emulate(x, keep=True)[conv.name][..., :8] for x in IMAGES[:8]])
    np.testing.assert_allclose(levels / 255.0 * scale + offset, real,
                               atol=0.5 / 255 * scale.max() + 1e-5)
    emulated = np.stack([net.emulate(x) for x in IMAGES])
    assert np.abs(emulated - model(IMAGES)).max() < 4 / 255


@pytest.mark.gl
def test_prelu_nets_run_on_the_gpu_as_emulated_and_on_es31_as_tf():
    """llvmpipe's bytes = the emulator's, every tensor, the Keras net and the ONNX one; ES 3.1
    (float storage) = TF."""
    from workbench import es31

    model = prelu_net()
    np.testing.assert_allclose(np.stack([es31.compile(model).run(x) for x in IMAGES[:2]]),
                               model(IMAGES[:2]).numpy(), atol=1e-5)
    for source in (model, onnx_prelu_net(SLOPES.reshape(8, 1, 1))[0]):
        net = es2.compile(source, calibration=list(IMAGES[:8]), scaled_bits=8)
        gpu, predicted = net.run(IMAGES[0], keep=True), net.emulate(IMAGES[0], keep=True)
        for name in predicted:
            np.testing.assert_array_equal(gpu[name], predicted[name], err_msg=name)


def test_the_shaders_pass_glslang(tmp_path):
    """The ES 2.0 programs (a pack's slopes and zeros as vec4 literals) under the ES 2.0
    limits, the ES 3.1 kernels (const vec4 arrays indexed by the job's pack)."""
    import shutil
    import subprocess

    from workbench import es31
    from workbench.es2 import glslang

    if shutil.which("glslangValidator") is None:
        pytest.skip("glslangValidator not installed")
    net = es2.compile(prelu_net(), calibration=list(IMAGES[:8]), scaled_bits=8)
    assert "vec4(0.100000001, 0.214285716, 0.328571439, 0.442857146) * min(" in net.passes[0].source
    glslang.validate_many({p.name: p.source for p in net.passes})
    for kernel in es31.compile(prelu_net()).kernels:
        path = tmp_path / f"{kernel.name}.comp"
        path.write_text(kernel.source)
        run = subprocess.run(["glslangValidator", str(path)], capture_output=True, text=True)
        assert run.returncode == 0, run.stdout


def one_line(call) -> str:
    with pytest.raises(LoweringError) as err:
        call()
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_slope_varying_over_space_is_refused_naming_the_layer_or_node():
    x = inputs = keras.Input((16, 16, 3))
    model = keras.Model(inputs, L.PReLU(name="p")(L.Conv2D(8, 3, padding="same")(x)))
    assert one_line(lambda: ir.from_model(model)).startswith(
        "layer 'p': a PRelu slope of shape (16, 16, 8); one value or one per channel of the 8")
    # ONNX broadcasts a slope (C,) along the width, not the channels
    for shape in [(8,), (1, 8, 16, 16)]:
        message = one_line(lambda: ir.from_model(onnx_prelu_net(np.ones(shape, np.float32))[0]))
        assert message.startswith(f"node '/p1/PRelu_1' (PRelu): a PRelu slope of shape {shape}")


@pytest.mark.gl
def test_the_page_tfjs_and_onnxruntime_run_a_prelu_classifier():
    """In one headless Chromium: the page (ES 2.0, the PRelu stored calibrated), TF.js (the IR
    with tf.prelu) and onnxruntime-web (the IR written as ONNX: PRelu, the zero added, Clip)
    give Keras' top-1; the peers its logits to float32 rounding."""
    from tests.web.test_bench_web import needs_ort, needs_tfjs  # skips without Chromium
    from workbench.studies import web_bench

    for needs in (needs_tfjs, needs_ort):
        if needs.args[0]:
            pytest.skip(needs.kwargs["reason"])
    keras.utils.set_random_seed(7)
    x = inputs = keras.Input((16, 16, 3))
    y = L.PReLU(shared_axes=[1, 2], name="p1")(L.Conv2D(8, 3, padding="same")(x))
    y = L.Conv2D(8, 1, activation="relu")(y)  # 1x1: no padding (the peers pad with zeros)
    y = L.MaxPooling2D(2)(L.MaxPooling2D(2)(y))  # (the page times a pooled Dense at many sizes)
    model = keras.Model(inputs, L.Dense(5)(L.GlobalAveragePooling2D()(y)))
    model.get_layer("p1").set_weights([SLOPES.reshape(1, 1, 8)])
    [result] = web_bench.bench_web(model, size=16, runs=1, warmup=0,
                                   backends=("wasm", "ort-wasm"), profile_runs=1, verbose=False)
    sides = {s["name"]: s for s in result["sides"]}
    assert {s.get("peer") for s in sides.values()} >= {"wasm", "ort-wasm"}
    diffs = {name: s["max_logit_diff"] for name, s in sides.items()}
    assert all(s["top1_equal"] for s in sides.values()), diffs
    assert all(diffs[name] < 1e-4 for name, s in sides.items() if s["engine"] != "page"), diffs
