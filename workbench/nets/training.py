"""Resumable training with Keras.

A run lives in one folder: ``checkpoint.keras`` (model and optimizer state, saved
atomically at the end of every epoch) and ``history.json`` (one entry per finished
epoch).  Calling :func:`fit` again on the same folder resumes where it stopped; a
finished run returns at once.  While :func:`fit` runs it holds a lock on ``<run>/.lock``, so
that a second training on the same folder stops at once instead of mixing its files in.  Any
Keras back end trains (``KERAS_BACKEND=jax`` as well as TensorFlow); a run may resume under
another back end than the one that started it.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import time
from pathlib import Path
from typing import Callable

import keras

from workbench.files import atomic_path, read_json, write_json
from workbench.nets.models import load_model

CHECKPOINT = "checkpoint.keras"
HISTORY = "history.json"
CONFIG = "config.json"
LOCK = ".lock"


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
        steps_per_epoch: int, verbose=2, config=None, **fit_kwargs):
    """Train ``build()`` (a compiled model) for ``epochs`` x ``steps_per_epoch`` steps.

    ``dataset`` is an infinite ``tf.data.Dataset`` of ``(x, y)`` batches.  If
    ``run_dir`` holds a checkpoint made with the same ``config`` (a JSON-able dict of the
    run's parameters), training resumes from it (``build`` is not called); a run made with
    other parameters is moved aside to ``<run_dir>.replaced-<time>``, never deleted.
    Returns ``(model, history)``; ``history[metric]`` has one value per epoch.  A folder
    another training is using raises :class:`RunFolderBusy` before anything is written.
    """
    run_dir = Path(run_dir)
    config = json.loads(json.dumps(config or {}, default=str))
    with contextlib.ExitStack() as held:
        held.enter_context(locked(run_dir))
        if (run_dir / HISTORY).exists() and read_json(run_dir / CONFIG, default={}) != config:
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
