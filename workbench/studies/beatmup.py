"""The reference articles' own system beside the workbench (``python -m workbench bench beatmup``).

Beatmup (GPL-3.0) runs as a separate program (:mod:`workbench.gl.beatmup`: its ``X2`` and
``Classify`` apps on this machine's GL); its dog classifier is read from its chunk file
(:mod:`workbench.nets.beatmup_model`) and deployed through our ES 2.0 shaders.  Three tables,
all from one run on one machine and GL (x2 and the classifier:
:mod:`workbench.studies.beatmup_measure`; the compilers: :mod:`workbench.studies.beatmup_pi`;
here: the command and its report):

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

from pathlib import Path

from workbench import tables
from workbench.files import figures_dir, read_json, write_json, write_text
from workbench.gl import beatmup, drivers
from workbench.nets import beatmup_model
from workbench.studies import beatmup_measure, beatmup_pi, peak

RESULT, TABLE = "beatmup.json", "beatmup.md"


def run(model_path=None, which="val", rounds=5, runs=3, driver_names=beatmup_pi.DRIVERS,
        out=None) -> dict:
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
             "x2": beatmup_measure.x2(rounds=rounds, runs=runs),
             "classifier": beatmup_measure.classifier(model_path, which, rounds)}
    if drivers.available() is None:
        found = beatmup_pi.implementations(model_path)
        rows = beatmup_pi.compile_all(found, driver_names)
        saved["compilers"] = {"mesa": drivers.MESA_VERSION, "rows": rows,
                              "pi": beatmup_pi.pi_model(rows),
                              "x2 layers": beatmup_pi.layer_budget(found)}
        if beatmup_pi.calibrate_pi(rows):
            print(f"written: {beatmup_pi.write_pi_fits(rows)} "
                  "(the fits `drivers` predicts the Pi from)")
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
             beatmup_measure.x2_section(saved["x2"], top),
             beatmup_measure.classifier_section(saved["classifier"], top)]
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
                     + tables.markdown(beatmup_pi.pi_rates(comp["pi"], _counts(saved)),
                                       digits=3))
    return "\n\n".join(parts)


def _counts(saved) -> dict:
    """``{net: multiply-adds an image}`` of a saved run's timings (none before they were)."""
    return {net: saved[net]["timing"].get("multiply_adds") for net in ("x2", "classifier")}


def report_section(directory) -> str | None:
    """The section of ``beatmup.json`` in ``directory`` (None: not there)."""
    saved = read_json(Path(directory) / RESULT)
    return section(saved) if saved else None
