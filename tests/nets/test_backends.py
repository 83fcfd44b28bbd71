"""The SR net's training on Keras' back ends: the keras.ops forms of the layers and activations
against their TensorFlow forms (here, under TensorFlow), and the same 20 training steps under
TensorFlow and JAX (each in its own process; skipped without jax)."""
import importlib.util
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from workbench.nets import activation_forms, activations, layers, sr_recipes
from workbench.studies import train_bench

# exact breakpoints of the activations (ties of a clip) and points between them
POINTS = np.array([-7, -6.5, -3, -2.5, -1, -0.5, -0.2, 0, 0.2, 0.5, 0.999, 1, 1.5, 2.5, 4, 6,
                   6.5, 9], np.float32)


def _value_and_grad(f, x):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x) * tf.range(1, x.shape[0] + 1, dtype=tf.float32)  # a distinct weight each
    return y.numpy(), tape.gradient(y, x).numpy()


@pytest.mark.parametrize("name", activations.names())
def test_activation_ops_form_has_the_tf_forms_values_and_gradients(name):
    act = activations.get(name)
    x = np.concatenate([POINTS, np.random.default_rng(0).uniform(-8, 8, 200).astype(np.float32)])
    (y_tf, g_tf), (y_ops, g_ops) = (_value_and_grad(act.fn(t), x) for t in (True, False))
    np.testing.assert_allclose(y_ops, y_tf, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(g_ops, g_tf)  # also at the breakpoints


def test_an_activation_without_ops_form_names_itself_off_tensorflow():
    act = activations.Activation("tf_only", tf.nn.relu, np.abs, "{x}", "test only")
    assert act.fn(True) is tf.nn.relu
    with pytest.raises(ValueError, match="'tf_only' has no keras.ops form"):
        act.fn(False)


def test_clip_ops_has_clip_by_value_gradient_at_the_bounds():
    x = np.array([-1, 0, 0.5, 1, 2], np.float32)
    got = _value_and_grad(lambda v: activation_forms.clip_ops(v, 0.0, 1.0), x)
    want = _value_and_grad(lambda v: tf.clip_by_value(v, 0.0, 1.0), x)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_depth_to_space_ops_is_tf_depth_to_space():
    x = np.arange(2 * 3 * 4 * 12, dtype=np.float32).reshape(2, 3, 4, 12)
    np.testing.assert_array_equal(layers.depth_to_space_ops(tf.constant(x), 2),
                                  tf.nn.depth_to_space(x, 2))


@pytest.mark.parametrize("groups, kernel, strides, padding",
                         [(1, 5, 1, "SAME"), (4, 3, 1, "SAME"), (2, 3, 2, "VALID")])
def test_conv2d_ops_is_grouped_conv2d(groups, kernel, strides, padding):
    rng = np.random.default_rng(groups)
    x = rng.normal(size=(2, 9, 8, 8)).astype(np.float32)
    k = rng.normal(size=(kernel, kernel, 8 // groups, 8)).astype(np.float32)
    np.testing.assert_allclose(layers.conv2d_ops(x, k, strides, padding, groups),
                               layers.grouped_conv2d(x, k, strides, padding, groups),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("recipe", [dict(expand=64, qat=True, init="identity"),
                                    dict(init="identity", anchor="bilinear"),
                                    dict(init="he", anchor="nearest", qat=True),
                                    dict(init="he", anchor="nearest", qat=True,
                                         anchor_storage="sqrt")])
def test_recipe_net_with_keras_ops_matches_tf_forms(recipe, monkeypatch):
    """The whole recipe net, built once, run with its TF forms and then with its keras.ops
    forms (what another back end runs) under TensorFlow: outputs and gradients agree."""
    keras.utils.set_random_seed(0)
    model = sr_recipes.sr_x2_recipe(**recipe)
    rng = np.random.default_rng(1)
    x = tf.constant(np.round(rng.random((2, 12, 10, 1)) * 255).astype(np.float32) / 255)
    x = tf.concat([x, tf.zeros((1, 12, 10, 1)), tf.ones((1, 12, 10, 1))], 0)  # ties at 0, 1
    target = tf.constant(rng.random((4, 24, 20, 1)).astype(np.float32))

    def run():
        with tf.GradientTape() as tape:
            loss = keras.losses.mean_absolute_error(target, model(x, training=True))
            loss = tf.reduce_mean(loss)
        return [loss.numpy()] + [g.numpy() for g in
                                 tape.gradient(loss, model.trainable_variables)]

    want = run()
    for module in (layers, sr_recipes):
        monkeypatch.setattr(module, "on_tensorflow", lambda: False)
    got = run()
    for g, w, v in zip(got[1:], want[1:], model.trainable_variables):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6, err_msg=v.path)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)


def test_charbonnier_ops_form_is_the_tf_form(monkeypatch):
    rng = np.random.default_rng(2)
    t, p = (tf.constant(rng.random((2, 6, 6, 1)).astype(np.float32)) for _ in range(2))
    want = sr_recipes.charbonnier(t, p).numpy()
    monkeypatch.setattr(sr_recipes, "on_tensorflow", lambda: False)
    np.testing.assert_allclose(sr_recipes.charbonnier(t, p), want, rtol=1e-6)


def test_a_missing_back_end_is_a_skipped_row_with_the_reason(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "jax" else real(name, *a))
    rows = train_bench.backend_runs(("jax", "nosuch"), trace_steps=2, repeats=1, steps=1)
    assert [r["skipped"] for r in rows] == [
        "jax is not installed here (pip install -e '.[jax]')",
        "unknown Keras back end 'nosuch'; known: tensorflow, jax, torch"]
    table = train_bench.format_backends(rows)
    assert "| jax | skipped: jax is not installed here" in table


needs_jax = pytest.mark.skipif(train_bench.backend_missing("jax") is not None,
                               reason=f"{train_bench.backend_missing('jax')}: the JAX side of "
                                      "the back-end comparison does not run")


@pytest.mark.slow
@needs_jax
def test_tf_and_jax_give_the_same_losses_for_20_steps():
    """Issue #30: the SR reference recipe from the same weights on the same batches, one
    process per back end: every one of the first 20 losses within 1e-4."""
    rows = train_bench.backend_runs(("tensorflow", "jax"), trace_steps=20, repeats=0)
    assert [r["skipped"] for r in rows] == [None, None], rows
    tf_losses, jax_losses = (r["losses"] for r in rows)
    assert len(tf_losses) == len(jax_losses) == 20
    assert tf_losses[-1] < tf_losses[0]  # it trains
    diffs = np.abs(np.subtract(tf_losses, jax_losses))
    assert diffs.max() <= 1e-4, diffs


@pytest.mark.slow
@needs_jax
def test_a_run_started_under_jax_resumes_under_tensorflow(tmp_path):
    """training.fit under JAX for one epoch, then under TensorFlow for the second: it resumes
    (not restarts), with TensorFlow's own XLA choice rather than the one JAX stored."""
    code = ("import sys, json, keras, numpy as np, workbench\n"
            "from workbench.nets import training\n"
            "def build():\n"
            "    m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])\n"
            "    m.compile(optimizer='adam', loss='mse')\n"
            "    return m\n"
            "x = np.random.default_rng(0).random((8, 2), np.float32)\n"
            "import tensorflow as tf\n"
            "data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(4).repeat()\n"
            "m, h = training.fit(build, data, sys.argv[1], int(sys.argv[2]), 2, verbose=0, "
            "config={'a': 1})\n"
            "print(json.dumps([keras.backend.backend(), len(h['loss']), bool(m.jit_compile), "
            "int(m.optimizer.iterations.numpy())]))\n")
    runs = []
    for backend, epochs in (("jax", 1), ("tensorflow", 2)):
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run"), str(epochs)],
                             env={**os.environ, "KERAS_BACKEND": backend}, capture_output=True,
                             text=True, check=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    assert runs == [["jax", 1, True, 2], ["tensorflow", 2, False, 4]]
