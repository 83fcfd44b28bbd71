"""Image classification with the dogs-classifier family (docs/design.md, "The dogs classifier").

Conventions: images are float32 RGB in [0, 1], (N, H, W, 3); labels are int class indices;
models output logits (softmax on the CPU); top-1 accuracy is a fraction in [0, 1].

A training run lives in one folder: ``checkpoint.keras``, ``history.json`` (training and
validation loss and top-1 per epoch) and ``config.json``, its :class:`ClassifierRecipe` (see
:mod:`workbench.nets.training`: re-running resumes, a run with changed settings is moved
aside), and ``best/epochNNN.keras``,
the k checkpoints with the best validation top-1.
A dataset without a ``val`` split is validated on its ``test`` split (CIFAR-10): the best
epochs are then chosen on the test set, so the last epoch's top-1 is the unbiased number.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from workbench.data import datasets
from workbench.files import read_json
from workbench.nets import activations, training
from workbench.nets.models import (CLASSIFIER_PRESETS, dogs_classifier, load_model,
                                   plain_classifier)

BEST_DIR = "best"
OPTIMIZERS = {"adam": keras.optimizers.Adam, "rmsprop": keras.optimizers.RMSprop}
SCHEDULES = ("cosine", "step", "constant")


def lr_schedule(kind, learning_rate, epochs, steps_per_epoch, decay_start=None,
                decay_every=None):
    """The learning rate per step.  ``"cosine"``: cosine decay to 1 % over the run;
    ``"step"``: constant for ``decay_start`` epochs, then halved every ``decay_every``
    epochs (the reference: 0.01 for 400 epochs, halved every 50 up to 600; by default the
    same proportions, 2/3 and 1/12 of ``epochs``); ``"constant"``."""
    if kind == "cosine":
        return keras.optimizers.schedules.CosineDecay(
            learning_rate, epochs * steps_per_epoch, alpha=0.01)
    if kind == "step":
        start = epochs * 2 // 3 if decay_start is None else decay_start
        every = max(1, epochs // 12) if decay_every is None else decay_every
        halvings = range(max(0, math.ceil((epochs - start) / every)))
        boundaries = [(start + k * every) * steps_per_epoch for k in halvings]
        values = [learning_rate * 0.5 ** k for k in range(len(boundaries) + 1)]
        return (keras.optimizers.schedules.PiecewiseConstantDecay(boundaries, values)
                if boundaries else learning_rate)
    if kind == "constant":
        return learning_rate
    raise ValueError(f"unknown lr schedule {kind!r}; use one of {', '.join(SCHEDULES)}")


def compile_classifier(model, optimizer="adam", learning_rate=1e-3):
    """Compile with Adam or RMSprop (``learning_rate``: a number or a schedule), sparse
    cross-entropy on logits and top-1 ``accuracy``."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of {', '.join(OPTIMIZERS)}")
    model.compile(optimizer=OPTIMIZERS[optimizer](learning_rate),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    return model


def class_list(classes):
    """``None`` (every class folder), a list of folder names, or ``"imagenet120"`` (the
    wnids of :func:`workbench.data.datasets.imagenet120`)."""
    if classes == "imagenet120":
        return [c["wnid"] for c in datasets.imagenet120()]
    return classes


def validation_split(root):
    """``"val"`` if ``<root>/val`` exists, else ``"test"``."""
    return "val" if (Path(root) / "val").is_dir() else "test"


def evaluate(model, dataset):
    """Top-1 accuracy (fraction) of ``model`` (logits) on a finite dataset of
    ``(images, labels)`` batches."""
    @tf.function(reduce_retracing=True)
    def hits(x, y):
        predicted = tf.argmax(model(x, training=False), -1, output_type=tf.int32)
        return tf.reduce_sum(tf.cast(tf.equal(predicted, tf.cast(y, tf.int32)), tf.int32))

    correct = count = 0
    for x, y in dataset:
        correct, count = correct + int(hits(x, y)), count + len(y)
    return correct / count


def average_checkpoints(paths):
    """The model of ``paths[0]`` with every weight (BatchNorm statistics included) replaced
    by its mean over the ``.keras`` checkpoints ``paths`` (same architecture)."""
    if not paths:
        raise ValueError("average_checkpoints: no checkpoints given")
    model = load_model(paths[0])
    sums = [w.astype(np.float64) for w in model.get_weights()]
    for path in paths[1:]:
        for total, w in zip(sums, load_model(path).get_weights()):
            total += w
    model.set_weights([(s / len(paths)).astype(w.dtype)
                       for s, w in zip(sums, model.get_weights())])
    return model


def calibrate_batchnorm(model, images):
    """Set every BatchNorm's moving mean and variance to the statistics of its input over
    ``images`` (one batch, e.g. 20 images), in inference mode; for nets with random weights.

    One forward pass in training mode with momentum 0: each BatchNorm then sees inputs
    normalised with the statistics its predecessors were just given.  Returns ``model``.
    """
    bns = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    momenta = [bn.momentum for bn in bns]
    try:
        for bn in bns:
            bn.momentum = 0.0
        model(tf.convert_to_tensor(images, tf.float32), training=True)
    finally:
        for bn, momentum in zip(bns, momenta):
            bn.momentum = momentum
    return model


@dataclasses.dataclass(frozen=True)
class ClassifierRecipe(training.Recipe):
    """Every parameter of a classifier training (:func:`train`), checked when made; the run's
    ``config.json``.

    The net: ``dogs_classifier(preset)`` (``net="plain"``: :func:`plain_classifier` at the
    preset's input size) with ``activation`` (a registered name, :mod:`workbench.nets.activations`),
    BatchNorm momentum ``bn_momentum``, ``quantize``: quantisation-aware training (8-bit
    activations, :class:`workbench.nets.layers.Quantize8`).  The data: the image folders
    ``data`` (default: CIFAR-10 under the data root), ``classes`` (:func:`class_list`),
    ``input_size`` (default the preset's), ``limit`` images a class (default all),
    ``val_limit`` images a class of the validation split (default ``limit``), ``augment``:
    random flips and crops.  The optimisation: ``epochs`` of ``steps_per_epoch`` (default one
    pass over the training images) batches of ``batch``, ``optimizer`` (:data:`OPTIMIZERS`) at
    ``learning_rate`` on the ``schedule`` of :func:`lr_schedule`; the ``keep_best`` best
    checkpoints by validation top-1 are kept.  ``init_model``: the path of a ``.keras``
    classifier of one's own to train instead (as it is: its layers, activations, widths; the
    preset's net fields then unused), its input size and classes the data's.  A run's recipe
    (:func:`train`) has ``data``, ``classes``, ``input_size`` and ``steps_per_epoch``
    resolved.
    """
    preset: str = "cifar10"
    net: str = "dogs"
    activation: str = "sigmoid_like"
    bn_momentum: float = 0.75
    quantize: bool = False
    data: str | None = None
    classes: str | tuple[str, ...] | None = None
    input_size: int | None = None
    limit: int | None = None
    val_limit: int | None = None
    augment: bool = True
    epochs: int = 20
    steps_per_epoch: int | None = None
    batch: int = 64
    optimizer: str = "adam"
    learning_rate: float = 3e-3
    schedule: str = "cosine"
    decay_start: int | None = None
    decay_every: int | None = None
    keep_best: int = 3
    seed: int = 0
    init_model: str | None = None

    RENAMED = {"class_names": "classes"}  # runs before recipes named their resolved classes so
    RUN_ENTRIES = ("model",)  # a model given to train(): training.described

    def _check(self):
        self._choice("preset", tuple(CLASSIFIER_PRESETS))
        self._choice("net", ("dogs", "plain"))
        self._choice("optimizer", tuple(OPTIMIZERS))
        self._choice("schedule", SCHEDULES)
        self._whole("epochs", "batch", "keep_best")
        self._whole("seed", least=0)
        self._whole("decay_start", least=0, optional=True)
        self._whole("input_size", "limit", "val_limit", "steps_per_epoch", "decay_every",
                    optional=True)
        self._positive("learning_rate")
        self._fraction("bn_momentum")
        self._flag("quantize", "augment")
        if not isinstance(self.data, (str, type(None))):
            self._refuse("data", "want an image-folder dataset's path, or None")
        if not isinstance(self.init_model, (str, type(None))):
            self._refuse("init_model", "want a .keras model's path, or None")
        if not (self.classes in (None, "imagenet120") or isinstance(self.classes, tuple)
                and all(isinstance(c, str) for c in self.classes)):
            self._refuse("classes", "want None, 'imagenet120' or a list of class folder names")
        try:
            activations.get(self.activation)
        except ValueError as err:
            self._refuse("activation", f"want a registered activation ({err})")


def train(run_dir, recipe: ClassifierRecipe, verbose=2, model=None):
    """Train the net of ``recipe`` (:class:`ClassifierRecipe`) on its data, or ``model``, a
    Keras classifier of one's own (a builder's output, trained as it is; ``config.json``
    names it: :func:`training.described`); resumable.
    Validation after every epoch (``val`` split, else ``test``); the ``keep_best`` best
    checkpoints by validation top-1 are kept.  Returns ``(model, history)``: the last model and
    ``history[metric]`` per epoch (``loss``, ``accuracy``, ``val_loss``, ``val_accuracy``;
    training metrics are on augmented batches)."""
    if model is not None and recipe.init_model:
        raise ValueError(f"classify.train: give model or the recipe's init_model "
                         f"({recipe.init_model}), not both")
    run_dir = Path(run_dir)
    root = Path(recipe.data) if recipe.data else datasets.classification_root("cifar10")
    paths, _, names = datasets.image_folder_files(root, "train", class_list(recipe.classes),
                                                  recipe.limit)
    recipe = recipe.replace(  # as the run records it: the data, classes and sizes it found
        data=str(root), classes=names,
        input_size=recipe.input_size or CLASSIFIER_PRESETS[recipe.preset]["input_size"],
        steps_per_epoch=recipe.steps_per_epoch or math.ceil(len(paths) / recipe.batch))
    keras.utils.set_random_seed(recipe.seed)
    train_ds, _ = datasets.image_folder(root, "train", recipe.input_size, batch=recipe.batch,
                                        classes=names, limit=recipe.limit,
                                        augment=recipe.augment, shuffle=recipe.seed,
                                        repeat=True)
    val_ds = validation_data(recipe)

    given = model if model is not None else recipe.init_model
    if given is not None:
        given = _own_model(given, recipe.input_size, len(names))

    def build():
        if given is not None:
            net = given
        else:
            builder = {"dogs": functools.partial(dogs_classifier, recipe.preset),
                       "plain": plain_classifier}[recipe.net]
            net = builder(input_size=recipe.input_size, classes=len(names),
                          activation=recipe.activation, bn_momentum=recipe.bn_momentum,
                          quantize=recipe.quantize)
        rate = lr_schedule(recipe.schedule, recipe.learning_rate, recipe.epochs,
                           recipe.steps_per_epoch, recipe.decay_start, recipe.decay_every)
        return compile_classifier(net, recipe.optimizer, rate)

    config = {**recipe.to_dict(),
              **({"model": training.described(model)} if model is not None else {})}
    return training.fit(build, train_ds, run_dir, recipe.epochs, recipe.steps_per_epoch, verbose,
                        config=config, read_config=ClassifierRecipe.read_config,
                        validation_data=val_ds, callbacks=[KeepBest(run_dir, recipe.keep_best)])


def _own_model(given, input_size, classes):
    """The classifier ``given`` (a Keras model, or a ``.keras`` file's path), checked against
    the data: an input of ``input_size`` x ``input_size`` x 3 and ``classes`` outputs, else
    one line naming it."""
    from workbench.nets.model_files import load_model

    model = given if isinstance(given, keras.Model) else load_model(given)
    shape, out = tuple(model.input_shape[1:]), model.output_shape[-1]
    name = f"model {model.name!r}" if given is model else f"init_model {given}"
    if shape[:2] not in ((input_size, input_size), (None, None)) or shape[2] != 3 \
            or out != classes:
        raise ValueError(f"{name}: takes {shape} and gives {out} outputs; the data "
                         f"is {input_size}x{input_size}x3 images of {classes} classes")
    return model


class KeepBest(keras.callbacks.Callback):
    """Keep the ``k`` best checkpoints by validation top-1 as ``best/epochNNN.keras``
    (epochs from 1).  Runs after :class:`workbench.nets.training.AtomicCheckpoint`, which has
    written this epoch's ``val_accuracy`` to ``history.json``."""

    def __init__(self, run_dir, k):
        super().__init__()
        self.run_dir, self.k = Path(run_dir), int(k)

    def on_epoch_end(self, epoch, logs=None):
        path = self.run_dir / BEST_DIR / f"epoch{epoch + 1:03d}.keras"
        ranked = best_checkpoints(self.run_dir, extra=[path])
        if path in ranked[:self.k]:
            training.save_model(self.model, path)
        for old in ranked[self.k:]:
            old.unlink(missing_ok=True)


def best_checkpoints(run_dir, extra=()):
    """The checkpoints in ``<run_dir>/best`` (and ``extra`` paths), best validation top-1
    first (ties: earlier epoch first)."""
    run_dir = Path(run_dir)
    accuracy = read_json(run_dir / training.HISTORY)["val_accuracy"]
    paths = set((run_dir / BEST_DIR).glob("epoch*.keras")) | set(extra)
    epoch = {p: int(p.stem[len("epoch"):]) for p in paths}
    return sorted(paths, key=lambda p: (-accuracy[epoch[p] - 1], epoch[p]))


def validation_data(recipe: ClassifierRecipe):
    """The validation batches of a run's recipe (:meth:`ClassifierRecipe.of_run`): the data's
    validation split, ``val_limit`` images per class (``limit`` when not given)."""
    limit = recipe.limit if recipe.val_limit is None else recipe.val_limit
    ds, _ = datasets.image_folder(recipe.data, validation_split(recipe.data), recipe.input_size,
                                  batch=256, classes=list(recipe.classes), limit=limit)
    return ds


def finish(run_dir, export="last"):
    """Top-1 on the validation split of the last, the best and the average of the k best
    checkpoints (:func:`final_models`) of a finished run; saves the ``export`` one
    (``"last"``, ``"best"`` or ``"average"``) as ``<run_dir>/model.keras``.  Returns a
    dict for ``results.json``.

    ``"last"`` is the default: the cosine schedule ends at its lowest rate, and "best" and
    "average" are chosen on the validation split (the test set for CIFAR-10).  On short runs
    the average is worse than the last checkpoint (8 epochs: 63.0 % vs 63.9 %), because
    its early epochs are far apart in weights."""
    if export not in ("average", "best", "last"):
        raise ValueError(f"export must be 'average', 'best' or 'last', not {export!r}")
    run_dir = Path(run_dir)
    recipe = ClassifierRecipe.of_run(run_dir)
    split = validation_split(recipe.data)
    val_ds = validation_data(recipe)
    models = final_models(run_dir)
    top1 = {label: evaluate(model, val_ds) for label, model in models.items()}
    label = next(k for k in models if k.startswith(export))
    training.save_model(models[label], run_dir / "model.keras")
    return {"preset": recipe.preset, "data": recipe.data, "validation_split": split,
            "classes": len(recipe.classes), "quantize": recipe.quantize,
            "epochs": recipe.epochs, "params": models[label].count_params(), "top1": top1,
            "exported": label,
            "best_epochs": [int(p.stem[len("epoch"):]) for p in best_checkpoints(run_dir)],
            "note": ("the best epochs were chosen on this split, so only 'last' is unbiased"
                     if split == "test" else "")}


def final_models(run_dir):
    """``{"last", "best", "average of k best"}`` models of a finished run (the last is the
    training checkpoint; the others come from the k best epochs by validation top-1)."""
    run_dir = Path(run_dir)
    best = best_checkpoints(run_dir)
    return {"last": load_model(run_dir / training.CHECKPOINT),
            "best": load_model(best[0]),
            f"average of {len(best)} best": average_checkpoints(best)}


def curves_figure(history, title="classifier training"):
    """Loss and top-1 per epoch, training (augmented batches) and validation."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, key, label in ((axes[0], "loss", "cross-entropy loss"),
                           (axes[1], "accuracy", "top-1 accuracy")):
        for prefix, name in (("", "training"), ("val_", "validation")):
            values = history.get(prefix + key, [])
            ax.plot(np.arange(1, len(values) + 1), values, marker=".", label=name)
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    return fig
