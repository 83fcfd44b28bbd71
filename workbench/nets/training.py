"""Resumable training with Keras.

A run lives in one folder: ``checkpoint.keras`` (model and optimizer state, saved
atomically at the end of every epoch) and ``history.json`` (one entry per finished
epoch).  Calling :func:`fit` again on the same folder resumes where it stopped; a
finished run returns at once.  While :func:`fit` runs it holds a lock on ``<run>/.lock``, so
that a second training on the same folder stops at once instead of mixing its files in.  Any
Keras back end trains (``KERAS_BACKEND=jax`` as well as TensorFlow); a run may resume under
another back end than the one that started it.

A trainer's parameters are one :class:`Recipe` (``sr_recipes.SRRecipe``,
``classify.ClassifierRecipe``): a frozen dataclass, checked when made, whose :meth:`~Recipe.to_dict`
is the run's ``config.json`` and whose :meth:`~Recipe.from_dict` reads it back, of this format
or an older one.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Callable, ClassVar

import keras

from workbench.files import atomic_path, read_json, write_json
from workbench.nets.models import load_model

CHECKPOINT = "checkpoint.keras"
HISTORY = "history.json"
CONFIG = "config.json"
LOCK = ".lock"


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The base of a trainer's recipe: every training parameter, one frozen value.

    A subclass declares its fields with their defaults and checks them in :meth:`_check`
    (one-line ``ValueError`` naming the field, :meth:`_refuse`).  Lists become tuples and paths
    text when a recipe is made, so that two recipes of the same parameters are equal.
    ``RENAMED``: names older run configs gave fields; ``RUN_ENTRIES``: a run config's entries
    that are the run's, not the recipe's (kept beside the fields, skipped by :meth:`from_dict`).
    """
    RENAMED: ClassVar[dict[str, str]] = {}
    RUN_ENTRIES: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, list):
                object.__setattr__(self, field.name, tuple(value))
            elif isinstance(value, os.PathLike):
                object.__setattr__(self, field.name, os.fspath(value))
        self._check()

    def _check(self):
        """Refuse a field out of its range (:meth:`_refuse`); subclasses say what."""

    def _refuse(self, name, wanted):
        raise ValueError(f"{type(self).__name__}.{name} = {getattr(self, name)!r}: {wanted}")

    def _whole(self, *names, least=1, optional=False):
        """Each field of ``names`` is a whole number >= ``least`` (or None, if ``optional``)."""
        for name in names:
            value = getattr(self, name)
            if not (optional and value is None or is_whole(value, least)):
                self._refuse(name, f"want a whole number >= {least}"
                             + (" or None" if optional else ""))

    def _number(self, name, ok, wanted):
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
            self._refuse(name, wanted)

    def _positive(self, *names):
        for name in names:
            self._number(name, lambda v: v > 0, "want a number > 0")

    def _fraction(self, *names):
        for name in names:
            self._number(name, lambda v: 0 <= v <= 1, "want a number in [0, 1]")

    def _flag(self, *names):
        for name in names:
            if not isinstance(getattr(self, name), bool):
                self._refuse(name, "want True or False")

    def _choice(self, name, options):
        if getattr(self, name) not in options:
            self._refuse(name, f"want one of {', '.join(map(repr, options))}")

    def replace(self, **changes):
        """This recipe with ``changes`` (checked as a new one)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """Every field, JSON-able (tuples as lists): the run's ``config.json``."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def changed(self) -> dict:
        """The fields off their defaults (and those without one), as :meth:`to_dict` gives
        them: what a command line or a card names to make this recipe."""
        fields = dataclasses.fields(self)
        return {f.name: value for f, value in zip(fields, self.to_dict().values())
                if f.default is dataclasses.MISSING or value != _jsonable(f.default)}

    @classmethod
    def from_dict(cls, config: dict):
        """The recipe of :meth:`to_dict`'s dict, or of a run's ``config.json`` of an older
        format: a field it lacks takes its default (older runs left fields at their defaults
        out), an older name (``RENAMED``) is read as its field, ``RUN_ENTRIES`` are skipped;
        any other key is refused in one line."""
        names = [f.name for f in dataclasses.fields(cls)]
        values = {cls.RENAMED.get(k, k): v for k, v in config.items()
                  if k not in cls.RUN_ENTRIES}
        unknown = [k for k in values if k not in names]
        if unknown:
            raise ValueError(f"{cls.__name__}: no field {', '.join(map(repr, unknown))} "
                             f"(fields: {', '.join(names)})")
        return cls(**values)

    @classmethod
    def of_run(cls, run_dir):
        """The recipe a run trained with: its ``config.json`` (of any format)."""
        return cls.from_dict(read_json(Path(run_dir) / CONFIG))

    @classmethod
    def read_config(cls, saved: dict) -> dict:
        """A run's saved ``config.json`` in this format (:func:`fit` compares it with a new
        run's: an older run of the same recipe resumes); one that is no recipe of this kind
        as it is."""
        try:
            recipe = cls.from_dict(saved)
        except (ValueError, TypeError):
            return saved
        return {**recipe.to_dict(), **{k: v for k, v in saved.items() if k in cls.RUN_ENTRIES}}


def described(model) -> dict:
    """What a Keras model is, for a run's ``config.json``: its ``layers``, ``parameters`` and
    ``architecture``, the first 16 hex digits of the SHA-256 of its Keras
    config (layers, their options and connections; not its weights, and its layers' names
    as their places: the same builder called twice gives the same architecture)."""
    import hashlib

    places = {layer.name: f"#{i}" for i, layer in enumerate(model.layers)}
    places[model.name] = "model"

    def canonical(value):
        if isinstance(value, dict):
            return {k: canonical(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [canonical(v) for v in value]
        return places.get(value, value) if isinstance(value, str) else value

    config = json.dumps(canonical(model.get_config()), sort_keys=True, default=str)
    return {"layers": len(model.layers), "parameters": int(model.count_params()),
            "architecture": hashlib.sha256(config.encode()).hexdigest()[:16]}


def is_whole(value, least=1) -> bool:
    """``value`` is a whole number (not a bool) >= ``least``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _jsonable(value):
    return [_jsonable(v) for v in value] if isinstance(value, tuple) else value


class RunFolderBusy(FileExistsError):
    """Another training holds the run folder's lock; the message names the folder."""


@contextlib.contextmanager
def locked(run_dir: Path):
    """Hold an exclusive lock on ``run_dir`` (creating it) for the block; raises
    :class:`RunFolderBusy` at once if another process (or ``fit``) holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / LOCK, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderBusy(f"{run_dir}: another training is writing to this run folder; "
                                "wait for it to finish or choose another folder") from None
        yield  # closing the file releases the lock, also when the process dies


class AtomicCheckpoint(keras.callbacks.Callback):
    """Save the model (with optimizer state) and the history after every epoch."""

    def __init__(self, run_dir: Path, history: dict):
        super().__init__()
        self.run_dir = Path(run_dir)
        self.history = history
        self._start = time.time()

    def on_epoch_end(self, epoch, logs=None):
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(float(value))
        self.history["seconds"] = self.history.get("seconds", 0.0) + time.time() - self._start
        self._start = time.time()
        save_model(self.model, self.run_dir / CHECKPOINT)
        write_json(self.run_dir / HISTORY, self.history)


def save_model(model, path):
    """``model.save`` to ``path`` (a ``.keras`` file), atomically."""
    with atomic_path(path) as tmp:
        model.save(tmp)


def epochs_done(history: dict) -> int:
    return len(history.get("loss", []))


def fit(build: Callable[[], keras.Model], dataset, run_dir, epochs: int,
        steps_per_epoch: int, verbose=2, config=None, read_config=None, **fit_kwargs):
    """Train ``build()`` (a compiled model) for ``epochs`` x ``steps_per_epoch`` steps.

    ``dataset`` is an infinite ``tf.data.Dataset`` of ``(x, y)`` batches.  If
    ``run_dir`` holds a checkpoint made with the same ``config`` (a JSON-able dict of the
    run's parameters), training resumes from it (``build`` is not called); a run made with
    other parameters is moved aside to ``<run_dir>.replaced-<time>``, never deleted.
    ``read_config``: what the saved config is in ``config``'s format (default: as saved;
    :meth:`Recipe.read_config`: older runs of the same recipe resume).
    Returns ``(model, history)``; ``history[metric]`` has one value per epoch.  A folder
    another training is using raises :class:`RunFolderBusy` before anything is written.
    """
    run_dir = Path(run_dir)
    config = json.loads(json.dumps(config or {}, default=str))
    with contextlib.ExitStack() as held:
        held.enter_context(locked(run_dir))
        saved = read_json(run_dir / CONFIG, default={})
        if read_config:
            saved = read_config(saved)
        if (run_dir / HISTORY).exists() and saved != config:
            aside = run_dir.with_name(f"{run_dir.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
            run_dir.rename(aside)  # its lock goes with it
            print(f"{run_dir}: parameters changed; the previous run was moved to {aside}")
            held.enter_context(locked(run_dir))  # the new folder
        write_json(run_dir / CONFIG, config)
        history = read_json(run_dir / HISTORY, default={})
        checkpoint = run_dir / CHECKPOINT
        if checkpoint.exists() and epochs_done(history):
            model = load_model(checkpoint)
            # The checkpoint stores the XLA choice its back end made for jit_compile="auto"
            # (TensorFlow on a CPU: off; JAX: on); the running back end makes its own.
            model.jit_compile = model._resolve_auto_jit_compile()
            print(f"resuming {run_dir} at epoch {epochs_done(history)} of {epochs}")
        else:
            history = {}
            model = build()
        if epochs_done(history) < epochs:
            callbacks = [AtomicCheckpoint(run_dir, history)] + fit_kwargs.pop("callbacks", [])
            model.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch,
                      initial_epoch=epochs_done(history), verbose=verbose, shuffle=False,
                      callbacks=callbacks, **fit_kwargs)  # the dataset shuffles itself
    return model, history


def adam_l1(model, learning_rate, decay_steps, alpha=0.01):
    """Compile ``model`` with Adam, L1 loss and a cosine-decayed learning rate."""
    schedule = keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps, alpha=alpha)
    model.compile(optimizer=keras.optimizers.Adam(schedule), loss="mean_absolute_error")
    return model
