"""Layers against Keras' own implementations and numpy; the SR net's exact size; loading a
saved model."""
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from workbench.nets.layers import DepthToSpace, GroupConv2D, grouped_conv2d
from workbench.nets.models import ModelFileError, load_model, sr_x2


@pytest.mark.parametrize("kernel, groups, strides, padding",
                         [(3, 4, 1, "same"), (1, 1, 1, "same"), (5, 2, 2, "valid"), (3, 8, 2, "same")])
def test_group_conv_matches_keras_conv2d_groups(kernel, groups, strides, padding):
    x = np.random.default_rng(1).normal(size=(2, 13, 11, 16)).astype(np.float32)
    ours = GroupConv2D(24, kernel, groups=groups, strides=strides, padding=padding)
    ref = keras.layers.Conv2D(24, kernel, groups=groups, strides=strides, padding=padding)
    y = ours(x)
    ref(x)
    ref.set_weights(ours.get_weights())
    np.testing.assert_allclose(y, ref(x), atol=1e-5)
    assert tuple(y.shape) == ours.compute_output_shape(x.shape)


@pytest.mark.parametrize("kernel, strides, padding", [(3, 1, "SAME"), (3, 2, "VALID"), (5, 2, "SAME")])
def test_per_group_gradient_matches_split_convolutions(kernel, strides, padding):
    # The fallback for TensorFlow without oneDNN, against per-group tf.nn.conv2d + concat.
    rng = np.random.default_rng(3)
    x = tf.constant(rng.normal(size=(2, 12, 13, 8)).astype(np.float32))
    k = tf.constant(rng.normal(size=(kernel, kernel, 2, 12)).astype(np.float32))
    dy = rng.normal(size=(2, *grouped_conv2d(x, k, strides, padding, 4, True).shape[1:]))

    def grads(f):
        with tf.GradientTape() as tape:
            tape.watch([x, k])
            y = f(x, k)
        return [g.numpy() for g in tape.gradient(y, [x, k], output_gradients=dy.astype(np.float32))]

    split = lambda x, k: tf.concat([tf.nn.conv2d(xg, kg, strides, padding) for xg, kg in
                                    zip(tf.split(x, 4, -1), tf.split(k, 4, -1))], -1)
    ours = grads(lambda x, k: grouped_conv2d(x, k, strides, padding, 4, per_group_gradient=True))
    for got, want in zip(ours, grads(split)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_group_conv_groups_are_independent():
    # Changing input channels of group 0 must not change outputs of group 1.
    layer = GroupConv2D(8, 3, groups=2)
    x = np.random.default_rng(2).normal(size=(1, 6, 6, 4)).astype(np.float32)
    y1 = layer(x).numpy()
    x[..., :2] += 1.0
    y2 = layer(x).numpy()
    assert not np.allclose(y1[..., :4], y2[..., :4])
    np.testing.assert_array_equal(y1[..., 4:], y2[..., 4:])


def test_group_conv_rejects_indivisible_channels():
    with pytest.raises(ValueError, match="10 input channels are not divisible by groups=4"):
        GroupConv2D(8, 3, groups=4, name="L2")(np.zeros((1, 5, 5, 10), np.float32))
    with pytest.raises(ValueError, match="filters=6 is not divisible by groups=4"):
        GroupConv2D(6, 3, groups=4)


def test_depth_to_space_order():
    # channel c = dy*2 + dx lands at sub-pixel (dy, dx)
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 1, 4)
    np.testing.assert_array_equal(DepthToSpace(2)(x).numpy()[0, :, :, 0], [[0, 1], [2, 3]])


def test_sr_x2_is_the_reference_net():
    model = sr_x2()
    assert model.count_params() == 7340
    sizes = {layer.name: layer.count_params() for layer in model.layers if layer.count_params()}
    assert sizes == {"L1": 25 * 48 + 48, "L2": 4 * 9 * 12 * 8 + 32, "L3": 32 * 24 + 24,
                     "L4": 2 * 9 * 12 * 8 + 16, "L5": 16 * 4 + 4}


def test_sr_x2_any_size_output_range_and_save_load(tmp_path):
    model = sr_x2()
    x = np.random.default_rng(3).random((1, 17, 23, 1), np.float32)
    y = model(x).numpy()
    assert y.shape == (1, 34, 46, 1)
    assert y.min() >= 0 and y.max() <= 1
    model.save(tmp_path / "m.keras")
    again = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(again(x).numpy(), y)


def test_sr_x2_widths_are_options():
    model = sr_x2(widths=(24, 16, 12, 8), groups=(1, 2, 1, 2), activation="relu6_scaled")
    assert model(np.zeros((1, 8, 8, 1), np.float32)).shape == (1, 16, 16, 1)
    assert model.get_layer("L1_act").activation == "relu6_scaled"


def test_workbench_load_model_in_a_fresh_python(tmp_path):
    """``workbench.load_model`` reads a model with the workbench's layers without importing
    them first; ``import workbench`` alone does not load TensorFlow."""
    model = sr_x2()
    model.save(tmp_path / "m.keras")
    x = np.random.default_rng(4).random((1, 6, 5, 1), np.float32)
    np.save(tmp_path / "x.npy", x)
    probe = ("import sys, numpy as np, workbench\n"
             "assert not {'tensorflow', 'keras'} & set(sys.modules), 'import workbench loaded TF'\n"
             f"m = workbench.load_model({str(tmp_path / 'm.keras')!r})\n"
             "print(type(m.get_layer('L2')).__name__)\n"
             f"np.save({str(tmp_path / 'y.npy')!r}, m(np.load({str(tmp_path / 'x.npy')!r})))\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["GroupConv2D"]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), model(x).numpy())


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_corrupt_model_file_is_named_as_corrupt(tmp_path, damage):
    sr_x2().save(tmp_path / "good.keras")
    data = (tmp_path / "good.keras").read_bytes()
    bad = tmp_path / "bad.keras"
    bad.write_bytes({"garbage": b"not a model", "truncated": data[:len(data) // 2],
                     "empty": b""}[damage])
    with pytest.raises(ModelFileError, match=r"bad\.keras: corrupt or truncated \.keras model"):
        load_model(bad)
    with pytest.raises(FileNotFoundError, match="nope.keras: no such model file"):
        load_model(tmp_path / "nope.keras")


def test_a_zip_that_is_not_a_model_is_named(tmp_path):
    import zipfile
    with zipfile.ZipFile(tmp_path / "other.keras", "w") as z:
        z.writestr("notes.txt", "not a model")
    with pytest.raises(ModelFileError, match=r"other\.keras: not a readable Keras model \(") as err:
        load_model(tmp_path / "other.keras")
    assert "\n" not in str(err.value)


def test_a_lambda_layer_is_named_as_unsafe_code(tmp_path):
    """Keras' own refusal speaks its API (``safe_mode=False``); the workbench names the layer
    and says why: Python code in the file, not run in safe mode, and no shader could."""
    inputs = keras.Input((8, 8, 3))
    doubled = keras.layers.Lambda(lambda x: 2 * x, name="double")(inputs)
    outputs = keras.layers.Conv2D(4, 3)(doubled)
    keras.Model(inputs, outputs).save(tmp_path / "lam.keras")
    with pytest.raises(ModelFileError) as err:
        load_model(tmp_path / "lam.keras")
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'lam.keras'}: layer 'double' is a Lambda layer")
    assert "safe mode" in message and "safe_mode" not in message and "\n" not in message


# The model names the project uses: the drivers command's default and help (sr, sr-mrt4,
# cifar10, dogs120), bench web's classifier presets (every preset).
PROJECT_MODEL_NAMES = ("sr", "sr-mrt4", "cifar10", "dogs120", "tiny")


def test_named_resolves_every_model_name_the_project_uses():
    from workbench.nets import models

    assert set(models.CLASSIFIER_PRESETS) <= set(PROJECT_MODEL_NAMES) == set(models.NAMED)
    loaded = {name: models.load_named(models.named(name)) for name in PROJECT_MODEL_NAMES}
    assert all(models.is_name(name) for name in PROJECT_MODEL_NAMES)
    assert models.named("sr").path == models.reference_sr() and models.named("sr").trained
    assert models.named("sr-mrt4").draw_buffers == 4 and models.named("sr").draw_buffers is None
    assert loaded["sr"].count_params() == loaded["sr-mrt4"].count_params()
    assert models.named("cifar10").path == models.reference_cifar10()
    for preset in models.CLASSIFIER_PRESETS:  # the preset's net (random weights) or checkpoint
        size = models.CLASSIFIER_PRESETS[preset]["input_size"]
        assert loaded[preset].input_shape == (None, size, size, 3)
    assert not models.named("dogs120").trained
    again = models.load_named(models.named("tiny"))  # random weights, seeded: the same net each time
    for a, b in zip(again.get_weights(), loaded["tiny"].get_weights()):
        np.testing.assert_array_equal(a, b)
    assert not models.is_name(models.reference_sr()) and not models.is_name("net.onnx")


def test_named_refuses_an_unknown_name_in_one_line_listing_the_known():
    from workbench.nets import models

    with pytest.raises(ValueError) as err:
        models.named("sr4")
    assert str(err.value) == ("unknown model name 'sr4'; known: sr, sr-mrt4, cifar10, dogs120, "
                              "tiny")
    assert models.is_name("sr4")  # a word that is no file: refused as a name, not a file
