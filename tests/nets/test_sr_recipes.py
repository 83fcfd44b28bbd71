"""SR training recipes: collapsed nets against the expanded ones and against plain TF ops."""
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from workbench.nets import storage
from workbench.nets.layers import AnchorResidual, DepthToSpace, Quantize8, anchor_subpixels
from workbench.nets.models import sr_x2
from workbench.nets.sr_recipes import (CollapsibleConv, SRRecipe, charbonnier, collapse,
                                       sr_x2_recipe, with_anchor)


def randomize(model, seed=0):
    """Give every weight random values (so that zero-initialised parts are exercised)."""
    rng = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(rng.normal(0, 0.3, w.shape).astype(np.float32))


@pytest.mark.parametrize("options", [dict(expand=64), dict(expand=32, init="identity"),
                                     dict(expand=16, qat=True), dict(init="identity"),
                                     dict(expand=16, anchor="bilinear", anchor_scale=0.5)])
def test_collapsed_net_equals_training_net(options):
    model = sr_x2_recipe(**options)
    randomize(model)
    x = np.random.default_rng(1).random((2, 13, 17, 1), np.float32)
    plain = collapse(model, quantize=options.get("qat", False))
    np.testing.assert_allclose(plain(x), model(x), atol=1e-5)
    if "anchor" not in options:
        assert plain.count_params() == 7340 == sr_x2().count_params()
        assert [w.shape for w in plain.weights] == [w.shape for w in sr_x2().weights]


def test_collapsible_conv_is_wide_conv_then_1x1():
    # Reference: the two convolutions run one after the other, per group, with tf.nn.conv2d.
    layer = CollapsibleConv(8, 3, groups=2, expand=20)
    x = np.random.default_rng(2).normal(size=(2, 9, 7, 12)).astype(np.float32)
    layer(x)
    randomize(layer)
    xs = tf.split(x, 2, -1)
    wides = tf.split(layer.wide, 2, -1)
    ref = [tf.nn.conv2d(tf.nn.conv2d(xg, wg, 1, "SAME"), layer.narrow[g][None, None], 1, "SAME")
           for g, (xg, wg) in enumerate(zip(xs, wides))]
    np.testing.assert_allclose(layer(x), tf.concat(ref, -1) + layer.bias, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("expand", [None, 32])
def test_identity_init_is_nearest_upsampling(expand):
    x = np.random.default_rng(3).random((1, 11, 9, 1), np.float32)
    y = sr_x2_recipe(expand=expand, init="identity")(x).numpy()
    np.testing.assert_allclose(y[0, ..., 0], np.kron(x[0, ..., 0], np.ones((2, 2))), atol=1e-6)


def test_anchor_starts_at_the_anchor_and_bilinear_matches_tf_resize():
    x = np.random.default_rng(4).random((2, 10, 7, 1), np.float32)
    ref = tf.image.resize(x, (20, 14), "bilinear")  # half-pixel centres, edges clamped
    np.testing.assert_allclose(tf.nn.depth_to_space(anchor_subpixels(x, "bilinear"), 2), ref,
                               atol=1e-6)
    np.testing.assert_allclose(sr_x2_recipe(anchor="bilinear")(x), ref, atol=1e-6)
    q = np.random.default_rng(5).random((2, 10, 7, 4), np.float32)
    want = np.clip(np.repeat(x, 4, -1) + 0.25 * (q - 0.5), 0, 1)
    np.testing.assert_allclose(AnchorResidual("nearest", 0.25)([x, q]), want, atol=1e-6)


@pytest.mark.parametrize("expand", [None, 8])
def test_with_anchor_keeps_the_output_where_the_features_carry_the_anchor(expand):
    # Identity init: L4's channel 0 is the input itself, so the nearest anchor is fitted
    # exactly and the refitted L5 gives the old output (corrections within +-s/2; float
    # activations, as 8-bit ones round the two outputs on different grids).
    model = sr_x2_recipe(expand=expand, init="identity")
    last = model.get_layer("L5")
    rng = np.random.default_rng(10)
    last.set_weights([w + rng.normal(0, 0.02, w.shape).astype(np.float32)
                      for w in last.get_weights()])
    x = rng.random((2, 12, 10, 1), np.float32)
    anchored = with_anchor(model, list(x), "nearest", 0.75)
    assert isinstance(anchored.get_layer("anchor"), AnchorResidual)
    assert anchored.get_layer("anchor").scale == 0.75
    np.testing.assert_allclose(anchored(x), model(x), atol=2e-5)
    assert collapse(anchored).count_params() == collapse(model).count_params()
    qat = with_anchor(sr_x2_recipe(expand=expand, init="identity", qat=True), list(x))
    assert sum(isinstance(layer, Quantize8) for layer in qat.layers) == 5


def test_sqrt_storage_keeps_the_float_net_and_rounds_in_the_companded_domain(tmp_path):
    # with_anchor to the same anchor and scale changes only how L5 is stored: the float net is
    # the same; the 8-bit one reads back L5 as the sqrt law's levels (decoded), with a
    # straight-through gradient; the options survive save / load.
    model = sr_x2_recipe(expand=8, init="identity", anchor="nearest", anchor_scale=0.75, qat=True)
    randomize(model, seed=11)
    x = np.random.default_rng(12).random((2, 9, 8, 1), np.float32)
    companded = with_anchor(model, list(x), "nearest", 0.75, anchor_storage="sqrt")
    assert companded.get_layer("anchor").storage == "sqrt"
    assert [companded.get_layer(f"L{i}_q8").law for i in (4, 5)] == ["linear", "sqrt"]
    np.testing.assert_allclose(collapse(companded)(x), collapse(model)(x), atol=1e-6)
    plain = collapse(companded, quantize=True)
    probe = keras.Model(plain.input, [plain.get_layer("L5_act").output,
                                       plain.get_layer("L5_q8").output])
    q, read = (np.asarray(t, np.float64) for t in probe(x))
    want = storage.decode(np.round(storage.encode(q, "sqrt") * 255) / 255, "sqrt")
    np.testing.assert_allclose(read, want, atol=1e-6)
    t = tf.constant(q.astype(np.float32))
    with tf.GradientTape() as tape:
        tape.watch(t)
        y = tf.reduce_sum(Quantize8("sqrt")(t) * 3.0)
    np.testing.assert_allclose(tape.gradient(y, t), 3.0)
    companded.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert loaded.get_layer("anchor").storage == "sqrt" and loaded.get_layer("L5_q8").law == "sqrt"
    np.testing.assert_array_equal(loaded(x), companded(x))


def test_qat_collapse_rounds_every_activation_to_8_bits():
    model = sr_x2_recipe(expand=16, qat=True)
    randomize(model, seed=6)
    plain = collapse(model, quantize=True)
    assert sum(isinstance(l, Quantize8) for l in plain.layers) == 5
    acts = keras.Model(plain.inputs, [plain.get_layer(f"L{i}_q8").output for i in range(1, 6)])
    for a in acts(np.random.default_rng(7).random((1, 8, 8, 1), np.float32)):
        np.testing.assert_allclose(a * 255, np.round(a * 255), atol=1e-4)


def test_charbonnier_against_numpy():
    rng = np.random.default_rng(8)
    t, p = rng.random((4, 5)).astype(np.float32), rng.random((4, 5)).astype(np.float32)
    np.testing.assert_allclose(charbonnier(t, p), np.mean(np.sqrt((p - t) ** 2 + 1e-6)), rtol=1e-5)


def test_recipe_model_save_load(tmp_path):
    model = sr_x2_recipe(expand=16, init="identity", qat=True)
    randomize(model, seed=9)
    model.save(tmp_path / "m.keras")
    x = np.random.default_rng(10).random((1, 6, 5, 1), np.float32)
    np.testing.assert_array_equal(keras.models.load_model(tmp_path / "m.keras")(x), model(x))


def test_train_writes_the_plain_deployable_net(tmp_path):
    """superres.train with collapsible blocks and QAT: model.keras is plain sr_x2 (7,340
    parameters, no training-only layers) computing what the trained net computes."""
    import keras

    from workbench.nets import superres
    from workbench.nets.layers import GroupConv2D
    from workbench.nets.models import load_model

    rng = np.random.default_rng(0)
    photos = [rng.random((40, 48, 3)).astype(np.float32) for _ in range(2)]
    # 4 steps in epochs of at most 3: 2 epochs of 2 (not 2 of 3: 6 steps, as it once was)
    recipe = SRRecipe(steps=4, batch=2, patch=12, expand=16, qat=False, init="identity",
                      steps_per_epoch=3)
    model, history = superres.train(photos, tmp_path / "run", recipe, verbose=0)
    saved = load_model(tmp_path / "run" / "model.keras")
    assert saved.count_params() == 7340 == sr_x2().count_params()
    assert [type(saved.get_layer(f"L{i}")) for i in range(1, 6)] == [GroupConv2D] * 5
    assert not any(isinstance(layer, (CollapsibleConv, Quantize8)) for layer in saved.layers)
    trained = keras.models.load_model(tmp_path / "run" / "checkpoint.keras")
    x = rng.random((1, 10, 9, 1)).astype(np.float32)
    np.testing.assert_allclose(saved(x), trained(x), atol=1e-5)
    assert len(history["loss"]) == 2 and int(trained.optimizer.iterations) == 4
    assert [superres.epoch_plan(s, 250) for s in (300, 2000, 301, 100)] == \
        [(2, 150), (8, 250), (2, 151), (1, 100)]


def test_a_family_member_trains_and_collapses_to_its_widths(tmp_path):
    """``widths``: another member of the family (here ~3K parameters), recorded in the run's
    config so that a resume builds the same net; model.keras is the plain sr_x2 of them."""
    import json

    from workbench.nets import superres
    from workbench.nets.models import load_model

    rng = np.random.default_rng(1)
    photos = [rng.random((40, 48, 3)).astype(np.float32) for _ in range(2)]
    superres.train(photos, tmp_path / "run", SRRecipe(steps=2, batch=2, patch=12, expand=16,
                                                       widths=(32, 16, 16, 12)), verbose=0)
    saved = load_model(tmp_path / "run" / "model.keras")
    assert saved.count_params() == 3200 == sr_x2(widths=(32, 16, 16, 12)).count_params()
    assert json.loads((tmp_path / "run" / "config.json").read_text())["widths"] == [32, 16, 16, 12]


def test_augmentation_and_distillation_are_in_the_run_config(tmp_path):
    """``flips``, ``scales`` and ``teacher`` are recorded in the run's config; a run with other
    augmentation does not resume the old one."""
    import json

    from workbench.nets import superres

    rng = np.random.default_rng(2)
    photos = [rng.random((40, 48, 3)).astype(np.float32) for _ in range(2)]
    plain = SRRecipe(steps=1, batch=2, patch=12, expand=16)
    superres.train(photos, tmp_path / "plain", plain, verbose=0)
    config = json.loads((tmp_path / "plain" / "config.json").read_text())
    assert config["flips"] is True and config["scales"] == [1.0] and config["train_images"] == 2
    superres.train(photos, tmp_path / "aug", plain.replace(flips=False, scales=(1.0, 0.8)),
                   verbose=0)
    config = json.loads((tmp_path / "aug" / "config.json").read_text())
    assert config["flips"] is False and config["scales"] == [1.0, 0.8]
    assert config["train_images"] == 2
    superres.train(photos, tmp_path / "aug", plain, verbose=0)
    assert [p.name.split("-")[0] for p in tmp_path.glob("aug.replaced-*")] == ["aug.replaced"]
    # distillation from a trained net (here the plain one): recorded with its weight
    teacher = tmp_path / "plain" / "model.keras"
    superres.train(photos, tmp_path / "taught", plain.replace(teacher=teacher, teacher_weight=0.3),
                   verbose=0)
    config = json.loads((tmp_path / "taught" / "config.json").read_text())
    assert config["teacher"] == str(teacher) and config["teacher_weight"] == 0.3


def test_ablation_verdict_reads_gaps_against_the_noise():
    from workbench.studies import sr_ablation

    def row(name, set5, set14, spread=None, seeds=1):
        return {"row": name, "seeds": seeds, "Set5 PSNR": set5, "Set14 PSNR": set14,
                "Set5 spread": spread, "Set14 spread": spread}

    bicubic = {"Set5": 33.68, "Set14": 30.33}
    one_seed = [row("base", 31.31, 28.80), row("+ identity init", 34.79, 31.24),
                row("+ collapsible blocks", 34.83, 31.27), row("+ QAT", 34.85, 31.28)]
    text = sr_ablation.verdict(one_seed, bicubic)
    lines = text.splitlines()
    assert lines[0] == "+ identity init: Set5 +3.48 dB (a gain), Set14 +2.44 dB (a gain)"
    assert "within the noise" in lines[1] and "a gain" not in lines[1]
    assert lines[3] == "Below bicubic at this budget: base."
    assert "(+ identity init, + collapsible blocks, + QAT are not told apart" in text
    assert "+1.17 vs bicubic" in text  # the top of the tied rows: + QAT
    # with seeds, the spreads decide: 0.1 dB apart with spreads of 0.02 is a gain
    seeded = [row("a", 34.0, 31.0, 0.02, 2), row("b", 34.1, 31.1, 0.02, 2)]
    text = sr_ablation.verdict(seeded, bicubic)
    assert text.startswith("b: Set5 +0.10 dB (a gain)") and "not told apart" not in text


def test_your_own_net_is_written_as_it_was_trained(tmp_path):
    """A net of one's own (ReLU6 / 6, widths, kernel sizes, groups not the reference's)
    trained through ``init_model``: model.keras, the deployable net, computes what the trained
    checkpoint computes (it was rebuilt with the default activation: 5.8 dB on Set5 where
    the checkpoint had 27.8)."""
    from workbench.nets import superres, training
    from workbench.nets.models import load_model

    keras.utils.set_random_seed(3)
    mine = sr_x2(widths=(32, 32, 24, 16), kernels=(5, 3, 3, 3), groups=(1, 2, 2, 1),
                 activation="relu6_scaled")
    mine.save(tmp_path / "mine.keras")
    rng = np.random.default_rng(4)
    photos = [rng.random((40, 48, 3)).astype(np.float32) for _ in range(2)]
    recipe = SRRecipe(steps=2, batch=2, patch=12, init_model=str(tmp_path / "mine.keras"))
    superres.train(photos, tmp_path / "run", recipe, verbose=0)
    trained = load_model(tmp_path / "run" / training.CHECKPOINT)
    written = load_model(tmp_path / "run" / "model.keras")
    x = rng.random((2, 13, 17, 1)).astype(np.float32)
    np.testing.assert_allclose(written(x), trained(x), atol=1e-6)
    assert {layer.activation for layer in written.layers if hasattr(layer, "activation")} \
        == {"relu6_scaled"}
    # config.json: the net that was trained (not the recipe's unused defaults), round-trips
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["net"] == {"widths": [32, 32, 24, 16], "kernels": [5, 3, 3, 3],
                             "groups": [1, 2, 2, 1], "activation": "relu6_scaled",
                             "parameters": mine.count_params()}
    assert SRRecipe.of_run(tmp_path / "run") == recipe.replace(steps_per_epoch=2)


def _espcn(activation="relu6"):
    """An ESPCN-style x2 net (not the sr_x2 layout): 5x5, 3x3, then 3x3 to 4 sub-pixels."""
    x = inputs = keras.Input((None, None, 1))
    x = keras.layers.Conv2D(16, 5, padding="same", activation=activation)(x)
    x = keras.layers.Conv2D(8, 3, padding="same", activation=activation)(x)
    x = keras.layers.Conv2D(4, 3, padding="same")(x)
    return keras.Model(inputs, DepthToSpace(2)(x), name="espcn")


@pytest.mark.parametrize("builder", [
    lambda: sr_x2(widths=(24, 16, 16, 8), kernels=(3, 5, 3, 1), groups=(1, 1, 2, 1),
                  activation="relu6_scaled"),
    _espcn], ids=["sr_x2-layout", "espcn"])
def test_a_builders_model_trains_as_built_and_is_written_as_trained(tmp_path, builder):
    """``superres.train(..., model=)``: a builder's net (the sr_x2 layout with its own options,
    or another layout) trains as it is; model.keras equals the trained checkpoint;
    config.json names that net: the same call finds the run done, another net replaces it."""
    from workbench.nets import superres, training
    from workbench.nets.models import load_model

    keras.utils.set_random_seed(5)
    rng = np.random.default_rng(6)
    photos = [rng.random((40, 48, 3)).astype(np.float32) for _ in range(2)]
    recipe = SRRecipe(steps=2, steps_per_epoch=1, batch=2, patch=12)
    mine = builder()
    superres.train(photos, tmp_path / "run", recipe, verbose=0, model=mine)
    trained = load_model(tmp_path / "run" / training.CHECKPOINT)
    written = load_model(tmp_path / "run" / "model.keras")
    x = rng.random((2, 13, 17, 1)).astype(np.float32)
    np.testing.assert_allclose(written(x), trained(x), atol=1e-6)
    assert trained.count_params() == mine.count_params()
    config = json.loads((tmp_path / "run" / training.CONFIG).read_text())
    assert config["net"]["parameters"] == mine.count_params()
    assert SRRecipe.of_run(tmp_path / "run") == recipe
    superres.train(photos, tmp_path / "run", recipe, verbose=0, model=builder())
    assert not list(tmp_path.glob("run.replaced-*"))
    other = sr_x2(widths=(8, 8, 8, 8), activation="relu6_scaled")
    superres.train(photos, tmp_path / "run", recipe, verbose=0, model=other)
    assert len(list(tmp_path.glob("run.replaced-*"))) == 1


def test_a_model_that_is_no_x2_net_is_refused_in_one_line(tmp_path):
    from workbench.nets import superres

    x = inputs = keras.Input((None, None, 1))
    same = keras.Model(inputs, keras.layers.Conv2D(1, 3, padding="same")(x), name="same")
    with pytest.raises(ValueError, match=r"^model: a 8x8x1 LR luma gives \(1, 8, 8, 1\); an x2"):
        superres.train([np.zeros((40, 48, 3), np.float32)], tmp_path / "run",
                       SRRecipe(steps=1, batch=1, patch=12), verbose=0, model=same)


@pytest.mark.parametrize("activation", ["bounded_relu", "relu6_scaled", "sigmoid_like"])
@pytest.mark.parametrize("expand", [None, 16])
def test_identity_init_passes_the_luma_through_any_activation(activation, expand):
    """Identity init starts as nearest upsampling whatever the activation (ReLU6 / 6 had
    divided the luma by 6 a layer: 8 dB on Set5 after training began); sigmoid_like, not
    linear from 0 to 1, within its closest line's error (0.064 a layer, 0.27 after five;
    without the gain 0.5 a layer)."""
    from workbench.nets import activations
    from workbench.nets.sr_recipes import identity_gain

    gain, bias = identity_gain(activation)
    v = np.linspace(0, 1, 101)
    through = activations.get(activation).np_fn(gain * v + bias)
    exact = activation != "sigmoid_like"
    np.testing.assert_allclose(through, v, atol=1e-6 if exact else 0.07)
    model = sr_x2_recipe(init="identity", activation=activation, expand=expand,
                         widths=(8, 8, 8, 8))
    x = np.random.default_rng(0).random((1, 6, 7, 1)).astype(np.float32)
    want = np.repeat(np.repeat(x, 2, axis=1), 2, axis=2)  # nearest upsampling
    error = np.abs(np.asarray(model(x)) - want).max()
    assert error < (1e-5 if exact else 0.3), error
