"""onnxruntime-web as a peer of the WebGL page: the IR graph written as ONNX for it, and the
pinned onnxruntime-web files from the npm cache.

:func:`net_files` writes the graph the page runs as ONNX (:func:`workbench.ir.to_onnx.to_onnx`,
opset :data:`OPSET`: PyTorch's export patterns, NCHW, the input's size and a batch of 1
fixed; the lowest IR version of that opset) and says how
``peers.js`` feeds it and reads it (``ort.json``): a luma net (the SR net) takes the luma of
the RGB input and gives the upscaled luma, and ``peers.js`` recombines it with the bilinear
upscale of the RGB input in JS as the page's demux and TF.js's ``tf.image.resizeBilinear`` do
(the SR row is then RGB end to end like the others, the JS part counted in its runs); a
classifier takes NCHW RGB in [0, 1] and gives its logits (its softmax where it ends with one).

Two of its back ends run: ``wasm`` (``ort.wasm.min.js``: the SIMD, threaded build,
``ort.env.wasm.numThreads`` threads where the page is cross-origin isolated) and ``webgl``
(``ort.webgl.min.js``: the deprecated onnx.js WebGL back end, while the pinned release ships
it; :func:`webgl_unavailable` says when it does not).

onnxruntime-web comes from the npm registry at :data:`ORT_WEB_VERSION` (``tools/ort_web.sh``,
run by ``make setup``) into :func:`cache_dir`; :func:`unavailable` says in one line why it
cannot be used here.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from workbench import ir
from workbench.es2.net import output_spec
from workbench.files import project_root
from workbench.ir.to_onnx import to_onnx
from workbench.web.tfjs import installed_version

ORT_WEB_VERSION = "1.30.0"  # keep in step with tools/ort_web.sh
PACKAGE = "onnxruntime-web"
CACHE_ENV = "WORKBENCH_ORT_WEB"
OPSET = 17
# files served to the page from cache/node_modules/onnxruntime-web/dist/, by back end
SCRIPTS = {"wasm": ["ort.wasm.min.js", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm"],
           "webgl": ["ort.webgl.min.js"]}


def cache_dir() -> Path:
    """Where ``tools/ort_web.sh`` installs onnxruntime-web: ``$WORKBENCH_ORT_WEB``, else
    ``.cache/onnxruntime-web`` in the checkout."""
    return Path(os.environ.get(CACHE_ENV) or project_root() / ".cache" / "onnxruntime-web")


def _dist() -> Path:
    return cache_dir() / "node_modules" / PACKAGE / "dist"


def unavailable() -> str | None:
    """``None`` when the pinned onnxruntime-web (its WASM files) is in the cache, else why
    not, in one line."""
    version = installed_version(PACKAGE, cache_dir())
    if version == ORT_WEB_VERSION:
        missing = [name for name in SCRIPTS["wasm"] if not (_dist() / name).exists()]
        return (f"onnxruntime-web {version} in {cache_dir()} lacks dist/{', dist/'.join(missing)}"
                if missing else None)
    how = ("run `make setup` (tools/ort_web.sh: npm install into the cache)" if shutil.which("npm")
           else "npm is not installed (apt-get install npm), then `make setup`")
    return (f"onnxruntime-web {ORT_WEB_VERSION} is not in {cache_dir()} "
            f"({PACKAGE} {version or 'missing'}): {how}")


def webgl_unavailable() -> str | None:
    """``None`` when the pinned release ships its WebGL back end (``dist/ort.webgl.min.js``),
    else why not (the package missing, or the release without it), in one line."""
    reason = unavailable()
    if reason:
        return reason
    if not (_dist() / SCRIPTS["webgl"][0]).exists():
        return (f"onnxruntime-web {ORT_WEB_VERSION} ships no WebGL back end (no dist/"
                f"{SCRIPTS['webgl'][0]}; it was deprecated)")
    return None


def script_files(backends=("wasm", "webgl")) -> dict[str, bytes]:
    """The onnxruntime-web files the page loads for ``backends``, by file name."""
    return {name: (_dist() / name).read_bytes() for b in backends for name in SCRIPTS[b]}


def net_files(graph: ir.Graph, size) -> dict:
    """``{"model.onnx": bytes, "ort.json": io}`` for ``graph`` at input ``size`` ``(h, w)``:
    ``io`` names the input and output and says what ``peers.js`` feeds (``luma``: the RGB
    input's luma, :data:`workbench.ir.LUMA`, one channel; else ``channels`` of RGB) and does
    with the output (``chroma``: recombine the luma with the bilinear upscale of the RGB
    input; ``logits``; else an NCHW image).  :class:`ValueError` where the graph has no ONNX
    pattern (:func:`workbench.ir.to_onnx.to_onnx`: an activation other than ReLU-clipped,
    sigmoid or none; a pack shuffle)."""
    from onnx import helper

    model = to_onnx(graph, opset=OPSET, input_size=tuple(size))
    # the lowest IR version that has the opset (onnx writes its newest, 14 in onnx 1.23; a
    # runtime reads up to its own: onnxruntime-web 1.30 up to 13)
    model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
    for value in (*model.graph.input, *model.graph.output):  # batch 1 (onnx.js's WebGL back
        value.type.tensor_type.shape.dim[0].dim_value = 1    # end refuses a named batch)
    io = {"format": "workbench-ort/1", "input": "input", "output": "output",
          "luma": bool(graph.input.rgb), "channels": 1 if graph.input.rgb else graph.input.channels,
          "chroma": bool(graph.rgb_output), "logits": output_spec(graph)["kind"] == "logits",
          "luma_weights": [float(v) for v in ir.LUMA], "opset": OPSET}
    return {"model.onnx": model.SerializeToString(), "ort.json": io}
