"""Grouped-convolution formulations and the bounded ReLU's gradient against plain TF."""
import numpy as np
import pytest
import tensorflow as tf

from workbench.nets import activations
from workbench.nets.layers import grouped_conv2d


@pytest.mark.parametrize("formulation", ["split", "dense", "auto"])
def test_grouped_formulations_match_grouped_conv(formulation):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(2, 9, 8, 12)).astype(np.float32))
    k = tf.constant(rng.normal(size=(3, 3, 3, 8)).astype(np.float32))
    dy = tf.constant(rng.normal(size=(2, 9, 8, 8)).astype(np.float32))

    def run(form):
        with tf.GradientTape() as tape:
            tape.watch([x, k])
            y = grouped_conv2d(x, k, 1, "SAME", 4, formulation=form)
        return [y] + tape.gradient(y, [x, k], output_gradients=dy)

    for got, want in zip(run(formulation), run("grouped")):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_bounded_relu_gradient_is_clip_by_value_gradient():
    x = tf.constant(np.random.default_rng(1).uniform(-1, 2, 1000).astype(np.float32))
    grads = []
    for f in (activations.get("bounded_relu").tf_fn, lambda v: tf.clip_by_value(v, 0.0, 1.0)):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x) * tf.range(1000, dtype=tf.float32)
        grads.append(tape.gradient(y, x).numpy())
    np.testing.assert_array_equal(grads[0], grads[1])
    np.testing.assert_array_equal(activations.get("bounded_relu").tf_fn(x), np.clip(x, 0, 1))


def test_bench_train_shows_today_and_the_default_side_by_side(capsys):
    from workbench.studies import train_bench

    result = train_bench.bench_train(repeats=1, steps=1, sr_sizes=(), formulations=("auto",),
                                     profile=False)
    labels = [r["option"] for r in result["steps"]]
    assert labels == ["sr b16 p48 today", "sr b16 p48 auto", "cls b64 auto"]
    assert all(r["samples_per_s"] > 0 and r["ms_min"] <= r["ms_per_step"] <= r["ms_max"]
               for r in result["steps"])
    out = capsys.readouterr().out
    assert "| sr b16 p48 today |" in out and "| sr b16 p48 auto |" in out
