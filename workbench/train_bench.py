"""Where a training step's time goes, and samples/s of training options side by side.

:func:`bench_train` times the x2 SR net (Adam, L1; batch x patch LR patches) and the
CIFAR-10 classifier (Adam, sparse cross-entropy; batch 64 of 32x32x3).  Options are measured
interleaved in one process: repeat r runs every option once, then r + 1, ...; a row reports
the median over repeats and the spread (min..max).  Thread settings are fixed at TensorFlow's
start, so :func:`bench_threads` runs each setting in a subprocess (also interleaved).
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from workbench import classify, datasets, layers, models, training


def _median_spread(xs):
    return statistics.median(xs), min(xs), max(xs)


def sr_model(formulation="grouped"):
    """Compiled ``sr_x2`` traced with ``formulation`` of the grouped convolutions."""
    layers.grouped_formulation = formulation
    return training.adam_l1(models.sr_x2(), 2e-3, 10_000)


def classifier_model(formulation="grouped"):
    layers.grouped_formulation = formulation
    return classify.compile_classifier(models.dogs_classifier("cifar10"))


def _batch(kind, batch, patch, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "sr":
        return (rng.random((batch, patch, patch, 1), np.float32),
                rng.random((batch, 2 * patch, 2 * patch, 1), np.float32))
    return rng.random((batch, 32, 32, 3), np.float32), rng.integers(0, 10, batch)


def _warm(model, x, y, formulation):
    layers.grouped_formulation = formulation
    model.train_on_batch(x, y)  # trace under this formulation
    layers.grouped_formulation = "grouped"


def step_options(options, repeats=5, steps=20):
    """``options``: ``{label: (kind, formulation, batch, patch)}``.  Returns one row per
    option: ms per step and samples/s (median, spread) of ``train_on_batch`` on a fixed batch
    (no input pipeline)."""
    built = {}
    for label, (kind, form, batch, patch) in options.items():
        model = sr_model(form) if kind == "sr" else classifier_model(form)
        x, y = _batch(kind, batch, patch)
        _warm(model, x, y, form)
        built[label] = (model, x, y, [])
    for _ in range(repeats):
        for label, (model, x, y, times) in built.items():
            start = time.perf_counter()
            for _ in range(steps):
                model.train_on_batch(x, y)
            times.append((time.perf_counter() - start) / steps)
    rows = []
    for label, (model, x, y, times) in built.items():
        kind, form, batch, patch = options[label]
        ms, lo, hi = _median_spread([t * 1e3 for t in times])
        rows.append({"net": kind, "option": label, "formulation": form, "batch": batch,
                     "patch": patch, "ms_per_step": ms, "ms_min": lo, "ms_max": hi,
                     "samples_per_s": batch / ms * 1e3,
                     "lr_pixels_per_s": batch * (patch or 32) ** 2 / ms * 1e3})
    return rows


def layer_profile(model, x, repeats=5, steps=10):
    """Forward + backward time of each layer alone (its own input shapes, a fixed output
    gradient), ms median over ``repeats``; with the whole ``train_on_batch`` step and the
    share of the conv layers in it.  The rest of the step is the optimizer update, the loss
    and Keras' per-step overhead."""
    probe = keras.Model(model.inputs, [l.output for l in model.layers[1:]])
    outs = dict(zip([l.name for l in model.layers[1:]], probe(x, training=False)))
    outs[model.layers[0].name] = tf.convert_to_tensor(x)
    fns = []
    for layer in model.layers[1:]:
        srcs = layer.input if isinstance(layer.input, list) else [layer.input]
        ins = [outs[s._keras_history.operation.name] for s in srcs]
        dy = tf.ones_like(outs[layer.name])

        @tf.function
        def fwd_bwd(ins, dy, layer=layer):
            with tf.GradientTape() as tape:
                tape.watch(ins)
                y = layer(ins if len(ins) > 1 else ins[0], training=True)
            return tape.gradient(y, ins + layer.trainable_weights, output_gradients=dy)

        fwd_bwd(ins, dy)
        fns.append((layer, fwd_bwd, ins, dy, []))
    for _ in range(repeats):
        for layer, fn, ins, dy, times in fns:
            start = time.perf_counter()
            for _ in range(steps):
                fn(ins, dy)
            times.append((time.perf_counter() - start) / steps * 1e3)
    return [{"layer": layer.name, "type": type(layer).__name__,
             "ms": statistics.median(times)} for layer, _, _, _, times in fns]


def data_ms(batch=16, patch=48, n=50, train_images=None):
    """ms to make one SR batch in the Python generator of :func:`datasets.sr_patches`
    (the run overlaps it with the step through ``prefetch``)."""
    images = train_images or [im for _, im in datasets.sr_images("train", limit=20).images]
    pairs = datasets.sr_training_pairs(images, 2)
    gen = iter(datasets.sr_patches(pairs, patch, batch, seed=0))
    next(gen)
    start = time.perf_counter()
    for _ in range(n):
        next(gen)
    return (time.perf_counter() - start) / n * 1e3


def bench_train(repeats=5, steps=20, sr_sizes=((16, 48), (32, 48), (16, 64), (32, 64), (64, 48)),
                formulations=layers.GROUPED_FORMULATIONS, profile=True, verbose=True):
    """Profile and compare; returns ``{"steps": rows, "profile": {net: rows}, "data_ms": ms}``
    and prints tables.  Step rows: SR at every (batch, patch) of ``sr_sizes`` with
    ``formulations[0]``, SR (16, 48) and the classifier (batch 64) with every formulation."""
    options = {f"sr b{b} p{p} {formulations[0]}": ("sr", formulations[0], b, p)
               for b, p in sr_sizes}
    options.update({f"sr b16 p48 {f}": ("sr", f, 16, 48) for f in formulations})
    options.update({f"cls b64 {f}": ("cls", f, 64, None) for f in formulations})
    rows = step_options(options, repeats, steps)
    result = {"steps": rows, "profile": {}, "data_ms": data_ms()}
    if profile:
        for kind in ("sr", "cls"):
            for form in formulations:
                model = sr_model(form) if kind == "sr" else classifier_model(form)
                x, y = _batch(kind, 16 if kind == "sr" else 64, 48)
                result["profile"][f"{kind} {form}"] = layer_profile(model, x, repeats)
        layers.grouped_formulation = "grouped"
    if verbose:
        print(format_result(result))
    return result


def format_result(result):
    lines = ["| option | ms/step (min..max) | samples/s | LR px/s |", "|---|---|---|---|"]
    for r in result["steps"]:
        lines.append(f"| {r['option']} | {r['ms_per_step']:.1f} ({r['ms_min']:.1f}..{r['ms_max']:.1f})"
                     f" | {r['samples_per_s']:.0f} | {r['lr_pixels_per_s'] / 1e3:.0f}k |")
    lines.append(f"\nSR data generator: {result['data_ms']:.2f} ms per batch of 16x48x48")
    step = {r["option"]: r["ms_per_step"] for r in result["steps"]}
    for name, prof in result["profile"].items():
        kind, form = name.split()
        total = step[f"sr b16 p48 {form}" if kind == "sr" else f"cls b64 {form}"]
        conv = sum(p["ms"] for p in prof if p["type"] in ("GroupConv2D", "Conv2D", "Dense"))
        rest = sum(p["ms"] for p in prof) - conv
        lines.append(f"\n{name}: step {total:.1f} ms; layers alone fwd+bwd: conv {conv:.1f} ms "
                     f"({conv / total:.0%} of the step), other layers {rest:.1f} ms, "
                     f"remainder (optimizer, loss, Keras) {total - conv - rest:.1f} ms")
        lines.append("  " + ", ".join(f"{p['layer']} {p['ms']:.2f}" for p in prof
                                      if p["ms"] >= 0.05 * total or kind == "sr"))
    return "\n".join(lines)


def bench_threads(settings=((0, 0), (1, 2), (2, 1), (1, 1), (2, 2)), repeats=5, steps=20):
    """SR (batch 16, patch 48) ms/step per ``(inter_op, intra_op)`` thread setting (0 = TF's
    default), each run in its own subprocess, interleaved; rows like :func:`step_options`."""
    code = ("import sys, json, workbench, tensorflow as tf\n"
            "tf.config.threading.set_inter_op_parallelism_threads(int(sys.argv[1]))\n"
            "tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[2]))\n"
            "from workbench import train_bench as tb\n"
            "r = tb.step_options({'x': ('sr', 'grouped', 16, 48)}, 1, int(sys.argv[3]))[0]\n"
            "print(json.dumps(r['ms_per_step']))\n")
    times = {s: [] for s in settings}
    for _ in range(repeats):
        for s in settings:
            out = subprocess.run([sys.executable, "-c", code, str(s[0]), str(s[1]), str(steps)],
                                 capture_output=True, text=True, check=True).stdout
            times[s].append(json.loads(out.strip().splitlines()[-1]))
    rows = []
    for (inter, intra), ts in times.items():
        ms, lo, hi = _median_spread(ts)
        rows.append({"inter_op": inter, "intra_op": intra, "ms_per_step": ms, "ms_min": lo,
                     "ms_max": hi, "samples_per_s": 16 / ms * 1e3})
    return rows
