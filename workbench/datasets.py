"""Where the data lives, the SR benchmark sets, and SR training patches.

Images are float32 HxWx3 RGB in [0, 1] (see workbench.images); luma for training is full-range
BT.601 Y (0.299R + 0.587G + 0.114B), as the x2 SR net of DESIGN.md section 1a sees it.
"""

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .images import ImageError, degrade, load_image, modcrop, rgb_to_y, to_float

REPO_DATA = Path(__file__).resolve().parent.parent / "data"
SR_SETS = ("Set5", "Set14")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
# Colour photos that scikit-image ships inside its wheel (no download needed).
SKIMAGE_SAMPLES = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry")


def data_root(path=None):
    """The data folder: `path` if given, else $WORKBENCH_DATA if set, else <repo>/data if it holds
    anything but a README/.gitkeep; None when there is none. A given path that is missing raises.
    """
    if path is not None:
        if not Path(path).exists():
            raise FileNotFoundError(f"data root {path} (the path parameter) does not exist")
        return Path(path)
    env = os.environ.get("WORKBENCH_DATA", "")
    if env:
        if not Path(env).exists():
            raise FileNotFoundError(f"WORKBENCH_DATA={env} does not exist")
        return Path(env)
    if REPO_DATA.is_dir() and any(
        p.name != ".gitkeep" and not p.name.startswith("README") for p in REPO_DATA.iterdir()
    ):
        return REPO_DATA
    return None


@dataclass
class SRSet:
    """A named list of (image name, float32 HxWx3 RGB [0, 1]) pairs, sorted by file name."""

    name: str
    is_benchmark: bool
    images: list

    def __len__(self):
        return len(self.images)


def sr_images(name, root=None, limit=None):
    """Load the SR set `name` ("Set5", "Set14", "train", ...) from <data root>/sr/<name>/.

    Without a data root or that folder, falls back (with a warning) to scikit-image's sample
    photos, labelled is_benchmark=False. `limit` keeps the first N images.
    """
    base = data_root(root)
    folder = base / "sr" / name if base is not None else None
    if folder is None or not folder.is_dir():
        warnings.warn(
            f"SR set {name!r} not found ({folder or 'no data root'}); using scikit-image sample"
            f" photos, which are NOT {name}. Run `python -m workbench fetch-data` to get the data.",
            stacklevel=2,
        )
        return _skimage_samples(name, limit)
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ImageError(f"{folder}: no images ({', '.join(IMAGE_SUFFIXES)}) in this folder")
    images = [(p.stem, load_image(p)) for p in files[:limit]]
    return SRSet(name, name in SR_SETS, images)


def _skimage_samples(name, limit=None):
    import skimage.data

    images = [(s, to_float(getattr(skimage.data, s)())) for s in SKIMAGE_SAMPLES[:limit]]
    return SRSet(f"skimage-samples (NOT {name})", False, images)


@dataclass
class SRPairs:
    """Training pairs in full-range luma: hr[i] is image i modcropped (HxW float32), lr[i][k] is
    it degraded with kernels[k] (H/scale x W/scale, Y of the 8-bit degraded RGB)."""

    scale: int
    kernels: tuple
    hr: list
    lr: list


def sr_training_pairs(images, scale, kernels=("bicubic_aa",)):
    """Precompute HR/LR luma once per (image, kernel); `images` is an SRSet, or a list of
    images or of (name, image) pairs."""
    items = images.images if isinstance(images, SRSet) else images
    hr, lr = [], []
    for item in items:
        rgb = modcrop(item[1] if isinstance(item, tuple) else item, scale)
        hr.append(rgb_to_y(rgb, range="full"))
        lr.append([rgb_to_y(degrade(rgb, scale, k), range="full") for k in kernels])
    return SRPairs(scale, tuple(kernels), hr, lr)


def _dihedral(a, t):
    """One of the 8 flips/rotations of a 2-D array, t in 0..7."""
    a = np.rot90(a, t % 4)
    return a[:, ::-1] if t >= 4 else a


def sr_patches(pairs, patch, batch, seed, augment=True):
    """Infinite tf.data.Dataset of (lr, hr) float32 batches, shapes (batch, patch, patch, 1) and
    (batch, patch*scale, patch*scale, 1): random image and kernel, aligned random crop (LR (i, j)
    <-> HR (scale*i, scale*j)), random flip/rot90 if augment. The same seed gives the same stream.
    """
    import tensorflow as tf  # imported here so that loading images works without TF

    s = pairs.scale
    fits = [i for i, y in enumerate(pairs.hr) if min(y.shape) // s >= patch]
    if len(fits) < len(pairs.hr):
        warnings.warn(
            f"sr_patches: {len(pairs.hr) - len(fits)} images are smaller than patch={patch}"
            " (LR pixels) and are skipped",
            stacklevel=2,
        )
    if not fits:
        raise ImageError(f"sr_patches: patch={patch} is larger than every LR image")

    def batches():
        rng = np.random.default_rng(seed)
        while True:
            lr_b = np.empty((batch, patch, patch, 1), np.float32)
            hr_b = np.empty((batch, patch * s, patch * s, 1), np.float32)
            for b in range(batch):
                i = fits[rng.integers(len(fits))]
                lr = pairs.lr[i][rng.integers(len(pairs.kernels))]
                y, x = (rng.integers(n - patch + 1) for n in lr.shape)
                lr_p = lr[y : y + patch, x : x + patch]
                hr_p = pairs.hr[i][s * y : s * (y + patch), s * x : s * (x + patch)]
                t = rng.integers(8) if augment else 0
                lr_b[b, ..., 0], hr_b[b, ..., 0] = _dihedral(lr_p, t), _dihedral(hr_p, t)
            yield lr_b, hr_b

    spec = (
        tf.TensorSpec((batch, patch, patch, 1), tf.float32),
        tf.TensorSpec((batch, patch * s, patch * s, 1), tf.float32),
    )
    ds = tf.data.Dataset.from_generator(batches, output_signature=spec)
    return ds.prefetch(tf.data.AUTOTUNE)
