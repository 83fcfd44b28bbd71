"""Calibration images: what a deploy measures a net's ranges on, and checks it against the
reference runtime with (:mod:`workbench.es2.calibrate`, :mod:`workbench.es2.reference`).

A source is given as the user has it (:func:`images`):

- ``"cifar10:100"``: a data set of the data folder and a count: ``cls/<name>/train/<class>/``
  (or ``cls/<name>/<class>/`` for a set without splits, e.g. ``imagewoof_val``) taken a
  class at a time, in turn, so that every class is seen; or ``sr/<name>/`` (``Set5``,
  ``train``) in file order;
- a folder of images, or a glob (``"photos/*.jpg"``), in name order, ``:N`` for the first N.

Images come back as float32 HxWxC in [0, 1] on 8-bit levels: RGB, or its full-range luma for a
1-channel net; for a net of a fixed size each is resized (shorter side, bilinear) and its
centre cut to that size; for a net of any size the centre :data:`CROP` x :data:`CROP` (or the
whole image where it is smaller).
"""
from __future__ import annotations

import glob
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from workbench.data import datasets
from workbench.data.datasets import IMAGE_SUFFIXES
from workbench.data.images import load_image, rgb_to_y, to_uint8
from workbench.data.memory import require_bytes

CROP = 96  # side of the centre crop of a calibration image for a net of any input size
_COUNTED = re.compile(r"^(?P<source>.+?):(?P<count>\d+)$")


class Listed(NamedTuple):
    """A source (see the module) with its image files already :func:`listed`."""
    source: str
    paths: list
    where: str


def images(source, size=None, channels=3, root=None) -> tuple[list[np.ndarray], str]:
    """``(images, description)`` of ``source`` (see the module, or its :class:`Listed` files)
    for a net of input ``size``
    ``(height, width)`` (None: any) and ``channels`` (3, or 1: luma); the description says in
    a few words where they come from (``"100 images of cifar10 (train)"``).  A source that
    names nothing, or holds no image, is refused in one line naming it; so are images that
    would not fit the memory available (the uint8 and float32 copies of each, counted before
    any is read)."""
    if channels not in (1, 3):
        raise ValueError(f"calibration {source!r}: images for a net of {channels} input "
                         "channels; give the images as arrays (calibration=[HxWxC, ...])")
    if isinstance(source, Listed):
        source, paths, where = source
    else:
        paths, where = listed(source, root)
    if not paths:
        raise ValueError(f"calibration {source!r}: no images there ({', '.join(IMAGE_SUFFIXES)})")
    h, w = size or (CROP, CROP)
    require_bytes({"calibration images": len(paths) * h * w * (3 + 4 * channels)},
                  f"calibration {source!r}: {len(paths)} images of {w}x{h}",
                  "give fewer (a count, e.g. cifar10:100)")
    found = [_fitted(to_uint8(load_image(p)), size) for p in paths]
    if channels == 1:
        found = [np.round(rgb_to_y(x, "full") * 255)[..., None].astype(np.uint8) for x in found]
    return [x.astype(np.float32) / np.float32(255) for x in found], \
        f"{len(found)} images of {where}"


def listed(source, root=None) -> tuple[list[Path], str]:
    """The image files ``source`` (see the module) names, and how to call them."""
    text = str(source)
    match = _COUNTED.match(text)
    name, count = (match["source"], int(match["count"])) if match else (text, None)
    if count == 0:
        raise ValueError(f"calibration {source!r}: a count of 0 images")
    return _paths(name, count, root)


def _paths(name, count, root) -> tuple[list[Path], str]:
    """The image files ``name`` stands for (at most ``count``) and how to call them."""
    path = Path(name).expanduser()
    if path.is_dir() or glob.has_magic(name):
        return datasets.image_files(name)[:count], str(path) if path.is_dir() else name
    base = datasets.data_root(root)
    for folder, split in ((base / "cls" / name / "train", "train") if base else (None, None),
                          (base / "cls" / name, None) if base else (None, None)):
        if folder is not None and folder.is_dir() and any(p.is_dir() for p in folder.iterdir()):
            return _round_robin(folder, count), name + (f" ({split})" if split else "")
    if base is not None and (base / "sr" / name).is_dir():
        return datasets.image_files(base / "sr" / name)[:count], name
    raise ValueError(f"calibration {name!r}: no such folder, glob or data set (a data set is "
                     f"a folder of {base / 'cls' if base else 'the data folder (WORKBENCH_DATA)'}"
                     ", e.g. cifar10:100)")


def _round_robin(folder: Path, count) -> list[Path]:
    """The first ``count`` images of the class folders of ``folder``, one class at a time."""
    classes = [datasets.image_files(c) for c in sorted(folder.iterdir()) if c.is_dir()]
    out = [p for k in range(max(map(len, classes), default=0)) for c in classes if k < len(c)
           for p in [c[k]]]
    return out[:count]


def _fitted(image: np.ndarray, size) -> np.ndarray:
    """A uint8 HxWx3 image at ``size`` (shorter side resized, the centre cut), or its centre
    :data:`CROP` square where ``size`` is None."""
    from PIL import Image

    h, w = image.shape[:2]
    if size is None:
        top, left = max(0, (h - CROP) // 2), max(0, (w - CROP) // 2)
        return image[top:top + CROP, left:left + CROP].copy()  # (not a view of the whole)
    th, tw = size
    scale = max(th / h, tw / w)
    nh, nw = max(th, round(h * scale)), max(tw, round(w * scale))
    if (nh, nw) != (h, w):
        image = np.asarray(Image.fromarray(image).resize((nw, nh), Image.BILINEAR))
    top, left = (nh - th) // 2, (nw - tw) // 2
    return image[top:top + th, left:left + tw].copy()
