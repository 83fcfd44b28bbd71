"""``python -m workbench bench web``: our WebGL 1.0 page against TensorFlow.js (WebGL, WASM on
one thread, WASM with its thread pool, CPU) and onnxruntime-web (WASM, threaded; WebGL) in one
headless Chromium, on the same net, weights and input (the peers and how a result reads:
:mod:`workbench.studies.peers`).

:func:`bench_web` exports the page (:mod:`workbench.web.page`), adds the net for TF.js
(:func:`workbench.web.tfjs.net_files`) and as ONNX for onnxruntime-web
(:func:`workbench.web.ort.net_files`: :func:`workbench.ir.to_onnx.to_onnx` of the same IR graph,
opset 17), the pinned TF.js and onnxruntime-web files and ``peers.js``, serves it cross-origin
isolated (``SharedArrayBuffer``, so WebAssembly threads; the result's ``cross_origin_isolated``)
and runs ``benchPeers`` there (see ``workbench/web/peers.js``) on the peers of
:data:`~workbench.studies.peers.PEERS`: each side's initialisation (the page's shader compile +
link + a draw of every program at load; TF.js's backend set-up and weights; onnxruntime-web's
``InferenceSession.create``), its first run, ``warmup`` untimed runs, then ``runs`` interleaved
rounds; a run is upload, net, read-back (onnxruntime-web's: the input made in JS,
``session.run``, the output read, and for the SR net the luma recombined with the bilinear
chroma in JS). The threaded WASM back ends (TF.js ``wasm-threads``: a second TF.js in a
same-origin frame, ``tf.wasm.setThreadsCount``, the frame reporting twice the cores to it as
TF.js keeps at most half of them; ``ort-wasm``: ``ort.env.wasm.numThreads``) get ``threads``
threads, by default ``navigator.hardwareConcurrency`` (every core, as SwiftShader uses); TF.js
``wasm`` stays on its build without threads; each side records the threads its back end reports
(``threads``). Fidelity of each side's first output against Keras in float32: PSNR (peak 1, RGB)
of the SR net's upscaled image (the page's is RGBA8, the peers' float), or a classifier's
largest logit difference and top-1. For grouped convs TF.js runs both forms ("split": a conv per
group, "block-diagonal": one conv with a dense block-diagonal filter); the faster per peer is
marked (onnxruntime-web runs ONNX's grouped Conv, one form). A peer that cannot run here (npm or
a package missing, a pinned release without its back end, a net with no ONNX pattern) gets a row
saying why (``not_run``). Each of :data:`PAGE_VARIANTS` (multiple render targets) is exported
beside the page and gets a row of its own. Then the "no float textures" rows
(:func:`_no_float_run`): the page reloaded with WebGL's float-texture extensions masked, our
page and each WebGL peer again, who runs (how fast) and who refuses (why). Then the profile: the
page's passes, each timed to a 1-pixel ``readPixels``, and the same passes on llvmpipe
(:mod:`workbench.es2.runner` timings), by layer and top passes.

The browser's WebGL runs on one GL a session (:data:`workbench.web.browser.GLS`): SwiftShader
(Chromium's own, its Subzero JIT) and Mesa llvmpipe (ANGLE's GL back end, LLVM); ``bench web``
runs each in turn, the same benchmark, a result and a section per GL.

:func:`run` measures, then writes ``peers.json`` and ``peers.md``
(:func:`workbench.studies.peers.save_results`) and prints the report's sections.
"""
from __future__ import annotations

import base64
import json
import tempfile
from pathlib import Path

import keras
import numpy as np

from workbench import es2, ir, references, timings, web
from workbench.data import datasets, metrics
from workbench.es2.net import output_spec
from workbench.files import figures_dir
from workbench.nets import classify, superres
from workbench.nets.models import is_name, load_model, load_named, named, reference_sr
from workbench.studies import peak
from workbench.studies.peers import (BACKENDS, GL_NAMES, GROUPINGS, NO_FLOAT_PEERS,
                                     NO_FLOAT_VARIANTS, ORT_BACKENDS, PEER_NAMES, PEERS, RESULT,
                                     TABLE, report_section, save_results)
from workbench.web import browser, ort, tfjs

# More rows of our page: name -> (``es2.compile`` options, what a program writes).  A browser
# that offers fewer draw buffers runs a variant's passes in smaller groups (the row says so).
PAGE_VARIANTS = {f"{n} render targets (MRT)": ({"target": es2.Target.of(draw_buffers=n)},
                                                f"a program per {n} output packs")
                 for n in (4, 8)}
PAGE_PROGRAMS = "a program per output pack"
NO_FLOAT_RUNS = 5  # the runs of each side of the "no float textures" rows
# The threaded TF.js's frame (``tfjs-threads.html?threads=N``).  TF.js's WASM back end caps its
# pool at navigator.hardwareConcurrency / 2 threads, whatever tf.wasm.setThreadsCount asks (its
# backend.cc assumes two hardware threads per core): the frame reports 2 N to it, so that it
# keeps the N threads asked (a 2-core machine: 2, not 1).
TFJS_FRAME = """<!doctype html><meta charset="utf-8"><title>TF.js, threaded WASM</title>
<script>
const threads = Number(new URLSearchParams(location.search).get("threads"));
Object.defineProperty(navigator, "hardwareConcurrency", { value: 2 * threads });
</script>
<script src="tfjs/tf.min.js"></script><script src="tfjs/tf-backend-wasm.min.js"></script>
"""


def resolve_model(model=None) -> tuple[keras.Model, str]:
    """(Keras model, label): ``None`` -> the reference SR checkpoint; a name
    (:func:`workbench.nets.models.named`) -> its checkpoint where ``models/`` has it, else a
    classifier preset's net with seeded random weights, its BatchNorm calibrated on photos;
    else a ``.keras`` or ``.onnx`` path; or a Keras model as it is."""
    if isinstance(model, keras.Model):
        return model, model.name
    if model is None:
        path = reference_sr()
        return load_model(path), path.name
    if is_name(model):
        entry = named(str(model))
        net = load_named(entry)
        if entry.trained:
            return net, entry.path.name
        classify.calibrate_batchnorm(net, datasets.photos(net.input_shape[1], 8))
        return net, f"{model} (random weights, BatchNorm calibrated)"
    return load_model(model), Path(model).name


def keras_output(model, graph: ir.Graph, image) -> np.ndarray:
    """Keras' float32 output for ``image`` (HxWx3 in [0, 1]): the SR net's RGB upscale (luma
    through the net, bilinear chroma, clipped to [0, 1]) or a classifier's logits."""
    if graph.rgb_output:
        return superres.upscale(model, image, rounded=False)
    return np.asarray(model(image[None], training=False), np.float32)[0]


def fidelity(reference, output, logits) -> dict:
    """PSNR (dB, peak 1) of an image against the reference; or max |logit difference| and
    whether the top-1 equals the reference's."""
    if logits:
        return {"max_logit_diff": float(np.abs(output - reference).max()),
                "top1_equal": bool(np.argmax(output) == np.argmax(reference))}
    return {"psnr_db": metrics.psnr(reference, output)}


def _decode(side, reference, logits):
    """A side's output (base64) as float32 of the reference's shape."""
    raw = base64.b64decode(side.pop("output"))
    if side["engine"] == "page" and not logits:  # RGBA8
        h, w = reference.shape[:2]
        return np.frombuffer(raw, np.uint8).reshape(h, w, 4)[..., :3].astype(np.float32) / 255
    return np.frombuffer(raw, np.float32).reshape(reference.shape)


def page_variants(model) -> dict:
    """``{row name: es2 net}`` of :data:`PAGE_VARIANTS`."""
    return {name: es2.compile(model, **options) for name, (options, _) in PAGE_VARIANTS.items()}


def unavailable_peers(graph, size, peers=PEERS) -> dict:
    """``{peer: why it cannot run here, in one line}`` for those of ``peers`` that cannot: TF.js
    or onnxruntime-web not in its cache, the pinned onnxruntime-web without its WebGL back end
    or ``graph`` with a nearest upsampling there, ``graph`` without an ONNX pattern."""
    reasons = {}
    tfjs_missing = tfjs.unavailable()
    ort_missing = ort.unavailable()
    if ort_missing is None and any(p in ORT_BACKENDS for p in peers):
        try:
            ort.net_files(graph, size)
        except ValueError as err:
            ort_missing = f"the net has no ONNX form (workbench.ir.to_onnx): {err}"
    for peer in peers:
        if peer in BACKENDS:
            reason = tfjs_missing
        elif peer == "ort-webgl":
            reason = ort_missing or ort.webgl_unavailable() or webgl_nearest(graph)
        else:
            reason = ort_missing
        if reason:
            reasons[peer] = reason
    return reasons


def webgl_nearest(graph) -> str | None:
    """Why onnxruntime-web's WebGL back end cannot run ``graph``'s ONNX form: its packed
    Resize has no nearest mode (a nearest upsampling or anchor)."""
    nearest = [op.name for op in graph.ops if op.nearest]
    return (f"onnxruntime-web's WebGL back end has no nearest Resize (layer {nearest[0]!r}: "
            "'resize (packed) does not support mode: nearest')" if nearest else None)


def _stage(folder, net, variants, peers, size):
    """The exported page (and each of ``variants``, ``{name: net}``, in a subfolder) plus
    peers.js and what ``peers`` need (TF.js: its net, scripts and the threaded TF.js's frame;
    onnxruntime-web: the net as ONNX, scripts) in ``folder``; ``{name: {folder, programs}}``
    of the variants."""
    web.export(net, folder)
    folders = {name: {"folder": f"variant{i}/", "programs": PAGE_VARIANTS[name][1]}
               for i, name in enumerate(variants)}
    for name, variant in variants.items():
        web.export(variant, Path(folder) / folders[name]["folder"])
    files = {"peers.js": tfjs.peers_js()}
    if any(p in BACKENDS for p in peers):
        files.update({f"tfjs/{k}": v for k, v in tfjs.script_files().items()})
        spec_and_weights = tfjs.net_files(net.graph)
        files["tfjs.json"] = json.dumps(spec_and_weights["tfjs.json"])
        files["tfjs.bin"] = spec_and_weights["tfjs.bin"]
        files["tfjs-threads.html"] = TFJS_FRAME
    ort_backends = [p.removeprefix("ort-") for p in peers if p in ORT_BACKENDS]
    if ort_backends:
        files.update({f"ort/{k}": v for k, v in ort.script_files(ort_backends).items()})
        model_and_io = ort.net_files(net.graph, size)
        files["model.onnx"] = model_and_io["model.onnx"]
        files["ort.json"] = json.dumps(model_and_io["ort.json"])
    for name, content in files.items():
        path = Path(folder) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return folders


def _check_known(option, what, values, known):
    """ValueError naming ``option`` and the values of ``values`` not in ``known``."""
    unknown = [v for v in values if v not in known]
    if unknown:
        raise ValueError(f"{option}: unknown {what} {', '.join(unknown)}; known: {', '.join(known)}")


def llvmpipe_profile(net, image, count=5) -> list:
    """[[pass, op, ms]]: the median over ``count`` runs (after one untimed) of each pass on this
    machine's GL (the es2 runner's timings: a pass until ``glFinish``)."""
    net.run(image)
    runs = []
    for _ in range(count):
        net.run(image)
        runs.append(net.timings)
    return [[p.name, p.op, 1000 * float(np.median([r[p.name] for r in runs]))] for p in net.passes]


def bench_web(model=None, size=256, runs=10, warmup=2, backends=PEERS, profile_runs=5,
              verbose=True, gls=("swiftshader",), threads=None,
              no_float_runs=NO_FLOAT_RUNS) -> list[dict]:
    """The benchmark (module docstring), a browser session with WebGL on each GL of ``gls``
    (keys of :data:`workbench.web.browser.GLS`; one that WebGL does not reach is skipped with a
    line saying why).  ``model``: see :func:`resolve_model`; ``size``: the input's side (a
    fixed-size net uses its own); ``backends``: the peers (:data:`PEERS`); ``threads``: the
    threaded WASM back ends' (default: the browser's ``navigator.hardwareConcurrency``);
    ``no_float_runs``: the runs of the "no float textures" rows (:func:`_no_float_run`; 0: none).
    Returns a result dict per GL that ran, what :func:`save_results` writes; ``skipped`` says
    why the TF.js rows are missing, if they are, ``not_run`` each peer that did not run and
    why."""
    if runs < 1 or warmup < 0 or size < 1:
        raise ValueError(f"--runs {runs}, --size {size}: need runs >= 1, size >= 1 (warm-up "
                         f"{warmup} >= 0)")
    _check_known("--backends", "peer(s)", backends, PEERS)
    _check_known("--gl", "GL(s)", gls, browser.GLS)
    if not gls:
        raise ValueError(f"--gl names no GL; give one or more of {', '.join(browser.GLS)}")
    model, label = resolve_model(model)
    net = es2.compile(model)
    graph = net.graph
    if graph.input_size and tuple(graph.input_size) != (size, size):
        size = graph.input_size[0]
    image = datasets.photos(size, 1)[0]
    pixels = np.concatenate([np.rint(image * 255).astype(np.uint8),
                             np.full((size, size, 1), 255, np.uint8)], axis=-1)
    image = pixels[..., :3].astype(np.float32) / 255  # what every side sees
    logits = output_spec(graph)["kind"] == "logits"
    reference = keras_output(model, graph, image)
    layers = {op: c.multiply_adds for op, c in net.cost((size, size)).items()}
    shared = dict(model=label, kind="logits" if logits else "image", size=[size, size],
                  output_shape=list(reference.shape), runs=runs, warmup=warmup,
                  programs=len(net.passes), llvmpipe_compile_ms=1000 * net.compile_seconds,
                  multiply_adds=sum(layers.values()), layer_multiply_adds=layers,
                  gl_peak=peak.gl_peak(),
                  llvmpipe_passes=llvmpipe_profile(net, image, profile_runs),
                  reference_compile_s=list(references.SR_PI3_COMPILE_S))
    not_run = unavailable_peers(graph, (size, size), backends)
    skipped = next((not_run[p] for p in backends if p in BACKENDS and p in not_run), None)
    if verbose:
        for what, peers in (("TF.js", BACKENDS), ("onnxruntime-web", ORT_BACKENDS)):
            for reason in dict.fromkeys(not_run[p] for p in peers if p in not_run):
                which = ", ".join(p for p in peers if not_run.get(p) == reason)
                print(f"{what} rows skipped ({which}): {reason}")
    backends = [p for p in backends if p not in not_run]
    results, reasons = [], []
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        folder = Path(tmp) / "page"
        variants = _stage(folder, net, page_variants(model), backends, (size, size))
        config = {"input": base64.b64encode(pixels.tobytes()).decode(), "width": size,
                  "height": size, "runs": runs, "warmup": warmup,
                  "backends": [p for p in backends if p in BACKENDS],
                  "ort": [p.removeprefix("ort-") for p in backends if p in ORT_BACKENDS],
                  "threads": threads, "groupings": list(GROUPINGS), "profile": profile_runs,
                  "variants": variants, "programs": PAGE_PROGRAMS}
        for gl in gls:
            try:
                result = _browser_run(folder, gl, config)
            except browser.BrowserUnavailable as err:
                reasons.append(f"WebGL on {gl} skipped: {err}")
                print(reasons[-1])
                continue
            _score(result, reference, logits)
            if no_float_runs:
                result["no_float"] = _no_float_run(folder, gl, config, no_float_runs)
                _score(result["no_float"], reference, logits)
            results.append({**shared, **result, "gl": gl, "skipped": skipped,
                            "not_run": [{"peer": p, "name": PEER_NAMES[p], "reason": r}
                                        for p, r in not_run.items()],
                            "page_compile_ms": result["sides"][0]["init_ms"]})
    if not results:
        raise ValueError("bench web: no GL ran; " + "; ".join(reasons))
    return results


def _browser_run(folder, gl, config) -> dict:
    """``benchPeers(config)`` (peers.js) on the page staged in ``folder``, served cross-origin
    isolated, WebGL on ``gl``."""
    with web.session(folder, gl=gl, isolated=True) as page:
        if page.state == "error":
            raise web.PageError(page.message)
        result = _bench_peers(page, config)
        result["peak"] = peak.browser_peak(page.page, f"WebGL on {GL_NAMES[gl]}, in the page")
        return result


def _bench_peers(page, config) -> dict:
    """``benchPeers(config)`` in a loaded page (:class:`workbench.web.Session`), peers.js and
    (for TF.js peers) TF.js's scripts added first where the page has none yet."""
    if config["backends"] and not page.page.evaluate("'tf' in window"):
        for script in ("tfjs/tf.min.js", "tfjs/tf-backend-wasm.min.js"):
            page.page.add_script_tag(url=script)
    if not page.page.evaluate("'benchPeers' in window"):
        page.page.add_script_tag(url="peers.js")
    base = page.url.rsplit("/", 1)[0]
    return page.page.evaluate("config => benchPeers(config)", {
        **config, "wasmPath": base + "/tfjs/", "ortPath": base + "/ort/"})


def _no_float_run(folder, gl, config, runs) -> dict:
    """The "no float textures" rows: the page reloaded under
    :data:`workbench.web.browser.NO_FLOAT_TEXTURES` (WebGL without float textures), the
    browser's float probe there, then ``benchPeers`` with ``runs`` runs on the page (one target
    and :data:`NO_FLOAT_VARIANTS`), then once per WebGL peer of :data:`NO_FLOAT_PEERS` in
    ``config``.  ``{probe, runs, sides, refused: [{peer, name, reason}]}``; a side refuses with
    its first error line and the first lines of the first two warnings or errors logged
    meanwhile (TF.js logs why)."""
    from playwright.sync_api import Error as ScriptError

    peers = [p for p in NO_FLOAT_PEERS if p in config["backends"]
             or p.removeprefix("ort-") in config["ort"] and p in ORT_BACKENDS]
    config = {**config, "runs": runs, "warmup": 1, "profile": 1, "backends": [], "ort": [],
              "variants": {k: v for k, v in config["variants"].items() if k in NO_FLOAT_VARIANTS}}
    with web.session(folder, gl=gl, isolated=True, init_script=browser.NO_FLOAT_TEXTURES) as page:
        result = {"probe": page.page.evaluate(browser.FLOAT_PROBE), "runs": runs, "sides": [],
                  "refused": []}
        if page.wait() == "error":
            names = ["ours (WebGL 1.0 page)", *(f"ours, {k}" for k in config["variants"])]
            result["refused"] = [{"peer": None, "name": name, "reason": page.message}
                                 for name in names]
            return result  # peers.js runs beside the page: no peer rows
        result["sides"] = _bench_peers(page, config)["sides"]
        for peer in peers:
            one = ({"backends": [peer]} if peer in BACKENDS
                   else {"ort": [peer.removeprefix("ort-")]})
            logged = len(page.console)
            try:
                sides = _bench_peers(page, {**config, **one, "variants": {}})["sides"]
            except ScriptError as err:
                said = [m.split(": ", 1)[1].splitlines()[0] for m in page.console[logged:]
                        if m.startswith(("warning:", "error:"))]
                lines = [str(err).removeprefix("Page.evaluate: ").splitlines()[0], *said[:2]]
                result["refused"].append({"peer": peer, "name": PEER_NAMES[peer],
                                          "reason": "; ".join(lines)})
            else:
                result["sides"] += sides[1:]
    return result


def _score(result, reference, logits):
    """Each side's fidelity against ``reference`` and its timing summary; the faster grouping
    per peer marked (in place)."""
    for side in result["sides"]:
        side.update(fidelity(reference, _decode(side, reference, logits), logits))
        q1, q3 = timings.quartiles(side["runs_ms"])
        side.update(median_ms=float(np.median(side["runs_ms"])), q1_ms=q1, q3_ms=q3,
                    min_ms=min(side["runs_ms"]), max_ms=max(side["runs_ms"]))
        if side.get("glue_ms"):
            side["glue_median_ms"] = float(np.median(side["glue_ms"]))
    for peer in dict.fromkeys(s["peer"] for s in result["sides"] if s["engine"] != "page"):
        mine = [s for s in result["sides"] if s.get("peer") == peer]
        best = min(mine, key=lambda s: s["median_ms"])
        for s in mine:
            s["fastest_grouping"] = s is best


def run(model=None, size=256, runs=10, out=None, warmup=2, backends=PEERS,
        gls=tuple(browser.GLS)) -> list[dict]:
    """The ``bench web`` command: measure on each GL of ``gls``, write into ``out`` (default:
    the figures folder), print the sections."""
    results = bench_web(model, size, runs, warmup, backends, gls=gls)
    out = Path(out) if out else figures_dir()
    save_results(out, results)
    print(report_section(out))
    print(f"\nwritten: {out / TABLE}, {out / RESULT}")
    return results
