"""Sample inputs of a net: what the bundle, the page's self-check and the ONNX storage check
run when the user gives none."""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.data import datasets


def test_images(graph: ir.Graph, count=2, size=(64, 64)) -> list[tuple[str, np.ndarray]]:
    """``count`` inputs of the net's size (``size`` for a net of any size) as float32
    HxWxC on 8-bit levels: centre crops of Set5 when the data root has it (RGB nets), else
    deterministic synthetic images (smooth gradients plus seeded noise)."""
    h, w = graph.input_size or size
    c = graph.input.channels
    found = []
    root = datasets.data_root()
    if c == 3 and root is not None and (root / "sr" / "Set5").is_dir():
        for name, image in datasets.sr_images("Set5", root).images:
            top, left = (image.shape[0] - h) // 2, (image.shape[1] - w) // 2
            if top >= 0 and left >= 0 and len(found) < count:
                found.append((f"Set5-{name}", image[top:top + h, left:left + w]))
    for i in range(len(found), count):
        y, x = np.mgrid[0:h, 0:w] / np.float32(max(h, w))
        channels = [0.5 + 0.4 * np.sin(2 * np.pi * ((k + 1) * x + (i + 1) * y + k / c))
                    for k in range(c)]
        noise = np.random.default_rng(i).normal(0, 0.05, (h, w, c))
        found.append((f"synthetic-{i}", np.stack(channels, -1) + noise))
    return [(name, (np.round(np.clip(image, 0, 1) * 255) / 255).astype(np.float32))
            for name, image in found]
