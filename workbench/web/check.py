"""The self-check of an exported page, and the device report it writes.

``export-web --check`` adds to the page folder a few test inputs, TensorFlow's float outputs
for them and the emulator's expected bytes (:func:`check_files`); the page runs them
(``?check=1`` or its button) and reports, per device, the GL strings, limits, precision, times
and how close its outputs are (``workbench-device-report/1``, see docs/design.md, "The web
self-check").  :func:`moderngl_report` makes the same report here, with the moderngl runner
(llvmpipe), from the same folder.

``check.json``: ``format`` ``workbench-check/1``, ``model``, ``model_sha256`` (of the folder's
``manifest.json`` bytes), ``kind`` (``image`` | ``logits``), ``output_channels`` (the channels
of the stored output texture the net defines; all 4 for logits) and ``inputs``: ``name``,
``width``, ``height`` (the input) and three raw files, ``input`` (uint8 HxWx4 RGBA, rows top
first, alpha 255), ``tf`` (float32, little-endian: HxWxC in [0, 1], or the logits) and
``expected`` (uint8, the emulator's stored output texture, HxWx4).

The device report (JSON), written by the page (source ``webgl``), :func:`moderngl_report`
(``moderngl``) and the bundle runner (``bundle``)::

    {"format": "workbench-device-report/1", "source": "webgl" | "bundle" | "moderngl",
     "model": graph name, "model_sha256": sha256 of the manifest.json bytes run,
     "output_channels": int,   # channels of the stored output compared (3 RGB; 4 for logits)
     "device": {"vendor", "renderer", "version", "shading_language_version": str,
                "unmasked_vendor", "unmasked_renderer": str | null,  # WEBGL_debug_renderer_info
                "precision": {"highp" | "mediump": {"rangeMin", "rangeMax", "precision": int}},
                "limits": {"MAX_TEXTURE_SIZE", "MAX_TEXTURE_IMAGE_UNITS", "MAX_VARYING_VECTORS",
                           "MAX_FRAGMENT_UNIFORM_VECTORS", "MAX_RENDERBUFFER_SIZE": int}},
     "user_agent": str | null,
     "compile_ms": float,      # every program compiled, linked and drawn once
     "first_draw_ms": float,   # the first run of the first input, upload to read-back
     "passes": [[pass name, ms], ...],  # first input, a later run, each pass until it finished
     "inputs": [{"name", "width", "height" (the output texture),
                 "psnr_vs_tf": dB over output_channels, [0, 1] scale, peak 1 (null: equal),
                 # or, a classifier: "logits": [...], "max_abs_logit_diff_vs_tf", "top1_equal_tf"
                 "bytes_equal_emulator": share in [0, 1] of the output texture's bytes,
                 "output": base64 of the output texture, uint8 HxWx4 RGBA, rows top first}]}
"""
from __future__ import annotations

import base64
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from workbench.data.images import to_uint8
from workbench.es2 import bundle, mediump, samples
from workbench.es2.net import output_spec

CHECK_FORMAT = "workbench-check/1"
REPORT_FORMAT = "workbench-device-report/1"
CHECK_SIZE = (32, 32)  # (height, width) of the test inputs of a net without a fixed size


def output_kind(net) -> tuple[str, int]:
    """(``"image"`` or ``"logits"``, the channels of the stored output compared)."""
    spec = output_spec(net.graph)
    return spec["kind"], 4 if spec["kind"] == "logits" else spec["channels"]


def check_files(net, model, manifest_text: str) -> dict:
    """The files :func:`workbench.web.export` adds for the self-check (see the module
    docstring); ``manifest_text``: the ``manifest.json`` the page is exported with."""
    kind, channels = output_kind(net)
    files, inputs = {}, []
    for name, x in samples.test_images(net.graph, size=CHECK_SIZE):
        image = to_uint8(x)
        rgba = np.concatenate([image, np.full((*image.shape[:2], 1), 255, np.uint8)], -1)
        stem = f"check.{name}"
        files[f"{stem}.input.bin"] = rgba.tobytes()
        files[f"{stem}.tf.bin"] = bundle.tf_output(model, net.graph, x).astype("<f4").tobytes()
        files[f"{stem}.expected.bin"] = stored_output(net.emulate(x, keep=True), net).tobytes()
        inputs.append({"name": name, "width": image.shape[1], "height": image.shape[0],
                       **{k: f"{stem}.{k}.bin" for k in ("input", "tf", "expected")}})
    files["check.json"] = {"format": CHECK_FORMAT, "model": net.graph.name,
                           "model_sha256": hashlib.sha256(manifest_text.encode()).hexdigest(),
                           "kind": kind, "output_channels": channels, "inputs": inputs}
    return files


def stored_output(tensors, net) -> np.ndarray:
    """The first texture of the output tensor, as stored (uint8 HxWx4), from ``{tensor:
    HxWx(4*packs)}`` or ``{(tensor, pack): HxWx4}``."""
    out = tensors.get((net.graph.output, 0))
    return out if out is not None else tensors[net.graph.output][..., :4]


def input_entry(name, output, expected, tf, channels, logits=None) -> dict:
    """One ``inputs`` entry of a device report: ``output`` and ``expected`` the stored output
    texture (uint8 HxWx4) of the device and the emulator; ``tf`` TensorFlow's float output;
    ``logits`` the device's decoded logits (a classifier) or None (an image: PSNR on the first
    ``channels`` channels, [0, 1] scale, peak 1)."""
    entry = {"name": name, "width": output.shape[1], "height": output.shape[0]}
    if logits is None:
        db = mediump.psnr(tf, output[..., :channels] / 255.0)
        entry["psnr_vs_tf"] = None if db == float("inf") else db  # JSON has no infinity
    else:
        entry.update(logits=[float(v) for v in logits],
                     max_abs_logit_diff_vs_tf=float(np.abs(np.asarray(logits, np.float64) - tf).max()),
                     top1_equal_tf=bool(np.argmax(logits) == np.argmax(tf)))
    entry["bytes_equal_emulator"] = float(np.mean(output == expected))
    entry["output"] = base64.b64encode(np.ascontiguousarray(output, np.uint8).tobytes()).decode()
    return entry


def read_check(folder) -> dict:
    """``check.json`` of an exported page with its raw files loaded as arrays (``input`` uint8
    HxWx4, ``tf`` float32, ``expected`` uint8 as flat bytes)."""
    path = Path(folder) / "check.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no self-check data; export the page with "
                                "`python -m workbench export-web --check`")
    check = json.loads(path.read_text())
    for item in check["inputs"]:
        item["input"] = np.fromfile(Path(folder) / item["input"], np.uint8).reshape(
            item["height"], item["width"], 4)
        item["tf"] = np.fromfile(Path(folder) / item["tf"], "<f4")
        item["expected"] = np.fromfile(Path(folder) / item["expected"], np.uint8)
    return check


def moderngl_report(folder) -> dict:
    """The device report (source ``moderngl``) of this machine's GL (llvmpipe here) for the
    self-check inputs of the exported page in ``folder``, run by :mod:`workbench.es2`'s runner."""
    from workbench import es2, gl
    from workbench.es2.net import output_values

    folder = Path(folder)
    check = read_check(folder)
    net = es2.load(folder)
    runner = net.runner  # compiles, links and draws every program once
    entries, first_ms = [], None
    for item in check["inputs"]:
        image = item["input"][..., :3].astype(np.float32) / 255
        start = time.perf_counter()
        stored = stored_output(runner.run(image), net)
        first_ms = first_ms if first_ms is not None else 1000 * (time.perf_counter() - start)
        logits = output_values(net.graph, stored) if check["kind"] == "logits" else None
        tf = item["tf"].reshape(stored.shape[:2] + (-1,)) if logits is None else item["tf"]
        entries.append(input_entry(item["name"], stored, item["expected"].reshape(stored.shape),
                                   tf, check["output_channels"], logits))
    runner.run(check["inputs"][0]["input"][..., :3].astype(np.float32) / 255)  # a later run
    info = gl.info()
    return {
        "format": REPORT_FORMAT, "source": "moderngl", "model": check["model"],
        "model_sha256": hashlib.sha256((folder / "manifest.json").read_bytes()).hexdigest(),
        "output_channels": check["output_channels"],
        "device": {
            "vendor": info["GL_VENDOR"], "renderer": info["GL_RENDERER"],
            "version": info["GL_VERSION"],
            "shading_language_version": info["GL_SHADING_LANGUAGE_VERSION"],
            "unmasked_vendor": None, "unmasked_renderer": None, "precision": info["precision"],
            "limits": {k.removeprefix("GL_"): info[k] for k in (
                "GL_MAX_TEXTURE_SIZE", "GL_MAX_TEXTURE_IMAGE_UNITS", "GL_MAX_VARYING_VECTORS",
                "GL_MAX_FRAGMENT_UNIFORM_VECTORS", "GL_MAX_RENDERBUFFER_SIZE")},
        },
        "user_agent": None,
        "compile_ms": 1000 * runner.compile_seconds,
        "first_draw_ms": first_ms,
        "passes": [[name, 1000 * s] for name, s in runner.timings.items()],
        "inputs": entries,
    }
