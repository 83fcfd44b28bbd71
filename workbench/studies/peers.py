"""Peers: who our WebGL 1.0 page is compared with in ``python -m workbench bench web``
(measured by :mod:`workbench.studies.web_bench`), and how a result reads.

:data:`PEERS`: TensorFlow.js's back ends (WebGL, WASM on one thread, WASM with its thread pool,
CPU) and onnxruntime-web's (WASM, threaded; WebGL).  :func:`save_results` writes ``peers.json``
and ``peers.md`` (one result per GL); the report's "Peers" section (:func:`report_section`)
appears when ``peers.json`` is there: per GL the table (:func:`table_rows`: each side's
initialisation, first run, median with quartiles, fidelity against Keras), its verdict column
(:func:`verdict_cells`: for each peer's faster form whether each page row is ahead, level or
behind, beyond the quartiles; pair by pair :func:`verdicts`), the "no float textures" rows
(:func:`no_float_rows`) and where the time goes (:func:`profile_rows`).
"""
from __future__ import annotations

from pathlib import Path

from workbench import tables, timings
from workbench.files import read_json, write_json, write_text
from workbench.studies import peak
from workbench.web import browser, ort

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
# The "no float textures" rows: the page (one target, these variants) and these peers, WebGL
# without float textures (browser.NO_FLOAT_TEXTURES), web_bench.NO_FLOAT_RUNS runs each.
NO_FLOAT_VARIANTS = ("4 render targets (MRT)",)
NO_FLOAT_PEERS = ("webgl", "ort-webgl")
# the forms TF.js runs a grouped conv in, and the "convs as" cell of each form
GROUPINGS = ("split", "block-diagonal")
GROUPING_TEXT = {"split": "grouped: a conv per group", "block-diagonal": "grouped: block-diagonal filter",
                 "none": "tf.fused.conv2d", "onnx": "ONNX Conv (group attribute)"}


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
