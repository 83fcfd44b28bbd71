"""Peers: our WebGL 1.0 page against TensorFlow.js (WebGL, WASM on one thread, WASM with its
thread pool, CPU) and onnxruntime-web (WASM, threaded; WebGL) in one headless Chromium, on the
same net, weights and input (``python -m workbench bench web``).

:func:`bench_web` exports the page (:mod:`workbench.web.page`), adds the net for TF.js
(:func:`workbench.web.tfjs.net_files`) and as ONNX for onnxruntime-web
(:func:`workbench.web.ort.net_files`: :func:`workbench.ir.to_onnx.to_onnx` of the same IR graph,
opset 17), the pinned TF.js and onnxruntime-web files and ``peers.js``, serves it cross-origin
isolated (``SharedArrayBuffer``, so WebAssembly threads; the result's ``cross_origin_isolated``)
and runs ``benchPeers`` there (see ``workbench/web/peers.js``) on the peers of :data:`PEERS`:
each side's initialisation (the page's shader compile + link + a draw of every program at load;
TF.js's backend set-up and weights; onnxruntime-web's ``InferenceSession.create``), its first
run, ``warmup`` untimed runs, then ``runs`` interleaved rounds; a run is upload, net, read-back
(onnxruntime-web's: the input made in JS, ``session.run``, the output read, and for the SR net
the luma recombined with the bilinear chroma in JS).  The threaded WASM back ends (TF.js
``wasm-threads``: a second TF.js in a same-origin frame, ``tf.wasm.setThreadsCount``, the frame
reporting twice the cores to it as TF.js keeps at most half of them; ``ort-wasm``:
``ort.env.wasm.numThreads``) get ``threads`` threads, by default ``navigator.hardwareConcurrency``
(every core, as SwiftShader uses); TF.js ``wasm`` stays on its build without threads; each
side records the threads its back end reports (``threads``).  Fidelity of each
side's first output against Keras in float32: PSNR (peak 1, RGB) of the SR net's upscaled image
(the page's is RGBA8, the peers' float), or a classifier's largest logit difference and top-1.
For grouped convs TF.js runs both forms ("split": a conv per group, "block-diagonal": one conv
with a dense block-diagonal filter); the faster per peer is marked (onnxruntime-web runs ONNX's
grouped Conv, one form).  A peer that cannot run here (npm or a package missing, a pinned
release without its back end, a net with no ONNX pattern) gets a row saying why (``not_run``).
Each of :data:`PAGE_VARIANTS` (multiple render targets) is exported beside the page and gets a
row of its own.  The table's verdict column says for each peer's faster form whether each
page row is ahead, level or behind, beyond the quartiles (:func:`verdict_cells`; pair by pair
:func:`verdicts`).  Then the "no float textures" rows (:func:`_no_float_run`): the page
reloaded with WebGL's float-texture extensions masked, our page and each WebGL peer again,
who runs (how fast) and who refuses (why).  Then the profile:
the page's passes, each timed to a 1-pixel ``readPixels``, and the same passes on llvmpipe
(:mod:`workbench.es2.runner` timings), by layer and top passes.

The browser's WebGL runs on one GL a session (:data:`workbench.web.browser.GLS`): SwiftShader
(Chromium's own, its Subzero JIT) and Mesa llvmpipe (ANGLE's GL back end, LLVM); ``bench web``
runs each in turn, the same benchmark, a result and a section per GL.

:func:`save_results` writes ``peers.json`` and ``peers.md`` into the figures folder; the
report's "Peers" section (:func:`report_section`) appears when ``peers.json`` is there.
"""
from __future__ import annotations

import base64
import json
import tempfile
from pathlib import Path

import keras
import numpy as np

from workbench import es2, ir, references, tables, timings, web
from workbench.data import datasets, metrics
from workbench.es2.net import output_spec
from workbench.files import figures_dir, read_json, write_json, write_text
from workbench.nets import classify, superres
from workbench.nets.models import is_name, load_model, load_named, named, reference_sr
from workbench.studies import peak
from workbench.web import browser, ort, tfjs

RESULT, TABLE = "peers.json", "peers.md"
GL_NAMES = {"swiftshader": "SwiftShader", "llvmpipe": "Mesa llvmpipe"}  # keys: browser.GLS
# The peers, as --backends names them: TF.js back ends ("wasm": its build without threads;
# "wasm-threads": its threaded SIMD build, a second TF.js in a frame) and onnxruntime-web's.
BACKENDS = ("webgl", "wasm", "wasm-threads", "cpu")
ORT_BACKENDS = ("ort-wasm", "ort-webgl")
PEERS = BACKENDS + ORT_BACKENDS
PEER_NAMES = {"webgl": "TF.js webgl", "wasm": "TF.js wasm, 1 thread", "wasm-threads":
              "TF.js wasm, threaded", "cpu": "TF.js cpu", "ort-wasm": "onnxruntime-web wasm, "
              "threaded", "ort-webgl": "onnxruntime-web webgl"}  # rows of peers that did not run
# More rows of our page: name -> (``es2.compile`` options, what a program writes).  A browser
# that offers fewer draw buffers runs a variant's passes in smaller groups (the row says so).
PAGE_VARIANTS = {f"{n} render targets (MRT)": ({"target": es2.Target.of(draw_buffers=n)},
                                                f"a program per {n} output packs")
                 for n in (4, 8)}
PAGE_PROGRAMS = "a program per output pack"
# The "no float textures" rows: the page (one target, these variants) and these peers, WebGL
# without float textures (browser.NO_FLOAT_TEXTURES), NO_FLOAT_RUNS runs each.
NO_FLOAT_VARIANTS = ("4 render targets (MRT)",)
NO_FLOAT_PEERS = ("webgl", "ort-webgl")
NO_FLOAT_RUNS = 5
GROUPINGS = ("split", "block-diagonal")
GROUPING_TEXT = {"split": "grouped: a conv per group", "block-diagonal": "grouped: block-diagonal filter",
                 "none": "tf.fused.conv2d", "onnx": "ONNX Conv (group attribute)"}
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


def bench_web(model=None, size=256, runs=10, warmup=2, backends=PEERS, groupings=GROUPINGS,
              profile_runs=5, verbose=True, gls=("swiftshader",), threads=None,
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
                  "threads": threads, "groupings": list(groupings), "profile": profile_runs,
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


# --- tables and the report ----------------------------------------------------------------------

def table_rows(result) -> list[dict]:
    """One row per side: initialisation, first run, median (quartiles; min..max), fidelity vs
    Keras, and on each peer's faster form the verdict of each page row against it
    (:func:`verdict_cells`); then a row per peer that did not run, saying why."""
    rows = []
    cells, header = verdict_cells(result)
    for i, s in enumerate(result["sides"]):
        row = {"side": s["name"], "convs as": _grouping(s),
               "init / compile ms": f"{s['init_ms']:,.0f}",
               "first run ms": f"{s['first_run_ms']:,.1f}",
               "median ms (quartiles; min..max)": _spread(s),
               **_rate(result, s["median_ms"]), **_fidelity_cells(result["kind"], s)}
        if header:
            row[header] = cells.get(i, "")
        rows.append(row)
    for missing in result.get("not_run", []):
        rows.append({"side": missing["name"], "convs as": f"not run: {missing['reason']}",
                     **{k: "" for k in list(rows[0])[2:]}} if rows else
                    {"side": missing["name"], "convs as": f"not run: {missing['reason']}"})
    return rows


def _grouping(side) -> str:
    """The "convs as" cell: the side's grouping, "(faster)" on a peer's faster form."""
    return GROUPING_TEXT.get(side["grouping"], side["grouping"]) + (
        " (faster)" if side.get("fastest_grouping") and side["grouping"] in GROUPINGS else "")


def _spread(side) -> str:
    """The median of the side's runs (their quartiles; min..max), in ms."""
    q1, q3 = timings.quartiles(side["runs_ms"])  # from the runs: peers.json of any age
    return (f"{side['median_ms']:,.1f} ({q1:,.0f}..{q3:,.0f}; "
            f"{side['min_ms']:,.0f}..{side['max_ms']:,.0f})")


def _fidelity_cells(kind, side) -> dict:
    """The side's fidelity against Keras: max logit difference and top-1, or PSNR."""
    if kind == "logits":
        return {"max logit diff vs Keras": f"{side['max_logit_diff']:.2g}",
                "top-1 = Keras": "yes" if side["top1_equal"] else "no"}
    return {"PSNR vs Keras dB": f"{side['psnr_db']:.1f}"}


def no_float_rows(result) -> list[dict]:
    """The "no float textures" table: per side of the masked run ``runs`` and its median
    (quartiles; min..max), beside its median with float textures (the main table's) and its
    fidelity; per side that refused ``refuses`` and why; per peer of :data:`NO_FLOAT_PEERS`
    that did not run at all, why."""
    masked = result["no_float"]
    usual = {(s["name"], s["grouping"]): s for s in result["sides"]}
    rows = []
    for s in masked["sides"]:
        before = usual.get((s["name"], s["grouping"]))
        rows.append({"side": s["name"], "convs as": _grouping(s),
                     "without float textures: ms (quartiles; min..max)": "runs: " + _spread(s),
                     "with them: median ms": f"{before['median_ms']:,.1f}" if before else "",
                     **_fidelity_cells(result["kind"], s)})
    blank = {k: "" for k in list(rows[0])[4:]} if rows else {}  # the fidelity cells
    for r in masked["refused"]:
        before = [s for s in result["sides"]
                  if (s.get("peer") == r["peer"] if r["peer"] else s["name"] == r["name"])]
        rows.append({"side": r["name"], "convs as": "",
                     "without float textures: ms (quartiles; min..max)":
                         f"refuses: {r['reason']}",
                     "with them: median ms": " / ".join(f"{s['median_ms']:,.1f}"
                                                        for s in before),
                     **blank})
    for m in result.get("not_run", []):
        if m["peer"] in NO_FLOAT_PEERS:
            rows.append({"side": m["name"], "convs as": "",
                         "without float textures: ms (quartiles; min..max)":
                             f"not run: {m['reason']}", "with them: median ms": "", **blank})
    return rows


def no_float_note(masked) -> str:
    """What the "no float textures" rows are, and what the probe found in the masked page."""
    def probed(version, key):
        found = masked["probe"][key]
        if found is None:
            return f"no {version} context"
        offered = ", ".join(found["extensions"]) or "none"
        return (f"{version} offers {offered} of them and renders to RGBA32F: "
                f"{'yes' if found['rgba32f'] else 'no'}, RGBA16F: "
                f"{'yes' if found['rgba16f'] else 'no'}")
    return ("No float textures: the page reloaded with WebGL's float-texture extensions masked "
            "(an init script before any of the page's: getExtension answers null and "
            f"getSupportedExtensions omits {', '.join(browser.FLOAT_EXTENSIONS)}, in WebGL 1 "
            "and 2 contexts; WebGL 2's float textures are core, rendering to them needs "
            "EXT_color_buffer_float or its half-float twin).  A probe there (every extension "
            "asked for, a 4x4 float texture as a framebuffer's attachment): "
            f"{probed('WebGL 1', 'webgl')}; {probed('WebGL 2', 'webgl2')}.  The page (one "
            f"target, {', '.join(NO_FLOAT_VARIANTS)}) and the WebGL peers, median of "
            f"{masked['runs']} runs after one warm-up; a side that refuses: its first error "
            "line and the first two warnings it logged.")


def _rate(result, ms) -> dict:
    """GMAC/s of the net in ``ms`` and its % of the peak of the result's WebGL (measured in
    the page; a result from before these counts: none)."""
    if "multiply_adds" not in result:
        return {}
    return peak.rate_cells(result["multiply_adds"], ms, result.get("peak", {}).get("gmacs"))


def _pairs(result):
    """(page side, peer side) for each page row and each peer's faster form; none for a
    result from before quartiles."""
    if not all("q1_ms" in s for s in result["sides"]):
        return []
    ours = [s for s in result["sides"] if s["engine"] == "page"]
    best = [s for s in result["sides"] if s.get("fastest_grouping")]
    return [(a, b) for a in ours for b in best]


def _short(side) -> str:
    """A page row's name in the verdict column's header."""
    name = side["name"]
    return "one target" if name.startswith("ours (") else (
        name.removeprefix("ours, ").replace(" render targets (MRT)", " targets"))


def verdict_cells(result) -> tuple[dict, str | None]:
    """``({side index: verdict}, column header)``: on each peer's faster form, each page row
    against it, in the page rows' order: ``ahead N x`` (the page's median N times shorter) or
    ``behind N x`` (N times longer) only beyond the quartiles
    (:func:`workbench.timings.faster`), else ``level``."""
    pairs = _pairs(result)
    if not pairs:
        return {}, None
    ours = list(dict.fromkeys(id(a) for a, _ in pairs))
    names = [_short(s) for s in result["sides"] if id(s) in ours]
    cells = {}
    for i, b in enumerate(result["sides"]):
        mine = [a for a, peer in pairs if peer is b]
        if mine:
            words = []
            for a in mine:
                ratio = b["median_ms"] / a["median_ms"]
                words.append({"a": f"ahead {ratio:.2f}x", "b": f"behind {1 / ratio:.2f}x",
                              None: "level"}[timings.faster(a["runs_ms"], b["runs_ms"])])
            cells[i] = " / ".join(words)
    return cells, f"the page ({' / '.join(names)}) vs it"


def verdicts(result) -> list[str]:
    """Each of our page's rows against each peer's faster grouping, from the same run's
    timings: faster or slower only beyond the quartiles (:func:`workbench.timings.faster`),
    else level."""
    lines = []
    for a, b in _pairs(result):
        ratio = b["median_ms"] / a["median_ms"]
        word = {"a": f"faster ({ratio:.2f}x)", "b": f"slower ({ratio:.2f}x)",
                None: f"level (medians {ratio:.2f}x; quartiles overlap)"}
        lines.append(f"{a['name']} vs {b['name']}: "
                     f"{word[timings.faster(a['runs_ms'], b['runs_ms'])]}")
    return lines


def profile_rows(result, top=None) -> list[dict]:
    """Per layer (op), then their total: the page's and llvmpipe's pass times, their shares of
    the total and the layer's GMAC/s (results with counts), and the page's other rows' (render
    targets) times."""
    def by_op(passes):
        totals = {}
        for _, op, ms in passes:
            totals[op] = totals.get(op, 0.0) + ms
        return {**totals, "total": sum(totals.values())}
    page, gl = by_op(result["page_passes"]), by_op(result["llvmpipe_passes"])
    variants = {name.removeprefix("ours, ") + " ms": by_op(passes)
                for name, passes in result.get("variant_passes", {}).items()}
    counts = ({**result["layer_multiply_adds"], "total": result["multiply_adds"]}
              if "layer_multiply_adds" in result else None)
    rows = [{"layer": op, "page ms": page[op], "page %": 100 * page[op] / page["total"],
             **_layer_rate("page", counts, op, page[op]),
             "moderngl ms": gl.get(op, 0.0), "moderngl %": 100 * gl.get(op, 0.0) / gl["total"],
             **_layer_rate("moderngl", counts, op, gl.get(op)),
             **{k: v.get(op, 0.0) for k, v in variants.items()}}
            for op in sorted(page, key=lambda op: (op == "total", -page[op]))]
    return rows[:top] if top else rows


def _layer_rate(side, counts, op, ms) -> dict:
    """``{"<side> GMAC/s": ...}`` of layer ``op`` in ``ms`` (none without counts; empty for a
    layer without multiply-adds)."""
    if not counts:
        return {}
    return {f"{side} GMAC/s": peak.gmacs(counts[op], ms) if counts.get(op) and ms else None}


def top_passes(passes, count=5) -> str:
    total = sum(ms for _, _, ms in passes)
    best = sorted(passes, key=lambda p: p[2], reverse=True)[:count]
    return ", ".join(f"{name} {ms:.1f} ms ({100 * ms / total:.0f} %)" for name, _, ms in best)


def load_results(directory) -> list[dict]:
    """The results in ``peers.json``, one per GL (a file of one result, from before GLs, too)."""
    saved = read_json(Path(directory) / RESULT)
    if not saved:
        return []
    return saved["results"] if "results" in saved else [saved]


def report_section(directory) -> str | None:
    """Per GL: the peers table, the verdicts, the compile times and the pass profile, from
    ``peers.json``."""
    results = load_results(directory)
    if len(results) == 1:
        return _gl_section(results[0])
    return "\n\n".join(f"### WebGL on {GL_NAMES[r['gl']]}\n\n{_gl_section(r)}"
                       for r in results) or None


def _gl_section(r) -> str:
    h, w = r["size"]
    lo, hi = r["reference_compile_s"]
    backends = r["tfjs"]["backends"]
    wasm = backends.get("wasm", {}).get("flags", {})
    notes = [f"{r['model']}, {w}x{h} input, {r['programs']} programs; {r['renderer']}. A run: "
             f"upload, net, read-back; median of {r['runs']} interleaved runs after "
             f"{r['warmup']} warm-up runs; fidelity of the first run's output against Keras "
             "(float32)" + (" (PSNR on RGB, peak 1: the SR net end to end, RGB in, luma net, "
                            "bilinear chroma, RGB out, on every side)" if r["kind"] == "image"
                            else "") + "."]
    notes += [f"{s['name']}: {s['note']}" for s in r["sides"] if s.get("note")]
    if "multiply_adds" in r:
        notes.append(peak_note(r))
    if "cross_origin_isolated" in r:
        isolated = str(r["cross_origin_isolated"]).lower()
        notes.append(f"The page served cross-origin isolated (COOP same-origin, COEP "
                     f"require-corp): crossOriginIsolated {isolated}, "
                     f"navigator.hardwareConcurrency {r['hardware_concurrency']}.")
    if r["skipped"]:
        notes.append(f"TF.js rows skipped: {r['skipped']}")
    elif backends:
        threaded = backends.get("wasm-threads")
        notes.append(f"TF.js {r['tfjs']['version']}: convs as tf.fused.conv2d with the bias; "
                     "'init' is the backend's set-up and the weights, the first run includes "
                     "its shader compilation (WebGL); WASM SIMD "
                     f"{wasm.get('WASM_HAS_SIMD_SUPPORT')}"
                     + (f"; 'wasm' its build without threads (WASM_HAS_MULTITHREAD_SUPPORT "
                        f"{wasm.get('WASM_HAS_MULTITHREAD_SUPPORT')}), "
                        f"{backends['wasm'].get('threads') or 1} thread" if "wasm" in backends
                        else "")
                     + (f"; the threaded row: a second TF.js in a same-origin frame, its "
                        f"threaded SIMD build (WASM_HAS_MULTITHREAD_SUPPORT "
                        f"{threaded['flags'].get('WASM_HAS_MULTITHREAD_SUPPORT')}), "
                        f"tf.wasm.setThreadsCount({threaded['threads_asked']}), "
                        f"tf.wasm.getThreadsCount() {threaded['threads']} (TF.js caps its pool at "
                        "navigator.hardwareConcurrency / 2, so the frame reports twice the "
                        "threads asked)" if threaded else "")
                     + ("; WebGL version "
                        f"{backends['webgl']['flags'].get('WEBGL_VERSION')}" if "webgl" in backends
                        else "") + ".")
    ort_run = r.get("ort", {}).get("backends", {})
    if ort_run:
        glue = ", ".join(f"{s['backend']} {s['glue_median_ms']:.1f}" for s in r["sides"]
                         if s.get("glue_median_ms") is not None)
        notes.append(f"onnxruntime-web {r['ort'].get('version')}: the same IR graph as ONNX "
                     f"(workbench.ir.to_onnx, opset {ort.OPSET}, NCHW, this input size), "
                     "'init' is InferenceSession.create"
                     + (f"; wasm: its SIMD threaded build, ort.env.wasm.numThreads "
                        f"{ort_run['wasm']['threads_asked']} asked, {ort_run['wasm']['threads']} "
                        "kept" if "wasm" in ort_run else "")
                     + ("; webgl: its deprecated WebGL back end (onnx.js, ort.webgl.min.js), the "
                        "first run compiles its shaders" if "webgl" in ort_run else "")
                     + ("; the SR net takes luma and gives luma: the luma is made from the RGB "
                        "input and recombined with the bilinear chroma in JS, as the page's "
                        "demux and TF.js's ops do, inside each timed run (median of a run: "
                        + glue + " ms)"
                        if r["kind"] == "image" and glue else "") + ".")
    compile_line = (f"Shader compile + link + one draw of every program: the page "
                    f"{r['page_compile_ms']:,.0f} ms ({GL_NAMES[r.get('gl', 'swiftshader')]}), "
                    "moderngl on llvmpipe "
                    f"{r['llvmpipe_compile_ms']:,.0f} ms; the reference article on a Raspberry "
                    f"Pi 3: {lo}-{hi} s.")
    verdict = "".join(f"\n- {line}" for line in verdicts(r))
    return ("\n\n".join(notes) + "\n\n" + tables.markdown(table_rows(r))
            + ("\n\nThe verdict column: on each peer's faster form, each page row ahead (its "
               "median N times shorter) or behind (N times longer) only where one side's 75th "
               "percentile is below the other's 25th, else level; the same run. Pair by pair:"
               + verdict if verdict else "")
            + "\n\n" + compile_line
            + (f"\n\n{no_float_note(r['no_float'])}\n\n{tables.markdown(no_float_rows(r))}"
               if "no_float" in r else "")
            + "\n\nWhere the time goes (each pass timed until a 1-pixel read-back of its "
            "target, median of the profile runs; by layer, the one-target page's largest first, "
            "the render-target rows beside it; moderngl: the same passes on this machine's GL "
            "outside the browser, the es2 runner; GMAC/s: the layer's multiply-adds over its "
            "time):\n\n"
            + tables.markdown(profile_rows(r), digits=1)
            + f"\n\nTop passes, page: {top_passes(r['page_passes'])}. "
            f"moderngl: {top_passes(r['llvmpipe_passes'])}.")


def peak_note(r) -> str:
    """What the GMAC/s and % of peak columns are, and the peaks measured."""
    native = r["gl_peak"]
    where = (f"the peak of WebGL on {GL_NAMES[r['gl']]} measured in the page, "
             f"{peak.peak_text(r['peak'])}" if "peak" in r else "no peak (none measured)")
    forms = peak.forms_text(r["peak"]) if "peak" in r else None
    return (f"GMAC/s: the net's {r['multiply_adds'] / 1e9:.3f} G multiply-adds an image "
            f"over the median; % of peak: of {where}, every row alike (for the WASM and CPU "
            "rows a yardstick of the same CPU, every core through the GL's JIT, not a peak of "
            f"their own). The peak: a plain fragment shader, {native['shader']} "
            "(workbench.studies.peak); the same shader natively, moderngl on "
            f"{native['where']}: {peak.peak_text(native)}."
            + (f" In the page, {forms}." if forms else ""))


def save_results(directory, results) -> list[dict]:
    """``peers.json`` and ``peers.md`` in ``directory``; ``results``: one per GL (or one)."""
    results = [results] if isinstance(results, dict) else list(results)
    directory = Path(directory)
    write_json(directory / RESULT, {"results": results})
    write_text(directory / TABLE, f"# Peers: {results[0]['model']}\n\n{report_section(directory)}\n")
    return results


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
