"""Resumable training (workbench.nets.training): one training per run folder at a time."""
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from workbench.nets import training


def _build():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def _data():
    x = np.random.default_rng(0).random((4, 2), np.float32)
    return tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(2).repeat()


def test_a_second_training_on_a_busy_run_folder_stops_naming_it(tmp_path):
    run = tmp_path / "run"
    training.fit(_build, _data(), run, epochs=1, steps_per_epoch=1, verbose=0, config={"a": 1})
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    # another process holds the lock, as a training running there does
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import fcntl, sys\n"
         f"f = open({str(run / training.LOCK)!r}, 'a'); fcntl.flock(f, fcntl.LOCK_EX)\n"
         "print('locked', flush=True); sys.stdin.read()")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        for config in ({"a": 1}, {"a": 2}):  # resuming, or moving the run aside: both wait
            with pytest.raises(training.RunFolderBusy, match=f"^{run}: another training is "
                               "writing to this run folder") as err:
                training.fit(_build, _data(), run, epochs=2, steps_per_epoch=1, verbose=0,
                             config=config)
            assert "\n" not in str(err.value)
            assert {p.name: p.read_bytes() for p in run.iterdir()} == before
            assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    finally:
        holder.communicate("")
    _, history = training.fit(_build, _data(), run, epochs=2, steps_per_epoch=1, verbose=0,
                              config={"a": 1})  # free again: resumes
    assert len(history["loss"]) == 2


def test_the_lock_is_released_when_training_fails(tmp_path):
    def broken():
        raise RuntimeError("no model")

    with pytest.raises(RuntimeError, match="no model"):
        training.fit(broken, _data(), tmp_path / "run", epochs=1, steps_per_epoch=1, verbose=0)
    with training.locked(tmp_path / "run"):
        pass
