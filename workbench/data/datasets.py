"""Where the data lives, the SR benchmark sets, and SR training patches.

Images are float32 HxWx3 RGB in [0, 1] (see workbench.data.images); luma for training is full-range
BT.601 Y (0.299R + 0.587G + 0.114B), as the x2 SR net of docs/design.md, "The x2 SR net" sees it.
"""

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.data.images import (
    ImageError,
    degrade,
    imresize,
    load_image,
    modcrop,
    rgb_to_y,
    round_8bit,
    to_float,
    to_uint8,
)
from workbench.files import project_root

REPO_DATA = project_root() / "data"
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
    it degraded with kernels[k] (H/scale x W/scale, Y of the 8-bit degraded RGB).  With
    ``scales`` other than (1.0,), each source image appears once per factor (see
    :func:`sr_training_pairs`)."""

    scale: int
    kernels: tuple
    hr: list
    lr: list
    scales: tuple = (1.0,)

    @property
    def sources(self):
        """How many source images the pairs were made from."""
        return len(self.hr) // len(self.scales)


FSRCNN_SCALES = (1.0, 0.9, 0.8, 0.7, 0.6)  # FSRCNN's scale augmentation (Dong et al. 2016)


def sr_training_pairs(images, scale, kernels=("bicubic_aa",), scales=(1.0,)):
    """Precompute HR/LR luma once per (image, kernel); `images` is an SRSet, or a list of
    images or of (name, image) pairs, or pairs already made with this scale, these kernels and
    these scales (returned as they are: a study training several nets on the same data makes
    them once).  ``scales``: factors each image is also shrunk by before it becomes an HR image
    (scale augmentation, e.g. :data:`FSRCNN_SCALES`): MATLAB's antialiased bicubic, rounded to
    8 bits as a smaller photo saved as PNG would be."""
    scales = tuple(float(f) for f in scales)
    if not scales or not all(0 < f <= 1 for f in scales):
        raise ValueError(f"scales={scales}: want factors in (0, 1]")
    if isinstance(images, SRPairs):
        if (images.scale, images.kernels, images.scales) != (scale, tuple(kernels), scales):
            raise ValueError(f"training pairs made for x{images.scale} {images.kernels} scales "
                             f"{images.scales}, not x{scale} {tuple(kernels)} scales {scales}")
        return images
    items = images.images if isinstance(images, SRSet) else images
    hr, lr = [], []
    for f in scales:
        for item in items:
            rgb = item[1] if isinstance(item, tuple) else item
            if f != 1.0:
                rgb = round_8bit(np.clip(imresize(rgb, f), 0, 1))
            rgb = modcrop(rgb, scale)
            hr.append(rgb_to_y(rgb, range="full"))
            lr.append([rgb_to_y(degrade(rgb, scale, k), range="full") for k in kernels])
    return SRPairs(scale, tuple(kernels), hr, lr, scales)


def _dihedral(a, t):
    """One of the 8 flips/rotations of a 2-D array, t in 0..7."""
    a = np.rot90(a, t % 4)
    return a[:, ::-1] if t >= 4 else a


def sr_patches(pairs, patch, batch, seed, augment=True, teacher=None, teacher_weight=0.5):
    """Infinite tf.data.Dataset of (lr, hr) float32 batches, shapes (batch, patch, patch, 1) and
    (batch, patch*scale, patch*scale, 1): random image and kernel, aligned random crop (LR (i, j)
    <-> HR (scale*i, scale*j)), random flip/rot90 if augment. The same seed gives the same stream.
    ``teacher`` (distillation): a function from an LR batch to an HR-shaped batch (numpy, as
    above); the target is then ``(1 - teacher_weight) * hr + teacher_weight * teacher(lr)``.
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
            if teacher is not None:
                hr_b = ((1 - teacher_weight) * hr_b +
                        teacher_weight * np.asarray(teacher(lr_b))).astype(np.float32)
            yield lr_b, hr_b

    spec = (
        tf.TensorSpec((batch, patch, patch, 1), tf.float32),
        tf.TensorSpec((batch, patch * s, patch * s, 1), tf.float32),
    )
    ds = tf.data.Dataset.from_generator(batches, output_signature=spec)
    return ds.prefetch(tf.data.AUTOTUNE)


# --- image-folder classification datasets --------------------------------------------------
# Layout: <root>/<split>/<class>/<image> (split "train", "val" or "test"); labels are indices
# into the class-name list (sorted folder names, or the order of `classes`).  Batches are
# (float32 RGB in [0, 1], shape (N, size, size, 3); int32 labels).

CACHE_LIMIT_BYTES = 1 << 30  # decoded uint8 images kept in memory up to this size


def classification_root(name="cifar10", root=None):
    """``<data root>/cls/<name>`` (see :func:`data_root`); a clear error when it is absent."""
    base = data_root(root)
    folder = base / "cls" / name if base is not None else None
    if folder is None or not folder.is_dir():
        raise FileNotFoundError(
            f"classification data set {name!r} not found ({folder or 'no data root'}); set "
            "WORKBENCH_DATA or pass the data path, and put it there as image folders "
            "(train/<class>/*.jpg, test/<class>/*.jpg), e.g. with `python -m workbench fetch-data`")
    return folder


def imagenet120():
    """The 120 ImageNet classes of the dogs classifier: a list of dicts with ``wnid``,
    ``name``, ``imagenet_index`` (0..999) and ``words`` (the WordNet synonyms)."""
    import json

    return json.loads((Path(__file__).parent / "imagenet120.json").read_text())["classes"]


def image_files(source) -> list[Path]:
    """The image files (:data:`IMAGE_SUFFIXES`) a user's ``source`` names, in name order: a
    folder's, or a glob's matches; [] for anything else."""
    import glob

    path = Path(source).expanduser()
    found = sorted(path.iterdir()) if path.is_dir() else \
        sorted(map(Path, glob.glob(str(path)))) if glob.has_magic(str(source)) else []
    return [p for p in found if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES]


def image_folder_files(root, split, classes=None, limit=None):
    """``(paths, labels, class_names)`` of ``<root>/<split>/<class>/*`` (images only).

    ``classes``: the class folder names to use, in label order (e.g. the wnids of
    :func:`imagenet120`); default: every sub-folder, sorted.  ``limit``: keep the first
    ``limit`` files (by name) of each class.  A missing folder or a class without images
    raises, naming the path.
    """
    folder = Path(root) / split
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder (expected <root>/{split}/<class>/*)")
    names = list(classes) if classes is not None else sorted(
        p.name for p in folder.iterdir() if p.is_dir())
    if not names:
        raise ImageError(f"{folder}: no class folders")
    paths, labels = [], []
    for label, name in enumerate(names):
        if not (folder / name).is_dir():
            raise FileNotFoundError(f"{folder / name}: no such class folder")
        files = sorted(p for p in (folder / name).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise ImageError(f"{folder / name}: no images ({', '.join(IMAGE_SUFFIXES)})")
        paths += files[:limit]
        labels += [label] * len(files[:limit])
    return paths, np.array(labels, np.int32), names


def load_square_uint8(path, size):
    """An image file as uint8 (size, size, 3) RGB: the shorter side resized to ``size``
    (bilinear, antialiased), then the centre square; errors name the file."""
    from PIL import Image

    img = to_uint8(load_image(path))
    h, w = img.shape[:2]
    if (h, w) != (size, size):
        scale = size / min(h, w)
        nh, nw = max(size, round(h * scale)), max(size, round(w * scale))
        img = np.asarray(Image.fromarray(img).resize((nw, nh), Image.BILINEAR))
        y, x = (nh - size) // 2, (nw - size) // 2
        img = img[y:y + size, x:x + size]
    return img


def load_images_uint8(paths, size, workers=None):
    """``load_square_uint8`` over many files (threads): a uint8 (N, size, size, 3) array."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers or os.cpu_count()) as pool:
        return np.stack(list(pool.map(lambda p: load_square_uint8(p, size), paths)))


def augment_batch(images, pad):
    """Random horizontal flip and random ``size x size`` crop of the batch zero-padded by
    ``pad`` pixels (the usual CIFAR augmentation); ``images``: (N, size, size, C) tensor."""
    import tensorflow as tf

    shape = tf.shape(images)
    n, size = shape[0], shape[1]
    flip = tf.random.uniform([n, 1, 1, 1]) < 0.5
    images = tf.where(flip, images[:, :, ::-1], images)
    if not pad:
        return images
    padded = tf.pad(images, [[0, 0], [pad, pad], [pad, pad], [0, 0]])
    offsets = tf.random.uniform([n, 2], 0, 2 * pad + 1, tf.int32)
    rows = offsets[:, :1] + tf.range(size)[None]
    cols = offsets[:, 1:] + tf.range(size)[None]
    return tf.gather(tf.gather(padded, rows, axis=1, batch_dims=1), cols, axis=2, batch_dims=1)


def image_folder(root, split, size, *, batch=64, classes=None, limit=None, augment=False,
                 shuffle=None, repeat=False, cache=None):
    """A classification dataset from image folders: ``(tf.data.Dataset, class_names)``.

    Batches are ``(images, labels)``: float32 RGB in [0, 1] (N, size, size, 3) and int32
    class indices; images are resized and centre-cropped to ``size`` (see
    :func:`load_square_uint8`).  ``classes`` and ``limit``: see :func:`image_folder_files`.
    ``augment``: random flip and random crop with ``size // 8`` pixels of zero padding.
    ``shuffle``: a seed to reshuffle every epoch with (None: the files' order); ``repeat``
    makes the dataset infinite (for :func:`workbench.nets.training.fit`).  ``cache``: decode
    every image once and keep the uint8 array in memory (default: when it fits in 1 GB);
    otherwise files are decoded on the fly in parallel.
    """
    import tensorflow as tf

    paths, labels, names = image_folder_files(root, split, classes, limit)
    if cache is None:
        cache = len(paths) * size * size * 3 <= CACHE_LIMIT_BYTES
    if cache:
        ds = tf.data.Dataset.from_tensor_slices((load_images_uint8(paths, size), labels))
    else:
        ds = tf.data.Dataset.from_tensor_slices(([str(p) for p in paths], labels))
    if shuffle is not None:
        ds = ds.shuffle(len(paths), seed=shuffle, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    if not cache:
        def load(path, label):
            img = tf.numpy_function(lambda p: load_square_uint8(p.decode(), size), [path], tf.uint8)
            return tf.ensure_shape(img, (size, size, 3)), label

        ds = ds.map(load, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(batch).map(
        lambda x, y: (tf.cast(x, tf.float32) / 255.0, y), num_parallel_calls=tf.data.AUTOTUNE)
    if augment:
        ds = ds.map(lambda x, y: (augment_batch(x, size // 8), y),
                    num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE), names


def classification_arrays(root, split, size, limit=None, classes=None):
    """A whole image-folder split in memory: ``(images, labels, class_names)``, images float32
    (N, size, size, 3) in [0, 1] (8-bit levels), labels int."""
    dataset, names = image_folder(root, split, size, batch=256, limit=limit,
                                           classes=classes)
    images_, labels = zip(*[(x.numpy(), y.numpy()) for x, y in dataset])
    return np.concatenate(images_), np.concatenate(labels), names


def photos(size, count, root=None):
    """``count`` natural photos (the SR training set, or scikit-image's samples) as float32
    (count, size, size, 3) centre squares, for running a classifier with random weights."""
    folder = data_root(root)
    paths = sorted((folder / "sr" / "train").glob("*.jpg"))[:count] if folder else []
    if paths:
        squares = [load_square_uint8(p, size) for p in paths]
    else:
        squares = [to_uint8(imresize(img, output_shape=(size, size)))
                   for _, img in sr_images("train", root).images[:count]]
    return np.stack(squares).astype(np.float32) / 255
