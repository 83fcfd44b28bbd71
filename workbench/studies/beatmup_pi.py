"""Both implementations through the targets' own compilers, and the calibrated Raspberry Pi
model (the third table of ``python -m workbench bench beatmup``, :mod:`workbench.studies.beatmup`).

Beatmup's programs (what its apps handed to GL, captured) and ours go through Mesa's drivers on
drm-shims (:mod:`workbench.gl.drivers`): programs taken, instructions, vc4's estimated cycles,
threads, spills, per image weighted by the fragments of each draw.  The Pi time model
(:mod:`workbench.studies.compilers`) predicts both from the same numbers, and is calibrated on
the article's two programs against its two measured times (:func:`calibrate_pi`; stored by
:func:`write_pi_fits` for ``drivers`` to predict any net's Pi times).
"""
from __future__ import annotations

from dataclasses import asdict
from functools import cache
from pathlib import Path

import numpy as np

from workbench.data import datasets, images
from workbench.files import write_json
from workbench.gl import beatmup, drivers
from workbench.nets import beatmup_model
from workbench.studies import compilers, peak
from workbench.studies.beatmup_measure import ARTICLE_MHZ, MEASURED_MS, SIZE

DRIVERS = ("vc4", "v3d", "a320", "t720", "mali400", "gc2000")

# what the calibrated Pi model counts: a vc4 row's column of fragment-weighted counts (of each
# program's :data:`compilers.FIT_STATS` of the same name)
PI_COUNTS = {"cycles": "cycle-fragments (G)", "instructions": "instruction-fragments (G)",
             "two threads": "two-thread cycle-fragments (G)"}


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
    captured, no net of ours compiled: seconds, where ``bench beatmup`` takes minutes): what
    :func:`calibrate_pi` solves from."""
    return compile_all(implementations(None, ours=False), ("vc4",))


FIT_DIGITS = 6  # decimals of a and d stored in compilers.PI_FITS
REFRESH = ("python -m workbench bench beatmup, or python -c 'from workbench.studies import "
           "beatmup_pi; beatmup_pi.write_pi_fits(beatmup_pi.article_rows())'")


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
                "beatmup_pi.calibrate_pi)",
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
