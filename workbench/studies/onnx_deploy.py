"""Nets from PyTorch: ONNX files deployed as ES 2.0 shaders and checked against ONNX Runtime
(``notebooks/onnx_deploy.ipynb``).

Two nets as PyTorch's exporter writes them: the SR reference checkpoint written as ONNX
(``nn.PixelShuffle`` as a CRD DepthToSpace, ``Hardtanh(0, 1)`` as Clip) and
``models/cifar10_plain.onnx``.  The reference is ONNX Runtime (CPU, float activations): "TF"
in :mod:`workbench.studies.deploy`'s records is the model's reference, here ONNX Runtime.
A PyTorch net never saw the 8-bit storage: :func:`workbench.es2.onnx_check.ranges` reports
what it costs per layer; the classifier with its clips turned into ReLUs shows the ReLUs
stored with a calibrated scale (:mod:`workbench.es2.calibrate`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from workbench import ir, tables
from workbench.es2 import onnx_check
from workbench.files import read_json, write_json
from workbench.ir.cost import Cost
from workbench.nets import onnx_model
from workbench.nets.models import load_model, reference_sr
from workbench.studies import deploy

NOTEBOOK, RESULT = "onnx_deploy", "onnx_deploy.json"
REFERENCE = "ONNX Runtime"


def reference_classifier() -> Path:
    """The ONNX reference classifier of this checkout (``models/cifar10_plain.onnx``)."""
    from workbench.files import project_root

    return project_root() / "models" / "cifar10_plain.onnx"


def sr_model(path=None, opset=17) -> onnx_model.OnnxModel:
    """The ONNX SR net at ``path``, or the SR reference checkpoint written as PyTorch's
    exporter writes it (opset ``opset``)."""
    if path:
        return load_model(path)
    from workbench.ir.to_onnx import to_onnx

    keras_model = load_model(reference_sr())
    return onnx_model.OnnxModel(to_onnx(ir.from_keras(keras_model), opset), "sr_x2_reference")


def relabelled(rows, reference=REFERENCE) -> list[dict]:
    """Rows of :mod:`workbench.studies.deploy` with "TF" (the model's reference) named."""
    return [{k.replace("TF", reference): v for k, v in row.items()} for row in rows]


def classifier_rows(result) -> list[dict]:
    """:func:`workbench.studies.deploy.compare_classifier`'s result as a table."""
    rows = [{"": "top-1 %", REFERENCE: 100 * result["top1_TF"], "GPU": 100 * result["top1_GPU"]},
            {"": f"GPU top-1 = {REFERENCE} top-1 %", "GPU": 100 * result["gpu_top1_equals_tf"]},
            {"": f"largest logit difference GPU - {REFERENCE}",
             "GPU": result["max_logit_diff_gpu_tf"]},
            {"": "GPU ms per image", "GPU": 1000 * result["gpu_seconds_per_image"]}]
    if "emulator_top1_equals_gpu" in result:
        rows.append({"": "emulator top-1 = GPU top-1 %",
                     "GPU": 100 * result["emulator_top1_equals_gpu"]})
    return rows


def with_relus(model: onnx_model.OnnxModel) -> onnx_model.OnnxModel:
    """A copy of ``model`` whose Clip nodes are ReLUs: what a PyTorch user's ``nn.ReLU`` net
    looks like, its values no longer bounded by 1."""
    import onnx

    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    for node in proto.graph.node:
        if node.op_type == "Clip":
            node.op_type = "Relu"
            del node.input[1:]
    return onnx_model.OnnxModel(proto, f"{model.name}_relu")


def torch_sr(path) -> str | None:
    """Where ``torch`` is installed: a small ``torch.nn`` SR net (conv, ``Hardtanh(0, 1)``,
    ``PixelShuffle``; random weights) exported to ``path`` by ``torch.onnx.export`` (the
    torch.export-based exporter where ``onnxscript`` is installed, else the TorchScript one;
    dynamic height and width); else the reason it was not (None when it was)."""
    import importlib.util
    import warnings

    try:
        import torch
    except ImportError:
        return "torch is not installed (pip install torch)"
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 5, padding=2), torch.nn.Hardtanh(0, 1),
        torch.nn.Conv2d(16, 16, 3, padding=1, groups=4), torch.nn.Hardtanh(0, 1),
        torch.nn.Conv2d(16, 4, 1), torch.nn.Hardtanh(0, 1), torch.nn.PixelShuffle(2)).eval()
    x = torch.rand(1, 1, 32, 32)
    names = {"input_names": ["luma"], "output_names": ["output"]}
    try:
        if importlib.util.find_spec("onnxscript"):
            side = {2: torch.export.Dim("height", min=8), 3: torch.export.Dim("width", min=8)}
            torch.onnx.export(net, (x,), str(path), opset_version=18, dynamo=True,
                              dynamic_shapes={"input": side}, verbose=False, **names)
        else:
            with warnings.catch_warnings():  # the TorchScript exporter is deprecated
                warnings.simplefilter("ignore", DeprecationWarning)
                torch.onnx.export(net, x, str(path), opset_version=17, dynamo=False,
                                  dynamic_axes={"luma": {2: "height", 3: "width"}}, **names)
    except Exception as e:  # an exporter that needs what is not installed, ...
        return f"torch.onnx.export failed ({type(e).__name__}: {str(e).splitlines()[0]})"
    return None


def save_results(directory, **results):
    """``onnx_deploy.json``: the notebook's tables and cost."""
    write_json(Path(directory) / RESULT, results)


def report_section(directory) -> str | None:
    results = read_json(Path(directory) / RESULT)
    if not results:
        return None
    shares = {"min bytes GPU = emulator %": 4, "min bytes per op %": 4}
    text = (f"**SR net** ({results['sr_model']}, opset {results['opset']}), against "
            f"{REFERENCE}:\n\n" + tables.markdown(results["sr_summary"], digits=shares)
            + "\n\nPSNR against the ground truth (Y601) is over the images counted: where a "
            "profile runs part of a set, not the set's published figure."
            + f"\n\n**Classifier** ({results['classifier_model']}, "
            f"{results['classifier']['images']} CIFAR-10 test images):\n\n"
            + tables.markdown(classifier_rows(results["classifier"]), digits=3))
    if results.get("relu_ranges"):
        text += ("\n\nThe classifier with ReLUs for its clips (a net that never saw the 8-bit "
                 "storage: its ReLUs' values past 1 stored with a scale calibrated on a few "
                 "images, es2.calibrate), on the same images:\n\n"
                 + tables.markdown(results["relu_ranges"], digits=3))
    costs = {op: Cost(**c) for op, c in results.get("sr_cost", {}).items()}
    if costs:
        from workbench.ir import cost
        text += "\n\nSR cost per op at 256x256 (from the .onnx file):\n\n" + cost.table(costs)
    return text


def storage_rows(model, net, images) -> list[dict]:
    """:func:`workbench.es2.onnx_check.ranges`, the ONNX tensor names left out."""
    return [{k: v for k, v in row.items() if k != "onnx tensor"}
            for row in onnx_check.ranges(model, net, images)]


def sr_records(model, net, sr_sets, kernel="bicubic_aa"):
    """:func:`workbench.studies.deploy.compare` and its summary, the reference named."""
    records, _ = deploy.compare(model, net, sr_sets, kernel)
    return records, relabelled(deploy.summarize(records))


def fidelity(summary) -> list[dict]:
    """The summary's columns that compare the GPU with the reference and the emulator (for a
    net whose output quality means nothing: random weights)."""
    return [{k: v for k, v in row.items() if k in ("set", "images") or " vs " in k
             or "bytes" in k or "ms/image" in k} for row in summary]


def mean_psnr_gain(summary) -> float:
    """The GPU's mean PSNR over bicubic (dB, Y601), averaged over the sets."""
    return float(np.mean([row["GPU PSNR Y601"] - row["bicubic PSNR Y601"] for row in summary]))
