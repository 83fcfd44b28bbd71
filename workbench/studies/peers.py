"""Peers: our WebGL 1.0 page against TensorFlow.js (WebGL, WASM, CPU backends) in one headless
Chromium, on the same net, weights and input (``python -m workbench bench web``).

:func:`bench_web` exports the page (:mod:`workbench.web.page`), adds the net for TF.js
(:func:`workbench.web.tfjs.net_files`), the pinned TF.js files and ``peers.js``, and runs
``benchPeers`` there (see ``workbench/web/peers.js``): each side's initialisation (the page's
shader compile + link + a draw of every program at load; TF.js's backend set-up and weights),
its first run, ``warmup`` untimed runs, then ``runs`` interleaved rounds; a run is upload, net,
read-back.  Fidelity of each side's first output against Keras in float32: PSNR (peak 1, RGB)
of the SR net's upscaled image (the page's is RGBA8, TF.js's float), or a classifier's largest
logit difference and top-1.  For grouped convs TF.js runs both forms ("split": a conv per
group, "block-diagonal": one conv with a dense block-diagonal filter); the faster per backend
is marked.  Each of :data:`PAGE_VARIANTS` (multiple render targets) is exported beside the
page and gets a row of its own.  Then the profile: the page's passes, each timed to a 1-pixel
``readPixels``, and the same passes on llvmpipe (:mod:`workbench.es2.runner` timings), by layer and top passes.

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
from importlib import resources
from pathlib import Path

import keras
import numpy as np

from workbench import es2, ir, references, tables, timings, web
from workbench.data import datasets, metrics
from workbench.es2.net import output_spec
from workbench.files import figures_dir, read_json, write_json, write_text
from workbench.nets import classify, superres
from workbench.nets.models import (
    CLASSIFIER_PRESETS,
    dogs_classifier,
    load_model,
    reference_cifar10,
    reference_sr,
)
from workbench.web import browser, tfjs

RESULT, TABLE = "peers.json", "peers.md"
GL_NAMES = {"swiftshader": "SwiftShader", "llvmpipe": "Mesa llvmpipe"}  # keys: browser.GLS
BACKENDS = ("webgl", "wasm", "cpu")
# More rows of our page: name -> (``es2.compile`` options, what a program writes).  A browser
# that offers fewer draw buffers runs a variant's passes in smaller groups (the row says so).
PAGE_VARIANTS = {f"{n} render targets (MRT)": ({"draw_buffers": n}, f"a program per {n} output packs")
                 for n in (4, 8)}
PAGE_PROGRAMS = "a program per output pack"
GROUPINGS = ("split", "block-diagonal")
GROUPING_TEXT = {"split": "grouped: a conv per group", "block-diagonal": "grouped: block-diagonal filter",
                 "none": "tf.fused.conv2d"}


def resolve_model(model=None) -> tuple[keras.Model, str]:
    """(Keras model, label): ``None`` -> the reference SR checkpoint; ``"cifar10"`` -> the
    CIFAR-10 reference checkpoint where ``models/`` has it; another classifier preset name
    (``CLASSIFIER_PRESETS``) -> that net with seeded random weights and its BatchNorm
    calibrated on photos; else a ``.keras`` path; or a Keras model as it is."""
    if isinstance(model, keras.Model):
        return model, model.name
    if model is None:
        path = reference_sr()
        return load_model(path), path.name
    if str(model) == "cifar10" and reference_cifar10().exists():
        return load_model(reference_cifar10()), reference_cifar10().name
    if str(model) in CLASSIFIER_PRESETS:
        keras.utils.set_random_seed(0)
        net = dogs_classifier(str(model))
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


def _stage(folder, net, variants):
    """The exported page (and each of ``variants``, ``{name: net}``, in a subfolder) plus
    TF.js (net, scripts) and peers.js in ``folder``; ``(TF.js missing: why, in one line, or
    None; {name: {folder, programs}})``."""
    web.export(net, folder)
    folders = {name: {"folder": f"variant{i}/", "programs": PAGE_VARIANTS[name][1]}
               for i, name in enumerate(variants)}
    for name, variant in variants.items():
        web.export(variant, Path(folder) / folders[name]["folder"])
    reason = tfjs.unavailable()
    files = {"peers.js": (resources.files("workbench") / "web" / "peers.js").read_bytes()}
    if reason is None:
        files.update({f"tfjs/{k}": v for k, v in tfjs.script_files().items()})
        spec_and_weights = tfjs.net_files(net.graph)
        files["tfjs.json"] = json.dumps(spec_and_weights["tfjs.json"])
        files["tfjs.bin"] = spec_and_weights["tfjs.bin"]
    for name, content in files.items():
        path = Path(folder) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return reason, folders


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


def bench_web(model=None, size=256, runs=10, warmup=2, backends=BACKENDS, groupings=GROUPINGS,
              profile_runs=5, verbose=True, gls=("swiftshader",)) -> list[dict]:
    """The benchmark (module docstring), a browser session with WebGL on each GL of ``gls``
    (keys of :data:`workbench.web.browser.GLS`; one that WebGL does not reach is skipped with a
    line saying why).  ``model``: see :func:`resolve_model`; ``size``: the input's side (a
    fixed-size net uses its own).  Returns a result dict per GL that ran, what
    :func:`save_results` writes; ``skipped`` says why the TF.js rows are missing, if they are."""
    if runs < 1 or warmup < 0 or size < 1:
        raise ValueError(f"--runs {runs}, --size {size}: need runs >= 1, size >= 1 (warm-up "
                         f"{warmup} >= 0)")
    _check_known("--backends", "TF.js backend(s)", backends, BACKENDS)
    _check_known("--gl", "GL(s)", gls, browser.GLS)
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
    shared = dict(model=label, kind="logits" if logits else "image", size=[size, size],
                  output_shape=list(reference.shape), runs=runs, warmup=warmup,
                  programs=len(net.passes), llvmpipe_compile_ms=1000 * net.compile_seconds,
                  llvmpipe_passes=llvmpipe_profile(net, image, profile_runs),
                  reference_compile_s=list(references.SR_PI3_COMPILE_S))
    results, reasons = [], []
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        folder = Path(tmp) / "page"
        skipped, variants = _stage(folder, net, page_variants(model))
        if skipped:
            backends = ()
            if verbose:
                print(f"TF.js rows skipped: {skipped}")
        config = {"input": base64.b64encode(pixels.tobytes()).decode(), "width": size,
                  "height": size, "runs": runs, "warmup": warmup, "backends": list(backends),
                  "groupings": list(groupings), "profile": profile_runs, "variants": variants,
                  "programs": PAGE_PROGRAMS}
        for gl in gls:
            try:
                result = _browser_run(folder, gl, config, bool(backends))
            except browser.BrowserUnavailable as err:
                reasons.append(f"WebGL on {gl} skipped: {err}")
                print(reasons[-1])
                continue
            _score(result, reference, logits, backends)
            results.append({**shared, **result, "gl": gl, "skipped": skipped,
                            "page_compile_ms": result["sides"][0]["init_ms"]})
    if not results:
        raise ValueError("bench web: no GL ran; " + "; ".join(reasons))
    return results


def _browser_run(folder, gl, config, tfjs_scripts) -> dict:
    """``benchPeers(config)`` (peers.js) on the page staged in ``folder``, WebGL on ``gl``."""
    with web.session(folder, gl=gl) as page:
        if page.state == "error":
            raise web.PageError(page.message)
        if tfjs_scripts:
            for script in ("tfjs/tf.min.js", "tfjs/tf-backend-wasm.min.js"):
                page.page.add_script_tag(url=script)
        page.page.add_script_tag(url="peers.js")
        return page.page.evaluate("config => benchPeers(config)", {
            **config, "wasmPath": page.url.rsplit("/", 1)[0] + "/tfjs/"})


def _score(result, reference, logits, backends):
    """Each side's fidelity against ``reference`` and its timing summary; the faster grouping
    per TF.js backend marked (in place)."""
    for side in result["sides"]:
        side.update(fidelity(reference, _decode(side, reference, logits), logits))
        q1, q3 = timings.quartiles(side["runs_ms"])
        side.update(median_ms=float(np.median(side["runs_ms"])), q1_ms=q1, q3_ms=q3,
                    min_ms=min(side["runs_ms"]), max_ms=max(side["runs_ms"]))
    for backend in backends:
        mine = [s for s in result["sides"] if s.get("backend") == backend]
        best = min(mine, key=lambda s: s["median_ms"])
        for s in mine:
            s["fastest_grouping"] = s is best


# --- tables and the report ----------------------------------------------------------------------

def table_rows(result) -> list[dict]:
    """One row per side: initialisation, first run, median (quartiles; min..max), fidelity vs
    Keras."""
    rows = []
    for s in result["sides"]:
        grouping = GROUPING_TEXT.get(s["grouping"], s["grouping"]) + (
            " (faster)" if s.get("fastest_grouping") and s["grouping"] in GROUPINGS else "")
        q1, q3 = timings.quartiles(s["runs_ms"])  # from the runs: peers.json of any age
        row = {"side": s["name"], "convs as": grouping,
               "init / compile ms": f"{s['init_ms']:,.0f}",
               "first run ms": f"{s['first_run_ms']:,.1f}",
               "median ms (quartiles; min..max)": f"{s['median_ms']:,.1f} ({q1:,.0f}..{q3:,.0f}; "
                                                   f"{s['min_ms']:,.0f}..{s['max_ms']:,.0f})"}
        if result["kind"] == "logits":
            row["max logit diff vs Keras"] = f"{s['max_logit_diff']:.2g}"
            row["top-1 = Keras"] = "yes" if s["top1_equal"] else "no"
        else:
            row["PSNR vs Keras dB"] = f"{s['psnr_db']:.1f}"
        rows.append(row)
    return rows


def verdicts(result) -> list[str]:
    """Each of our page's rows against each TF.js backend's faster grouping, from the same
    run's timings: faster or slower only beyond the quartiles (:func:`workbench.timings.faster`),
    else level."""
    if not all("q1_ms" in s for s in result["sides"]):  # a result from before quartiles
        return []
    ours = [s for s in result["sides"] if s["engine"] == "page"]
    tfjs_best = [s for s in result["sides"] if s.get("fastest_grouping")]
    lines = []
    for a in ours:
        for b in tfjs_best:
            ratio = b["median_ms"] / a["median_ms"]
            word = {"a": f"faster ({ratio:.2f}x)", "b": f"slower ({ratio:.2f}x)",
                    None: f"level (medians {ratio:.2f}x; quartiles overlap)"}
            lines.append(f"{a['name']} vs {b['name']}: "
                         f"{word[timings.faster(a['runs_ms'], b['runs_ms'])]}")
    return lines


def profile_rows(result, top=None) -> list[dict]:
    """Per layer (op): the page's and llvmpipe's pass times and their shares of the total, and
    the page's other rows' (render targets) times."""
    def by_op(passes):
        totals = {}
        for _, op, ms in passes:
            totals[op] = totals.get(op, 0.0) + ms
        return totals, sum(totals.values())
    page, page_total = by_op(result["page_passes"])
    gl, gl_total = by_op(result["llvmpipe_passes"])
    variants = {name.removeprefix("ours, ") + " ms": by_op(passes)
                for name, passes in result.get("variant_passes", {}).items()}
    rows = [{"layer": op, "page ms": page[op], "page %": 100 * page[op] / page_total,
             "moderngl ms": gl.get(op, 0.0), "moderngl %": 100 * gl.get(op, 0.0) / gl_total,
             **{k: v.get(op, 0.0) for k, (v, _) in variants.items()}}
            for op in sorted(page, key=page.get, reverse=True)]
    rows.append({"layer": "total", "page ms": page_total, "page %": 100.0,
                 "moderngl ms": gl_total, "moderngl %": 100.0,
                 **{k: total for k, (_, total) in variants.items()}})
    return rows[:top] if top else rows


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
    if r["skipped"]:
        notes.append(f"TF.js rows skipped: {r['skipped']}")
    else:
        notes.append(f"TF.js {r['tfjs']['version']}: convs as tf.fused.conv2d with the bias; "
                     "'init' is the backend's set-up and the weights, the first run includes "
                     "its shader compilation (WebGL); WASM SIMD "
                     f"{wasm.get('WASM_HAS_SIMD_SUPPORT')}, threads "
                     f"{wasm.get('WASM_HAS_MULTITHREAD_SUPPORT')} (no cross-origin isolation "
                     "here); WebGL version "
                     f"{backends.get('webgl', {}).get('flags', {}).get('WEBGL_VERSION')}.")
    compile_line = (f"Shader compile + link + one draw of every program: the page "
                    f"{r['page_compile_ms']:,.0f} ms ({GL_NAMES[r.get('gl', 'swiftshader')]}), "
                    "moderngl on llvmpipe "
                    f"{r['llvmpipe_compile_ms']:,.0f} ms; the reference article on a Raspberry "
                    f"Pi 3: {lo}-{hi} s.")
    verdict = "".join(f"\n- {line}" for line in verdicts(r))
    return ("\n\n".join(notes) + "\n\n" + tables.markdown(table_rows(r))
            + ("\n\nFaster beyond the spread (one side's 75th percentile below the other's 25th), "
               "same run:" + verdict if verdict else "")
            + "\n\n" + compile_line
            + "\n\nWhere the time goes (each pass timed until a 1-pixel read-back of its "
            "target, median of the profile runs; by layer, the one-target page's largest first, "
            "the render-target rows beside it; moderngl: the same passes on this machine's GL "
            "outside the browser, the es2 runner):\n\n"
            + tables.markdown(profile_rows(r), digits=1)
            + f"\n\nTop passes, page: {top_passes(r['page_passes'])}. "
            f"moderngl: {top_passes(r['llvmpipe_passes'])}.")


def save_results(directory, results) -> list[dict]:
    """``peers.json`` and ``peers.md`` in ``directory``; ``results``: one per GL (or one)."""
    results = [results] if isinstance(results, dict) else list(results)
    directory = Path(directory)
    write_json(directory / RESULT, {"results": results})
    write_text(directory / TABLE, f"# Peers: {results[0]['model']}\n\n{report_section(directory)}\n")
    return results


def run(model=None, size=256, runs=10, out=None, warmup=2, backends=BACKENDS,
        gls=tuple(browser.GLS)) -> list[dict]:
    """The ``bench web`` command: measure on each GL of ``gls``, write into ``out`` (default:
    the figures folder), print the sections."""
    results = bench_web(model, size, runs, warmup, backends, gls=gls)
    out = Path(out) if out else figures_dir()
    save_results(out, results)
    print(report_section(out))
    print(f"\nwritten: {out / TABLE}, {out / RESULT}")
    return results
