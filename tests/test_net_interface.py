"""One interface, two back ends (:class:`workbench.ir.backend.Net`, issue 59): the same
assertions on an ES 2.0 net and an ES 3.1 net compiled from one small Keras model, each
through its package's ``compile`` and ``load``.

Tolerances against TF: ES 2.0 stores every tensor in 8 bits (RGBA8) and writes its output in
8-bit levels, so each layer's rounding (half a level) reaches the output: 3/255; ES 3.1 keeps
float32 all the way: 1e-5.  ``emulate``: ES 2.0's numpy emulator predicts its GPU's bytes;
ES 3.1 has none (its float storage is not the emulator's arithmetic) and says so.
"""
import keras
import numpy as np
import pytest

from workbench import es2, es31, gl
from workbench.ir.backend import Net
from workbench.nets.layers import Act

BACKENDS = {"es2": es2, "es31": es31}
WORKERS = {"es2": gl.FRAGMENT, "es31": gl.COMPUTE}
TOLERANCE = {"es2": 3 / 255, "es31": 1e-5}


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(5)
    x = inputs = keras.Input((None, None, 3))
    x = Act("sigmoid_like")(keras.layers.Conv2D(8, 3, padding="same")(x))
    x = Act("sigmoid_like")(keras.layers.Conv2D(6, 3, padding="same")(x))
    return keras.Model(inputs, Act("sigmoid_like")(keras.layers.Conv2D(3, 1)(x)))


@pytest.fixture(scope="module", params=list(BACKENDS))
def compiled(request, model):
    return request.param, BACKENDS[request.param].compile(model)


@pytest.fixture(scope="module")
def image():
    return np.round(np.random.default_rng(6).random((13, 11, 3)) * 255).astype(np.float32) / 255


def gpu(name):
    """Skip, saying why, where this machine's GL offers no context for ``name``'s programs."""
    try:
        gl.info(WORKERS[name])
    except gl.GLUnavailable as error:
        pytest.skip(f"no {name} GL context here: {str(error).splitlines()[0]}")


def test_cost_counts_the_models_multiply_adds(compiled, model):
    _, net = compiled
    convs = [w.shape for w in model.get_weights() if w.ndim == 4]  # (k, k, cin, cout)
    assert sum(c.multiply_adds for c in net.cost((13, 11)).values()) == \
        13 * 11 * sum(int(np.prod(shape)) for shape in convs)


def test_is_the_shared_interface_and_compiles_nothing_to_say_so(model):
    """``isinstance`` reads every member of the protocol (Python 3.11): none of them compiles
    an ES 2.0 net's programs (its GL runner is made at the first run)."""
    net = es2.compile(model)
    assert isinstance(net, Net) and net._runner is None and net.timings == {}


def test_runs_as_tf(compiled, model, image):
    name, net = compiled
    gpu(name)
    out = net.run(image)
    assert out.shape == (13, 11, 3) and out.dtype == np.float32
    assert np.abs(out - model(image[None]).numpy()[0]).max() <= TOLERANCE[name]
    assert set(net.timings) and net.compile_seconds is not None
    assert np.array_equal(net.run(image, timed=False), out) and net.timings == {}


def test_save_load_run_gives_the_same_output(compiled, image, tmp_path):
    name, net = compiled
    gpu(name)
    net.save(tmp_path / "net")
    back = BACKENDS[name].load(tmp_path / "net")
    assert isinstance(back, Net) and back.target == net.target
    assert set(back.files()) == set(net.files())
    assert np.array_equal(back.run(image), net.run(image))


def test_emulate_predicts_run_or_says_it_cannot(compiled, image):
    name, net = compiled
    if name == "es31":
        with pytest.raises(NotImplementedError, match="^ES 3.1 has no emulator"):
            net.emulate(image)
        return
    gpu(name)  # (its 8-bit levels: the two divide by 255 in their own float order)
    assert np.array_equal(np.round(net.emulate(image) * 255), np.round(net.run(image) * 255))


@pytest.mark.parametrize("name", list(BACKENDS))
def test_an_unknown_option_is_refused_as_python_does(name, model):
    with pytest.raises(TypeError, match=r"^compile\(\) got an unexpected keyword argument "
                                        r"'tiles'$"):
        BACKENDS[name].compile(model, tiles=True)
