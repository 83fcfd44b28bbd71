"""The reference articles' own system beside the workbench (``python -m workbench bench beatmup``).

Beatmup (GPL-3.0) runs as a separate program (:mod:`workbench.gl.beatmup`: its ``X2`` and
``Classify`` apps on this machine's GL); its dog classifier is read from its chunk file
(:mod:`workbench.nets.beatmup_model`) and deployed through our ES 2.0 shaders.  Three tables,
all from one run on one machine and GL:

* **x2**: Beatmup's app and our reference checkpoint on the same low-resolution images
  (Set5 / Set14, MATLAB's antialiased bicubic, Y of BT.601 studio range, crop 2); the time of
  one 256x256 -> 512x512 upscale (Beatmup's app times its inference alone, the picture already
  on the GPU; ours ``net.run`` with upload and read-back; median and quartiles of alternating
  rounds); the shaders' compile time.
* **classifier**: Beatmup's ``Classify`` and the imported net on the same decoded pixels: top-1,
  agreement of the top-1 between Beatmup, TensorFlow and our GPU, the largest probability
  difference, time per image, programs compiled and their compile time.
* **compilers**: both implementations' programs through each target's own compiler (Mesa's
  drivers on drm-shims: what each app handed to GL, captured): programs taken, instructions,
  vc4's estimated cycles, threads, spills; per image, weighted by the fragments of each
  draw; the Pi time model (:mod:`workbench.studies.compilers`) for both from the same
  numbers, and the model calibrated on the article's programs against its measured times.
"""
from __future__ import annotations

import time
from dataclasses import asdict
from functools import cache
from pathlib import Path

import numpy as np

from workbench import references, tables, timings
from workbench.data import datasets, images, metrics
from workbench.files import figures_dir, read_json, write_json, write_text
from workbench.gl import beatmup, drivers
from workbench.nets import beatmup_model
from workbench.studies import compilers, peak

RESULT, TABLE = "beatmup.json", "beatmup.md"
WOOF = "imagewoof_val"
DRIVERS = ("vc4", "v3d", "a320", "t720", "mali400", "gc2000")
SIZE = 256  # the x2 timing's input side, as the article's
DOGS_SIDE = 385
# The classifier's weights as uniforms in its layers of at most this many output pixels (a
# program a layer shape, as Beatmup's), literals in its larger ones (its first 12 layers,
# 191x191 and 95x95: a program a pass, as Beatmup's first layer), where on llvmpipe a uniform
# read at every fragment costs more than compiling the layer's programs
# (es2.net.shared_weights; 128 * 128, the 191x191 layers alone: 57 programs, start-up 7.0
# s, a photo 152 ms; this: 113 programs, 10.8 s, 119 ms; Beatmup's app 7.4 s, 203 ms)
SHARED_PIXELS = 64 * 64
MEASURED_MS = {("x2", board): ms for board, ms in (
    ("Raspberry Pi 3 B / B+", references.SR_PI3_MS),
    ("Raspberry Pi Zero W", references.SR_PI_ZERO_MS))}
MEASURED_MS.update({("classifier", "Raspberry Pi 3 B / B+"): references.DOGS120_PI3BPLUS_MS,
                    ("classifier", "Raspberry Pi Zero W"): references.DOGS120_PI_ZERO_MS})
ARTICLE_MHZ = {"Raspberry Pi 3 B / B+": 300, "Raspberry Pi Zero W": 250}  # the classifier article's


# --- x2 ------------------------------------------------------------------------------------

def x2(sets=("Set5", "Set14"), rounds=5, runs=3, model=None, label="workbench reference") -> dict:
    """PSNR of Beatmup's X2 app, our net (``model``, default the reference checkpoint; ES 2.0,
    this GL) and bicubic on ``sets``, on the same 8-bit low-resolution images; the 256x256
    timing (:func:`x2_timing`)."""
    from workbench import es2
    from workbench.nets.models import load_model, reference_sr

    picture = images.to_uint8(datasets.photos(SIZE, 1)[0])
    cold = beatmup.upscale([picture])[0].compile_ms  # its first compile in this cache
    net = es2.compile(model or load_model(reference_sr()))
    rows = []
    for name in sets:
        sr_set = datasets.sr_images(name)
        pairs = [(hr, images.degrade(hr, 2, "bicubic_aa"))
                 for hr in (images.modcrop(hr, 2) for _, hr in sr_set.images)]
        theirs = beatmup.upscale([images.to_uint8(lr) for _, lr in pairs])
        scores = {"bicubic": [], BEATMUP_X2: [], label: []}
        for (hr, lr), their in zip(pairs, theirs):
            for method, out in (("bicubic", images.upscale_bicubic(lr, 2)),
                                (BEATMUP_X2, their.image.astype(np.float32) / 255),
                                (label, net.run(lr))):
                scores[method].append(metrics.psnr(hr, out, 2, "studio"))
        shown = name if sr_set.is_benchmark else f"{name} (stand-in: scikit-image photos)"
        rows += [{"set": shown, "method": method, "PSNR Y (dB)": float(np.mean(v)),
                  "images": len(v)} for method, v in scores.items()]
    timing = x2_timing(net, picture, rounds, runs)
    timing["compile ms"] = {"Beatmup": cold, **timing["compile ms"]}
    return {"psnr": rows, "timing": timing}


BEATMUP_X2 = "Beatmup X2 (its 2.1 weights)"


def x2_timing(net, picture, rounds=5, runs=3) -> dict:
    """Both sides on ``picture`` (HxWx3 uint8), in ``rounds`` alternating rounds of ``runs``
    runs a side: Beatmup's app's own per-run times (after its warm-up, the picture on the
    GPU), ours ``net.run`` (upload, draws back to back, read-back).  Our compile: the
    programs' compile, link and first draw (Beatmup's is its app's "compiling shaders": all
    programs and a first run on a dummy picture, measured by :func:`x2` on its first
    start)."""
    lr = picture.astype(np.float32) / 255
    theirs, ours = [], []
    net.run(lr)
    for _ in range(rounds):
        theirs += beatmup.upscale([picture], repeat=runs)[0].times_ms
        ours += _timed(lambda: net.run(lr, timed=False), runs)
    return {"input": "x".join(map(str, picture.shape[:2])), "runs": len(ours), "ms": {
        "Beatmup": _spread(theirs), "workbench": _spread(ours)},
        "faster": _faster(theirs, ours),
        "multiply_adds": peak.net_multiply_adds(net, picture.shape[:2]),
        "compile ms": {"workbench": 1e3 * net.compile_seconds}}


def _timed(fn, runs) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - start))
    return times


def _faster(theirs, ours) -> str:
    return {"a": "Beatmup", "b": "workbench", None: "neither (within the spread)"}[
        timings.faster(theirs, ours)]


def _spread(runs_ms) -> dict:
    lo, hi = timings.quartiles(runs_ms)
    return {"median": float(np.median(runs_ms)), "q25": lo, "q75": hi}


# --- the classifier ------------------------------------------------------------------------

def woof_files(which="val", root=None) -> list[tuple[Path, int | None]]:
    """``(file, class index of the 120)`` of data/cls/imagewoof_val (``which="val"``: the
    ImageNet validation images of the classes among the 120; ``"all"``: every photo, dingo's
    with index None: it is not among them)."""
    from workbench.data import fetch

    base = datasets.data_root(root)
    folder = base / "cls" / WOOF if base else None
    if folder is None or not folder.is_dir():
        raise FileNotFoundError(f"{folder or 'no data root'}: no cls/{WOOF} (Imagewoof's "
                                f"validation photos); fetch its 162 ImageNet validation images "
                                f"with: {fetch.COMMAND} {WOOF}")
    index = {c["wnid"]: i for i, c in enumerate(datasets.imagenet120())}
    files = []
    for wnid in sorted(p.name for p in folder.iterdir() if p.is_dir()):
        label = index.get(wnid)
        for f in sorted((folder / wnid).iterdir()):
            if which == "all" or (label is not None and f.name.startswith("ILSVRC2012_val_")):
                files.append((f, label))
    return files


def _picture(path) -> np.ndarray:
    return images.to_uint8(images.load_image(path))


def classifier(model_path, which="val", rounds=5, limit=None, chunk=500) -> dict:
    """Beatmup's Classify, TensorFlow and our ES 2.0 shaders on the Imagewoof photos
    ``which`` (:func:`woof_files`; ``limit``: that many, evenly spaced over them), on the same
    decoded pixels (Beatmup gets them as BMP and applies its input step; ours is
    :func:`workbench.nets.beatmup_model.sample`).  Ours compiled with weights as uniforms
    in the layers of at most :data:`SHARED_PIXELS` output pixels: a program a layer shape
    there, as Beatmup's."""
    from tqdm import tqdm

    from workbench import es2

    model = beatmup_model.load(model_path)
    files = woof_files(which)
    if limit:
        files = [files[i] for i in np.linspace(0, len(files) - 1, limit).round().astype(int)]
    step = model.beatmup_input
    first = _picture(files[0][0])
    start = time.perf_counter()  # its first start in this cache: loading, compiling, a pass
    cold = beatmup.classify_timed(first)
    their_start_s = time.perf_counter() - start - sum(cold.times_ms) / 1e3
    start = time.perf_counter()
    net = es2.compile(model, "videocore4", shared=SHARED_PIXELS)
    net.run(beatmup_model.sample(first, step).astype(np.float32) / 255)
    ours_compile_s = time.perf_counter() - start
    their_probs, tf_probs, gpu_probs = [], [], []
    for i in tqdm(range(0, len(files), chunk), desc="Beatmup, TF and the ES 2.0 shaders",
                  unit="chunk", leave=False):  # each photo decoded once, for the three
        pictures = [_picture(f) for f, _ in files[i:i + chunk]]
        their_probs.append(beatmup.classify(pictures, chunk=chunk,
                                            progress=lambda done: None).probs)
        batch = np.stack([beatmup_model.sample(p, step) for p in pictures]).astype(np.float32) / 255
        tf_probs.append(model.predict(batch, verbose=0))
        gpu_probs += [net.run(x, timed=False) for x in batch]
    labels = [label for _, label in files]
    return {"which": which, "photos": len(files),
            **compare(labels, np.concatenate(their_probs), np.concatenate(tf_probs),
                      np.stack(gpu_probs)),
            "timing": classifier_timing(net, [f for f, _ in files[:rounds]], step),
            "programs": {"Beatmup": len(beatmup.capture("Classify", first).programs),
                         "workbench": len({p.source for p in net.passes})},
            "compile s": {"Beatmup": their_start_s, "workbench": ours_compile_s}}


def compare(labels, beatmup_probs, tf_probs, gpu_probs) -> dict:
    """Top-1 of each system on the photos whose label (a class index, or None) is among its
    classes, the agreement of their top-1 on every photo, the largest probability
    differences."""
    labels = np.array([-1 if label is None else label for label in labels])
    top = {"Beatmup": beatmup_probs.argmax(1), "TF (imported)": tf_probs.argmax(1),
           "workbench ES 2.0 (imported)": gpu_probs.argmax(1)}
    known = labels >= 0
    rows = [{"system": name, "top-1 %": 100 * float(np.mean(t[known] == labels[known])),
             "correct": int(np.sum(t[known] == labels[known])), "photos": int(known.sum())}
            for name, t in top.items()]
    names = list(top)
    agreement = {f"{a} = {b}": 100 * float(np.mean(top[a] == top[b]))
                 for i, a in enumerate(names) for b in names[i + 1:]}
    return {"top1": rows, "agreement %": agreement, "largest probability difference": {
        "Beatmup vs ES 2.0": float(np.abs(beatmup_probs - gpu_probs).max()),
        "TF vs ES 2.0": float(np.abs(tf_probs - gpu_probs).max())}}


def classifier_timing(net, paths, step) -> dict:
    """Per photo of ``paths``, alternately: Beatmup's single-picture mode (10 runs of its
    whole inference task: upload, input step, net, probabilities back) and ours (10 runs of
    the input step and ``net.run``)."""
    theirs, ours = [], []
    for path in paths:
        picture = _picture(path)
        result = beatmup.classify_timed(picture)
        theirs += result.times_ms
        ours += _timed(lambda: net.run(beatmup_model.sample(picture, step).astype(np.float32)
                                       / 255, timed=False), len(result.times_ms))
    return {"runs": len(ours), "ms": {"Beatmup": _spread(theirs), "workbench": _spread(ours)},
            "faster": _faster(theirs, ours),
            "multiply_adds": peak.net_multiply_adds(net, (step.height, step.width))}


# --- both implementations through the targets' compilers ----------------------------------

def implementations(model_path, nets=("x2", "classifier"), ours=True) -> dict:
    """``{net: {implementation: (check, draws, programs)}}`` for x2 (a 256x256 photo) and the
    classifier (one photo): ``check(driver)`` compiles that side's programs through the
    Mesa driver once (a report each; asked again, the same reports), ``draws``
    ``[(program index, fragments)]`` of one inference.  Beatmup's side is what its apps handed
    to GL; ours is the reference checkpoint as compiled by default and for
    ``"videocore4", tune=True``, and the imported classifier by default and with
    weights as uniforms, tuned (``shared=True, tune=True``); ``programs``: distinct programs
    (passes of one shape share one).  ``nets``: which of the two to compile; ``ours=False``:
    Beatmup's side alone (``model_path`` unused)."""
    from workbench import es2
    from workbench.es2 import drivers as es2_drivers
    from workbench.nets.models import load_model, reference_sr

    def x2():
        sr = load_model(reference_sr())
        return {"workbench": es2.compile(sr),
                "workbench (videocore4, tuned)": es2.compile(sr, "videocore4", tune=True)}

    def classifier():
        return {"workbench": es2.compile(beatmup_model.load(model_path)),
                "workbench (videocore4, shared, tuned)": es2.compile(
                    beatmup_model.load(model_path), "videocore4", shared=True, tune=True)}

    picture = images.to_uint8(datasets.photos(SIZE, 1)[0])
    ours = {name: build() for name, build in (("x2", x2), ("classifier", classifier))
            if name in nets and ours}
    found = {}
    for name, app, hw in (("x2", "X2", (SIZE, SIZE)), ("classifier", "Classify", None)):
        if name not in nets:
            continue
        captured = beatmup.capture(app, picture)
        found[name] = {"Beatmup": (cache(lambda t, c=captured: beatmup.compile_captured(t, c)),
                                   [(i, w * h) for i, w, h in captured.draws],
                                   len(captured.programs))}
        for side, net in ours.get(name, {}).items():
            found[name][side] = (cache(lambda t, n=net: es2_drivers.check(n, t)),
                                 compilers.draws(net, hw or net.graph.input_size),
                                 len({p.source for p in net.passes}))
    if "x2" in ours:
        found["x2 layers"] = ours["x2"]
    return found


def layer_budget(found) -> list[dict]:
    """vc4's estimated cycles per low-resolution pixel, layer by layer of the x2 net, for
    Beatmup's programs (its 32 in the net's order: 12 L1, 8 L2, 6 L3, 4 L4, L5, the demux) and
    ours, beside the layer's multiply-adds per pixel (the floor: one a cycle)."""
    nets = found["x2 layers"]
    reference = nets["workbench"]
    pixels = SIZE * SIZE
    layers = list(dict.fromkeys(p.op for p in reference.passes))
    costs = reference.cost((SIZE, SIZE))
    sides = {}
    for side, (check, draw_list, _) in found["x2"].items():
        reports = [asdict(r) for r in check("vc4")]
        if side == "Beatmup":
            owners = [p.op for p in reference.passes]  # the same net, the same program counts
        else:
            owners = [p.op for p in nets[side].passes]
        if len(owners) != len(reports):
            raise ValueError(f"{side}: {len(reports)} programs, the net has {len(owners)}")
        paid = compilers.by_layer(owners, reports, draw_list)
        sides[side] = {layer: paid.get(layer, 0) / pixels for layer in layers}
    rows = []
    for layer in layers:
        madds = costs[layer].multiply_adds // pixels
        row = {"layer": layer, "multiply-adds a pixel": madds}
        for side, cycles in sides.items():
            row[f"{side}: cycles a pixel"] = round(cycles[layer])
            row[f"{side}: cycles / multiply-add"] = cycles[layer] / madds if madds else None
        rows.append(row)
    return rows


def compile_all(found, driver_names=DRIVERS) -> list[dict]:
    """One row per (net, implementation, driver): programs taken, instructions (sum over the
    programs, and per image weighted by each draw's fragments), vc4's estimated cycles the
    same two ways, the fewest threads, the most spills, the first refusal."""
    rows = []
    for net, sides in found.items():
        if net == "x2 layers":
            continue
        for side, (check, draw_list, programs) in sides.items():
            for driver in driver_names:
                if side.endswith("tuned)") and driver != "vc4":  # tuned for vc4
                    continue
                reports = [asdict(r) for r in check(driver)]
                ok = all(r["ok"] for r in reports)
                stats = [r["stats"] for r in reports]
                row = {"net": net, "implementation": side, "target": driver,
                       "programs": programs, "draws": len(draw_list),
                       "refused": sum(not r["ok"] for r in reports),
                       "instructions": sum(s.get("instructions", 0) for s in stats),
                       "instruction-fragments (G)": compilers.weighted(
                           reports, draw_list, "instructions") / 1e9 if ok else None}
                if driver == "vc4" and ok:
                    row["estimated cycles"] = sum(s["estimated_cycles"] for s in stats)
                    for count in ("cycles", "two threads"):
                        row[PI_COUNTS[count]] = compilers.weighted(
                            reports, draw_list, compilers.FIT_STATS[count]) / 1e9
                    row["fewest threads"] = min(s["threads"] for s in stats)
                spills = [s.get("spills", s.get("spill", 0)) for s in stats]
                row["most spills"] = max(spills) if spills else 0
                first = next((r for r in reports if not r["ok"]), None)
                row["first refusal"] = (first["errors"] or ["?"])[0][:80] if first else ""
                rows.append(row)
    return rows


def pi_model(rows) -> list[dict]:
    """The Pi time model for every vc4 row of :func:`compile_all`: uncalibrated (the board's
    documented V3D clock, every estimated cycle paid) and calibrated: per board and clock
    assumption, ``ms = a * clocks / MHz + d * draws`` with ``a`` (clocks paid per clock
    counted) and ``d`` (ms a draw) solved from the article's two programs (x2, classifier)
    and its two measured times on that board (:func:`calibrate_pi`); ours then predicted
    from the same fit.  A fit a count (:data:`PI_COUNTS`): vc4's estimated cycles (its
    scheduler's waits on texture results all paid), its instructions (those waits all hidden
    by the QPU's second thread) and, between them, its threads interleaved
    (:func:`~workbench.es2.drivers.two_thread_cycles`); the article's two times fit each
    exactly, so only a board says which a Pi follows."""
    vc4 = _vc4(rows)
    fits = {(f["board"], f["clock from"], f["count"]): f for f in calibrate_pi(rows)}
    out = []
    for board, clocks_from, mhz in _clock_assumptions():
        for (net, side), r in vc4.items():
            row = {"board": board, "V3D MHz": mhz, "clock from": clocks_from, "net": net,
                   "implementation": side,
                   "model ms": _clocks(r, PI_COUNTS["cycles"]) / (mhz * 1e3)}
            for count, key in PI_COUNTS.items():
                fit = fits.get((board, clocks_from, count))
                row[f"calibrated ms ({count})"] = (
                    compilers.calibrated_ms(fit, _clocks(r, key), r["draws"]) if fit else None)
            row["measured ms (article)"] = MEASURED_MS.get((net, board)) \
                if side == "Beatmup" else None
            cycles = fits.get((board, clocks_from, "cycles"))
            if cycles:
                row["a (cycles paid / estimated)"], row["d (ms a draw)"] = cycles["a"], cycles["d"]
            out.append(row)
    return out


# what the calibrated Pi model counts: a vc4 row's column of fragment-weighted counts (of each
# program's :data:`compilers.FIT_STATS` of the same name)
PI_COUNTS = {"cycles": "cycle-fragments (G)", "instructions": "instruction-fragments (G)",
             "two threads": "two-thread cycle-fragments (G)"}


def calibrate_pi(rows) -> list[dict]:
    """The calibrated Pi model's fits from :func:`compile_all`'s rows (those of the article's
    two nets through vc4): one per board, clock assumption ("documented": the board's V3D
    clock, :data:`compilers.BOARDS_MHZ`; "article": :data:`ARTICLE_MHZ`) and count
    (:data:`PI_COUNTS`): ``{"board", "clock from", "V3D MHz", "count", "a", "d"}`` (none
    where a row is missing).  The clock assumed scales ``a`` alone: the times it predicts are
    the same."""
    vc4 = _vc4(rows)
    return [{"board": board, "clock from": clocks_from, "V3D MHz": mhz, "count": count,
             "a": fit[0], "d": fit[1]}
            for board, clocks_from, mhz in _clock_assumptions()
            for count, key in PI_COUNTS.items()
            if (fit := _calibrate(vc4, board, mhz, key))]


def article_rows() -> list[dict]:
    """:func:`compile_all`'s vc4 rows of the article's own programs alone (Beatmup's apps
    captured, no net of ours compiled: seconds, where :func:`run` takes minutes): what
    :func:`calibrate_pi` solves from."""
    return compile_all(implementations(None, ours=False), ("vc4",))


FIT_DIGITS = 6  # decimals of a and d stored in compilers.PI_FITS
REFRESH = ("python -m workbench bench beatmup, or python -c 'from workbench.studies import "
           "beatmup; beatmup.write_pi_fits(beatmup.article_rows())'")


def write_pi_fits(rows, path=None) -> Path:
    """Store :func:`calibrate_pi` of ``rows`` (:func:`compile_all`'s) in ``path`` (default
    :data:`compilers.PI_FITS`, which ``drivers`` predicts any net's Pi times from), ``a`` and
    ``d`` to :data:`FIT_DIGITS` decimals, with what they were solved from: the article's
    programs' vc4 counts and its measured times, Mesa's version, Beatmup's commit."""
    path = Path(path) if path else compilers.PI_FITS
    article = [{k: r[k] for k in ("net", "draws", *PI_COUNTS.values())}
               for r in _vc4(rows).values() if r["implementation"] == "Beatmup"]
    write_json(path, {
        "what": "the calibrated Raspberry Pi model, ms = a * clocks / (V3D MHz * 1e3) + d * "
                "draws, clocks = fragment-weighted count / 16 * 4 / 12 (workbench.studies."
                "beatmup.calibrate_pi)",
        "made by": REFRESH, "mesa": drivers.MESA_VERSION, "beatmup": beatmup.COMMIT,
        "measured ms": [{"net": n, "board": b, "ms": ms} for (n, b), ms in MEASURED_MS.items()],
        "article's programs (vc4)": article, "digits": FIT_DIGITS,
        "fits": [{**f, "a": round(f["a"], FIT_DIGITS), "d": round(f["d"], FIT_DIGITS)}
                 for f in calibrate_pi(rows)]})
    return path


def _vc4(rows) -> dict:
    """``{(net, implementation): row}`` of the vc4 rows of :func:`compile_all` it took whole."""
    return {(r["net"], r["implementation"]): r for r in rows
            if r["target"] == "vc4" and r.get("cycle-fragments (G)") is not None}


def _clock_assumptions():
    """``(board, clock from, V3D MHz)``: each board's documented clock and the article's."""
    return [(board, clocks_from, mhz) for board, documented in compilers.BOARDS_MHZ.items()
            for clocks_from, mhz in (("documented", documented), ("article", ARTICLE_MHZ[board]))]


def _clocks(row, key) -> float:
    return compilers.v3d_clocks(row[key] * 1e9)


def _calibrate(vc4, board, mhz, key=PI_COUNTS["cycles"]):
    """``(a, d)`` from the article's two nets on ``board``, their clocks from the count ``key``
    (None: a row is missing)."""
    try:
        theirs = [vc4[(net, "Beatmup")] for net in ("x2", "classifier")]
    except KeyError:
        return None
    lhs = np.array([[_clocks(r, key) / (mhz * 1e3), r["draws"]] for r in theirs])
    rhs = np.array([MEASURED_MS[(net, board)] for net in ("x2", "classifier")])
    a, d = np.linalg.solve(lhs, rhs)
    return float(a), float(d)


# --- the run ---------------------------------------------------------------------------------

def run(model_path=None, which="val", rounds=5, runs=3, driver_names=DRIVERS, out=None) -> dict:
    """The ``bench beatmup`` command: the three tables into ``out`` (default the figures
    folder) as ``beatmup.md`` / ``beatmup.json``, and printed.  Mesa's shader cache starts
    empty (a folder of the run's own): each side's first compile is a compile, not a cache
    hit.  (The cache stays on: llvmpipe keeps a bounded number of compiled variants in memory,
    and a net of 1,134 programs would otherwise compile some of them again on every image.)
    The model is read first (a bad ``model_path`` refused before any run); the cache is
    removed at the end."""
    import tempfile
    from unittest import mock

    why = beatmup.available()
    if why:
        raise beatmup.BeatmupUnavailable(why)
    model_path = Path(model_path) if model_path else beatmup.model_file()
    beatmup_model.load(model_path)  # (one line naming the file, before minutes of runs)
    with tempfile.TemporaryDirectory(prefix="workbench-mesa-cache-") as cache, \
            mock.patch.dict("os.environ", {"MESA_SHADER_CACHE_DIR": cache}):
        return _run(model_path, which, rounds, runs, driver_names, out)


def _run(model_path, which, rounds, runs, driver_names, out) -> dict:
    from workbench import gl

    saved = {"machine": machine(), "gl": gl.info().get("GL_RENDERER", "?"),
             "peak": peak.gl_peak(),
             "x2": x2(rounds=rounds, runs=runs),
             "classifier": classifier(model_path, which, rounds)}
    if drivers.available() is None:
        found = implementations(model_path)
        rows = compile_all(found, driver_names)
        saved["compilers"] = {"mesa": drivers.MESA_VERSION, "rows": rows, "pi": pi_model(rows),
                              "x2 layers": layer_budget(found)}
        if calibrate_pi(rows):
            print(f"written: {write_pi_fits(rows)} (the fits `drivers` predicts the Pi from)")
    else:
        saved["compilers"] = {"skipped": drivers.available()}
    out = Path(out) if out else figures_dir()
    write_json(out / RESULT, saved)
    text = section(saved)
    write_text(out / TABLE, f"# The articles' own system, side by side\n\n{text}\n")
    print(text)
    print(f"\nwritten: {out / TABLE}, {out / RESULT}")
    return saved


def machine() -> str:
    """The CPU model, its cores and whether it has AVX-512 (what the timings depend on)."""
    import os

    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                  if line.startswith("model name")), "?")
    avx = "with AVX-512" if "avx512f" in info else "without AVX-512"
    return f"{model}, {os.cpu_count()} cores, {avx}"


def section(saved) -> str:
    """The report's text for the saved results."""
    top = saved.get("peak")
    parts = [f"One run on {saved['machine']}; GL: {saved['gl']} (Beatmup's apps and our shaders "
             "alike); Mesa's shader cache empty at the start."
             + (f" GMAC/s: a net's multiply-adds an image over a median time; % of peak: of "
                f"this GL's measured peak, {peak.peak_text(top)} ({top['shader']}: a plain "
                "fragment shader of multiply-adds, workbench.studies.peak), on a Pi of the "
                "QPUs' (12 QPUs x 4 lanes x 1 multiply-add a clock) at the article's V3D clock "
                "and the board's documented one." if top else ""),
             x2_section(saved["x2"], top), classifier_section(saved["classifier"], top)]
    comp = saved["compilers"]
    if "skipped" in comp:
        parts.append(f"Compilers: not run ({comp['skipped']}).")
    else:
        parts.append(f"**Both implementations through the targets' compilers** (Mesa "
                     f"{comp['mesa']} on drm-shims; Beatmup's programs as its apps handed "
                     "them to GL; per image: each program's count times the fragments of its "
                     "draws, summed over one inference):\n\n" + tables.markdown(comp["rows"]))
        parts.append("vc4's estimated cycles a low-resolution pixel, x2 layer by layer "
                     "(the floor: one cycle a multiply-add):\n\n"
                     + tables.markdown(comp["x2 layers"]))
        parts.append("Raspberry Pi times from vc4's counts, the same model for both sides "
                     "(12 QPUs, 16 fragments an instruction in 4 clocks); calibrated: `ms = a "
                     "clocks / MHz + d draws` solved per board and clock from the article's "
                     "two nets and its two measured times, then applied to ours, with the "
                     "clocks from vc4's estimated cycles (its scheduler's waits on texture "
                     "results all paid), from its instructions (those waits all hidden by the "
                     "second thread) and from its two threads interleaved (a program: the "
                     "longer of its instructions and its estimated cycles over its threads): "
                     "each fits the article's two times exactly; a board says which a Pi "
                     "follows:\n\n"
                     + tables.markdown(pi_rates(comp["pi"], _counts(saved)), digits=3))
    return "\n\n".join(parts)


def x2_section(x, top=None) -> str:
    """The x2 table and timing of :func:`x2`'s result (``top``: this GL's peak,
    :func:`workbench.studies.peak.gl_peak`)."""
    t = x["timing"]
    return ("**x2 SR**, the same 8-bit low-resolution images to both (MATLAB's antialiased "
            "bicubic; PSNR on Y of BT.601 studio range, crop 2):\n\n" + tables.markdown(x["psnr"])
            + f"\n\nOne {t['input']} -> x2 upscale, {t['runs']} runs a side in alternating "
            f"rounds; the article's times measured on its boards:\n\n"
            + tables.markdown(timing_rows(t, "x2", top))
            + f"\n\nFaster here: {t['faster']}. Compile, "
            f"every program with a first draw: Beatmup {t['compile ms']['Beatmup']:.0f} ms, "
            f"workbench {t['compile ms']['workbench']:.0f} ms (each side's first, Mesa's cache "
            "empty).")


def classifier_section(c, top=None) -> str:
    """The classifier's tables of :func:`classifier`'s result (``top``: as
    :func:`x2_section`'s)."""
    t = c["timing"]
    return (f"**Classifier**: Beatmup's trained dog classifier on {c['photos']} photos of "
            f"`cls/{WOOF}` ({_which(c['which'])}); the same decoded pixels to both sides; the "
            "imported net through TensorFlow and our ES 2.0 shaders:\n\n"
            + tables.markdown(c["top1"])
            + "\n\nTop-1 agreement: " + "; ".join(f"{k}: {v:.2f} %" for k, v in
                                                  c["agreement %"].items())
            + ". Largest probability difference: " + "; ".join(
                f"{k} {v:.4f}" for k, v in c["largest probability difference"].items())
            + f".\n\nTime per photo, {t['runs']} runs a side alternating photo by photo; "
            "the article's times measured on its boards:\n\n"
            + tables.markdown(timing_rows(t, "classifier", top))
            + f"\n\nFaster here: {t['faster']}. Programs compiled: "
            f"Beatmup {c['programs']['Beatmup']}, workbench {c['programs']['workbench']}; "
            f"start-up to a first result, Mesa's cache empty: Beatmup "
            f"{c['compile s']['Beatmup']:.1f} s (its app: loading, compiling, a first pass), "
            f"workbench {c['compile s']['workbench']:.1f} s (generating, compiling, a first "
            "photo).")


def timing_rows(t, net, top=None) -> list[dict]:
    """A timing of :func:`x2_timing` / :func:`classifier_timing` as rows: each side's median
    (quartiles) here, then the article's measured times of ``net`` ("x2", "classifier") on
    its boards; with the net's count, GMAC/s and % of the peak: ``top``'s here (this GL's,
    measured), the QPUs' on a Pi (:func:`qpu_shares`)."""
    count = t.get("multiply_adds")
    rows = [{"where": "this machine", "side": side,
             "median ms (quartiles)": f"{v['median']:.1f} ({v['q25']:.1f}-{v['q75']:.1f})",
             **(peak.rate_cells(count, v["median"], top and top["gmacs"]) if count else {})}
            for side, v in t["ms"].items()]
    for (name, board), ms in MEASURED_MS.items():
        if name == net:
            rows.append({"where": board, "side": "Beatmup (the article's time)",
                         "median ms (quartiles)": f"{ms:.0f}",
                         **({"GMAC/s": f"{peak.gmacs(count, ms):.2f}",
                             "% of peak": qpu_shares(peak.gmacs(count, ms), board)}
                            if count else {})})
    return rows


def qpu_shares(rate, board) -> str:
    """``rate`` (GMAC/s) as % of the QPUs' peak of ``board`` at the article's V3D clock and at
    the documented one: ``"a (article's N MHz) / b (documented M MHz)"``."""
    return " / ".join(f"{peak.share(rate, compilers.qpu_peak_gmacs(mhz)):.1f} ({what} {mhz} MHz)"
                      for what, mhz in (("article's", ARTICLE_MHZ[board]),
                                        ("documented", compilers.BOARDS_MHZ[board])))


def pi_rates(rows, counts) -> list[dict]:
    """:func:`pi_model`'s rows with GMAC/s and % of the QPUs' peak at the row's clock, each
    ``"model; calibrated min-max"`` (the calibrated range over the counts; ``counts``: ``{net:
    multiply-adds an image}``, a net missing there: no such cells)."""
    out = []
    for r in rows:
        count = counts.get(r["net"])
        if not count:
            out.append(r)
            continue
        times = [r[f"calibrated ms ({c})"] for c in PI_COUNTS if r[f"calibrated ms ({c})"]]
        rates = [peak.gmacs(count, ms) for ms in [r["model ms"], *times]]
        peak_rate = compilers.qpu_peak_gmacs(r["V3D MHz"])
        out.append({**r, "GMAC/s (model; calibrated)": _model_and_range(rates, 2),
                    "% of QPU peak (model; calibrated)": _model_and_range(
                        [peak.share(v, peak_rate) for v in rates], 1)})
    return out


def _model_and_range(values, digits) -> str:
    """``"model; lo-hi"`` to ``digits`` decimals (``values``: the model's, then the calibrated
    ones; one number where the calibrated ones agree)."""
    model, *calibrated = (f"{v:.{digits}f}" for v in values)
    if not calibrated:
        return model
    lo, hi = (f"{v:.{digits}f}" for v in (min(values[1:]), max(values[1:])))
    return f"{model}; {lo}" + (f"-{hi}" if hi != lo else "")


def _counts(saved) -> dict:
    """``{net: multiply-adds an image}`` of a saved run's timings (none before they were)."""
    return {net: saved[net]["timing"].get("multiply_adds") for net in ("x2", "classifier")}


def _which(which) -> str:
    return ("its ImageNet validation images of the 9 classes among the 120" if which == "val"
            else "every photo; of those of the 9 classes among the 120, all but 145 are "
                 "ImageNet training images; dingo's 410 count in the agreement only")


def report_section(directory) -> str | None:
    """The section of ``beatmup.json`` in ``directory`` (None: not there)."""
    saved = read_json(Path(directory) / RESULT)
    return section(saved) if saved else None
