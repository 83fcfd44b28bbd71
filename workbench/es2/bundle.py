"""A replayable bundle: an ES 2.0 net, test inputs and the outputs they must give, and a
standalone runner, to check a GPU where the workbench is not installed (a Raspberry Pi).

``bundle(net, model, dir)`` (or ``python -m workbench bundle --model M --out DIR``) writes

* what :meth:`workbench.es2.Net.save` writes (``manifest.json``, ``<pass>.glsl``, ...);
* ``bundle.json``: the run plan for the test inputs' size (every RGBA8 texture's size, each
  pass's uniform values), the output tensor and its kind, the check threshold, the inputs
  and (``files``) the sha256 of each of their files, and (``bundle_sha256``) its own
  (:func:`workbench.es2.saved.sealed`, as the manifest's ``manifest_sha256``);
* ``checks/<name>.input.npy``: a test input as uploaded (uint8 HxWx(4*packs), see
  :mod:`workbench.es2.runner`); ``checks/<name>.expected.npy``: the emulator's bytes of the
  output texture (uint8, the same layout; for a ``mediump`` net its float16 prediction, and
  ``bundle.json``'s ``levels`` the most the float32 prediction differs from it, the band in
  which a GPU's mediump may land; for a net with 16-bit tensors, the band its output moves
  when their codes move by a step (:func:`nudged_band`): steps of the output, a dense layer's
  in its values' codes); ``checks/<name>.tf.npy``: TensorFlow's float32 output (HxWxC in
  [0, 1], or a classifier's logits);
* ``run.py`` (from ``workbench/es2/bundle_run.py``): Python 3 + numpy + PyOpenGL through EGL
  and OpenGL ES 2.0; it runs the inputs, compares, and writes a device report (see its
  docstring).
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np

from workbench import ir
from workbench.es2 import emulate, fixed16, plan, saved
from workbench.es2.samples import test_images
from workbench.es2.net import output_spec
from workbench.es2.shaders import draw_area, uniform_values
from workbench.files import content_bytes, sha256
from workbench.folders import write_folder
from workbench.nets import superres

RUNNER = "bundle_run.py"  # shipped beside this module, written as run.py
THRESHOLD = 0.999  # least share of output bytes equal to the emulator's (within ``levels``)
#                    for run.py's exit 0
NUDGE_RATE, NUDGE_RUNS = 1 / 64, 4  # codes of a 16-bit tensor moved by a step in nudged_band
SEAL = "bundle_sha256"  # bundle.json's own sha256 (saved.sealed)


def tf_output(model, graph: ir.Graph, image) -> np.ndarray:
    """TensorFlow's float32 output for ``image`` as the net's output means it: the SR net's
    RGB (luma through the net, chroma bilinear; clipped to [0, 1]), or the model's output
    (an image, or a classifier's logits)."""
    out = graph.op(graph.output)
    if graph.rgb_output:
        return superres.upscale(model, image, out.block, rounded=False).astype(np.float32)
    if graph.input.rgb:
        raise ValueError(f"net {graph.name!r}: a luma net without the RGB demux; no TF "
                         "output to bundle")
    return np.asarray(model(image[None], training=False), np.float32)[0]


def steps(stored, expected, output) -> np.ndarray:
    """How many steps apart each value of two output textures is, as run.py compares them: a
    dense layer's values' 16-bit codes (each in two bytes, high then low), else the bytes."""
    if output["kind"] != "logits":
        return np.abs(stored.astype(np.int16) - expected)
    codes = [(b[0, :output["pairs"]].reshape(-1, 2).astype(np.int64) @ [256, 1])[
        :output["count"]] for b in (stored, expected)]
    return np.abs(codes[0] - codes[1])


def nudged_band(graph: ir.Graph, image, expected) -> int:
    """Twice the most steps (:func:`steps`) the output moves from ``expected`` when a 16-bit
    tensor's codes move by a step (one code in :data:`NUDGE_RATE`, up or down, after each op
    that stores one; :data:`NUDGE_RUNS` seeded runs): a GPU's float32 sums differ from the
    emulator's in the last bit, so some codes by a step (:mod:`workbench.es2.emulate`), and
    that spreads through the layers after (MobileNetV2-style net on llvmpipe: logits 3 codes
    off where every op is the emulator's within a step)."""
    spec, most, step = output_spec(graph), 1, 2.0 ** -(8 + fixed16.SHIFT)
    for seed in range(NUDGE_RUNS):
        rng = np.random.default_rng(seed)

        def nudged(op, v):  # a 16-bit tensor's values in [0, 1] in steps of 2**-SHIFT
            if fixed16.tensor_bits(op) != 16:
                return v
            moves = rng.choice([-1, 0, 1], v.shape, p=[NUDGE_RATE / 2, 1 - NUDGE_RATE,
                                                        NUDGE_RATE / 2])
            return np.clip(v + moves * step, 0, 1 - step).astype(v.dtype)

        values = emulate.tensors(graph, image, after=nudged)
        stored = emulate.as_stored(graph, graph.output, values[graph.output])  # as run(keep)
        most = max(most, int(steps(stored, expected, spec).max()))
    return 2 * most


def run_plan(net, hw) -> dict:
    """Textures, uniform values and the areas drawn of passes whose outputs hold a zero
    border (:func:`~workbench.es2.shaders.draw_area`) for input size ``hw`` (what
    :mod:`.runner` plans)."""
    textures = plan.textures(net.graph, hw)
    floats = [f"{k[0]}.{k[1]}" for k, (_, _, dtype) in textures.items() if dtype != "f1"]
    if floats:
        raise ValueError(f"net {net.graph.name!r}: textures {floats[:3]} are RGBA32F; the "
                         "bundle runs RGBA8 nets only (compile with dense='fixed16')")
    if net.draw_buffers > 1:
        raise ValueError(f"net {net.graph.name!r} writes {net.draw_buffers} render targets per "
                         "pass; the bundle runs one-target nets only (compile with draw_buffers=1)")
    shapes = net.graph.shapes(hw)
    return {"input_size": list(hw),
            "textures": [{"tensor": k[0], "index": k[1], "width": w, "height": h}
                         for k, (w, h, _) in textures.items()],
            "uniforms": {p.name: uniform_values(p, shapes) for p in net.passes},
            "areas": {p.name: draw_area(p, shapes) for p in net.passes if p.border}}


def files(net, model, inputs=None, threshold=None) -> dict:
    """The bundle, ``{file name: content}``; ``inputs``: ``[(name, HxWxC image)]`` of one
    size (default :func:`test_images`); ``threshold``: run.py's default (:data:`THRESHOLD`)."""
    threshold = THRESHOLD if threshold is None else threshold
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold {threshold}: a share of bytes, must be in [0, 1]")
    graph = net.graph
    inputs = test_images(graph) if inputs is None else inputs
    sizes = {image.shape[:2] for _, image in inputs}
    if len(sizes) != 1:
        raise ValueError(f"bundle inputs: all must have one size, got {sorted(sizes)}")
    runner = (resources.files("workbench") / "es2" / RUNNER).read_bytes()
    wide = any(fixed16.tensor_bits(op) == 16 for op in graph.ops)
    contents, entries, levels = {**net.files(), "run.py": runner}, [], 0
    for name, image in inputs:
        image = graph.input_image(image)
        entry = {"name": name, **{k: f"checks/{name}.{k}.npy"
                                  for k in ("input", "expected", "tf")}}
        arrays = {"input": emulate.to_packs(image, opaque=graph.input.rgb)}
        arithmetic = "float16" if net.precision == "mediump" else "float32"
        expected = net.emulate(image, keep=True, arithmetic=arithmetic)[graph.output]
        if wide:
            levels = max(levels, nudged_band(graph, image, expected))
        if net.precision == "mediump":  # a GPU may compute mediump in float16 or float32
            highp = net.emulate(image, keep=True)[graph.output]
            levels = max(levels, int(np.abs(highp.astype(np.int16) - expected).max()))
        arrays.update(expected=expected, tf=tf_output(model, graph, image))
        contents.update({entry[k]: content_bytes(entry[k], a) for k, a in arrays.items()})
        entries.append(entry)
    contents["bundle.json"] = saved.sealed({
        "format": "workbench-bundle/1", "name": graph.name, "precision": net.precision,
        "levels": levels, "threshold": threshold, "output": output_spec(graph),
        "plan": run_plan(net, sizes.pop()), "inputs": entries, "compiled_with": net.plan_line(),
        "files": {e[k]: sha256(contents[e[k]]) for e in entries
                  for k in ("input", "expected", "tf")}}, SEAL)
    return contents


def bundle(net, model, directory, inputs=None, threshold=None, force=False) -> Path:
    """Write the bundle into the folder ``directory`` at once; a folder the workbench did not
    write is replaced only with ``force`` (see :func:`workbench.folders.write_folder`)."""
    return write_folder(directory, files(net, model, inputs, threshold), force)
