"""Where a training step's time goes, and samples/s of training options side by side.

:func:`bench_train` times the x2 SR net (Adam, L1; batch x patch LR patches) and the
CIFAR-10 classifier (Adam, sparse cross-entropy; batch 64 of 32x32x3).  Options are measured
interleaved in one process: repeat r runs every option once, then r + 1, ...; a row reports
the median over repeats and the spread (min..max).  Thread settings are fixed at TensorFlow's
start, so :func:`bench_threads` runs each setting in a subprocess (also interleaved).
"""
from __future__ import annotations

import collections
import dataclasses
import glob
import json
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

from workbench.data import datasets
from workbench.nets import activations, classify, layers, models, training

_FUSED_BOUNDED_RELU = activations.get("bounded_relu")
# Today's bounded ReLU before this bench: clip_by_value with TF's own gradient.
_CLIP_BOUNDED_RELU = dataclasses.replace(_FUSED_BOUNDED_RELU,
                                         tf_fn=lambda x: tf.clip_by_value(x, 0.0, 1.0))


def _use(formulation="auto", act="fused"):
    """Set the grouped-conv formulation and the bounded ReLU's gradient for the next trace."""
    layers.grouped_formulation = formulation
    activations.register(_FUSED_BOUNDED_RELU if act == "fused" else _CLIP_BOUNDED_RELU)


def _median_spread(xs):
    return statistics.median(xs), min(xs), max(xs)


def sr_model():
    """Compiled ``sr_x2`` (Adam, L1), as :func:`superres.train` trains it."""
    return training.adam_l1(models.sr_x2(), 2e-3, 10_000)


def classifier_model():
    return classify.compile_classifier(models.dogs_classifier("cifar10"))


def _batch(kind, batch, patch, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "sr":
        return (rng.random((batch, patch, patch, 1), np.float32),
                rng.random((batch, 2 * patch, 2 * patch, 1), np.float32))
    return rng.random((batch, 32, 32, 3), np.float32), rng.integers(0, 10, batch)


def step_options(options, repeats=5, steps=20):
    """``options``: ``{label: (kind, formulation, batch, patch, act)}``, kind "sr" or "cls",
    act "fused" (the bounded ReLU's one-op gradient) or "clip" (TF's clip_by_value gradient).
    Returns one row per option: ms per step and samples/s (median, spread) of
    ``train_on_batch`` on a fixed batch (no input pipeline)."""
    built = {}
    for label, (kind, form, batch, patch, act) in options.items():
        _use(form, act)
        model = sr_model() if kind == "sr" else classifier_model()
        x, y = _batch(kind, batch, patch)
        model.train_on_batch(x, y)  # traced with these settings
        built[label] = (model, x, y, [])
    _use()
    for _ in range(repeats):
        for label, (model, x, y, times) in built.items():
            start = time.perf_counter()
            for _ in range(steps):
                model.train_on_batch(x, y)
            times.append((time.perf_counter() - start) / steps)
    rows = []
    for label, (model, x, y, times) in built.items():
        kind, form, batch, patch, act = options[label]
        ms, lo, hi = _median_spread([t * 1e3 for t in times])
        rows.append({"net": kind, "option": label, "formulation": form, "act": act, "batch": batch,
                     "patch": patch, "ms_per_step": ms, "ms_min": lo, "ms_max": hi,
                     "samples_per_s": batch / ms * 1e3,
                     "lr_pixels_per_s": batch * (patch or 32) ** 2 / ms * 1e3})
    return rows


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


OP_GROUPS = (("conv", ("Conv2D", "DepthwiseConv")), ("matmul", ("MatMul",)),
             ("batch norm", ("BatchNorm",)), ("optimizer", ("adam/", "Adam", "Variable")))


def op_profile(model, x, y, steps=10):
    """TensorFlow's profiler over ``steps`` of ``train_on_batch``: ms per step of each op
    group (``OP_GROUPS``; the rest is "element-wise / other"), summed over TF's compute
    threads (2 ops can run at once), the top op types and layers, and the wall-clock ms per
    step."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    model.train_on_batch(x, y)
    logdir = tempfile.mkdtemp(prefix="train_bench_")
    start = time.perf_counter()
    tf.profiler.experimental.start(logdir)
    for _ in range(steps):
        model.train_on_batch(x, y)
    tf.profiler.experimental.stop()
    wall = (time.perf_counter() - start) / steps * 1e3
    space = xplane_pb2.XSpace()
    space.ParseFromString(open(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)[0], "rb").read())
    totals, ops, per_layer = collections.Counter(), collections.Counter(), collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if ":" not in name.replace("::", ""):
                    continue  # executor bookkeeping around the ops
                group = next((g for g, keys in OP_GROUPS if any(k in name for k in keys)),
                             "element-wise / other")
                totals[group] += event.duration_ps / 1e9 / steps
                ops[name.rsplit(":", 1)[1]] += event.duration_ps / 1e9 / steps
                scope = name.removeprefix("gradient_tape/").split("/")
                per_layer[scope[1] if len(scope) > 2 else scope[0]] += event.duration_ps / 1e9 / steps
    return {"wall_ms": wall, "groups": dict(totals), "top_ops": dict(ops.most_common(8)),
            "layers": dict(per_layer.most_common(12))}


def bench_train(repeats=5, steps=20, sr_sizes=((16, 48), (32, 48), (16, 64), (32, 64), (64, 48)),
                formulations=layers.GROUPED_FORMULATIONS, profile=True, verbose=True):
    """Profile and compare; returns ``{"steps": rows, "profile": {...}, "data_ms": ms}`` and
    prints tables.  Step rows: "today" (grouped filter, clip_by_value gradient) and every
    formulation with the fused bounded-ReLU gradient, for SR (batch 16, patch 48) and the
    CIFAR-10 classifier (batch 64); SR at every (batch, patch) of ``sr_sizes`` (new default)."""
    options = {"sr b16 p48 today": ("sr", "grouped", 16, 48, "clip")}
    options.update({f"sr b16 p48 {f}": ("sr", f, 16, 48, "fused") for f in formulations})
    options.update({f"sr b{b} p{p}": ("sr", "grouped", b, p, "fused")
                    for b, p in sr_sizes if (b, p) != (16, 48)})
    options.update({f"cls b64 {f}": ("cls", f, 64, None, "fused") for f in formulations})
    rows = step_options(options, repeats, steps)
    result = {"steps": rows, "profile": {}, "data_ms": data_ms()}
    if profile:
        for label in ["sr b16 p48 today"] + [f"{n} {f}" for n in ("sr b16 p48", "cls b64")
                                             for f in formulations]:
            kind, form, batch, patch, act = options[label]
            _use(form, act)
            model = sr_model() if kind == "sr" else classifier_model()
            result["profile"][label] = op_profile(model, *_batch(kind, batch, patch))
        _use()
    if verbose:
        print(format_result(result))
    return result


def format_result(result):
    lines = ["| option | ms/step (min..max) | samples/s | LR px/s |", "|---|---|---|---|"]
    for r in result["steps"]:
        lines.append(f"| {r['option']} | {r['ms_per_step']:.1f} ({r['ms_min']:.1f}..{r['ms_max']:.1f})"
                     f" | {r['samples_per_s']:.0f} | {r['lr_pixels_per_s'] / 1e3:.0f}k |")
    lines.append(f"\nSR data generator: {result['data_ms']:.2f} ms per batch of 16x48x48 "
                 "(overlapped with the step by prefetch)")
    for name, prof in result["profile"].items():
        total = sum(prof["groups"].values())
        lines.append(f"\n{name}: wall {prof['wall_ms']:.1f} ms/step (under the profiler); op time "
                     f"{total:.1f} ms/step summed over threads: " + ", ".join(
                         f"{g} {ms:.1f} ({ms / total:.0%})" for g, ms in
                         sorted(prof["groups"].items(), key=lambda kv: -kv[1])))
        lines.append("  top ops: " + ", ".join(f"{k} {v:.1f}" for k, v in prof["top_ops"].items()))
        lines.append("  by layer (fwd+bwd): " + ", ".join(f"{k} {v:.1f}" for k, v in prof["layers"].items()))
    return "\n".join(lines)


def bench_threads(settings=((0, 0), (1, 2), (2, 1), (1, 1), (2, 2)), repeats=5, steps=20):
    """SR (batch 16, patch 48) ms/step per ``(inter_op, intra_op)`` thread setting (0 = TF's
    default), each run in its own subprocess, interleaved; rows like :func:`step_options`."""
    code = ("import sys, json, workbench, tensorflow as tf\n"
            "tf.config.threading.set_inter_op_parallelism_threads(int(sys.argv[1]))\n"
            "tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[2]))\n"
            "from workbench.studies import train_bench as tb\n"
            "r = tb.step_options({'x': ('sr', 'grouped', 16, 48, 'fused')}, 1, int(sys.argv[3]))[0]\n"
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
