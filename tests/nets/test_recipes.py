"""Recipes (workbench.nets.training.Recipe): an SR or classifier training's parameters as one
value, checked when made, saved as the run's config.json and read back, of that format or the
one runs had before recipes."""
import json
from pathlib import Path

import numpy as np
import pytest

from workbench.nets import classify, superres, training
from workbench.nets.classify import ClassifierRecipe
from workbench.nets.sr_recipes import SRRecipe

from .test_classifier import make_folder


@pytest.mark.parametrize("cls, field, value", [
    (SRRecipe, "steps", 0), (SRRecipe, "batch", 2.5), (SRRecipe, "learning_rate", -1e-3),
    (SRRecipe, "loss", "l2"), (SRRecipe, "init", "zeros"), (SRRecipe, "anchor", "bicubic"),
    (SRRecipe, "anchor_storage", "log"), (SRRecipe, "qat", "yes"), (SRRecipe, "degradations", ()),
    (SRRecipe, "degradations", ("box",)), (SRRecipe, "widths", (32, 16)),
    (SRRecipe, "scales", (1.0, 1.2)), (SRRecipe, "teacher_weight", 2),
    (SRRecipe, "init_model", 3), (SRRecipe, "expand", 0),
    (ClassifierRecipe, "preset", "dogs"), (ClassifierRecipe, "net", "resnet"),
    (ClassifierRecipe, "activation", "swish"), (ClassifierRecipe, "bn_momentum", 1.5),
    (ClassifierRecipe, "classes", "imagenet"), (ClassifierRecipe, "optimizer", "sgd"),
    (ClassifierRecipe, "schedule", "linear"), (ClassifierRecipe, "epochs", 0),
    (ClassifierRecipe, "limit", 0), (ClassifierRecipe, "seed", -1),
    (ClassifierRecipe, "quantize", 1),
])
def test_a_recipe_refuses_a_bad_field_in_one_line_naming_it(cls, field, value):
    given = {"steps": 10} if cls is SRRecipe else {}
    with pytest.raises(ValueError) as err:
        cls(**{**given, field: value})
    assert str(err.value).startswith(f"{cls.__name__}.{field} = {value!r}: want ")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=f"^{cls.__name__}.{field} = "):
        cls(**given).replace(**{field: value})  # a changed recipe is checked too


def test_a_dict_with_a_key_no_recipe_field_has_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^SRRecipe: no field 'lr' \(fields: steps, "):
        SRRecipe.from_dict({"steps": 10, "lr": 1e-3})


@pytest.mark.parametrize("recipe", [
    SRRecipe(steps=300),
    SRRecipe(steps=40_000, batch=32, patch=64, learning_rate=1e-4, expand=256, qat=True,
             anchor="nearest", anchor_scale=0.75, anchor_storage="sqrt", widths=[32, 16, 16, 12],
             init_model=Path("runs/a/model.keras"), degradations=["bilinear", "lanczos"],
             flips=False, scales=(1.0, 0.9), teacher="models/sr_x2_large.keras",
             teacher_weight=0.3, seed=5),
    ClassifierRecipe(),
    ClassifierRecipe(preset="tiny", net="plain", activation="bounded_relu", data=Path("cls/x"),
                     classes=["a", "b"], input_size=20, limit=5, val_limit=2, epochs=3,
                     schedule="step", decay_start=2, decay_every=1, quantize=True),
], ids=["sr-defaults", "sr-all", "classifier-defaults", "classifier-all"])
def test_a_recipe_round_trips_through_its_dict(recipe):
    saved = json.loads(json.dumps(recipe.to_dict()))  # as config.json holds it
    assert type(recipe).from_dict(saved) == recipe
    assert saved == recipe.to_dict()
    assert type(recipe).from_dict(recipe.changed()) == recipe  # what a card names


def _interrupted_after_the_first_epoch(monkeypatch, train):
    """Run ``train()`` and stop it once its first epoch is saved (a checkpoint, history)."""
    save = training.AtomicCheckpoint.on_epoch_end

    def interrupted(self, epoch, logs=None):
        save(self, epoch, logs)
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(training.AtomicCheckpoint, "on_epoch_end", interrupted)
        with pytest.raises(KeyboardInterrupt):
            train()


def _resumes(run, old_config, train):
    """``run`` with its config in the format before recipes resumes where it stopped: the
    first epoch kept, not moved aside; its config is then the recipe's."""
    first = json.loads((run / training.HISTORY).read_text())["loss"]
    (run / training.CONFIG).write_text(json.dumps(old_config))
    _, history = train()
    assert history["loss"][:1] == first and len(history["loss"]) == 2
    assert not list(run.parent.glob("*.replaced-*"))
    return json.loads((run / training.CONFIG).read_text())


# config.json as superres.train / classify.train wrote it before recipes, for the recipes below
# (fields at their defaults left out; the classifier's classes as "class_names")
OLD_SR_CONFIG = {
    "steps": 2, "kernels": ["bicubic_aa"], "batch": 2, "patch": 12, "learning_rate": 0.002,
    "seed": 0, "steps_per_epoch": 1, "init_model": None, "train_images": 2, "loss": "l1",
    "init": "identity", "expand": 16, "qat": True, "anchor": "nearest", "anchor_scale": 0.75,
    "scales": [1.0, 0.8]}
OLD_CLASSIFIER_CONFIG = {
    "preset": "tiny", "data": "DATA", "class_names": ["a", "b", "c"], "input_size": 16,
    "epochs": 2, "batch": 6, "optimizer": "adam", "learning_rate": 0.01, "schedule": "cosine",
    "decay_start": None, "decay_every": None, "bn_momentum": 0.75, "augment": True,
    "quantize": True, "keep_best": 2, "limit": None, "steps_per_epoch": 3, "seed": 0,
    "activation": "sigmoid_like"}


def test_an_sr_run_saved_before_recipes_resumes(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    photos = [rng.random((40, 48, 3)).astype(np.float32) for _ in range(2)]
    recipe = SRRecipe(steps=2, steps_per_epoch=1, batch=2, patch=12, expand=16, qat=True,
                      anchor="nearest", anchor_scale=0.75, scales=(1.0, 0.8))
    run = tmp_path / "run"

    def train():
        return superres.train(photos, run, recipe, verbose=0)
    _interrupted_after_the_first_epoch(monkeypatch, train)
    resumed = _resumes(run, OLD_SR_CONFIG, train)  # (the old config named no net: the recipe's)
    assert resumed == {**recipe.to_dict(), "train_images": 2, "net": resumed["net"]}
    assert resumed["net"]["widths"] == [48, 32, 24, 16]  # the reference layout
    assert SRRecipe.from_dict(OLD_SR_CONFIG) == recipe
    # another recipe does not resume it
    superres.train(photos, run, recipe.replace(anchor_storage="sqrt"), verbose=0)
    assert len(list(tmp_path.glob("run.replaced-*"))) == 1


@pytest.mark.slow
def test_a_classifier_run_saved_before_recipes_resumes(tmp_path, monkeypatch):
    make_folder(tmp_path / "data", "train", n=6)
    make_folder(tmp_path / "data", "test", n=3, seed=1)
    recipe = ClassifierRecipe(preset="tiny", data=tmp_path / "data", epochs=2, batch=6,
                              keep_best=2, learning_rate=1e-2, quantize=True)
    run = tmp_path / "run"

    def train():
        return classify.train(run, recipe, verbose=0)
    _interrupted_after_the_first_epoch(monkeypatch, train)
    old = {**OLD_CLASSIFIER_CONFIG, "data": str(tmp_path / "data")}
    resolved = recipe.replace(classes=["a", "b", "c"], input_size=16, steps_per_epoch=3)
    assert _resumes(run, old, train) == resolved.to_dict()
    assert ClassifierRecipe.from_dict(old) == resolved
    (run / training.CONFIG).write_text(json.dumps(old))
    assert classify.finish(run)["classes"] == 3  # finish reads the old format too
