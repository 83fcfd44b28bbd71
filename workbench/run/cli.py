"""The command line, ``python -m workbench <command>``: every subcommand is registered here.

A user error (a bad file, parameter or model) prints ``error: <one line>`` and exits 2;
``--debug`` shows the traceback instead.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

from workbench.folders import FolderNotReplaceable, check_folder

# OSError: permissions, a full disk, a name too long; the GL errors: a driver's or the GL
# worker's refusal (its first line; --debug shows the worker's traceback)
USER_ERRORS = (ValueError, KeyError, OSError)


def _fetch_data(args):
    from workbench.data import fetch
    return fetch.run(args)


def _run(args):
    import yaml

    from workbench.run import pipeline
    pipeline.run(args.profile, args.only, overrides={k: yaml.safe_load(v) for k, v in args.p},
                 force=args.force, verbose=args.verbose, jobs=args.jobs)
    return 0


def _sweep(args):
    import yaml

    from workbench.run import sweep
    values = {k: [yaml.safe_load(v) for v in vs.split(",")] for k, vs in args.p}
    sweep.run(args.notebook, values, args.profile, args.collect, workers=args.workers,
              dask=args.dask)
    return 0


def _add_device_options(p):
    """``--device``, ``--precision`` and ``--draw-buffers`` of a command that compiles a net;
    :func:`_target` reads them."""
    from workbench.es2.limits import PROFILES
    p.add_argument("--device", metavar="NAME", help="check the net against this device's "
                   f"limits: {', '.join(PROFILES)} (default: the ES 2.0 limits)")
    p.add_argument("--precision", choices=("highp", "mediump"), help="float precision of the "
                   "shaders (default: the device's: highp, or mediump on a device without highp)")
    p.add_argument("--draw-buffers", type=int, metavar="N", help="render targets a "
                   "convolution's program may write (GL_EXT_draw_buffers / WEBGL_draw_buffers; "
                   "default: the device's, 1 for ES 2.0; an exported page splits them where the "
                   "browser lacks the extension)")


def _add_compile_options(p, tune=True):
    """The options of :func:`workbench.es2.compile` on a command that deploys a model
    (``tune``: with ``--tune``); :func:`_compile_options` reads them."""
    from workbench.es2.calibrate import HEADROOM
    from workbench.es2.drivers import COUNTS

    p.add_argument("--calibration", metavar="SOURCE", help="images to calibrate the ranges of "
                   "unbounded tensors on and to check the net against its reference runtime "
                   "with: a data set and a count (cifar10:100, imagewoof_val:20, Set5), a folder "
                   "or a glob of images (default: a few built-in samples, with a warning)")
    p.add_argument("--headroom", type=float, metavar="H", help="share of a calibrated "
                   f"channel's span kept past its measured ends (default {HEADROOM})")
    p.add_argument("--mean", metavar="R,G,B", help="the exporter's input normalisation, as "
                   "torchvision writes it on [0, 1] pixels (e.g. 0.4914,0.4822,0.4465): the "
                   "net reads (x - mean) / std")
    p.add_argument("--std", metavar="R,G,B", help="see --mean (e.g. 0.2470,0.2435,0.2616)")
    p.add_argument("--force-deploy", action="store_true", help="deploy even where the "
                   "reference check finds the net departs from its reference runtime")
    if tune:
        p.add_argument("--tune", nargs="?", const=True, default=False,
                       choices=(True, *COUNTS), metavar="COUNT", help="keep each layer's "
                       "fastest form by the device's own compiler (needs --device with a "
                       "driver); COUNT: " + ", ".join(COUNTS))
    p.add_argument("--shared", nargs="?", const=True, default=False, type=_positive,
                   metavar="PIXELS", help="weights as uniform arrays, so that one program "
                   "serves every layer of its shape (fewer programs, same bytes); PIXELS: only "
                   "in layers whose output has at most that many pixels (llvmpipe pays ~5x "
                   "for a uniform at every fragment)")
    p.add_argument("--scaled-bits", type=int, choices=(8, 16), help="bits a tensor stored "
                   "with a scale keeps (default 16: two RGBA8 textures a pack, where highp)")


def _compile_options(args) -> dict:
    """:func:`workbench.es2.load_net`'s keywords from :func:`_add_compile_options`: those
    given (a saved shader folder takes none)."""
    from workbench.nets.normalise import parse

    options = {"calibration": args.calibration, "headroom": args.headroom,
               "mean": parse(args.mean, "--mean") if args.mean else None,
               "std": parse(args.std, "--std") if args.std else None,
               "force": args.force_deploy or None, "tune": getattr(args, "tune", None) or None,
               "shared": args.shared or None, "scaled_bits": args.scaled_bits}
    return {k: v for k, v in options.items() if v is not None}


def _deployed(net):
    """Print the plan the net was made with and what the deploy's reference check measured
    (a net loaded from a saved folder: what it was saved with)."""
    print(net.deployed_lines())


def _target(args):
    """The :class:`workbench.es2.Target` of :func:`_add_device_options`' options (checked
    once: a bad value is refused in one line), or None where none is given: a model is then
    compiled for plain ES 2.0, a saved shader folder loads for its own target."""
    from workbench import es2
    given = (args.device, args.precision, args.draw_buffers)
    return None if given == (None, None, None) else es2.Target.of(*given)


def _upscale(args):
    from workbench.nets.named import reference_sr
    from workbench.studies.upscale import upscale_files
    if len(args.paths) < 2:
        raise ValueError("upscale: give an input and an output (upscale in.png out.png), or "
                         "inputs and a folder (upscale a.png photos/ 'more/*.jpg' out/)")
    *inputs, output = args.paths
    seen = []

    def line(result):  # each image's line as it is written
        (h, w, _), seconds, tiles, db = result
        when = "steady state" if seen else "first run: the driver's first draws"
        seen.append(result)
        print(f"{w}x{h}, {seconds * 1000:.1f} ms of GPU passes ({when})"
              + (f", {tiles} tiles" if tiles > 1 else "")
              + (f", {db:.2f} dB (Y601, studio range)" if db is not None else ""), flush=True)

    done = upscale_files(inputs, output, args.model or reference_sr(), _target(args),
                         args.quality, reference=args.reference, done=line,
                         **_compile_options(args))
    if len(done) > 1:
        import numpy as np
        times = [1000 * s for _, s, _, _ in done[1:]]
        print(f"{len(done)} images into {output}; steady state: median {np.median(times):.1f} "
              f"ms ({min(times):.1f}-{max(times):.1f}) of the {len(times)} after the first"
              + (f"; mean PSNR {np.mean([d for *_, d in done]):.2f} dB"
                 if done[0][3] is not None else ""))
    return 0


def _export_web(args):
    from workbench import es2, web

    labels = _labels(args.labels) if args.labels else None
    from workbench.nets.models import reference_sr
    model_path = args.model or reference_sr()
    check_folder(args.out, args.force)  # before the work
    net, model = es2.load_net(model_path, _target(args), input_size=args.input_size,
                              **_compile_options(args))
    _deployed(net)
    if args.check and model is None:
        raise ValueError(f"--check needs a .keras or .onnx model (for its reference outputs); "
                         f"{model_path} is a saved shader folder")
    index = web.export(net, args.out, labels, force=args.force,
                       check_model=model if args.check else None)
    check = "?check=1 runs the self-check" if args.check else ""
    print(f"{index}: {len(net.passes)} passes. Open it through a web server, e.g.\n"
          f"  python3 -m http.server --bind 127.0.0.1 -d {args.out}   # then "
          f"http://localhost:8000/{check}")
    return 0


def _labels(text) -> list[str]:
    """``--labels``: a UTF-8 text file's lines, or names separated by commas; a path (one
    there, or a name with a folder or a .txt suffix) that is no readable text file is refused
    in one line (a folder, a FIFO, a missing file)."""
    from workbench.files import read_text
    if os.path.lexists(text) or ("," not in text and ("/" in text or text.endswith(".txt"))):
        return [line.strip() for line in read_text(text, "--labels").splitlines()
                if line.strip()]
    return [name.strip() for name in text.split(",")]


def _owned_out(args, names):
    """The command's writes of ``names`` into its ``--out``, a folder the user may own:
    :func:`workbench.folders.owned_files` (a user's file of one of those names is refused
    before the work, unless ``--force``); the default, the figures folder, is the
    workbench's."""
    import contextlib

    from workbench.folders import owned_files
    return (owned_files(args.out, names, args.force, "--out") if args.out is not None else
            contextlib.nullcontext())


def _figure(name) -> list[str]:
    return [f"{name}.png", f"{name}.svg"]


def _devices(args):
    from workbench.studies import devices
    names = [devices.TABLE, devices.RESULT, *_figure(devices.FIGURE)]
    with _owned_out(args, names + (["device-moderngl.json"] if args.moderngl else [])):
        devices.run(args.reports, args.out, args.moderngl)
    return 0


def _bundle(args):
    from workbench import es2
    from workbench.es2 import bundle
    from workbench.nets.models import reference_sr
    check_folder(args.out, args.force)  # before the work
    net, model = es2.load_net(args.model or reference_sr(), _target(args),
                              input_size=args.input_size, **_compile_options(args))
    _deployed(net)
    if model is None:
        raise ValueError(f"--model {args.model}: a saved shader folder has no model; the bundle "
                         "needs the .keras or .onnx file (for its reference outputs)")
    out = bundle.bundle(net, model, args.out, threshold=args.threshold, force=args.force)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"{out}: {len(net.passes)} passes, {size / 1e6:.2f} MB. On the device:\n"
          f"  python3 {out / 'run.py'}   # needs numpy, PyOpenGL, EGL + OpenGL ES 2.0")
    return 0


def _report(args):
    from workbench.files import figures_dir
    from workbench.run import report
    directory = figures_dir(args.profile)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no results of profile {args.profile!r} here; "
                                f"make reproduce PROFILE={args.profile} writes them")
    text = report.build(directory, args.profile)
    print(directory / "report.md")
    if args.publish is not None:
        print(report.publish(text, args.publish, args.source or
                             f"From `make reproduce PROFILE={args.profile}`.", args.force))
    return 0


def _drivers(args):
    from workbench import es2
    from workbench.gl.drivers import driver
    from workbench.nets.models import is_name, load_model, load_named, named
    from workbench.nets.normalise import normalised
    from workbench.studies import compilers

    names = _names(args.driver)
    if not names:
        raise ValueError(f"--driver {args.driver!r} names no driver; e.g. --driver vc4,gc2000")
    for name in names:
        driver(name)  # an unknown name: one line before any work
    options = _compile_options(args)
    mean, std = options.pop("mean", None), options.pop("std", None)  # (every user net's)
    with _owned_out(args, [compilers.TABLE, compilers.RESULT, *_figure(compilers.FIGURE)]):
        models, sizes = {}, {}
        for name in args.model or ["sr", "sr-mrt4", "cifar10"]:
            if is_name(name):
                entry = named(name)
                models[name] = (load_named(entry), {"target": es2.Target.of(
                    draw_buffers=entry.draw_buffers)} if entry.draw_buffers else {})
            else:  # a user's net: the Pi's time at its own size (256x256 where it has none)
                model = normalised(load_model(name), mean, std)
                models[Path(name).stem] = (model, options)
                if side := compilers.pi_side(model):
                    sizes[Path(name).stem] = ("model", side)
        sizes.update({n: s for n, s in compilers.PI_SIZES.items() if n in models})
        compilers.run(models, names, args.out, sizes)
    return 0


def _require_memory(args):
    """``bench sr / draw-buffers / web --size``: refuse in one line a size whose run would
    not fit the memory available (a MemoryError traceback, or the OOM killer, before), from
    the net's IR (default: web's reference SR checkpoint, the others' random-weight sr_x2)."""
    from workbench import ir
    from workbench.es2 import plan
    from workbench.es2.limits import ES2
    from workbench.es2.net import prepared
    from workbench.nets.models import (is_name, load_model, load_named, named, reference_sr,
                                       sr_x2)
    given = getattr(args, "model", None)
    if given and is_name(given):
        entry = named(given)  # an unknown name: one line naming the known ones
        if entry.preset:
            return  # a classifier: its fixed size, not --size
        model = load_named(entry)
    else:
        model = (load_model(given) if given else
                 load_model(reference_sr()) if args.what == "web" else sr_x2())
    graph = prepared(ir.from_model(model), ES2)  # as the run will hold it (a dense's blocks)
    plan.require_memory(graph, graph.input_size or (args.size, args.size),
                        "give a smaller --size")


def _positive(text) -> int:
    """An argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number >= 1")
    return value


def _names(text) -> list[str]:
    """A comma-separated option's names, blanks dropped (``""`` -> none)."""
    return [name.strip() for name in text.split(",") if name.strip()]


def _bench_out(args):
    """``bench web / beatmup --out``: a file there is refused before minutes of runs."""
    from workbench.files import check_writable
    if args.out is not None:
        if Path(args.out).exists() and not Path(args.out).is_dir():
            raise NotADirectoryError(f"{args.out}: is a file; give a folder")
        check_writable(args.out, folder=True, what="--out")


def _bench_sr(args):
    from workbench.nets.models import load_model
    from workbench.studies import bench
    options = _compile_options(args)  # (a bad --mean refused before the model loads)
    _require_memory(args)
    model = load_model(args.model) if args.model else None
    bench.print_sr(bench.bench_sr(model, args.size, args.repeat, _target(args), **options))


def _bench_loop(args):
    import tempfile

    from workbench.nets.named import reference_sr
    from workbench.studies import loop
    model = args.model or reference_sr()
    if Path(model).is_dir():
        raise ValueError(f"--model {model}: give a .keras or .onnx model (the benchmark saves "
                         "its shader folder itself)")
    machine = loop.machine()  # (the load average before the runs)
    with tempfile.TemporaryDirectory() as tmp:
        result = loop.run(model, tmp, args.repeat)
    print(loop.report(result, machine))


def _bench_draw_buffers(args):
    from workbench.studies import bench
    _require_memory(args)
    bench.print_draw_buffers(bench.bench_draw_buffers(size=args.size, repeat=args.repeat,
                                                      **_compile_options(args)))


def _bench_web(args):
    from workbench.studies import peers, web_bench
    _bench_out(args)
    _require_memory(args)
    backends = ",".join(peers.PEERS) if args.backends is None else args.backends
    with _owned_out(args, [peers.TABLE, peers.RESULT]):
        web_bench.run(args.model, args.size, args.runs, args.out, backends=_names(backends),
                      gls=_names(args.gl))


def _bench_es31(args):
    from workbench.studies import bench
    bench.print_es31_vs_es2(bench.es31_vs_es2(repeat=args.repeat))


def _bench_train(args):
    from workbench.studies import train_bench
    backends = ",".join(train_bench.BACKENDS) if args.backends is None else args.backends
    train_bench.bench_train(repeats=args.repeat, steps=args.steps, profile=not args.no_profile,
                            backends=_names(backends))


def _bench_activation(args):
    from workbench.studies import bench
    bench.bench_activation(args.preset, args.batch, args.steps)
    bench.bench_batchnorm(args.preset, args.batch, args.steps)


def _bench_beatmup(args):
    from workbench.studies import beatmup
    _bench_out(args)
    with _owned_out(args, [beatmup.TABLE, beatmup.RESULT]):
        beatmup.run(args.model, args.images, rounds=args.repeat, out=args.out)


def _add_bench(commands):
    """``bench <what>``: one sub-command a benchmark, each with its own options."""
    bench = commands.add_parser("bench", help="benchmarks, each a sub-command: times measured "
                                "side by side in one run (median of --repeat runs)")
    whats = bench.add_subparsers(dest="what", required=True, metavar="BENCHMARK")

    def add(name, func, help, repeat=True):
        p = whats.add_parser(name, help=help, description=help)
        if repeat:
            p.add_argument("--repeat", type=_positive, default=5,
                           help="timed runs (the median is shown; default 5)")
        p.set_defaults(func=func)
        return p

    def size(p):
        p.add_argument("--size", type=_positive, default=256,
                       help="input size (side of a square; default 256)")

    def out(p):
        p.add_argument("--out", help="folder for the tables (default: the figures folder)")
        _add_force(p)

    p = add("sr", _bench_sr, "the SR net: GPU vs TensorFlow on the CPU, compile time")
    p.add_argument("--model", help=".keras or .onnx model (default: random-weight sr_x2)")
    size(p)
    _add_device_options(p)
    _add_compile_options(p)
    p = add("loop", _bench_loop, "the fast loop: each run a fresh `upscale` process, timed to "
            "its first result and to its exit: one image from a saved shader folder, one from "
            "the model file, Set5 + Set14 through the GPU (PSNR Y601); each once with Mesa's "
            "shader cache empty (a new net), then --repeat times warm (the same net again)")
    p.add_argument("--model", help=".keras or .onnx SR model, compiled and saved for the "
                   "folder runs (default: the SR reference checkpoint)")
    p = add("draw-buffers", _bench_draw_buffers, "the SR net with 1 vs 4 render targets per "
            "program, GL and Chromium, interleaved")
    size(p)
    _add_compile_options(p, tune=False)  # (no --device: tuning has no driver to ask)
    add("es31", _bench_es31, "ES 2.0 vs ES 3.1 on dogs120")
    p = add("train", _bench_train, "SR and classifier training steps: samples/s of each option "
            "side by side, where the time goes; the SR recipe's losses and steps/s under "
            "Keras' TensorFlow and JAX back ends")
    p.add_argument("--steps", type=_positive, default=20, help="steps per round (default 20)")
    p.add_argument("--no-profile", action="store_true", help="skip the op profile")
    p.add_argument("--backends", help="Keras back ends, each in its own process (default: "
                   "tensorflow,jax; empty: none)")
    p = add("activation", _bench_activation, "training-step cost of the sigmoid-like "
            "activation and of the fused batch norm", repeat=False)
    p.add_argument("--preset", default="cifar10", help="classifier preset (default cifar10)")
    p.add_argument("--batch", type=_positive, default=64, help="batch size (default 64)")
    p.add_argument("--steps", type=_positive, default=20, help="steps per round (default 20)")
    p = add("web", _bench_web, "our WebGL page vs TensorFlow.js WebGL/WASM (one thread, "
            "threaded)/CPU and onnxruntime-web WASM (threaded)/WebGL in one headless "
            "Chromium: times, fidelity vs Keras, where the page's time goes; peers.md/.json",
            repeat=False)
    p.add_argument("--model", help=".keras or .onnx model or a model name (default: the "
                   "reference SR checkpoint)")
    size(p)
    p.add_argument("--runs", type=_positive, default=10, help="interleaved timed runs per side "
                   "(default 10)")
    p.add_argument("--backends", help="the peers, comma separated (default: all: "
                   "webgl,wasm,wasm-threads,cpu of TF.js, ort-wasm,ort-webgl of "
                   "onnxruntime-web; empty: the page alone)")
    p.add_argument("--gl", default="swiftshader,llvmpipe", help="the GLs behind the browser's "
                   "WebGL, comma separated, a run each (default: swiftshader,llvmpipe: "
                   "Chromium's SwiftShader, Mesa's llvmpipe through ANGLE's GL back end)")
    out(p)
    p = add("beatmup", _bench_beatmup, "the reference articles' own system, built by `make "
            "beatmup`, beside ours: x2 PSNR and time, its dog classifier's top-1, agreement "
            "and time, both sides' programs through the targets' compilers and the Pi time "
            "model; beatmup.md/.json")
    p.add_argument("--images", choices=("val", "all"), default="val", help="the Imagewoof "
                   "photos: its 145 ImageNet validation images of the classes among the 120 "
                   "(default), or all 3,929 (about 2 hours on 2 cores)")
    p.add_argument("--model", help="its classifier's chunk file (default: the one of the "
                   "built peer, dog_classifier.chunks)")
    out(p)


def _add_force(p):
    p.add_argument("--force", action="store_true", help="replace files of the names this "
                   "command writes in --out even where the workbench did not write them (its "
                   "files there are replaced without it)")


def _size(text) -> tuple[int, int]:
    """An argparse type: ``HxW`` (height x width, whole numbers >= 1) as ``(h, w)``."""
    try:
        h, w = (int(n) for n in text.lower().split("x"))
    except ValueError:
        h = w = 0
    if h < 1 or w < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give HEIGHTxWIDTH, e.g. 32x32")
    return h, w


def _add_model_and_out(p, model_kinds, what):
    """--model, --input-size, --out and --force of a command that writes a folder from a net."""
    p.add_argument("--model", help=f"{model_kinds} (default: the SR reference checkpoint, "
                   "models/sr_x2_reference.keras)")
    p.add_argument("--input-size", type=_size, metavar="HxW", help="an ONNX model's input size "
                   "where it is dynamic (a net with a Gemm needs one)")
    p.add_argument("--out", required=True, help=f"folder to write {what} into (replaced whole; "
                   "a non-empty folder the workbench did not write needs --force)")
    p.add_argument("--force", action="store_true", help="replace --out even if the workbench "
                   "did not write it")


def parser() -> argparse.ArgumentParser:
    from workbench.data import fetch
    from workbench.gl.drivers import TABLE_DRIVERS

    top = argparse.ArgumentParser(prog="python -m workbench", description=__doc__)
    top.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = top.add_subparsers(dest="command", required=True)

    p = commands.add_parser("fetch-data", help="download the data sets the notebooks need",
                            description="Download data sets into the data root, verifying them.")
    fetch.add_arguments(p)
    p.set_defaults(func=_fetch_data)

    p = commands.add_parser("run", help="execute the notebooks of a profile with papermill")
    p.add_argument("--profile", default="quick", help="quick (default), full or ci")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these notebooks")
    p.add_argument("-p", nargs=2, action="append", metavar=("[NOTEBOOK.]KEY", "VALUE"),
                   default=[], help="override a parameter of one notebook (VALUE parsed as "
                   "YAML); a plain KEY only where one notebook of the run has it")
    p.add_argument("--force", action="store_true", help="re-run unchanged notebooks too")
    p.add_argument("--jobs", type=_positive, default=min(2, os.cpu_count() or 1), metavar="N",
                   help="notebooks run side by side, each in its own kernel (default: 2 where "
                   "the machine has 2 cores); those that time something run alone")
    p.add_argument("--verbose", action="store_true", help="stream every cell's output and "
                   "papermill's cell-by-cell trace (default: a line a notebook; the outputs are "
                   "in the executed notebooks under runs/)")
    p.set_defaults(func=_run)

    p = commands.add_parser("sweep", help="run a notebook over a parameter grid")
    p.add_argument("notebook", help="name in notebooks/, without .ipynb")
    p.add_argument("-p", nargs=2, action="append", metavar=("KEY", "V1,V2,..."), required=True,
                   help="a swept parameter and its comma-separated values (each parsed as YAML)")
    p.add_argument("--profile", default="quick", help="base parameters (default quick)")
    p.add_argument("--collect", default="summary", help="the notebook variable to collect")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=_positive, default=1, metavar="N",
                       help="run N points at a time, each in its own process (default 1)")
    where.add_argument("--dask", metavar="ADDRESS", help="submit the points to the Dask "
                       "scheduler at ADDRESS (e.g. tcp://host:8786; needs the cluster extra)")
    p.set_defaults(func=_sweep)

    p = commands.add_parser("upscale", help="upscale images with the SR shaders on the GPU "
                            "(one start-up for them all)")
    p.add_argument("paths", nargs="+", metavar="INPUT... OUTPUT", help="the image files, "
                   "folders or globs to upscale, then the image file to write (.png, or .jpg / "
                   ".jpeg, see --quality; never an input) or, for several, a folder "
                   "(<name>.png each)")
    p.add_argument("--reference", metavar="HR", help="the ground truth (a folder of them by "
                   "the inputs' names, for several): each output's PSNR, Y601 studio range")
    p.add_argument("--model", help=".keras or .onnx model, or saved shader folder (default: "
                   "the SR reference checkpoint, models/sr_x2_reference.keras)")
    _add_device_options(p)
    _add_compile_options(p)
    p.add_argument("--quality", type=int, default=95, help="JPEG quality, 1..100 (default 95)")
    p.set_defaults(func=_upscale)

    p = commands.add_parser("export-web", help="write a static web page that runs the net "
                            "with WebGL 1.0 (serve the folder over HTTP to open it)")
    _add_model_and_out(p, ".keras or .onnx model, or saved shader folder", "the page")
    p.add_argument("--labels", help="a classifier's class names: comma-separated, or a text "
                   "file with one per line (default: class 0, class 1, ...)")
    _add_device_options(p)
    _add_compile_options(p)
    p.add_argument("--check", action="store_true", help="embed the self-check: test inputs, "
                   "the model's outputs and the emulator's bytes (needs a .keras or .onnx "
                   "model); the page runs it with ?check=1 or its button and offers a device "
                   "report (JSON)")
    p.set_defaults(func=_export_web)

    p = commands.add_parser("devices", help="gather device reports (JSON, from export-web "
                            "--check pages) into a table and a figure")
    p.add_argument("reports", nargs="*", metavar="REPORT.json", help="device reports of one "
                   "exported page")
    p.add_argument("--moderngl", metavar="PAGE_DIR", help="also run the self-check of the page "
                   "exported in PAGE_DIR on this machine's GL (moderngl) and add its report")
    p.add_argument("--out", help="folder for devices.md, devices.json and the figure (default: "
                   "the figures folder, figures/ or figures/<profile>)")
    _add_force(p)
    p.set_defaults(func=_devices)

    p = commands.add_parser("drivers", help="compile every program of a net through the "
                            "target GPUs' own compilers (Mesa's vc4, v3d, freedreno, etnaviv, "
                            "panfrost and lima on drm-shims; `make drivers` builds them): what "
                            "each takes or refuses, its statistics, a predicted Pi time")
    p.add_argument("--model", action="append", metavar="M", help="repeatable: a .keras or "
                   ".onnx model, or sr / sr-mrt4 (the SR reference checkpoint, one or 4 render "
                   "targets a program), cifar10 (the reference classifier, else random "
                   "weights), dogs120 (random weights, 385x385, ~1,100 programs: minutes a "
                   "driver); default: sr, sr-mrt4, cifar10")
    p.add_argument("--driver", "--target", default=",".join(TABLE_DRIVERS), help="comma-"
                   f"separated Mesa drivers (default: {','.join(TABLE_DRIVERS)}; also a305, "
                   "gc3000; --target is its older name)")
    p.add_argument("--out", help="folder for drivers.md, drivers.json and the figure (default: "
                   "the figures folder)")
    _add_force(p)
    _add_compile_options(p, tune=False)  # (its table has each profile's tuned row already)
    p.set_defaults(func=_drivers)

    p = commands.add_parser("report", help="gather a profile's results into figures/<profile>/"
                            "report.md (and .html), and publish them into a Markdown file")
    p.add_argument("--profile", default="quick", help="the profile whose results to gather")
    p.add_argument("--publish", metavar="FILE", help="also put the report between FILE's "
                   "'<!-- report: begin -->' and '<!-- report: end -->' lines "
                   "(docs/results.md)")
    p.add_argument("--source", help="the line saying where the results come from (commit, "
                   "machine, minutes)")
    p.add_argument("--force", action="store_true", help="--publish: replace what is between "
                   "FILE's report lines even where it is not the report the workbench put there")
    p.set_defaults(func=_report)
    p = commands.add_parser("bundle", help="write a folder that replays the net on an OpenGL "
                            "ES 2.0 GPU with only Python, numpy and PyOpenGL (run.py), checked "
                            "against the emulator's bytes and TensorFlow's outputs")
    _add_model_and_out(p, ".keras or .onnx model", "the bundle")
    _add_device_options(p)
    _add_compile_options(p)
    p.add_argument("--threshold", type=float, help="run.py's default least share of output "
                   "bytes equal to the emulator's for exit status 0 (default 0.999)")
    p.set_defaults(func=_bundle)

    _add_bench(commands)
    return top


def _one_line_warnings(message, category, filename, lineno, file=None, line=None,
                       _default=warnings.showwarning):
    """The workbench's own warnings (of its categories, or raised from its code) as
    ``warning: <message>``; others as Python shows them."""
    package = Path(__file__).resolve().parents[1]
    if category.__module__.startswith("workbench") or Path(filename).resolve().is_relative_to(package):
        print(f"warning: {message}", file=sys.stderr)
    else:
        _default(message, category, filename, lineno, file, line)


def _internal(err) -> bool:
    """Whether ``err`` (a ValueError, KeyError, ...) was raised by another library's code
    (numpy's broadcast message, Python's own) rather than by the workbench to name what the
    user gave: a bug, never passed off as the user's error.  A file system's OSError is the
    user's wherever it is raised."""
    if isinstance(err, OSError):
        return False
    tb = err.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    package = Path(__file__).resolve().parents[1]
    return not Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(package)


INTERRUPTED = 130  # the shell's code for a command stopped by Ctrl-C (128 + SIGINT)


def _interrupt(signum, frame):
    """SIGINT: remember it (a library may swallow the KeyboardInterrupt), then raise it."""
    _interrupt.seen = True
    raise KeyboardInterrupt


def _terminate(signum, frame):
    """SIGTERM: exit as the shell says a terminated command does, through every ``finally``
    (child programs stopped, temporary folders removed)."""
    raise SystemExit(128 + signum)


def main(argv=None) -> int:
    import signal
    import threading

    from workbench import gl

    args = parser().parse_args(argv)
    own = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, _interrupt) if own else None
    terminate = signal.signal(signal.SIGTERM, _terminate) if own else None
    _interrupt.seen = False
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warnings
            code = args.func(args) or 0
        if _interrupt.seen:  # a Ctrl-C that some library caught: still an interrupted run
            raise KeyboardInterrupt
        return code
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("interrupted", file=sys.stderr)
        return INTERRUPTED
    except Exception as err:
        if args.debug:
            raise
        if not isinstance(err, (*USER_ERRORS, gl.GLError, gl.GLUnavailable)) or _internal(err):
            first = (str(err).strip().splitlines() or [""])[0]
            print(f"error: an internal error, a bug in the workbench, not in what you gave "
                  f"(--debug shows the traceback; please report it): {type(err).__name__}: "
                  f"{first}", file=sys.stderr)
            return 1
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        if isinstance(err, FolderNotReplaceable):
            message = err.command_line()
        lines = str(message).strip().splitlines() or [type(err).__name__]
        if isinstance(err, gl.GLError) and len(lines) > 1:  # a worker's traceback: its last
            lines = [f"{lines[0]} {lines[-1]}", *lines[1:]]    # line says what went wrong
        more = " (--debug shows the rest)" if len(lines) > 1 else ""
        print(f"error: {lines[0]}{more}", file=sys.stderr)
        return 2
    finally:
        if own:
            signal.signal(signal.SIGINT, previous)
            signal.signal(signal.SIGTERM, terminate)
