"""Each activation: TensorFlow and numpy forms agree, and the sigmoid-like one has the
published breakpoints, slopes and an exact hand-written gradient."""
import numpy as np
import pytest
import tensorflow as tf

from workbench import activations

X = np.linspace(-9, 9, 3601, dtype=np.float32)


@pytest.mark.parametrize("name", activations.names())
def test_tf_and_numpy_forms_agree(name):
    act = activations.get(name)
    np.testing.assert_allclose(act.tf_fn(tf.constant(X)).numpy(), act.np_fn(X), atol=1e-6)
    if act.output_range:
        y = act.np_fn(X)
        assert y.min() >= act.output_range[0] and y.max() <= act.output_range[1]
    assert "{x}" in act.glsl


def test_sigmoid_like_slopes_and_breakpoints():
    f = activations.get("sigmoid_like").np_fn
    assert f(np.float32(0)) == pytest.approx(0.5)
    # slope between breakpoints, measured by finite differences on the numpy form
    for lo, hi, slope in [(0, 0.5, 0.2), (0.5, 2.5, 0.1), (2.5, 6.5, 0.05), (6.5, 9, 0.0)]:
        a, b = lo + 0.01, hi - 0.01
        assert (f(np.float32(b)) - f(np.float32(a))) / (b - a) == pytest.approx(slope, abs=1e-5)
        assert (f(np.float32(-a)) - f(np.float32(-b))) / (b - a) == pytest.approx(slope, abs=1e-5)
    assert f(np.float32(6.5)) == pytest.approx(1.0) and f(np.float32(-6.5)) == pytest.approx(0.0)


def test_sigmoid_like_custom_gradient_matches_autodiff_of_clip_form():
    x = tf.constant(X[np.abs(np.abs(X) - np.array([[0.5], [2.5], [6.5]])).min(0) > 1e-3])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y_custom = activations.get("sigmoid_like").tf_fn(x)
        y_plain = tf.clip_by_value(0.05 * x + tf.clip_by_value(0.1 * x, -0.05, 0.05)
                                   + tf.clip_by_value(0.05 * x, -0.125, 0.125) + 0.5, 0.0, 1.0)
    np.testing.assert_allclose(tape.gradient(y_custom, x), tape.gradient(y_plain, x), atol=1e-6)


def test_unknown_activation_lists_known_ones():
    with pytest.raises(ValueError, match="unknown activation 'swish'.*sigmoid_like"):
        activations.get("swish")
