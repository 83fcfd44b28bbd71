"""The dogs classifier family: exact size and shapes, its layers, image-folder data, training."""
import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from workbench.data import datasets
from workbench.data.images import ImageError
from workbench.nets import activations, classify
from workbench.nets.layers import Act, FastBatchNorm, Quantize8, Shuffle, shuffle_order
from workbench.nets.models import dogs_classifier


def trainable(model):
    return sum(int(np.prod(w.shape)) for w in model.trainable_weights)


def test_dogs120_is_the_reference_net():
    model = dogs_classifier("dogs120")
    assert model.count_params() == 225_112
    assert trainable(model) == 216_152
    assert model.input_shape == (None, 385, 385, 3) and model.output_shape == (None, 120)


def test_dogs120_stage_table():
    model = dogs_classifier("dogs120")
    shape = {layer.name: layer.output.shape[1:] for layer in model.layers}
    assert shape["stem"] == (191, 191, 32)
    stages = [(2, 32), (3, 32), (3, 64), (4, 128), (5, 192)]
    sizes = [191, 95, 47, 23, 11, 5]
    for s, (units, c) in enumerate(stages, start=1):
        for u in range(1, units + 1):
            assert shape[f"s{s}u{u}_act"] == (sizes[s - 1],) * 2 + (c,)
        assert f"s{s}u{units + 1}_act" not in shape
        assert shape[f"down{s}_act"][:2] == (sizes[s],) * 2
    assert shape["final_act"] == (3, 3, 192)
    convs = {layer.name: layer.groups for layer in model.layers if hasattr(layer, "groups")}
    assert convs["s4u2_1x1"] == 4 and convs["s4u2_3x3"] == 32 and convs["down4"] == 16
    assert convs["final"] == 24 and convs["s1u1_1x1"] == 1
    # a shuffle before every unit but the first of the stages wider than 32 channels
    shuffles = sorted(layer.name for layer in model.layers if isinstance(layer, Shuffle))
    assert shuffles == sorted([f"s3u{u}_shuffle" for u in (2, 3)] +
                              [f"s4u{u}_shuffle" for u in (2, 3, 4)] +
                              [f"s5u{u}_shuffle" for u in (2, 3, 4, 5)])


def test_unit_layer_order_conv_bn_add_act():
    model = dogs_classifier("tiny")
    inbound = {layer.name: [t._keras_history.operation.name for t in
                            keras.tree.flatten(layer.input)] for layer in model.layers[1:]}
    assert inbound["s2u2_1x1"] == ["s2u2_shuffle"]
    assert inbound["s2u2_3x3_bn"] == ["s2u2_3x3"]
    assert inbound["s2u2_add"] == ["s2u2_3x3_bn", "s2u1_act"]  # x: before the shuffle
    assert inbound["s2u2_act"] == ["s2u2_add"]
    assert inbound["down2_act"] == ["down2_bn"]


def test_cifar10_preset_size_and_output():
    model = dogs_classifier("cifar10")
    assert model.count_params() == 80_746
    assert model(np.zeros((2, 32, 32, 3), np.float32)).shape == (2, 10)


def test_shuffle_order_and_layer_against_numpy():
    assert shuffle_order(32, 8)[:6] == [0, 8, 16, 24, 1, 9]
    x = np.random.default_rng(0).normal(size=(2, 3, 3, 64)).astype(np.float32)
    order = shuffle_order(16, 8)
    expected = x.reshape(2, 3, 3, 16, 4)[:, :, :, order].reshape(x.shape)
    np.testing.assert_array_equal(Shuffle(8)(x).numpy(), expected)


def test_sigmoid_like_gradient_in_a_model(monkeypatch):
    """The hand-written gradient gives the same weight gradients as autodiff of the clip form."""
    def clip_form(x):
        inner = 0.05 * x + tf.clip_by_value(0.1 * x, -0.05, 0.05) + tf.clip_by_value(
            0.05 * x, -0.125, 0.125)
        return tf.clip_by_value(inner + 0.5, 0.0, 1.0)

    ref = activations.Activation("sigmoid_like_autodiff", clip_form, None, "", "test only")
    monkeypatch.setitem(activations._REGISTRY, ref.name, ref)
    x = np.random.default_rng(1).normal(size=(4, 16, 16, 3)).astype(np.float32) * 4
    y = np.arange(4) % 4
    grads = []
    for activation in ("sigmoid_like", ref.name):
        model = dogs_classifier("tiny", activation=activation)
        keras.utils.set_random_seed(0)
        model.set_weights([np.random.default_rng(k).normal(size=w.shape).astype(np.float32)
                           for k, w in enumerate(model.get_weights())])
        with tf.GradientTape() as tape:
            loss = keras.losses.sparse_categorical_crossentropy(
                y, model(x, training=True), from_logits=True)
        grads.append(tape.gradient(loss, model.trainable_weights))
    for a, b in zip(*grads):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)
    assert any(np.abs(g.numpy()).max() > 0 for g in grads[0])


def test_quantize8_forward_and_straight_through_gradient():
    x = tf.constant([0.0, 0.1, 0.5, 1 / 510 - 1e-6, 0.9999, 1.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = Quantize8()(x)
        total = tf.reduce_sum(3 * y)
    np.testing.assert_array_equal(y.numpy(), np.round(x.numpy() * 255) / 255)
    np.testing.assert_array_equal(tape.gradient(total, x).numpy(), 3.0)
    model = dogs_classifier("tiny", quantize=True)
    acts = [layer for layer in model.layers if isinstance(layer, Act)]
    quants = [layer for layer in model.layers if isinstance(layer, Quantize8)]
    assert len(quants) == len(acts) > 0
    for q in quants:  # directly after its activation
        assert q.input._keras_history.operation.name == q.name.replace("_q8", "_act")


def test_fast_batchnorm_matches_keras():
    x = np.random.default_rng(2).normal(2, 3, size=(8, 9, 7, 16)).astype(np.float32)
    ref, fast = keras.layers.BatchNormalization(momentum=0.75), FastBatchNorm(momentum=0.75)
    ref.build(x.shape)
    fast.build(x.shape)
    weights = [np.random.default_rng(i).normal(size=16).astype(np.float32) for i in range(3)]
    weights.append(np.random.default_rng(3).random(16).astype(np.float32) + 0.5)
    ref.set_weights(weights)
    fast.set_weights(weights)
    np.testing.assert_allclose(fast(x, training=True), ref(x, training=True), atol=1e-5)
    for a, b in zip(fast.weights, ref.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fast(x, training=False), ref(x, training=False), atol=1e-5)
    assert fast.get_config() == {**ref.get_config(), "name": fast.name}


def test_calibrate_batchnorm_sets_the_batch_statistics():
    model = dogs_classifier("tiny")
    images = np.random.default_rng(4).random((6, 16, 16, 3), np.float32)
    classify.calibrate_batchnorm(model, images)
    bn = model.get_layer("s2u2_3x3_bn")
    z = keras.Model(model.input, bn.input)(images, training=False).numpy()
    np.testing.assert_allclose(bn.moving_mean.numpy(), z.mean(axis=(0, 1, 2)), atol=1e-5)
    np.testing.assert_allclose(bn.moving_variance.numpy(), z.var(axis=(0, 1, 2)), rtol=1e-4)
    assert bn.momentum == 0.75
    # inference with the calibrated statistics = normalising with the batch statistics
    np.testing.assert_allclose(model(images, training=False), model(images, training=True),
                               atol=1e-4)


def test_average_checkpoints(tmp_path):
    paths, weights = [], []
    for i in range(3):
        model = dogs_classifier("tiny")
        model.set_weights([np.full(w.shape, i + 1.0, np.float32) * (k + 1)
                           for k, w in enumerate(model.get_weights())])
        weights.append(model.get_weights())
        paths.append(tmp_path / f"m{i}.keras")
        model.save(paths[-1])
    mean = classify.average_checkpoints(paths).get_weights()
    for k, w in enumerate(mean):
        np.testing.assert_allclose(w, 2.0 * (k + 1))


def test_lr_schedules():
    step = classify.lr_schedule("step", 0.01, epochs=600, steps_per_epoch=10,
                                decay_start=400, decay_every=50)
    rates = {e: float(step(e * 10)) for e in (0, 399, 401, 451, 599)}
    assert rates == pytest.approx({0: 0.01, 399: 0.01, 401: 0.005, 451: 0.0025, 599: 0.000625})
    cosine = classify.lr_schedule("cosine", 0.01, epochs=10, steps_per_epoch=10)
    assert float(cosine(0)) == pytest.approx(0.01) and float(cosine(100)) == pytest.approx(1e-4)
    with pytest.raises(ValueError, match="unknown lr schedule"):
        classify.lr_schedule("linear", 0.01, 1, 1)


def test_imagenet120_class_list():
    classes = datasets.imagenet120()
    wnids = [c["wnid"] for c in classes]
    assert len(classes) == 120 and len(set(wnids)) == 120
    assert wnids[0] == "n02085620" and wnids[117] == "n02113978"
    assert wnids[118:] == ["n02116738", "n02123159"]
    assert [c["imagenet_index"] for c in classes] == list(range(151, 269)) + [275, 282]
    assert classes[-1]["name"] == "tiger cat" and classify.class_list("imagenet120") == wnids


def make_folder(root, split, classes=("a", "b", "c"), n=4, size=20, seed=0):
    """Tiny image folders; class k's images have mean colour k/len(classes)."""
    rng = np.random.default_rng(seed)
    for k, name in enumerate(classes):
        (root / split / name).mkdir(parents=True)
        for i in range(n):
            base = np.zeros((size, size, 3)) + 255 * k / len(classes)
            pixels = np.clip(base + rng.integers(0, 40, (size, size, 3)), 0, 255)
            Image.fromarray(pixels.astype(np.uint8)).save(root / split / name / f"{i}.png")


def test_image_folder_batches(tmp_path):
    make_folder(tmp_path, "train", size=20)
    ds, names = datasets.image_folder(tmp_path, "train", 16, batch=5)
    assert names == ["a", "b", "c"]
    batches = list(ds)
    assert [len(y) for _, y in batches] == [5, 5, 2]
    x, y = batches[0]
    assert x.shape == (5, 16, 16, 3) and x.dtype == tf.float32 and 0 <= x.numpy().min()
    assert y.numpy().tolist() == [0, 0, 0, 0, 1]
    streamed, _ = datasets.image_folder(tmp_path, "train", 16, batch=5, cache=False)
    np.testing.assert_array_equal(next(iter(streamed))[0], x)
    only, names = datasets.image_folder(tmp_path, "train", 16, batch=50, classes=["c", "a"],
                                        limit=3, augment=True, shuffle=0)
    x, y = next(iter(only))
    assert names == ["c", "a"] and sorted(y.numpy().tolist()) == [0, 0, 0, 1, 1, 1]


def test_augment_batch_is_flip_and_shifted_crop():
    x = tf.constant(np.random.default_rng(5).random((64, 8, 8, 1), np.float32))
    y = datasets.augment_batch(x, 2).numpy()
    padded = np.pad(x.numpy(), ((0, 0), (2, 2), (2, 2), (0, 0)))
    for i in range(64):
        found = [(dy, dx, f) for dy in range(5) for dx in range(5) for f in (0, 1)
                 if np.array_equal(y[i], (padded[i, :, ::-1] if f else padded[i])
                                   [dy:dy + 8, dx:dx + 8])]
        assert found, f"image {i} is not a flipped/shifted crop"


def test_image_folder_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "train")):
        datasets.image_folder_files(tmp_path, "train")
    make_folder(tmp_path, "train")
    (tmp_path / "train" / "empty").mkdir()
    with pytest.raises(ImageError, match="empty: no images"):
        datasets.image_folder_files(tmp_path, "train")
    with pytest.raises(FileNotFoundError, match="zebra: no such class folder"):
        datasets.image_folder_files(tmp_path, "train", classes=["a", "zebra"])
    (tmp_path / "train" / "a" / "9.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(ImageError, match="9.jpg: not a readable image"):
        datasets.image_folder(tmp_path, "train", 16, classes=["a"])
    with pytest.raises(Exception, match="9.jpg: not a readable image"):
        list(datasets.image_folder(tmp_path, "train", 16, classes=["a"], cache=False)[0])


def test_default_dataset_missing_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="cls/cifar10.*fetch-data"):
        datasets.classification_root("cifar10")


@pytest.mark.slow
def test_train_resume_and_final_models(tmp_path, monkeypatch):
    make_folder(tmp_path / "data", "train", n=6)
    make_folder(tmp_path / "data", "test", n=3, seed=1)
    recipe = classify.ClassifierRecipe(preset="tiny", data=tmp_path / "data", epochs=3, batch=6,
                                       keep_best=2, learning_rate=1e-2, quantize=True)
    run = tmp_path / "run"
    keep = classify.KeepBest.on_epoch_end

    def interrupted(self, epoch, logs=None):
        if epoch == 1:
            raise KeyboardInterrupt  # after epoch 2's checkpoint, before keeping it as a best
        keep(self, epoch, logs)

    monkeypatch.setattr(classify.KeepBest, "on_epoch_end", interrupted)
    with pytest.raises(KeyboardInterrupt):
        classify.train(run, recipe, verbose=0)
    loss = json.loads((run / "history.json").read_text())["loss"]
    assert len(loss) == 2
    monkeypatch.setattr(classify.KeepBest, "on_epoch_end", keep)
    model, history = classify.train(run, recipe, verbose=0)
    assert history["loss"][:2] == loss and len(history["loss"]) == 3
    assert len(history["val_accuracy"]) == 3
    best = classify.best_checkpoints(run)
    assert sorted(p.name for p in best) == ["epoch001.keras", "epoch003.keras"]
    accuracy = [history["val_accuracy"][int(p.stem[5:]) - 1] for p in best]
    assert accuracy == sorted(accuracy, reverse=True)
    again, history2 = classify.train(run, recipe, verbose=0)  # finished: trains nothing
    assert history2 == history
    np.testing.assert_array_equal(again.get_weights()[0], model.get_weights()[0])
    results = classify.finish(run, export="average")
    assert list(results["top1"]) == ["last", "best", "average of 2 best"]
    assert results["exported"] == "average of 2 best" and results["quantize"] is True
    assert all(0 <= v <= 1 for v in results["top1"].values())
    ds, _ = datasets.image_folder(tmp_path / "data", "test", 16)
    exported = keras.models.load_model(run / "model.keras")
    assert classify.evaluate(exported, ds) == results["top1"]["average of 2 best"]


def test_validation_data_takes_val_limit_else_limit(tmp_path):
    make_folder(tmp_path, "test", n=5)
    recipe = classify.ClassifierRecipe(data=tmp_path, input_size=16, classes=["a", "b", "c"],
                                       limit=4)
    count = lambda r: sum(len(y) for _, y in classify.validation_data(r))  # noqa: E731
    assert count(recipe) == 12
    assert count(recipe.replace(val_limit=2)) == 6
    assert count(recipe.replace(limit=None)) == 15


def test_your_own_classifier_trains_as_built(tmp_path):
    """``init_model``: a Keras classifier of one's own (ReLU6, its own widths) trains as it is
    built, the exported model.keras is the trained checkpoint, and config.json names it and
    round-trips into the same recipe."""
    make_folder(tmp_path / "data", "train", n=6)
    make_folder(tmp_path / "data", "test", n=3, seed=1)
    keras.utils.set_random_seed(2)
    x = inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(12, 3, padding="same", activation="relu6", name="mine")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(x)).save(tmp_path / "m.keras")
    recipe = classify.ClassifierRecipe(preset="tiny", data=str(tmp_path / "data"), epochs=1,
                                       batch=6, init_model=str(tmp_path / "m.keras"))
    model, _ = classify.train(tmp_path / "run", recipe, verbose=0)
    assert model.get_layer("mine").filters == 12
    assert model.get_layer("mine").get_config()["activation"] == "relu6"
    classify.finish(tmp_path / "run", export="last")
    exported = keras.models.load_model(tmp_path / "run" / "model.keras")
    images = np.random.default_rng(5).random((2, 16, 16, 3)).astype(np.float32)
    np.testing.assert_allclose(exported(images), model(images), atol=1e-6)
    ran = classify.ClassifierRecipe.of_run(tmp_path / "run")
    assert ran.init_model == str(tmp_path / "m.keras") and ran == classify.ClassifierRecipe(
        **{**recipe.to_dict(), "classes": ran.classes, "input_size": 16,
           "steps_per_epoch": ran.steps_per_epoch})
    # the same net given as a Keras model (a builder's output): trained as it is, named in
    # config.json by its architecture
    keras.utils.set_random_seed(2)
    given = keras.models.load_model(tmp_path / "m.keras")
    model, _ = classify.train(tmp_path / "given", recipe.replace(init_model=None), verbose=0,
                              model=given)
    assert model.get_layer("mine").get_config()["activation"] == "relu6"
    config = json.loads((tmp_path / "given" / "config.json").read_text())
    assert config["model"]["parameters"] == given.count_params() and config["init_model"] is None
    with pytest.raises(ValueError, match=r"^model 'small': takes \(16, 16, 3\) and gives 5 "):
        classify.train(tmp_path / "run6", recipe.replace(init_model=None), verbose=0,
                       model=keras.Model(inputs, keras.layers.Dense(5)(x), name="small"))
    with pytest.raises(ValueError, match="init_model .*: takes .* the data is 16x16x3 images"):
        keras.Model(inputs, keras.layers.Dense(5)(x)).save(tmp_path / "five.keras")
        classify.train(tmp_path / "run5", recipe.replace(init_model=str(tmp_path / "five.keras")),
                       verbose=0)
