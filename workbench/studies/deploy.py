"""Deployment checks: TensorFlow vs the numpy emulator vs the GPU shaders, for the SR net
(:func:`compare`) and for classifiers (:func:`compare_classifier`).

SR conventions as :mod:`workbench.nets.superres`: HxWx3 RGB float in [0, 1]; "TF" is the Keras net
on luma with bilinear chroma, rounded to 8 bits; PSNR vs ground truth on studio-range Y with
``crop_border = 2`` (the published convention).
"""
from __future__ import annotations

from pathlib import Path

import keras
import numpy as np

from workbench import es2, references, tables
from workbench.data import datasets, images, metrics
from workbench.es2 import emulate
from workbench.files import read_json, write_json
from workbench.ir import cost
from workbench.ir.cost import Cost
from workbench.nets import superres
from workbench.studies import precision


def compare(model, net, sr_sets, kernel="bicubic_aa", scale=2, keep_images=()):
    """Per image: the three outputs against each other and against the ground truth.

    Two byte comparisons with the emulator: end to end (``bytes_equal_gpu_emulator``, where a
    value rounded differently in one layer spreads through the next), and op by op from the
    GPU's own stored inputs (``bytes_equal_per_op_worst``, the worst op), which checks each
    shader on its own.

    Returns ``(records, kept)``; ``kept[image]`` holds the outputs of the images named in
    ``keep_images`` (or each set's first image) for figures.
    """
    records, kept = [], {}
    first = next((images.degrade(images.modcrop(hr, scale), scale, kernel)
                  for s in sr_sets for _, hr in s.images[:1]), None)
    if first is not None:
        net.run(first)  # the first run also has the driver translate every shader: untimed
    for sr_set in sr_sets:
        keep = superres.figure_images(sr_set, keep_images)
        for name, hr in sr_set.images:
            hr = images.modcrop(hr, scale)
            lr = images.degrade(hr, scale, kernel)
            stored = net.run(lr, keep=True)
            gpu_seconds = sum(net.timings.values())
            gpu = stored[net.graph.output][..., :3] / np.float32(255)
            tf_out, emu = superres.upscale(model, lr, scale), net.emulate(lr)
            per_op = emulate.stepwise(net.graph, stored)
            outputs = {"bicubic": images.upscale_bicubic(lr, scale), "TF": tf_out,
                       "emulator": emu, "GPU": gpu}
            records.append({
                "set": sr_set.name, "image": name, "size": list(lr.shape[:2]),
                "psnr_gpu_vs_tf": metrics.psnr(tf_out, gpu),
                "psnr_emulator_vs_tf": metrics.psnr(tf_out, emu),
                "bytes_equal_gpu_emulator": float(np.mean(images.to_uint8(gpu) == images.to_uint8(emu))),
                "max_level_diff_gpu_emulator": int(np.abs(images.to_uint8(gpu).astype(int)
                                                          - images.to_uint8(emu)).max()),
                "bytes_equal_per_op_worst": min(float(np.mean(stored[k] == v))
                                                for k, v in per_op.items()),
                **{f"psnr_y_studio_{k}": metrics.psnr(hr, v, scale, "studio")
                   for k, v in outputs.items()},
                "gpu_seconds": gpu_seconds,  # the passes, without upload and read-back
            })
            if name in keep:
                kept[name] = outputs
    return records, kept


def summarize(records):
    """Per set: worst and mean GPU-vs-TF PSNR, worst share of bytes equal to the emulator,
    mean PSNR vs ground truth of each output, GPU milliseconds per image in the steady state
    (the first run, which translates every shader, left out by :func:`compare`): the
    median and the range."""
    out = []
    for name in dict.fromkeys(r["set"] for r in records):
        rs = [r for r in records if r["set"] == name]
        row = {"set": name, "images": len(rs),
               "min PSNR GPU vs TF": min(r["psnr_gpu_vs_tf"] for r in rs),
               "mean PSNR GPU vs TF": float(np.mean([r["psnr_gpu_vs_tf"] for r in rs])),
               "min bytes GPU = emulator %": 100 * min(r["bytes_equal_gpu_emulator"] for r in rs),
               "min bytes per op %": 100 * min(r["bytes_equal_per_op_worst"] for r in rs)}
        for k in ("bicubic", "TF", "emulator", "GPU"):
            row[f"{k} PSNR Y601"] = float(np.mean([r[f"psnr_y_studio_{k}"] for r in rs]))
        ms = [1000 * r["gpu_seconds"] for r in rs]
        row["GPU ms/image (steady)"] = float(np.median(ms))
        row["GPU ms range"] = f"{min(ms):.1f}-{max(ms):.1f}"
        out.append(row)
    return out


def compare_classifier(model, net, images, labels=None, emulate=True, progress=True):
    """Logits of TF, the GPU (and the emulator) for each image (HxWx3 float [0, 1]).

    Returns a dict: per-image top-1 of each, accuracy of each (if ``labels``), the share of
    images where the GPU's top-1 equals TF's, the largest |GPU - TF| logit difference, the
    correlation of all GPU and TF logits, GPU seconds per image (passes only).
    """
    from tqdm.auto import tqdm

    logits = {"GPU": []} | ({"emulator": []} if emulate else {})
    net.run(images[0])  # the first run also has the driver translate every shader
    seconds = []
    for image in tqdm(images, desc="GPU" + (" / emulator" if emulate else ""),
                      disable=not progress):
        logits["GPU"].append(net.run(image))
        seconds.append(sum(net.timings.values()))
        if emulate:
            logits["emulator"].append(net.emulate(image))
    logits = {k: np.array(v, np.float64) for k, v in logits.items()}
    logits["TF"] = np.asarray(model.predict(np.asarray(images), batch_size=256, verbose=0),
                              np.float64)
    top1 = {k: v.argmax(axis=1) for k, v in logits.items()}
    result = {
        "images": len(images),
        "gpu_top1_equals_tf": float(np.mean(top1["GPU"] == top1["TF"])),
        "max_logit_diff_gpu_tf": float(np.abs(logits["GPU"] - logits["TF"]).max()),
        "logit_correlation_gpu_tf": float(np.corrcoef(logits["GPU"].ravel(), logits["TF"].ravel())[0, 1]),
        "gpu_seconds_per_image": float(np.mean(seconds)),
    }
    if emulate:
        result["emulator_top1_equals_gpu"] = float(np.mean(top1["emulator"] == top1["GPU"]))
        result["max_logit_diff_gpu_emulator"] = float(np.abs(logits["GPU"] - logits["emulator"]).max())
    if labels is not None:
        result.update({f"top1_{k}": float(np.mean(v == np.asarray(labels))) for k, v in top1.items()})
    return result


def dogs120_check(count=20, root=None, calibrate=4, seed=0):
    """The full-size dogs120 net (385x385) with random weights, BatchNorm statistics
    calibrated on ``calibrate`` photos, run on ``count`` other photos through TF and the
    GPU; with its cost against the reference's (398.4 M multiply-adds, 27.9 M texel
    fetches, < 6 MB of textures per image)."""
    from workbench.ir import cost
    from workbench.nets import classify
    from workbench.nets.models import dogs_classifier

    keras.utils.set_random_seed(seed)
    model = dogs_classifier("dogs120")
    pictures = datasets.photos(385, count + calibrate, root)
    classify.calibrate_batchnorm(model, pictures[:calibrate])
    net = es2.compile(model)
    result = compare_classifier(model, net, pictures[calibrate:], emulate=False)
    total = cost.total(net.cost((385, 385)).values())
    return {"images": result["images"], "programs": len(net.passes),
            "compile s": net.compile_seconds,
            "logit correlation GPU/TF": result["logit_correlation_gpu_tf"],
            "max logit |GPU - TF|": result["max_logit_diff_gpu_tf"],
            "GPU top-1 = TF top-1": result["gpu_top1_equals_tf"],
            "GPU s/image": result["gpu_seconds_per_image"],
            "multiply-adds M": total.multiply_adds / 1e6, "reference M": references.DOGS120_MULTIPLY_ADDS_M,
            "texel fetches M": total.texel_fetches / 1e6, "reference fetches M": references.DOGS120_TEXEL_FETCHES_M,
            "peak texture MB": net.peak_texture_bytes((385, 385)) / 1e6,
            "all textures MB": total.texture_bytes / 1e6}


# --- results and the report --------------------------------------------------------------------

SR_RESULT, SR_NOTEBOOK = "glsl_deploy.json", "glsl_deploy"
CLASSIFIER_RESULT, CLASSIFIER_NOTEBOOK = "classifier_deploy.json", "classifier_deploy"
COST_SIZE = (256, 256)   # the SR net's cost is reported for this input


def save_sr_results(directory, net, records, summary, mediump=None, **about):
    """``glsl_deploy.json``: the comparison records and summary, compile and pass times, the
    net's cost per op at :data:`COST_SIZE`, and the mediump prediction if given
    (``{"rows", "summary"}`` of :func:`workbench.studies.precision.compare`); ``about``:
    model path, precision, kernel..."""
    write_json(Path(directory) / SR_RESULT, {
        **about, "compile_seconds": net.compile_seconds, "pass_seconds": net.timings,
        "cost": {k: vars(v) for k, v in net.cost(COST_SIZE).items()},
        "summary": summary, "records": records, "mediump": mediump})


def save_classifier_results(directory, net, result, size, dogs120=None, mediump=None, **about):
    """``classifier_deploy.json``: :func:`compare_classifier`'s result, compile and pass times,
    the cost per op for a ``size`` x ``size`` input, the dogs120 check if it ran, and the
    mediump prediction if given (as in :func:`save_sr_results`)."""
    write_json(Path(directory) / CLASSIFIER_RESULT, {
        **about, "programs": len(net.passes), "compile_seconds": net.compile_seconds,
        "result": result, "cost": {k: vars(v) for k, v in net.cost((size, size)).items()},
        "peak_texture_bytes": net.peak_texture_bytes((size, size)),
        "pass_seconds": net.timings, "dogs120": dogs120, "mediump": mediump})


def mediump_section(mediump) -> str:
    """The mediump prediction's end-to-end numbers and per-op table, for the report."""
    rows = mediump["rows"]
    first = precision.first_break(rows)
    return ("\n\nPredicted on a GPU whose mediump is float16 (emulator, "
            f"{mediump['summary']['images']} image(s)):\n\n"
            + tables.markdown([mediump["summary"]], digits=3)
            + "\n\nPer op, PSNR against TF (dB); first op below 40 dB with mediump: "
            + (f"**{first}**" if first else "none") + "\n\n" + precision.table(rows))


def sr_section(directory) -> str | None:
    results = read_json(Path(directory) / SR_RESULT)
    if not results:
        return None
    low, high = references.SR_PI3_COMPILE_S
    shares = {"min bytes GPU = emulator %": 4, "min bytes per op %": 4}  # 99.9989 is not 100
    return (tables.markdown(results["summary"], digits=shares) + f"\n\nCompile + link of "
            f"{len(results['pass_seconds'])} programs: {results['compile_seconds']:.2f} s here "
            f"(reference: {low}-{high} s on a Pi 3). Reference: outputs of a Pi, a phone and a "
            f"desktop GPU within {references.SR_DEVICES_PSNR_DB} dB of each other."
            + (mediump_section(results["mediump"]) if results.get("mediump") else ""))


def classifier_section(directory) -> str | None:
    deployed = read_json(Path(directory) / CLASSIFIER_RESULT)
    if not deployed:
        return None
    r = deployed["result"]
    rows = [{"": "top-1 %", "TF": 100 * r["top1_TF"], "GPU": 100 * r["top1_GPU"],
             "reference TF": references.DOGS120_TOP1_TF,
             "reference GPU": references.DOGS120_TOP1_GPU},
            {"": "GPU top-1 = TF top-1 %", "GPU": 100 * r["gpu_top1_equals_tf"]},
            {"": "largest logit difference GPU - TF", "GPU": r["max_logit_diff_gpu_tf"]},
            {"": "GPU ms per image", "GPU": 1000 * r["gpu_seconds_per_image"]}]
    text = tables.markdown(rows, digits=3) + f"\n\n{r['images']} test images."
    if deployed.get("mediump"):
        text += mediump_section(deployed["mediump"])
    if deployed.get("dogs120"):
        text += "\n\ndogs120 at 385x385 (random weights, BatchNorm calibrated):\n\n" + \
            tables.markdown([deployed["dogs120"]], digits=3)
    return text


def cost_section(directory) -> str | None:
    """Cost per op of both deployed nets, as :func:`workbench.ir.cost.table` prints it."""
    parts = []
    for title, name in ((f"x2 SR at {COST_SIZE[1]}x{COST_SIZE[0]}", SR_RESULT),
                        ("classifier", CLASSIFIER_RESULT)):
        results = read_json(Path(directory) / name)
        if results:
            costs = {op: Cost(**c) for op, c in results["cost"].items()}
            parts.append(f"**{title}**\n\n" + cost.table(costs))
    return "\n\n".join(parts) or None


def timings_section(directory) -> str | None:
    rows = []
    for title, name in (("x2 SR (last image)", SR_RESULT),
                        ("classifier (last image)", CLASSIFIER_RESULT)):
        results = read_json(Path(directory) / name)
        if results and results.get("pass_seconds"):
            seconds = results["pass_seconds"].values()
            rows.append({"net": title, "programs": len(seconds),
                         "all passes ms": 1000 * sum(seconds),
                         "slowest pass ms": 1000 * max(seconds),
                         "compile s": results["compile_seconds"]})
    return tables.markdown(rows) if rows else None
