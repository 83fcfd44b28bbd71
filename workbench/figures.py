"""Figures: matplotlib, saved to ``figures/`` as PNG and SVG (atomically)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
    matplotlib.use("Agg")  # headless by default; notebooks keep their inline backend
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from workbench.files import atomic_path, figures_dir  # noqa: E402


def save_figure(fig, name, directory=None) -> list[Path]:
    """Save ``fig`` as ``<directory>/<name>.png`` and ``.svg``; returns the two paths."""
    directory = Path(directory) if directory else figures_dir()
    paths = []
    for ext in ("png", "svg"):
        path = directory / f"{name}.{ext}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, dpi=120, bbox_inches="tight")
        paths.append(path)
    return paths


def loss_curves(histories: dict[str, dict], title="training loss"):
    """One line per run: ``histories[label] = {"loss": [...]}`` (one value per epoch)."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    start = 0
    for label, history in histories.items():
        loss = history.get("loss", [])
        ax.plot(np.arange(start, start + len(loss)) + 1, loss, label=label)
        start += len(loss)
    ax.set_xlabel("epoch")
    ax.set_ylabel("L1 loss")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def crops_side_by_side(rows: dict[str, dict[str, np.ndarray]], crop=None):
    """A grid of images: one row per image name, one column per method.

    ``rows[image][method]`` is an HxWx3 float [0,1] image; ``crop = (y, x, size)``
    in the coordinates of the high-resolution image (default: a centred square).
    """
    methods = list(next(iter(rows.values())))
    fig, axes = plt.subplots(len(rows), len(methods),
                             figsize=(2.6 * len(methods), 2.6 * len(rows)), squeeze=False)
    for r, (image_name, images) in enumerate(rows.items()):
        for c, method in enumerate(methods):
            img = images[method]
            y, x, size = crop or _centre_crop(img.shape)
            ax = axes[r, c]
            ax.imshow(np.clip(img[y:y + size, x:x + size], 0, 1), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(method, fontsize=9)
            if c == 0:
                ax.set_ylabel(image_name, fontsize=9)
    fig.tight_layout()
    return fig


def _centre_crop(shape, size=96):
    size = min(size, shape[0], shape[1])
    return (shape[0] - size) // 2, (shape[1] - size) // 2, size


def difference_maps(rows: dict[str, dict[str, np.ndarray]], pairs=(("GPU", "TF"), ("GPU", "emulator")),
                    gain=32):
    """Per image, ``|a - b|`` (mean over RGB) for each pair of outputs, multiplied by ``gain``
    so that one 8-bit level shows (gain/255 of full scale)."""
    fig, axes = plt.subplots(len(rows), len(pairs), figsize=(3.2 * len(pairs), 3.0 * len(rows)),
                             squeeze=False)
    for r, (image_name, outputs) in enumerate(rows.items()):
        for c, (a, b) in enumerate(pairs):
            diff = np.abs(outputs[a].astype(np.float64) - outputs[b]).mean(axis=-1) * 255
            ax = axes[r, c]
            im = ax.imshow(diff, cmap="magma", vmin=0, vmax=255 / gain)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{image_name}: |{a} - {b}|, max {diff.max():.1f} levels", fontsize=8)
            fig.colorbar(im, ax=ax, fraction=0.046, label="8-bit levels")
    fig.tight_layout()
    return fig
