"""Where a training step's time goes, and samples/s of training options side by side.

:func:`bench_train` times the x2 SR net (Adam, L1; batch x patch LR patches) and the
CIFAR-10 classifier (Adam, sparse cross-entropy; batch 64 of 32x32x3).  Options are measured
interleaved in one process: repeat r runs every option once, then r + 1, ...; a row reports
the median over repeats and the spread (min..max).  Thread settings are fixed at TensorFlow's
start, so :func:`bench_threads` runs each setting in a subprocess (also interleaved).
:func:`backend_runs` trains the SR reference recipe under Keras' back ends (TensorFlow, JAX),
each in its own process, from the same weights on the same batches: per-step losses and
ms/step side by side.
"""
from __future__ import annotations

import collections
import dataclasses
import glob
import importlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
                formulations=layers.GROUPED_FORMULATIONS, profile=True, verbose=True,
                backends=()):
    """Profile and compare; returns ``{"steps": rows, "profile": {...}, "data_ms": ms,
    "backends": rows}`` and prints tables.  Step rows: "today" (grouped filter, clip_by_value
    gradient) and every formulation with the fused bounded-ReLU gradient, for SR (batch 16,
    patch 48) and the CIFAR-10 classifier (batch 64); SR at every (batch, patch) of ``sr_sizes``
    (new default).  Back-end rows: :func:`backend_runs` of ``backends`` (e.g.
    :data:`BACKENDS`, as ``bench train`` asks) with the same ``repeats`` and ``steps``."""
    options = {"sr b16 p48 today": ("sr", "grouped", 16, 48, "clip")}
    options.update({f"sr b16 p48 {f}": ("sr", f, 16, 48, "fused") for f in formulations})
    options.update({f"sr b{b} p{p}": ("sr", "grouped", b, p, "fused")
                    for b, p in sr_sizes if (b, p) != (16, 48)})
    options.update({f"cls b64 {f}": ("cls", f, 64, None, "fused") for f in formulations})
    rows = step_options(options, repeats, steps)
    result = {"steps": rows, "profile": {}, "data_ms": data_ms(),
              "backends": backend_runs(backends, repeats=repeats, steps=steps) if backends
              else []}
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
    if result.get("backends"):
        lines += ["", format_backends(result["backends"])]
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


# --- the SR training on Keras' back ends ---------------------------------------------------------

BACKENDS = ("tensorflow", "jax")
_BACKEND_PACKAGES = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}
_REPLY = "@@workbench "  # the worker's answers on stdout, apart from anything a library prints


def backend_missing(backend) -> str | None:
    """Why Keras cannot run on ``backend`` here (an unknown name, its package not installed),
    or None."""
    package = _BACKEND_PACKAGES.get(backend)
    if package is None:
        return f"unknown Keras back end {backend!r}; known: {', '.join(_BACKEND_PACKAGES)}"
    if importlib.util.find_spec(package) is None:
        return f"{package} is not installed here (pip install -e '.[{package}]')"
    return None


def _worker():
    """A back end's process (:class:`_BackendWorker`): the loss trace, then timed rounds."""
    config = json.loads(sys.argv[1])
    import keras

    from workbench.nets import superres

    def reply(**message):
        print(_REPLY + json.dumps(message), flush=True)

    batches = superres.synthetic_batches(max(1, config["trace_steps"]), config["batch"],
                                         config["patch"], config["seed"])
    model = superres.trace_net(config["weights"])
    losses = superres.loss_trace(model, batches[:config["trace_steps"]])
    x, y = batches[0]
    model.train_on_batch(x, y)  # compiled and warm before any timing
    package = _BACKEND_PACKAGES[keras.backend.backend()]
    reply(backend=keras.backend.backend(), losses=losses,
          version=f"{package} {importlib.import_module(package).__version__}, "
                  f"Keras {keras.__version__}")
    for line in sys.stdin:
        start = time.perf_counter()
        for _ in range(int(line)):
            model.train_on_batch(x, y)
        reply(seconds=time.perf_counter() - start)


class _BackendWorker:
    """``python -c _worker()`` with ``KERAS_BACKEND=backend``; its stderr goes to a temporary
    file (quoted when it fails)."""

    def __init__(self, backend, config):
        self.backend = backend
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from workbench.studies.train_bench import _worker; _worker()",
             json.dumps(config)], env={**os.environ, "KERAS_BACKEND": backend},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)

    def read(self):
        for line in self.proc.stdout:
            if line.startswith(_REPLY):
                return json.loads(line[len(_REPLY):])
        self.proc.wait()
        self.log.seek(0)
        tail = [line for line in self.log.read().splitlines() if line.strip()][-3:]
        raise RuntimeError(f"the {self.backend} back end's process ended (exit "
                           f"{self.proc.returncode}): " + " | ".join(tail))

    def ask(self, steps):
        self.proc.stdin.write(f"{steps}\n")
        self.proc.stdin.flush()
        return self.read()["seconds"]

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait()
        self.log.close()


def backend_runs(backends=BACKENDS, trace_steps=20, repeats=5, steps=20, batch=16, patch=48,
                 seed=0):
    """The SR reference recipe (:data:`superres.TRACE_RECIPE`: expand 256, QAT, identity
    init; Adam, L1, learning rate 5e-4) trained under each Keras back end of ``backends``, each
    in its own process, all from the same weights (initialised here, by this process' back end)
    on the same :func:`superres.synthetic_batches` of ``batch`` x ``patch`` x ``patch``.

    One row per back end: ``losses`` (the first ``trace_steps`` steps, one batch each),
    ``max_loss_diff`` (largest |difference| from the first back end's, step by step) and, when
    ``repeats`` > 0, ms per step of ``train_on_batch`` on one batch, ``steps`` a round, the
    rounds interleaved (median, min..max) and samples/s.  A back end that cannot run here is a
    row with ``skipped`` (the reason) instead of numbers."""
    from workbench.nets import superres

    rows = [{"backend": b, "skipped": backend_missing(b), "batch": batch, "patch": patch}
            for b in backends]
    with tempfile.TemporaryDirectory(prefix="train_bench_") as tmp:
        weights = Path(tmp) / "sr.weights.h5"
        superres.trace_net(weights, seed=seed)
        config = {"weights": str(weights), "trace_steps": trace_steps, "batch": batch,
                  "patch": patch, "seed": seed}
        workers = {r["backend"]: _BackendWorker(r["backend"], config)
                   for r in rows if not r["skipped"]}  # started together: the traces overlap
        try:
            for row in rows:
                if row["backend"] not in workers:
                    continue
                try:
                    hello = workers[row["backend"]].read()
                except RuntimeError as error:
                    row["skipped"] = f"failed: {error}"
                    workers.pop(row["backend"]).close()
                    continue
                if hello["backend"] != row["backend"]:
                    raise RuntimeError(f"asked for Keras' {row['backend']} back end, the "
                                       f"process ran {hello['backend']}")
                row.update(version=hello["version"], losses=hello["losses"], times=[])
            for _ in range(repeats):
                for row in rows:
                    if row["backend"] in workers:
                        row["times"].append(workers[row["backend"]].ask(steps) / steps)
        finally:
            for worker in workers.values():
                worker.close()
    first = next((r["losses"] for r in rows if "losses" in r), None)
    for row in rows:
        if "losses" not in row:
            continue
        row["max_loss_diff"] = max((abs(a - b) for a, b in zip(row["losses"], first)),
                                   default=0.0)
        times = row.pop("times")
        if times:
            ms, lo, hi = _median_spread([t * 1e3 for t in times])
            row.update(ms_per_step=ms, ms_min=lo, ms_max=hi, samples_per_s=batch / ms * 1e3)
    return rows


def format_backends(rows):
    """The rows of :func:`backend_runs` as a table."""
    ran = [r for r in rows if "losses" in r]
    first = ran[0]["backend"] if ran else "-"
    steps = len(ran[0]["losses"]) if ran else 0
    batch, patch = (rows[0]["batch"], rows[0]["patch"]) if rows else (16, 48)
    lines = [f"SR reference recipe (expand 256, QAT, identity init; Adam, L1), batch {batch} "
             f"x {patch}x{patch}, one process per Keras back end, same weights and batches:",
             f"| back end | ms/step (min..max) | steps/s | samples/s | loss step 1 | max loss "
             f"diff vs {first}, {steps} steps |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "losses" not in r:
            lines.append(f"| {r['backend']} | skipped: {r['skipped']} | | | | |")
            continue
        speed = (f"{r['ms_per_step']:.1f} ({r['ms_min']:.1f}..{r['ms_max']:.1f}) | "
                 f"{1e3 / r['ms_per_step']:.1f} | {r['samples_per_s']:.0f}"
                 if "ms_per_step" in r else "- | - | -")
        loss = f"{r['losses'][0]:.6f}" if r["losses"] else "-"
        lines.append(f"| {r['backend']} ({r['version']}) | {speed} | {loss} | "
                     f"{r['max_loss_diff']:.2e} |")
    return "\n".join(lines)
