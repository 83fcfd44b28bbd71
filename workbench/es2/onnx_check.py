"""What the 8-bit storage costs a net that never saw it (an ONNX net trained in PyTorch).

Every op's output is stored in RGBA8 textures: values in [0, 1] in steps of 1/255.  A net
trained with the workbench's fake quantisation learnt that; a PyTorch net did not: a ReLU's
output above 1 is clipped, small values are rounded.  :func:`ranges` runs ONNX Runtime beside
the emulator on sample images and reports, per layer, the ONNX tensor the layer stands for
(:attr:`workbench.ir.Graph.origin`), its range, the share of its values the storage clips,
and the PSNR of the stored values against ONNX Runtime's; :func:`require` refuses a net whose
values leave [0, 1] by more than the storage carries, naming the layer and the two fixes.
(A deploy is judged by the reference check instead, :mod:`workbench.es2.reference`: these
serve the onnx_deploy study's table.)
"""
from __future__ import annotations

import warnings

import numpy as np

from workbench import ir
from workbench.es2.mediump import psnr
from workbench.es2.record import record

HALF_STEP = 0.5 / 255      # beyond this outside [0, 1] a value is clipped, not rounded
REFUSE_SHARE = 0.01        # clipped values, share of a layer's, that refuse the net
FIXES = ("clamp the activations to [0, 1] at export (e.g. torch.clamp(x, 0, 1) or "
         "nn.Hardtanh(0, 1) after the layer, and scale the next layer's weights by the old "
         "range), or fine-tune with the 8-bit fake quantisation of the workbench's training "
         "(workbench.nets.layers.Quantize8 after every activation, clamped to [0, 1])")


class ClippingWarning(UserWarning):
    """Some of a layer's values leave [0, 1]; the 8-bit storage clips them."""


def onnx_input(graph: ir.Graph, image) -> np.ndarray:
    """What the model (ONNX, or the Keras one the reference check runs) takes for an RGB or
    C-channel image (HxWxC float [0, 1], or a batch of them): a luma net its full-range luma
    (HxWx1)."""
    image = np.asarray(image, np.float32)
    return (image[..., :3] @ ir.LUMA)[..., None] if graph.input.rgb else image


def ranges(model, net, images) -> list[dict]:
    """Per 8-bit layer of ``net`` (compiled from the ONNX ``model``), over ``images``:
    ``layer``, ``onnx tensor``, ONNX Runtime's ``min`` and ``max``, ``clipped %`` (values
    more than half a step outside [0, 1]) and ``PSNR stored vs ONNX dB`` (the emulator's
    stored values, float32 arithmetic, against ONNX Runtime's, peak 1)."""
    graph = net.graph
    origin = graph.origin or {}
    layers = [op for op in graph.ops if op.name in origin and record(op).stored is None
              and not op.rgb_output]  # 8-bit images of the ONNX tensor's
    if not layers:  # every 8-bit layer stored with a scale: nothing ONNX's values can check
        return []
    found = {op.name: {"onnx": [], "stored": []} for op in layers}
    onnx_values = model.tensors(np.stack([onnx_input(graph, x) for x in images]),
                                [origin[op.name] for op in layers])  # one session, one run
    for i, image in enumerate(images):
        stored = net.emulate(image, keep=True)
        for op in layers:
            c = graph.channels(op.name)
            found[op.name]["onnx"].append(onnx_values[origin[op.name]][i].ravel())
            found[op.name]["stored"].append((stored[op.name][..., :c] / 255.0).ravel())
    rows = []
    for op in layers:
        values = np.concatenate(found[op.name]["onnx"])
        stored = np.concatenate(found[op.name]["stored"])
        clipped = (values < -HALF_STEP) | (values > 1 + HALF_STEP)
        rows.append({"layer": op.name, "onnx tensor": origin[op.name],
                     "min": float(values.min()), "max": float(values.max()),
                     "clipped %": 100 * float(clipped.mean()),
                     "PSNR stored vs ONNX dB": psnr(values, stored)})
    return rows


def require(model, net, images) -> list[dict]:
    """:func:`ranges`, then a :class:`ValueError` naming the first layer that clips more
    than :data:`REFUSE_SHARE` of its values (and the fixes), a :class:`ClippingWarning` for
    layers that clip fewer.  Returns the rows."""
    rows = ranges(model, net, images)
    for row in rows:
        where = (f"layer {row['layer']!r} (ONNX tensor {row['onnx tensor']!r}) spans "
                 f"[{row['min']:.3g}, {row['max']:.3g}]: {row['clipped %']:.2f} % of its values "
                 "leave the [0, 1] an 8-bit texture stores")
        if row["clipped %"] > 100 * REFUSE_SHARE:
            raise ValueError(f"{where}; {FIXES}")
        if row["clipped %"] > 0:
            warnings.warn(f"{where} (clipped)", ClippingWarning, stacklevel=2)
    return rows
