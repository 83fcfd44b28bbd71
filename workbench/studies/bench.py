"""Benchmarks (``python -m workbench bench ...``): times measured side by side in one run,
medians of several runs.  Speed targets live here, never in timed tests."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from workbench import es2, es31, gl, ir, references, tables
from workbench.data import datasets
from workbench.ir import cost
from workbench.nets import activations, classify, superres
from workbench.nets.models import dogs_classifier, sr_x2
from workbench.studies import peak


def _spread(seconds) -> dict:
    """``{"median", "min", "max"}`` of timed runs (seconds)."""
    return {"median": float(np.median(seconds)), "min": min(seconds), "max": max(seconds)}


def _timed(run, repeat) -> dict:
    """:func:`_spread` of ``repeat`` calls of ``run``."""
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return _spread(seconds)


def bench_sr(model=None, size=256, repeat=5, target=None, **options):
    """GPU (this machine's GL) vs the model's own CPU time (TensorFlow; ONNX Runtime for an
    ONNX model) for one ``size`` x ``size`` -> 2x upscale, and the compile+link time of all
    programs, compiled for ``target`` (an :class:`workbench.es2.Target`; default plain ES 2.0)
    with :func:`workbench.es2.compile`'s ``options`` (``mean`` and ``std`` prepended to the
    model, so that the CPU runs the same net).  The first run's seconds (``generate``: the
    compile call, any check, calibration or tuning included; ``compile_link``; ``first_run``;
    ``cpu_first``: its tracing) and the steady state's :func:`_spread` of ``repeat`` runs
    after them (``gpu``: whole ``net.run``; ``gpu_passes``: its passes alone; ``cpu``); the
    net's ``multiply_adds`` an image and this GL's measured ``peak``
    (:func:`workbench.studies.peak.gl_peak`)."""
    import tensorflow as tf

    from workbench.nets.normalise import normalised

    model = normalised(model or sr_x2(), options.pop("mean", None), options.pop("std", None))
    image = np.random.default_rng(0).random((size, size, 3)).astype(np.float32)
    start = time.perf_counter()
    net = es2.compile(model, target, **options)
    result = {"size": size, "programs": len(net.passes), "repeat": repeat,
              "generate": time.perf_counter() - start,
              "compile_link": net.compile_seconds,  # compile + link + a warm-up draw each
              "renderer": gl.info()["GL_RENDERER"],
              "multiply_adds": peak.net_multiply_adds(net, (size, size)), "peak": peak.gl_peak()}
    start = time.perf_counter()
    net.run(image)  # the driver may still translate shader variants for the real textures
    result["first_run"] = time.perf_counter() - start
    passes = []
    result["gpu"] = _timed(lambda: (net.run(image), passes.append(sum(net.timings.values()))),
                           repeat)
    result["gpu_passes"] = _spread(passes)
    onnx = ir.is_onnx(model)
    forward = model if onnx else tf.function(lambda x, training=False: model(x, training=training))
    start = time.perf_counter()
    superres.upscale(forward, image)
    result["cpu_first"] = time.perf_counter() - start
    result["cpu"] = _timed(lambda: superres.upscale(forward, image), repeat)
    result["runtime"] = "ONNX Runtime" if onnx else "TensorFlow"
    return result


def print_sr(r):
    """Print :func:`bench_sr`'s result: a table whose rows each say first run or steady
    state (the median of ``repeat`` runs, with min-max); a steady state's GMAC/s, and on the
    GPU its % of this GL's measured peak."""
    s, steady = r["size"], f"steady state: median of {r['repeat']}"
    gl_name = r["renderer"].split(" (")[0]

    def row(what, kind, t, note="", gpu=False):
        if isinstance(t, dict):
            return {"what": what, "kind": kind, "ms": 1000 * t["median"],
                    "range": f"{1000 * t['min']:.1f}-{1000 * t['max']:.1f}", "note": note,
                    **peak.rate_cells(r["multiply_adds"], 1000 * t["median"],
                                      r["peak"]["gmacs"] if gpu else None)}
        return {"what": what, "kind": kind, "ms": 1000 * t, "range": "", "note": note}

    rows = [row("shader generation (+ check, calibration, tuning where they run)", "first run",
                r["generate"]),
            row("compile + link + a warm-up draw each", "first run", r["compile_link"],
                "Pi 3 reference: 3500-4000 ms"),
            row("first net.run (any shader translation left)", "first run", r["first_run"]),
            row(f"GPU ({gl_name}) net.run: upload, passes, read-back", steady, r["gpu"],
                f"Pi 3 reference: ~{references.SR_PI3_MS:.0f} ms", gpu=True),
            row("GPU passes alone", steady, r["gpu_passes"], gpu=True),
            row(f"{r['runtime']} CPU, first call (tracing)", "first run", r["cpu_first"]),
            row(f"{r['runtime']} CPU run", steady, r["cpu"])]
    print(f"x2 SR, {s}x{s} -> {2 * s}x{2 * s}, {r['programs']} programs\n")
    print(tables.markdown(rows, {"what": "", "kind": "first run / steady state", "ms": "ms",
                                 "range": "min-max", "GMAC/s": "GMAC/s",
                                 "% of peak": "% of peak", "note": ""}, digits=1))
    print(f"\nGMAC/s: the net's {r['multiply_adds'] / 1e9:.3f} G multiply-adds over the median; "
          f"% of peak: of {gl_name}'s measured peak, {peak.peak_text(r['peak'])} "
          f"({r['peak']['shader']}: a plain fragment shader of multiply-adds)")
    print(f"\nGPU / CPU time ratio (steady-state medians): "
          f"{r['gpu']['median'] / r['cpu']['median']:.2f}")


def bench_draw_buffers(model=None, size=256, repeat=10, draw_buffers=4, browser=True, seed=0,
                       **options):
    """The x2 SR net with one render target per program vs ``draw_buffers`` (random weights,
    or ``model``) on a ``size`` x ``size`` image: programs, texel fetches, whether the output
    bytes are equal, and seconds per run on this machine's GL (whole ``net.run``: upload, passes,
    read-back) and, with ``browser``, in headless Chromium (the page's run without per-pass
    waits).  ``repeat`` timed runs after a warm-up run, the two forms interleaved; per form
    ``{"median", "min", "max"}`` of the seconds, and ``"ratio"``: the median over the rounds of
    the ``draw_buffers`` run's time over the one-target run's.  Both forms are compiled with
    :func:`workbench.es2.compile`'s ``options``."""
    from workbench import web

    keras.utils.set_random_seed(seed)
    model = model or sr_x2()
    image = np.random.default_rng(seed).random((size, size, 3)).astype(np.float32)
    nets = {1: es2.compile(model, **options),
            draw_buffers: es2.compile(model, es2.Target.of(draw_buffers=draw_buffers),
                                      **options)}
    result = {n: {"programs": len(net.passes),
                  "fetches": cost.total(net.cost((size, size)).values()).texel_fetches}
              for n, net in nets.items()}
    outputs = {n: net.run(image) for n, net in nets.items()}  # warm-up
    result["same_bytes"] = bool(np.array_equal(*outputs.values()))

    def interleaved(run):  # also the median ratio of the two runs of each round
        seconds = {n: [] for n in nets}
        for _ in range(repeat):
            for n in nets:
                seconds[n].append(run(n))
        ratio = float(np.median(np.divide(seconds[draw_buffers], seconds[1])))
        return {**{n: _spread(s) for n, s in seconds.items()}, "ratio": ratio}

    def gl_seconds(n):
        start = time.perf_counter()
        nets[n].run(image)
        return time.perf_counter() - start

    result["gl"] = interleaved(gl_seconds)
    result["renderer"] = gl.info()["GL_RENDERER"]
    if browser:
        with tempfile.TemporaryDirectory() as tmp:
            for n, net in nets.items():
                web.export(net, Path(tmp) / str(n))
            with web.sessions([Path(tmp) / str(n) for n in nets], repeat=1) as opened:
                pages = dict(zip(nets, opened))
                first = [page.run(image)["output"] for page in pages.values()]  # warm-up
                result["browser_same_bytes"] = bool(np.array_equal(*first))
                result["browser"] = interleaved(lambda n: pages[n].run(image)["repeat_ms"][0] / 1000)
    return result


def print_draw_buffers(r):
    """Print :func:`bench_draw_buffers`'s result as a table."""
    one, many = [k for k in r if isinstance(k, int)]
    print(f"x2 SR, {r[one]['programs']} programs (1 target) vs {r[many]['programs']} "
          f"({many} draw buffers); output bytes equal: {r['same_bytes']}"
          + (f", in the browser: {r['browser_same_bytes']}" if "browser" in r else ""))
    print(f"  {'':34s} {'1 target':>22s} {f'{many} targets':>22s}   (ms, steady state after a "
          "warm-up run: median (min-max))")
    print(f"  {'texel fetches':34s} {r[one]['fetches']:>22,d} {r[many]['fetches']:>22,d}")
    for key, label in (("gl", f"ms per run, {r['renderer'].split(' (')[0]}"),
                       ("browser", "ms per run, Chromium")):
        if key in r:
            cells = [f"{1000 * t['median']:.1f} ({1000 * t['min']:.1f}-{1000 * t['max']:.1f})"
                     for t in (r[key][one], r[key][many])]
            print(f"  {label:34s} {cells[0]:>22s} {cells[1]:>22s}   ratio {r[key]['ratio']:.2f}")


def es31_vs_es2(count=3, seed=0, size=385, repeat=3, root=None):
    """dogs120 at 385x385 (random weights, BatchNorm calibrated on photos as
    :func:`workbench.studies.deploy.dogs120_check`): ES 2.0 texel fetches vs ES 3.1 image loads,
    ES 2.0 vs ES 3.1 time on this machine (median of ``max(repeat, count)`` runs after a
    first, untimed one; whole ``net.run``: upload, passes, read-back), and both against TF's
    logits on ``count`` photos."""
    keras.utils.set_random_seed(seed)
    model = dogs_classifier("dogs120")
    pictures = datasets.photos(size, count + 4, root)
    classify.calibrate_batchnorm(model, pictures[:4])
    pictures = pictures[4:]
    tf_logits = np.asarray(model.predict(pictures, verbose=0), np.float64)
    es2_net, es31_net = es2.compile(model), es31.compile(model)
    result = {}
    for label, net in (("es2", es2_net), ("es31", es31_net)):
        start = time.perf_counter()
        net.run(pictures[0])  # compile + the driver's first translation
        first = time.perf_counter() - start
        seconds, logits = [], []
        for i in range(max(repeat, len(pictures))):  # every photo once, at least `repeat` runs
            start = time.perf_counter()
            out = net.run(pictures[i % len(pictures)])
            seconds.append(time.perf_counter() - start)
            logits += [out] if i < len(pictures) else []
        logits = np.array(logits, np.float64)
        total = cost.total(net.cost((size, size)).values())
        result[label] = {"fetches": total.texel_fetches, "multiply_adds": total.multiply_adds,
                         "programs": len(getattr(net, "passes", None) or net.kernels),
                         "first_run_s": first, "seconds": float(np.median(seconds)),
                         "pass_seconds": float(sum(net.timings.values())),
                         "max_logit_diff_tf": float(np.abs(logits - tf_logits).max()),
                         "top1_equals_tf": float(np.mean(logits.argmax(1) == tf_logits.argmax(1)))}
    result["loads_over_fetches"] = result["es31"]["fetches"] / result["es2"]["fetches"]
    result["time_ratio"] = result["es31"]["seconds"] / result["es2"]["seconds"]
    result["images"] = len(pictures)
    return result


def print_es31_vs_es2(r):
    size = 385
    e2, e3 = r["es2"], r["es31"]
    print(f"dogs120 at {size}x{size}, random weights, BatchNorm calibrated; {r['images']} photos")
    print(f"  {'':28s} {'ES 2.0':>14s} {'ES 3.1':>14s}")
    print(f"  {'programs':28s} {e2['programs']:>14,d} {e3['programs']:>14,d}")
    print(f"  {'multiply-adds':28s} {e2['multiply_adds']:>14,d} {e3['multiply_adds']:>14,d}")
    print(f"  {'texel fetches / image loads':28s} {e2['fetches']:>14,d} {e3['fetches']:>14,d}"
          f"   ratio {r['loads_over_fetches']:.3f} (goal <= 0.5)")
    print(f"  {'time per image (ms)':28s} {1000 * e2['seconds']:>14.1f} {1000 * e3['seconds']:>14.1f}"
          f"   ratio {r['time_ratio']:.3f}")
    print(f"  {'  passes alone (ms)':28s} {1000 * e2['pass_seconds']:>14.1f} {1000 * e3['pass_seconds']:>14.1f}")
    print(f"  {'first run (ms)':28s} {1000 * e2['first_run_s']:>14.1f} {1000 * e3['first_run_s']:>14.1f}")
    print(f"  {'max |logit - TF|':28s} {e2['max_logit_diff_tf']:>14.4f} {e3['max_logit_diff_tf']:>14.6f}")
    print(f"  {'top-1 = TF top-1':28s} {e2['top1_equals_tf']:>14.2%} {e3['top1_equals_tf']:>14.2%}")


# --- training steps -------------------------------------------------------------------------

def _register_relu():
    if "relu" not in activations.names():
        activations.register(activations.Activation(
            name="relu", tf_fn=tf.nn.relu, np_fn=lambda x: np.maximum(x, 0).astype(np.float32),
            glsl="max({x}, 0.0)", description="ReLU (benchmark reference only, unbounded)",
            output_range=None))


def step_seconds(models, batch=64, steps=20, rounds=3, seed=0):
    """Seconds per training step (``train_on_batch``, batch ``batch``) of each compiled
    model in ``{label: model}``; rounds alternate between the models, the fastest round
    counts (robust to other jobs on the machine)."""
    rng = np.random.default_rng(seed)
    times = {}
    for label, model in models.items():
        size, classes = model.input_shape[1], model.output_shape[-1]
        x = rng.random((batch, size, size, 3), np.float32)
        y = rng.integers(0, classes, batch)
        model.train_on_batch(x, y)  # trace
        times[label] = (x, y, [])
    for _ in range(rounds):
        for label, model in models.items():
            x, y, rounds_s = times[label]
            start = time.perf_counter()
            for _ in range(steps):
                model.train_on_batch(x, y)
            rounds_s.append((time.perf_counter() - start) / steps)
    return {label: min(t[2]) for label, t in times.items()}


def bench_activation(preset="cifar10", batch=64, steps=20, rounds=3, verbose=True):
    """Ratio of the training-step time with ``sigmoid_like`` to that with ``tf.nn.relu``
    (Adam, the given preset and batch)."""
    _register_relu()
    models = {a: classify.compile_classifier(dogs_classifier(preset, activation=a))
              for a in ("sigmoid_like", "relu")}
    t = step_seconds(models, batch, steps, rounds)
    ratio = t["sigmoid_like"] / t["relu"]
    if verbose:
        print(f"{preset}, batch {batch}: training step sigmoid_like {t['sigmoid_like'] * 1e3:.1f}"
              f" ms, relu {t['relu'] * 1e3:.1f} ms, ratio {ratio:.2f}")
    return ratio


def bench_batchnorm(preset="cifar10", batch=64, steps=20, rounds=3, verbose=True):
    """Ratio of the training-step time with Keras' ``BatchNormalization`` to that with
    :class:`workbench.nets.layers.FastBatchNorm` (the speed-up of the fused kernel)."""
    models = {f: classify.compile_classifier(dogs_classifier(preset, fast_bn=f)) for f in (False, True)}
    t = step_seconds(models, batch, steps, rounds)
    ratio = t[False] / t[True]
    if verbose:
        print(f"{preset}, batch {batch}: training step keras BN {t[False] * 1e3:.1f} ms,"
              f" fused BN {t[True] * 1e3:.1f} ms, speed-up {ratio:.2f}x")
    return ratio
