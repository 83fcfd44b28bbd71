"""Each activation: TensorFlow and numpy forms agree, and the sigmoid-like one has the
published breakpoints, slopes and an exact hand-written gradient."""
import numpy as np
import pytest
import tensorflow as tf

from workbench.nets import activations
from workbench.studies import activation_study

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


@pytest.mark.parametrize("name", ["bounded_relu", "relu6_scaled", "sigmoid_like", "sigmoid"])
def test_gradient_matches_central_differences_away_from_kinks(name):
    x = np.array([-7.0, -3.0, -1.0, -0.2, 0.3, 0.7, 1.7, 3.0, 5.0, 7.0])
    act = activations.get(name).np_fn
    h = 1e-3
    numeric = (act(x + h).astype(np.float64) - act(x - h)) / (2 * h)
    np.testing.assert_allclose(activations.gradient(name, x), numeric, atol=2e-3)


def test_activation_study_summary_and_verdict():
    from workbench.studies import activation_study

    def record(name, seed, top1):
        return {"activation": name, "seed": seed, "top1": top1, "top1_8bit": top1 - 0.01,
                "history": {"loss": [2.0, 1.0 + seed]}}

    records = [record("bounded_relu", s, t) for s, t in enumerate((0.10, 0.12, 0.11))]
    records += [record("relu6_scaled", s, t) for s, t in enumerate((0.40, 0.42, 0.44))]
    records += [record("sigmoid_like", s, t) for s, t in enumerate((0.60, 0.62, 0.61))]
    summary = activation_study.summarize(records)
    assert [r["activation"] for r in summary] == ["bounded_relu", "relu6_scaled", "sigmoid_like"]
    relu6 = summary[1]
    assert relu6["top-1 %"] == "42.0 ± 2.0" and relu6["8-bit top-1 %"] == "41.0 ± 2.0"
    assert relu6["final loss"] == pytest.approx(2.0)
    assert activation_study.verdict(summary).startswith("The article's finding holds")
    swapped = [dict(r, activation={"bounded_relu": "sigmoid_like", "sigmoid_like": "bounded_relu"}
                    .get(r["activation"], r["activation"])) for r in records]
    assert "does not hold" in activation_study.verdict(activation_study.summarize(swapped))
    # overlapping seeds: the pair is not called either way
    close = [dict(r, top1={"bounded_relu": 0.20, "relu6_scaled": 0.22}.get(r["activation"], r["top1"])
                  + 0.02 * r["seed"]) for r in records]
    text = activation_study.verdict(activation_study.summarize(close))
    assert text.startswith("Partly told apart") and "relu6_scaled vs bounded_relu" in text
    assert "cannot tell" in text and "sigmoid_like beats relu6_scaled" in text
    # a study at chance level says so, whatever the order
    chance = [dict(r, top1=0.10 + 0.001 * r["seed"] + 0.01 * (r["activation"] == "sigmoid_like"))
              for r in records]
    assert activation_study.verdict(activation_study.summarize(chance), chance=10).startswith(
        "Cannot tell: every activation is within 5 points of chance")


def test_activation_figures_draw_every_candidate(tmp_path):
    from workbench import figures

    for fig in (activation_study.shape_figure(), activation_study.levels_figure()):
        labels = [line.get_label() for line in fig.axes[0].get_lines()]
        assert labels == list(activation_study.STUDY_ACTIVATIONS)
        assert [p.name for p in figures.save_figure(fig, "a", tmp_path)] == ["a.png", "a.svg"]
