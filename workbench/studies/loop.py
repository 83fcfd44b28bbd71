"""``python -m workbench bench loop``: the fast loop (issue 57).  Each run is a fresh
``python -m workbench upscale`` process, timed from its start: to its first image's result
(the line it prints for it) and to its exit.  Three cases, each with its own Mesa shader
cache (``MESA_SHADER_CACHE_DIR``): one image from a saved shader folder (no TensorFlow), one
from the model file (TensorFlow loads it; the deploy's reference check), and Set5 + Set14
through the GPU from the saved folder (19 images, PSNR on Y of BT.601 studio range: the
tables' convention).  A case's first run finds its cache empty (llvmpipe compiles every
shader: a new net's first run); the ``repeat`` rounds after it, interleaved, find it warm
(the same net again): their median and min-max.  The GPU passes of a run's first image
(the driver's first draws) are told apart from those of the others (the steady state)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from workbench import tables
from workbench.data import datasets, images

SETS = ("Set5", "Set14")
SCALE, KERNEL = 2, "bicubic_aa"  # the SR tables' degradation
# what `upscale` prints for each image it has written (workbench.run.cli._upscale)
RESULT = re.compile(r"([\d.]+) ms of GPU passes \(")
PSNR = re.compile(r"([\d.]+) dB \(Y601")
GOALS = {"folder": 5.0, "model": 10.0, "sets": 30.0}  # seconds (issue 57)


def prepare(directory, model_path, root=None) -> dict:
    """The runs' inputs in ``directory``: ``hr/``, Set5 and Set14 cut to a multiple of the
    scale; ``lr/<set>/``, their ``bicubic_aa`` halves in 8 bits, as the SR tables degrade
    them; ``net/``, ``model_path`` compiled and saved.  Returns ``{set: image count}``."""
    from workbench import es2

    directory, base = Path(directory), datasets.data_root(root)
    missing = [s for s in SETS if base is None or not (base / "sr" / s).is_dir()]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)}: not in the data root ({base}); "
                                f"python -m workbench fetch-data {' '.join(missing)}")
    counts = {}
    for name in SETS:
        for stem, hr in (sr_set := datasets.sr_images(name, root)).images:
            hr = images.modcrop(hr, SCALE)
            images.save_image(directory / "hr" / f"{stem}.png", hr)
            images.save_image(directory / "lr" / name / f"{stem}.png",
                              images.degrade(hr, SCALE, KERNEL))
        counts[name] = len(sr_set)
    es2.load_net(model_path)[0].save(directory / "net")
    return counts


def timed(args, cache) -> dict:
    """One fresh ``python -m workbench <args>`` with Mesa's shader cache in ``cache``: seconds
    from its start to its first image's line (``first``) and to its exit (``exit``); each
    image's GPU milliseconds (``ms``) and PSNR (``db``), as it printed them.  A failed run
    raises its last line."""
    Path(cache).mkdir(parents=True, exist_ok=True)  # (Mesa makes its last folder alone)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MESA_SHADER_CACHE_DIR": str(cache)}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "workbench", *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first, ms, db, lines = None, [], [], []
    for line in proc.stdout:
        lines.append(line.strip())
        if found := RESULT.search(line):
            first = first or time.perf_counter() - start
            ms.append(float(found[1]))
            db += [float(d[1]) for d in [PSNR.search(line)] if d]
    code = proc.wait()
    if code or first is None:
        raise ChildProcessError(f"python -m workbench {' '.join(map(str, args))}: exit {code}: "
                                f"{([x for x in lines if x] or ['no output'])[-1]}")
    return {"first": first, "exit": time.perf_counter() - start, "ms": ms, "db": db}


def run(model_path, directory, repeat=5, root=None) -> dict:
    """Each case's cold run, then ``repeat`` rounds of warm ones (:mod:`this module
    <.loop>`), their inputs made in ``directory`` first (:func:`prepare`).  Returns
    ``{"cold": {case: timed()}, "warm": {case: [timed(), ...]}, "sets": {set: images},
    "model": its file name}``."""
    directory = Path(directory)
    sets = prepare(directory, model_path, root)
    one = sorted((directory / "lr" / SETS[0]).iterdir())[0]
    out = directory / "out"
    commands = {"folder": ["--model", directory / "net", one, out / "folder.png"],
                "model": ["--model", model_path, one, out / "model.png"],
                "sets": ["--model", directory / "net", *(directory / "lr" / s for s in SETS),
                         out / "sets", "--reference", directory / "hr"]}
    cache = {case: directory / "mesa-cache" / case for case in commands}
    cold = {case: timed(["upscale", *args], cache[case]) for case, args in commands.items()}
    warm = {case: [] for case in commands}
    for _ in range(repeat):
        for case, args in commands.items():
            warm[case].append(timed(["upscale", *args], cache[case]))
    return {"cold": cold, "warm": warm, "sets": sets, "model": Path(model_path).name}


def rows(result) -> list[dict]:
    """The table's rows: each time, whether it is a first run or the steady state, its cold
    run's value, its warm runs' median and min-max, its goal (issue 57)."""
    cold, warm = result["cold"], result["warm"]

    def row(case, time, kind, of, digits, goal=""):  # of: a run -> its values
        values = [v for r in warm[case] for v in of(r)]
        return {"time": time, "kind": kind, "cold": f"{np.median(of(cold[case])):.{digits}f}",
                "median": f"{np.median(values):.{digits}f}",
                "range": f"{min(values):.{digits}f}-{max(values):.{digits}f}", "goal": goal}

    out, first_run = [], "first run: fresh process, load, compile, first draws"
    for case, what, goal in (("folder", "1 image from the saved shader folder", "first"),
                             ("model", f"1 image from {result['model']}", "first"),
                             ("sets", "Set5 + Set14 from the saved shader folder", "exit")):
        for key, until in (("first", "its first result"), ("exit", "the process's exit")):
            out.append(row(case, f"{what}: to {until} (s)", first_run, lambda r: [r[key]], 2,
                           f"<= {GOALS[case]:.0f} s" if key == goal else ""))
    out.append(row("sets", "Set5 + Set14: GPU passes of the first image (ms)",
                   "first run: the driver's first draws", lambda r: r["ms"][:1], 1))
    out.append(row("sets", "Set5 + Set14: GPU passes an image after the first (ms)",
                   "steady state: every image after the first", lambda r: r["ms"][1:], 1))
    return out


def psnr_line(result) -> str:
    """Each set's mean PSNR through the GPU (the first run's; every run's are equal)."""
    db, at, parts = result["cold"]["sets"]["db"], 0, []
    for name, count in result["sets"].items():
        parts.append(f"{name} {np.mean(db[at:at + count]):.2f} dB")
        at += count
    return (f"PSNR through the GPU, Y of BT.601 studio range, {SCALE} pixels cropped: "
            + ", ".join(parts))


def machine() -> str:
    """The CPU (:func:`workbench.studies.beatmup.machine`), the GL renderer and the load
    average at the start (other jobs make the times noisy)."""
    from workbench import gl
    from workbench.studies import beatmup
    return (f"{beatmup.machine()}; {gl.info()['GL_RENDERER']}; load average "
            f"{os.getloadavg()[0]:.1f} at the start")


def report(result, machine) -> str:
    """The table (:func:`rows`), the PSNRs and ``machine`` (:func:`machine`), as printed."""
    runs = len(result["warm"]["folder"])
    return ("The fast loop: each time a fresh `python -m workbench upscale`; Mesa's shader "
            "cache empty (cold: a new net) or holding the net's shaders (warm: the same "
            "net again)\n\n"
            + tables.markdown(rows(result), {"time": "time", "kind": "first run / steady state",
                                             "cold": "cold cache (1 run)",
                                             "median": f"warm: median of {runs}",
                                             "range": "min-max", "goal": "goal"})
            + f"\n\n{psnr_line(result)}\nMachine: {machine}")
