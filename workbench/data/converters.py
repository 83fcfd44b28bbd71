"""Converters of downloaded files into a data set's folder (a manifest entry's "convert"):
each ``converter(files, stage)`` writes the folder ``stage`` from the downloaded ``files``."""

import io
import os
import pickle
import shutil
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from workbench.data.catalog import FetchError


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists and numpy arrays only (a pickle can otherwise run any code)."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar"),
               ("_codecs", "encode")}  # how Python 3's protocol 2 writes bytes

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a data pickle")
        if module.startswith("numpy.core") and not hasattr(np, "core"):
            module = module.replace("numpy.core", "numpy._core")
        return super().find_class(module, name)


def cifar10_python(files, stage):
    """Write the CIFAR-10 python archive (cifar-10-python.tar.gz: data_batch_1..5, test_batch,
    batches.meta) as image folders: stage/train/<class>/NNNN.png (data_batch_1..5) and
    stage/test/<class>/NNNN.png (test_batch), numbered per class in archive order. The class
    folders are the archive's label_names (airplane ... truck, already sorted, so the labels
    workbench.data.datasets reads from the folders equal CIFAR-10's)."""
    from PIL import Image

    (archive,) = files
    with tarfile.open(archive) as tar:
        members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}

        def load(key):
            if key not in members:
                raise FetchError(f"{archive.name}: no {key} inside (not the CIFAR-10 python archive?)")
            try:
                return _ArrayUnpickler(tar.extractfile(members[key]), encoding="bytes").load()
            except Exception as e:
                raise FetchError(f"{archive.name}: {key} is not a CIFAR-10 batch ({e})") from None

        classes = [c.decode() if isinstance(c, bytes) else c
                   for c in load("batches.meta")[b"label_names"]]
        jobs = []
        for split, keys in (("train", [f"data_batch_{i}" for i in range(1, 6)]),
                            ("test", ["test_batch"])):
            counts = [0] * len(classes)
            for c in classes:
                (stage / split / c).mkdir(parents=True)
            for key in keys:
                batch = load(key)
                data, labels = np.asarray(batch[b"data"], np.uint8), list(batch[b"labels"])
                if data.ndim != 2 or data.shape != (len(labels), 3072):
                    raise FetchError(f"{archive.name}: {key} holds data of shape {data.shape} for"
                                     f" {len(labels)} labels, want ({len(labels)}, 3072)")
                images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
                for img, label in zip(images, labels):
                    if not 0 <= label < len(classes):
                        raise FetchError(f"{archive.name}: {key} has label {label}, want 0..9")
                    jobs.append((stage / split / classes[label] / f"{counts[label]:04d}.png", img))
                    counts[label] += 1

    def write(job):
        path, img = job
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="PNG")
        path.write_bytes(buf.getvalue())

    print(f"{archive.name}: writing {len(jobs)} PNG images (about a minute for CIFAR-10)")
    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
        list(pool.map(write, jobs))


def train291(files, dest):
    """T91's BMP files as ``t91_<name>.png`` (the same pixels, lossless), BSD200's PNG files
    copied as ``bsd200_<name>.png``: one flat folder, as ``sr/train291``."""
    from PIL import Image

    for file in files:
        if file.suffix.lower() == ".bmp":
            with Image.open(file) as image:
                image.convert("RGB").save(dest / f"t91_{file.stem}.png")
        else:
            shutil.copyfile(file, dest / f"bsd200_{file.name}")


CONVERTERS = {"cifar10-python": cifar10_python, "train291": train291}
