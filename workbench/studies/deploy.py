"""Deployment checks: TensorFlow vs the numpy emulator vs the GPU shaders, for the SR net
(:func:`compare`) and for classifiers (:func:`compare_classifier`); ``python -m workbench
upscale`` and ``bench``.

SR conventions as :mod:`workbench.superres`: HxWx3 RGB float in [0, 1]; "TF" is the Keras net
on luma with bilinear chroma, rounded to 8 bits; PSNR vs ground truth on studio-range Y with
``crop_border = 2`` (the published convention).
"""
from __future__ import annotations

import time
from pathlib import Path

import keras
import numpy as np

from workbench import datasets, emulate, glsl, images, metrics, superres


def load_net(path, precision="highp"):
    """A compiled net from a ``.keras`` model or from a folder written by ``net.save``.
    Returns ``(net, keras_model_or_None)``."""
    path = Path(path)
    if path.is_dir():
        return glsl.load(path), None
    if not path.exists():
        raise FileNotFoundError(f"model {path} not found (a .keras file or a saved shader folder)")
    model = keras.models.load_model(path)
    return glsl.compile(model, precision=precision), model


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
    mean PSNR vs ground truth of each output, mean GPU seconds per image."""
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
        row["GPU ms/image"] = 1000 * float(np.mean([r["gpu_seconds"] for r in rs]))
        out.append(row)
    return out


def classification_arrays(root, split, size, limit=None, classes=None):
    """A whole image-folder split in memory: ``(images, labels, class_names)``, images float32
    (N, size, size, 3) in [0, 1] (8-bit levels), labels int."""
    dataset, names = datasets.image_folder(root, split, size, batch=256, limit=limit,
                                           classes=classes)
    images_, labels = zip(*[(x.numpy(), y.numpy()) for x, y in dataset])
    return np.concatenate(images_), np.concatenate(labels), names


def photos(size, count, root=None):
    """``count`` natural photos (the SR training set, or scikit-image's samples) as float32
    (count, size, size, 3) centre squares, for running a classifier with random weights."""
    folder = datasets.data_root(root)
    paths = sorted((folder / "sr" / "train").glob("*.jpg"))[:count] if folder else []
    if paths:
        squares = [datasets.load_square_uint8(p, size) for p in paths]
    else:
        squares = [images.to_uint8(images.imresize(img, output_shape=(size, size)))
                   for _, img in datasets.sr_images("train", root).images[:count]]
    return np.stack(squares).astype(np.float32) / 255


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
    from workbench import classify, cost
    from workbench.models import dogs_classifier

    keras.utils.set_random_seed(seed)
    model = dogs_classifier("dogs120")
    pictures = photos(385, count + calibrate, root)
    classify.calibrate_batchnorm(model, pictures[:calibrate])
    net = glsl.compile(model)
    result = compare_classifier(model, net, pictures[calibrate:], emulate=False)
    total = cost.total(net.cost((385, 385)).values())
    return {"images": result["images"], "programs": len(net.passes),
            "compile s": net.compile_seconds,
            "logit correlation GPU/TF": result["logit_correlation_gpu_tf"],
            "max logit |GPU - TF|": result["max_logit_diff_gpu_tf"],
            "GPU top-1 = TF top-1": result["gpu_top1_equals_tf"],
            "GPU s/image": result["gpu_seconds_per_image"],
            "multiply-adds M": total.multiply_adds / 1e6, "reference M": 398.4,
            "texel fetches M": total.texel_fetches / 1e6, "reference fetches M": 27.9,
            "peak texture MB": net.graph.peak_texture_bytes((385, 385)) / 1e6,
            "all textures MB": total.texture_bytes / 1e6}


def bench_sr(model=None, size=256, repeat=5):
    """GPU (this machine's GL) vs TensorFlow CPU time for one ``size`` x ``size`` -> 2x upscale,
    and the compile+link time of all programs.  Returns a dict of seconds and ratios."""
    import tensorflow as tf

    from workbench.models import sr_x2

    model = model or sr_x2()
    image = np.random.default_rng(0).random((size, size, 3)).astype(np.float32)
    start = time.perf_counter()
    net = glsl.compile(model)
    generate_seconds = time.perf_counter() - start
    compile_seconds = net.compile_seconds  # compile + link + a warm-up draw of every program
    start = time.perf_counter()
    net.run(image)  # the driver may still translate shader variants for the real textures
    first_run_seconds = time.perf_counter() - start
    gpu = []
    for _ in range(repeat):
        start = time.perf_counter()
        net.run(image)
        gpu.append(time.perf_counter() - start)
    passes = sum(net.timings.values())
    forward = tf.function(lambda x, training=False: model(x, training=training))
    superres.upscale(forward, image)
    cpu = []
    for _ in range(repeat):
        start = time.perf_counter()
        superres.upscale(forward, image)
        cpu.append(time.perf_counter() - start)
    result = {"size": size, "programs": len(net.passes), "generate_seconds": generate_seconds,
              "compile_link_seconds": compile_seconds, "first_run_seconds": first_run_seconds,
              "gpu_seconds": float(np.median(gpu)),
              "gpu_pass_seconds": passes, "tf_cpu_seconds": float(np.median(cpu))}
    result["gpu_over_tf"] = result["gpu_seconds"] / result["tf_cpu_seconds"]
    return result


def upscale_file(source, target, model_path, precision="highp"):
    """Upscale one image file x2 with the shaders; greyscale/RGBA/16-bit load as RGB."""
    net, _ = load_net(model_path, precision)
    image = images.load_image(source)
    out = net.run(image)
    images.save_image(target, out)
    return out.shape, sum(net.timings.values())


def add_parser(subparsers):
    p = subparsers.add_parser("upscale", help="x2 upscale an image with the SR shaders on the GPU")
    p.add_argument("input")
    p.add_argument("output", help="PNG file to write")
    p.add_argument("--model", required=True, help=".keras model or saved shader folder")
    p.add_argument("--precision", default="highp", choices=glsl.PRECISIONS)
    p.set_defaults(func=_upscale_cli)

    b = subparsers.add_parser("bench", help="benchmarks (sr: GPU vs TF CPU, compile time)")
    b.add_argument("what", choices=["sr"])
    b.add_argument("--model", help=".keras model (default: random-weight sr_x2)")
    b.add_argument("--size", type=int, default=256)
    b.add_argument("--repeat", type=int, default=5)
    b.set_defaults(func=_bench_cli)


def _upscale_cli(args):
    shape, seconds = upscale_file(args.input, args.output, args.model, args.precision)
    print(f"{args.output}: {shape[1]}x{shape[0]}, {seconds * 1000:.1f} ms on the GPU")
    return 0


def _bench_cli(args):
    model = keras.models.load_model(args.model) if args.model else None
    r = bench_sr(model, args.size, args.repeat)
    s = r["size"]
    print(f"x2 SR, {s}x{s} -> {2 * s}x{2 * s}, {r['programs']} programs")
    print(f"  shader generation       {r['generate_seconds'] * 1000:8.1f} ms")
    print(f"  compile + link (+JIT)   {r['compile_link_seconds'] * 1000:8.1f} ms   (Pi 3 reference: 3500-4000 ms)")
    print(f"  first run               {r['first_run_seconds'] * 1000:8.1f} ms   (includes any shader translation left)")
    print(f"  GPU (llvmpipe) run      {r['gpu_seconds'] * 1000:8.1f} ms   (passes alone {r['gpu_pass_seconds'] * 1000:.1f} ms; Pi 3 reference: ~130 ms)")
    print(f"  TensorFlow CPU run      {r['tf_cpu_seconds'] * 1000:8.1f} ms")
    print(f"  GPU / TF time ratio     {r['gpu_over_tf']:8.2f}")
    return 0
