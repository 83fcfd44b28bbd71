"""The target GPUs' own compilers on the shipped nets: the drivers table, a figure, and a time
predicted for the Raspberry Pi from VideoCore IV's compiler (``python -m workbench drivers``).

Every program of each net goes through each GPU's Mesa driver (:mod:`workbench.es2.drivers`):
the table says per driver and net how many programs it takes, how large the largest is, the
fewest threads, the most spills, and why it refused what it refused.  Each net is also
compiled as ``es2.compile(..., <the driver's device profile>, tune=True)`` plans it where
a profile names that driver (refusals cured, then each layer's programs in the form that
compiler runs fastest), so the table shows the refusal and its cure side by side.

Pi time model (:func:`predict_pi`): VideoCore IV has 12 QPUs (3 slices of 4); a QPU runs one
instruction for 16 fragments in 4 clock cycles (4-wide ALUs, 16-wide vectors).  vc4's
compiler estimates each program's cycles (instructions plus the texture-fetch latency its
scheduler could not hide).  So a pass of F fragments takes ``F / 16 * 4 * cycles / 12``
V3D clocks, and the net the sum over its passes, at the board's V3D clock (Raspberry Pi
documentation, config.txt "Overclocking options", default values: ``v3d_freq`` 400 MHz on
the Pi 3 B and 3 B+, 300 on the Pi Zero W).  It leaves out: the texture units' throughput
and cache misses, memory bandwidth, binning and per-tile costs, the CPU's draw calls
and what the latency-hiding of 2-thread programs saves beyond the estimate.

Calibrated (:func:`calibrated_pi`): ``ms = a * clocks / MHz + d * draws``, ``a`` and ``d``
solved per board from the article's two nets (Beatmup's programs through the same vc4) and
their two measured times (:func:`workbench.studies.beatmup_pi.calibrate_pi`, stored in
:data:`PI_FITS`), the clocks counted three ways (vc4's estimated cycles, its instructions, its
two threads interleaved): any net's Pi time is the range of the three.  Multiply-adds per
second are the net's (:meth:`~workbench.es2.net.Net.cost`) over that time, beside the QPUs'
peak (:func:`qpu_peak_gmacs`).
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from workbench import tables
from workbench.es2 import drivers as es2_drivers
from workbench.es2 import limits
from workbench.es2.shaders import fragments
from workbench.files import figures_dir, read_json, write_json, write_text
from workbench.gl import drivers
from workbench.studies import peak

RESULT, TABLE, FIGURE = "drivers.json", "drivers.md", "drivers_instructions"  # of the SR nets;
# a notebook that writes another table beside them names it (classifier_deploy:
# "drivers_classifier")
NAMES = ("drivers", "drivers_classifier")
DEFAULT_DRIVERS = drivers.TABLE_DRIVERS
QPUS, FRAGMENTS_PER_INSTRUCTION, CLOCKS_PER_INSTRUCTION = 12, 16, 4
BOARDS_MHZ = {"Raspberry Pi 3 B / B+": 400, "Raspberry Pi Zero W": 300}
# The Pi times of the named nets (``workbench.nets.models.named``): ``{name: (kind, side)}``, the
# input side they are predicted at (a classifier preset's random weights have a trained one's
# programs)
PI_SIZES = {"sr": ("sr", 256), "sr-mrt4": ("sr", 256), "dogs120": ("dogs120", 385)}
# The calibrated Pi model's fits (written by workbench.studies.beatmup_pi.write_pi_fits)
PI_FITS = Path(__file__).with_name("pi_fits.json")
# What a fit counts of a vc4 program, by the fit's name: a key of its statistics or a function
# of them (fragment-weighted: :func:`weighted`)
FIT_STATS = {"cycles": "estimated_cycles", "instructions": "instructions",
             "two threads": es2_drivers.two_thread_cycles}


def profile_for(driver) -> str | None:
    """The device profile whose ``driver`` is ``driver`` (None: no profile names it)."""
    return next((p.name for p in limits.PROFILES.values() if p.driver == driver), None)


def compile_nets(models: dict, driver_names=DEFAULT_DRIVERS) -> dict:
    """Every net of ``models`` (``{label: (keras model, es2.compile options)}``) through each
    driver: ``{label: {"targets": {driver: {"passes": [...], "reports": [...], "changes":
    [...], "compiled_for": ...}}, ...}}``.  A net is compiled for the ES 2.0 limits, and where
    a profile names the driver also for that profile (as many of the net's render targets as
    it allows) with ``tune=True``: the row of that net is ``"<driver> (tuned)"``."""
    from workbench import es2

    results = {}
    for label, (model, options) in models.items():
        plain = es2.compile(model, **options)
        rows = {}
        for name in driver_names:
            rows[name] = _row(plain, es2_drivers.check(plain, name), "ES 2.0")
            device = profile_for(name)
            if device:
                most = min(plain.target.draw_buffers, limits.profile(device).draw_buffers)
                tuned = es2.compile(model, **{**options, "tune": True,
                                              "target": es2.Target.of(device, draw_buffers=most)})
                rows[f"{name} (tuned)"] = _row(tuned, es2_drivers.check(tuned, name),
                                               f"profile {device}, tune=True", tuned.changes)
            if name in drivers.ES31_DRIVERS:
                rows[f"{name} (ES 3.1)"] = _compute_row(model, name)
        results[label] = {"programs": len(plain.passes), "targets": rows,
                          "net": plain, "input_size": plain.graph.input_size}
    return results


def _compute_row(model, driver):
    """The net's ES 3.1 compute kernels (:mod:`workbench.es31`) through the driver ``driver``."""
    from workbench import es31

    net = es31.compile(model)
    reports = drivers.compile_compute(driver, [(k.name, k.source) for k in net.kernels])
    return {"compiled_for": "ES 3.1 compute", "changes": [],
            "passes": [{"name": k.name, "op": k.op, "outputs": 1} for k in net.kernels],
            "reports": [asdict(r) for r in reports], "net": net}


def _row(net, reports, compiled_for, changes=()):
    return {"compiled_for": compiled_for, "changes": list(changes),
            "passes": [{"name": p.name, "op": p.op, "outputs": len(p.outputs)}
                       for p in net.passes],
            "reports": [asdict(r) for r in reports],
            "net": net}


def summary_rows(results) -> list[dict]:
    """One row per (net, driver): programs taken / refused, the largest program, the fewest
    threads, the most registers and spills, the first refusal."""
    rows = []
    for label, result in results.items():
        for key, row in result["targets"].items():
            driver = drivers.driver(key.split(" ")[0])
            reports = row["reports"]
            stats = [r["stats"] for r in reports if r["stats"]]
            failed = [r for r in reports if not r["ok"]]

            def most(name, values=stats):
                found = [s[name] for s in values if name in s]
                return max(found) if found else ""

            threads = [s["threads"] for s in stats if "threads" in s]
            rows.append({
                "net": label, "target": key, "GPU": driver.gpu,
                "compiled for": row["compiled_for"],
                "programs ok": f"{len(reports) - len(failed)} / {len(reports)}",
                "largest (instructions)": most("instructions"),
                "fewest threads": min(threads) if threads else "",
                "registers": most("registers") or most("max_temps") or most("temps") or
                most("full"),
                "spills": most("spills"),
                "refused because": (failed[0]["errors"] or ["?"])[0] if failed else "",
            })
    return rows


def draws(net, hw) -> list[tuple[int, int]]:
    """``(program index, fragments)`` of each draw of ``net`` for an input of ``hw = (height,
    width)``: its passes in order (:func:`~workbench.es2.shaders.fragments`)."""
    return [(i, int(f)) for i, f in enumerate(fragments(net.graph, net.passes, hw))]


def by_layer(owners, reports, draw_list, stat="estimated_cycles") -> dict[str, float]:
    """:func:`weighted` layer by layer: ``{layer: fragments times the program's stat, summed
    over the draws of its programs}``, ``owners[i]`` the layer of program ``i``."""
    paid = {}
    for i, count in draw_list:
        paid[owners[i]] = paid.get(owners[i], 0) + count * reports[i]["stats"].get(stat, 0)
    return paid


def weighted(reports, draw_list, stat="estimated_cycles") -> float:
    """The sum over ``draw_list`` (``(program index, fragments)``) of fragments times the
    program's ``stat`` in ``reports`` (dicts, as :func:`dataclasses.asdict` gives them; or a
    function of a program's stats, as :func:`workbench.es2.drivers.two_thread_cycles`): e.g.
    the estimated cycle-fragments of one image."""
    of = stat if callable(stat) else (lambda stats: stats[stat])
    return float(sum(f * of(reports[i]["stats"]) for i, f in draw_list))


def v3d_clocks(cycle_fragments) -> float:
    """V3D clocks of ``cycle_fragments`` (estimated cycles times fragments, summed)."""
    return cycle_fragments / FRAGMENTS_PER_INSTRUCTION * CLOCKS_PER_INSTRUCTION / QPUS


def predict_pi(net, reports, hw) -> dict:
    """Predicted ms of ``net`` for an input of ``hw = (height, width)`` on each board of
    :data:`BOARDS_MHZ`, from vc4's estimated cycles (``reports``, in pass order); also the
    V3D clocks per pass."""
    clocks = {net.passes[i].name: v3d_clocks(f * reports[i]["stats"]["estimated_cycles"])
              for i, f in draws(net, hw)}
    total = sum(clocks.values())
    return {"clocks": clocks, "ms": {b: total / (mhz * 1e3) for b, mhz in BOARDS_MHZ.items()}}


def stored_fits(clock_from="documented", path=PI_FITS) -> dict:
    """``{board: {count: fit}}`` of :data:`PI_FITS` (a fit: ``{"a", "d", "V3D MHz", ...}``) for
    the clock assumed: "documented" (:data:`BOARDS_MHZ`) or "article" (the classifier
    article's; the same times, another ``a``)."""
    fits = {}
    for fit in read_json(path)["fits"]:
        if fit["clock from"] == clock_from:
            fits.setdefault(fit["board"], {})[fit["count"]] = fit
    return fits


def pi_side(model) -> int | None:
    """The side of the square input a user's ``model`` (Keras or ONNX) is predicted at on the
    Pi: its own fixed size, 256 where it has none (an SR net), None where its fixed input is
    not square."""
    from workbench import ir

    h, w = ir.from_model(model).input_size or (256, 256)
    return h if h == w else None


def calibrated_ms(fit, clocks, draws) -> float:
    """``a * clocks / MHz + d * draws``: a fit's ms for ``clocks`` V3D clocks in ``draws``
    draws."""
    return fit["a"] * clocks / (fit["V3D MHz"] * 1e3) + fit["d"] * draws


def calibrated_pi(net, reports, hw, fits, draw_list=None) -> dict:
    """``{count: ms}`` of ``net`` at ``hw = (height, width)`` under each fit of ``fits``
    (``{count: fit}``, one board's: :func:`stored_fits`), its clocks from vc4's ``reports``;
    ``draw_list``: its :func:`draws` at ``hw`` where the caller has them."""
    draw_list = draw_list or draws(net, hw)
    return {count: calibrated_ms(fit, v3d_clocks(weighted(reports, draw_list,
                                                          FIT_STATS[count])), len(draw_list))
            for count, fit in fits.items()}


def qpu_peak_gmacs(mhz) -> float:
    """VideoCore IV's peak, G multiply-adds a second at ``mhz``: 12 QPUs x 4 lanes (16
    fragments an instruction in 4 clocks) x 1 multiply-add a lane a clock (the QPU issues a
    multiply and an add together; one multiply-add, not two operations): 19.2 at 400 MHz."""
    return QPUS * FRAGMENTS_PER_INSTRUCTION / CLOCKS_PER_INSTRUCTION * mhz / 1e3


def pi_rows(results, sizes, fits=None) -> list[dict]:
    """Predicted Pi times: ``sizes`` = ``{net label: (kind, side)}``; each vc4 row of the
    table at a ``side`` x ``side`` input, per board: the uncalibrated model ("predicted ms"),
    the three calibrated fits (``fits``: ``{board: {count: fit}}``, default
    :func:`stored_fits`) and their range, the net's multiply-adds an image, G a second at the
    range's ends and their share of :func:`qpu_peak_gmacs` at the board's clock."""
    fits = fits or stored_fits()
    rows = []
    for label, (_, side) in sizes.items():
        for key in ("vc4", "vc4 (tuned)"):
            row = results[label]["targets"].get(key)
            if not row or not all(r["ok"] for r in row["reports"]):
                continue
            net, reports, hw = row["net"], row["reports"], (side, side)
            predicted, draw_list = predict_pi(net, reports, hw)["ms"], draws(net, hw)
            macs = sum(c.multiply_adds for c in net.cost(hw).values())
            for board, mhz in BOARDS_MHZ.items():
                ms = calibrated_pi(net, reports, hw, fits[board], draw_list)
                fast, slow = min(ms.values()), max(ms.values())
                rate = {"min": peak.gmacs(macs, slow), "max": peak.gmacs(macs, fast)}
                rows.append({"net": label, "compiled for": row["compiled_for"],
                             "input": f"{side}x{side}", "board": board, "V3D MHz": mhz,
                             "predicted ms": round(predicted[board], 1),
                             **{f"calibrated ms ({count})": v for count, v in ms.items()},
                             "calibrated ms min": fast, "calibrated ms max": slow,
                             "GMAC an image": macs / 1e9,
                             **{f"GMAC/s {end}": v for end, v in rate.items()},
                             **{f"% of QPU peak {end}": peak.share(v, qpu_peak_gmacs(mhz))
                                for end, v in rate.items()}})
    return rows


def _pi_table(rows) -> list[dict]:
    """:func:`pi_rows` as shown: each range ``min-max`` (rows saved before the calibrated
    columns: as they are)."""
    if "calibrated ms min" not in rows[0]:
        return rows

    def span(r, name, digits):
        return f"{r[f'{name} min']:.{digits}f}-{r[f'{name} max']:.{digits}f}"

    return [{**{k: r[k] for k in ("net", "compiled for", "input", "board", "V3D MHz")},
             "model ms (uncalibrated)": r["predicted ms"],
             "calibrated ms": span(r, "calibrated ms", 1),
             "GMAC an image": f"{r['GMAC an image']:.3f}", "GMAC/s": span(r, "GMAC/s", 2),
             "% of QPU peak": span(r, "% of QPU peak", 1)}
            for r in rows]


def layer_rows(results, sizes=None) -> list[dict]:
    """The budget per layer: one row per (net, layer), a column per target row of the table
    (where its compiler took every program): ``"a / b"``, the driver's estimated cycles
    (vc4) or instructions per multiply-add (a) and per texel fetch (b), each program
    weighted by its fragments, at the net's size in ``sizes`` (``{label: (kind, side)}``)
    or its own input size (else 64x64).  The floor per multiply-add: 1 on VideoCore IV (its
    QPU issues a multiply and an add together, one lane each), 1/4 where an instruction is
    a vec4 one (Mali-400)."""
    rows = []
    for label, result in results.items():
        side = (sizes or {}).get(label, (None, None))[1]
        hw = (side, side) if side else (result["input_size"] or (64, 64))
        columns = {}
        for key, row in result["targets"].items():
            if not all(r["ok"] for r in row["reports"]) or "ES 3.1" in key:
                continue  # (the compute kernels draw no fragments)
            net, reports = row["net"], row["reports"]
            stat = "estimated_cycles" if "estimated_cycles" in reports[0]["stats"] else \
                "instructions"
            costs = net.cost(hw)
            paid = by_layer([p.op for p in net.passes], reports, draws(net, hw), stat)
            columns[f"{key}: {'cycles' if stat == 'estimated_cycles' else stat}"] = {
                layer: f"{_per(total, costs[layer].multiply_adds)} / "
                       f"{_per(total, costs[layer].texel_fetches)}"
                for layer, total in paid.items()}
        layers = dict.fromkeys(layer for values in columns.values() for layer in values)
        rows += [{"net": label, "layer": layer,
                  **{name: values.get(layer, "") for name, values in columns.items()}}
                 for layer in layers]
    return rows


def _per(total, count) -> str:
    return f"{total / count:.2f}" if count else "-"


def figure(results, label):
    """Instructions per program of net ``label`` on each target (ES 2.0 plan)."""
    import matplotlib.pyplot as plt

    result = results[label]
    fig, ax = plt.subplots(figsize=(9, 4))
    for key, row in result["targets"].items():
        if "(" in key:  # the ES 2.0 plan only
            continue
        values = [r["stats"].get("instructions", float("nan")) for r in row["reports"]]
        ok = [r["ok"] for r in row["reports"]]
        line, = ax.plot(range(len(values)), values, marker=".", label=drivers.driver(key).gpu)
        refused = [i for i, good in enumerate(ok) if not good]
        if refused:
            ax.plot(refused, [0] * len(refused), "x", color=line.get_color(), markersize=8,
                    label=f"{drivers.driver(key).gpu}: refused")
    names = [p["name"] for p in next(iter(result["targets"].values()))["passes"]]
    step = max(1, len(names) // 16)
    ax.set_xticks(range(0, len(names), step), names[::step], rotation=60, fontsize=7)
    ax.set_ylabel("instructions (driver's count)")
    ax.set_title(f"{label}: fragment-shader instructions per program, each target's compiler "
                 f"(Mesa {drivers.MESA_VERSION})", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def save_results(directory, results, pi_sizes=None, name="drivers") -> dict:
    """``<name>.json``, ``<name>.md`` and the figure ``<name>_instructions`` (of the first net)
    in ``directory``."""
    from workbench.figures import save_figure

    directory = Path(directory)
    saved = {"mesa": drivers.MESA_VERSION,
             "nets": {label: {"programs": r["programs"],
                              "targets": {k: {key: v for key, v in row.items() if key != "net"}
                                          for k, row in r["targets"].items()}}
                      for label, r in results.items()},
             "summary": summary_rows(results),
             "layers": layer_rows(results, pi_sizes),
             "pi": pi_rows(results, pi_sizes or {})}
    write_json(directory / f"{name}.json", saved)
    write_text(directory / f"{name}.md", f"# The target GPUs' compilers\n\n{section(saved)}\n")
    save_figure(figure(results, next(iter(results))), f"{name}_instructions", directory)
    return saved


def section(saved) -> str:
    changes = [f"- {label}, {key}: {c}" for label, r in saved["nets"].items()
               for key, row in r["targets"].items() for c in row["changes"]]
    text = (f"Every program through each target's own compiler (Mesa {saved['mesa']} drivers on "
            "their drm-shims; a program counts as refused when the driver says so at the "
            "draw, also where GL_COMPILE_STATUS and GL_LINK_STATUS said success).\n\n"
            + tables.markdown(saved["summary"]))
    if changes:
        text += "\n\nWhat `tune=True` changed:\n" + "\n".join(changes)
    if saved.get("layers"):
        text += ("\n\nThe budget per layer: the driver's estimated cycles (vc4) or instructions "
                 "per multiply-add / per texel fetch, each program weighted by the fragments it "
                 "draws; the floor per multiply-add: 1 on VideoCore IV, whose QPU issues a "
                 "multiply and an add together, 1/4 where an instruction is a vec4 one, as "
                 "Mali-400's:\n\n" + tables.markdown(saved["layers"]))
    if saved["pi"]:
        text += ("\n\nThe Raspberry Pi predicted from vc4's counts (12 QPUs, 16 fragments an "
                 "instruction in 4 clocks, the board's default V3D clock): the model from its "
                 "estimated cycles, uncalibrated; calibrated, `ms = a clocks / MHz + d draws` "
                 "with a and d solved per board from the article's two nets and their measured "
                 "times (`bench beatmup`), the clocks from vc4's estimated cycles, its "
                 "instructions or its two threads interleaved: the range of the three; the "
                 "net's multiply-adds an image, a second at the range's ends and their share "
                 "of the QPUs' peak (12 QPUs x 4 lanes x 1 multiply-add a clock: 19.2 G/s at "
                 "400 MHz):\n\n" + tables.markdown(_pi_table(saved["pi"]), digits=1))
    return text


def report_section(directory) -> str | None:
    """The tables of every :data:`NAMES` results file in ``directory`` (None: none there)."""
    found = [read_json(Path(directory) / f"{n}.json") for n in NAMES]
    return "\n\n".join(section(saved) for saved in found if saved) or None


def run(models: dict, driver_names=DEFAULT_DRIVERS, out=None, pi_sizes=None) -> dict:
    """The ``drivers`` command: compile, save into ``out`` (default the figures folder), print."""
    why = drivers.available()
    if why:
        raise drivers.DriversUnavailable(why)
    out = Path(out) if out else figures_dir()
    results = compile_nets(models, driver_names)
    for label, result in results.items():  # (a net calibrated or clamped: its deploy's check)
        if result["net"].reference is not None:
            print(f"{label}: {result['net'].reference.line()}")
    saved = save_results(out, results, pi_sizes)
    print(section(saved))
    print(f"\nwritten: {out / TABLE}, {out / RESULT}, {out / FIGURE}.png/.svg")
    return saved
