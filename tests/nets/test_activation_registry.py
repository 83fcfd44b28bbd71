"""An activation added by its registry entry alone (issue 59): ``hard_sigmoid_like``,
``clamp(0.2 x + 0.5, 0, 1)``, registered with its TF, numpy, GLSL, ONNX (HardSigmoid) and
TF.js forms and nothing else, runs in a Keras model (``layers.Act``) through TF, the ES 2.0
emulator, the GPU and the ONNX writer (ONNX Runtime).

Tolerances: the emulator against TF 3/255 (every tensor stored in 8 bits, half a level each);
the GPU the emulator's 8-bit levels exactly; ONNX Runtime against TF 1e-5 (both float32)."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from workbench import es2, gl, ir
from workbench.ir.to_onnx import to_onnx
from workbench.nets import activations
from workbench.nets.layers import Act
from workbench.web import tfjs


def _hard_sigmoid_np(x):
    x = np.asarray(x)  # float16 kept (the emulator's mediump), else float32
    x = x if x.dtype == np.float16 else x.astype(np.float32)
    return np.clip(0.2 * x + 0.5, 0.0, 1.0)


HARD_SIGMOID = activations.Activation(
    name="hard_sigmoid_like",
    tf_fn=lambda x: tf.clip_by_value(0.2 * x + 0.5, 0.0, 1.0),
    np_fn=_hard_sigmoid_np,
    glsl="clamp(0.2 * {x} + 0.5, 0.0, 1.0)",
    description="hard sigmoid: clamp(0.2 x + 0.5, 0, 1)",
    onnx=lambda w, x, layer: w.node("HardSigmoid", [x], layer, alpha=0.2, beta=0.5),
    tfjs="tf.clipByValue(tf.add(tf.mul(x, 0.2), 0.5), 0, 1)",
)


@pytest.fixture(scope="module")
def registered():
    """The registry with ``hard_sigmoid_like`` added by :func:`activations.register` (a copy,
    restored after the module)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(activations, "_REGISTRY", dict(activations._REGISTRY))
        activations.register(HARD_SIGMOID)
        yield HARD_SIGMOID


@pytest.fixture(scope="module")
def model(registered):
    keras.utils.set_random_seed(7)
    x = inputs = keras.Input((None, None, 3))
    x = Act(registered.name)(keras.layers.Conv2D(8, 3, padding="same")(x))
    x = keras.layers.Conv2D(3, 1)(x)
    return keras.Model(inputs, Act(registered.name)(x))


@pytest.fixture(scope="module")
def image():
    return np.round(np.random.default_rng(8).random((13, 11, 3)) * 255).astype(np.float32) / 255


def test_tf_and_numpy_forms_agree(registered):
    x = np.linspace(-8, 8, 1601, dtype=np.float32)
    np.testing.assert_allclose(Act(registered.name)(x[None]).numpy()[0], registered.np_fn(x),
                               atol=1e-6)


def test_emulator_runs_it_as_tf(model, image):
    net = es2.compile(model)
    assert np.abs(net.emulate(image) - model(image[None]).numpy()[0]).max() <= 3 / 255


def test_gpu_gives_the_emulators_bytes(model, image):
    try:
        gl.info(gl.FRAGMENT)
    except gl.GLUnavailable as error:
        pytest.skip(f"no ES 2.0 GL context here: {str(error).splitlines()[0]}")
    net = es2.compile(model)
    assert np.array_equal(np.round(net.emulate(image) * 255), np.round(net.run(image) * 255))


def test_onnx_writer_writes_it_and_onnx_runtime_runs_it_as_tf(model, image):
    onnxruntime = pytest.importorskip("onnxruntime")
    proto = to_onnx(ir.from_keras(model))
    assert [n.op_type for n in proto.graph.node].count("HardSigmoid") == 2
    session = onnxruntime.InferenceSession(proto.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    out = session.run(None, {"input": image.transpose(2, 0, 1)[None]})[0][0]
    np.testing.assert_allclose(out.transpose(1, 2, 0), model(image[None]).numpy()[0],
                               atol=1e-5)


def test_tfjs_peer_has_its_form(registered):
    assert (f"  {registered.name}: (tf, x) => {registered.tfjs},\n"
            in tfjs.peers_js().decode())
