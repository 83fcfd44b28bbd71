"""Reading a model file of any kind the workbench takes (:func:`load_model`): a ``.keras``
file (Keras and TensorFlow imported then), an ``.onnx`` file (ONNX Runtime, no TensorFlow),
a Beatmup chunk file; errors that name the file."""
from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path

from workbench.files import readable_file


class ModelFileError(ValueError):
    """A model file that cannot be read (corrupt, truncated, not a model); names the file."""


def load_model(path, input_size=None):
    """``keras.models.load_model`` with the workbench's layers registered, and errors that
    name the file: a missing file, or one that is not a readable model (corrupt, truncated).
    An ``.onnx`` file gives an :class:`workbench.nets.onnx_model.OnnxModel` (called as a
    Keras model is, ONNX Runtime computing); ``input_size`` ``(height, width)`` fixes its
    dynamic input size (a Keras model has its own).  A Beatmup chunk file (``.chunks``) gives
    its net as a Keras model (:func:`workbench.nets.beatmup_model.load`)."""
    try:
        path = readable_file(path)  # (a folder, a FIFO, a device: one line saying which)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such model file") from None
    if path.suffix.lower() == ".onnx":
        from workbench.nets import onnx_model

        return onnx_model.load(path, input_size)
    if path.suffix.lower() == ".chunks":
        if input_size is not None:
            raise ValueError(f"{path}: a Beatmup model has its own input size (its image_sampler)")
        from workbench.nets import beatmup_model

        return beatmup_model.load(path)
    if input_size is not None:
        raise ValueError(f"{path}: an input size is for ONNX models with a dynamic size; a "
                         "Keras model has its own (keras.Input((height, width, channels)))")
    if path.suffix.lower() == ".keras" and not zipfile.is_zipfile(path):
        raise ModelFileError(f"{path}: corrupt or truncated .keras model (not a zip archive)")
    suffix = path.suffix.lower()
    if suffix in (".keras", ".h5", ".hdf5") and path.suffix != suffix:  # Keras reads the
        with tempfile.TemporaryDirectory() as tmp:                      # lower-case ones
            link = Path(tmp) / f"model{suffix}"
            link.symlink_to(path.absolute())
            return _keras(link, path)
    return _keras(path, path)


def _keras(path, source):
    """The Keras model in ``path``; errors name ``source``, the file the user gave."""
    import keras

    from workbench.nets import layers  # noqa: F401  (registers the custom layers)

    try:
        return keras.models.load_model(path)
    except Exception as e:  # Keras, h5py and zipfile raise many kinds; keep the first line
        lambdas = _lambda_layers(path) if "Lambda" in str(e) else []
        if lambdas:
            raise ModelFileError(
                f"{source}: layer {lambdas[0]!r} is a Lambda layer, Python code stored in the "
                "file: the workbench loads models in Keras' safe mode, which does not run it "
                "(and no shader could); build the model from standard layers") from None
        first = (str(e).strip().splitlines() or [""])[0]
        raise ModelFileError(f"{source}: not a readable Keras model ({type(e).__name__}: "
                             f"{first})") from e


def _lambda_layers(path) -> list[str]:
    """Names of the Lambda layers in a ``.keras`` file's config (without loading it)."""
    import json

    try:
        with zipfile.ZipFile(path) as z:
            config = json.loads(z.read("config.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return []
    found = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("class_name") == "Lambda":
                found.append(node.get("config", {}).get("name", "?"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(config)
    return found
