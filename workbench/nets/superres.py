"""x2 super-resolution: the training recipe, upscaling with the net, and the benchmark table.

Conventions: images are HxWx3 RGB float32 in [0, 1].  The net sees full-range luma
(``Y = 0.299R + 0.587G + 0.114B``); chroma is upsampled bilinearly, as the GPU demux
shader does.  Outputs are rounded to 8 bits, as a saved PNG (or an RGBA8 texture) is.
Evaluation follows docs/design.md, "Evaluation convention": PSNR/SSIM on studio-range Y with ``crop_border = scale``
(the published convention), plus PSNR on full-range Y (the articles' own figures).

Training runs on any Keras 3 back end: TensorFlow (the default) or JAX (``KERAS_BACKEND=jax``,
the ``jax`` extra); :func:`loss_trace` gives the numbers that compare them.
"""
from __future__ import annotations

import math
from pathlib import Path

import keras
import numpy as np

from workbench import references, tables
from workbench.data import datasets, images, metrics
from workbench.files import read_json, write_json, write_text
from workbench.nets import sr_recipes, training
from workbench.nets.layers import Quantize8
from workbench.nets.models import load_model
from workbench.nets.sr_recipes import SRRecipe

SCALE = 2
MULTI_KERNELS = ("bicubic_aa", "bilinear", "bicubic", "lanczos")


def epoch_plan(steps, steps_per_epoch):
    """``(epochs, steps a epoch)`` for ``steps`` training steps in epochs of at most
    ``steps_per_epoch``: as few epochs as that allows, all of one length, so that exactly
    ``steps`` are trained when the epochs divide it (300 -> 2 x 150), else at most
    ``epochs - 1`` more (301 -> 2 x 151)."""
    epochs = math.ceil(steps / max(1, steps_per_epoch))
    return epochs, math.ceil(steps / epochs)


def train(train_images, run_dir, recipe: SRRecipe, verbose=2, model=None):
    """Train an SR net on random LR/HR patches as ``recipe`` says
    (:class:`workbench.nets.sr_recipes.SRRecipe`); resumable (see
    :mod:`workbench.nets.training`).

    ``train_images``: list of RGB images, or their
    :func:`workbench.data.datasets.sr_training_pairs`.  The net: ``model``, a Keras model
    of one's own (any x2 net from an HxWx1 LR luma in [0, 1] to its 2Hx2Wx1 HR luma: a
    builder's output, trained as it is), else the recipe's ``init_model`` or its fresh net.
    Returns ``(model, history)`` and writes ``<run_dir>/model.keras``, the deployable net
    (:func:`workbench.nets.sr_recipes.deployable`: the trained net, an sr_x2 layout collapsed
    to plain layers of the same options); ``config.json`` names the net trained
    (:func:`~workbench.nets.sr_recipes.layout`).
    """
    if model is not None and recipe.init_model:
        raise ValueError(f"superres.train: give model or the recipe's init_model "
                         f"({recipe.init_model}), not both")
    keras.utils.set_random_seed(recipe.seed)
    epochs, steps_per_epoch = epoch_plan(recipe.steps, recipe.steps_per_epoch)
    recipe = recipe.replace(steps_per_epoch=steps_per_epoch)  # the plan, as the run records it
    pairs = datasets.sr_training_pairs(train_images, SCALE, recipe.degradations, recipe.scales)
    teach = load_model(recipe.teacher) if recipe.teacher is not None else None  # its function
    patches = datasets.sr_patches(pairs, patch=recipe.patch, batch=recipe.batch, seed=recipe.seed,
                                  augment=recipe.flips, teacher=teach,
                                  teacher_weight=recipe.teacher_weight)
    net = (model if model is not None else load_model(recipe.init_model) if recipe.init_model
           else recipe.net())
    _require_x2(net, recipe.init_model or "model")
    layout = sr_recipes.layout(net)  # what is trained, whatever made it

    def build():
        return compile_sr(net, recipe.learning_rate, epochs * steps_per_epoch, recipe.loss)

    def read_config(saved):  # (a run from before configs named the net: the recipe's makes it)
        return {"net": layout, **SRRecipe.read_config(saved)}

    model, history = training.fit(build, patches, run_dir, epochs, steps_per_epoch, verbose,
                                  config={**recipe.to_dict(), "train_images": pairs.sources,
                                          "net": layout},
                                  read_config=read_config)
    model = sr_recipes.deployable(model)
    training.save_model(model, Path(run_dir) / "model.keras")
    return model, history


def _require_x2(model, name):
    """One line naming ``name`` unless ``model`` maps an HxWx1 luma to 2Hx2Wx1."""
    h, w = (side or 8 for side in tuple(model.input_shape)[1:3])
    try:
        shape = tuple(keras.ops.shape(model(np.zeros((1, h, w, 1), np.float32))))
    except Exception as err:  # a net that cannot take an HxWx1 input at all
        shape = f"no output ({type(err).__name__}: {str(err).splitlines()[0][:80]})"
    if shape != (1, 2 * h, 2 * w, 1):
        raise ValueError(f"{name}: a {h}x{w}x1 LR luma gives {shape}; an x2 SR net must give "
                         f"{(1, 2 * h, 2 * w, 1)}")


def compile_sr(model, learning_rate, decay_steps, loss="l1"):
    """Compile ``model`` as :func:`train` does: Adam, cosine decay of ``learning_rate`` to 1 %
    over ``decay_steps``, loss one of :data:`sr_recipes.LOSSES`."""
    schedule = keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps, alpha=0.01)
    model.compile(optimizer=keras.optimizers.Adam(schedule), loss=sr_recipes.LOSSES[loss])
    return model


# --- the same training on Keras' back ends ------------------------------------------------------

# The recipe of models/sr_x2_reference's first training (its card's history) as the back ends'
# loss traces train it: its net and optimizer, the cosine decay over 100,000 steps.
TRACE_RECIPE = SRRecipe(steps=100_000, init="identity", expand=256, qat=True,
                        learning_rate=5e-4)


def synthetic_batches(count, batch=16, patch=48, seed=0, scale=SCALE):
    """``count`` fixed ``(lr, hr)`` batches, shapes (batch, patch, patch, 1) and (batch,
    scale * patch, scale * patch, 1), float32: HR is Gaussian-blurred noise (sigma 1.5 HR
    pixels) stretched to [0, 1] per patch, LR its ``scale`` x ``scale`` means.  The same for a
    seed on every machine, no data set needed."""
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(seed)
    size = scale * patch
    hr = gaussian_filter(rng.random((count * batch, size, size)), (0, 1.5, 1.5), mode="wrap")
    low, high = hr.min(axis=(1, 2), keepdims=True), hr.max(axis=(1, 2), keepdims=True)
    hr = ((hr - low) / (high - low)).astype(np.float32)
    lr = hr.reshape(-1, patch, scale, patch, scale).mean(axis=(2, 4), dtype=np.float32)
    return [(lr[i:i + batch, ..., None], hr[i:i + batch, ..., None])
            for i in range(0, count * batch, batch)]


def trace_net(weights, recipe=TRACE_RECIPE, seed=0):
    """The recipe's net, compiled as :func:`train` compiles it (cosine decay over
    ``recipe.steps``), with the weights of the file ``weights`` (``.weights.h5``, readable by
    every back end); when that file does not exist the net is initialised from ``seed`` by the
    running back end and its weights written there."""
    keras.utils.set_random_seed(seed)
    model = recipe.net()
    if Path(weights).exists():
        model.load_weights(weights)
    else:
        model.save_weights(weights)
    return compile_sr(model, recipe.learning_rate, recipe.steps, recipe.loss)


def loss_trace(model, batches):
    """The training loss of each step of ``model`` (compiled), one step per batch of
    ``batches`` (``train_on_batch``: the loss of the batch before that step's update)."""
    return [float(model.train_on_batch(x, y)) for x, y in batches]


def load_models(paths: dict):
    """``{label: path}`` -> ``{label: model}``; a missing file is named, with the cure."""
    missing = [f"{label}: {path}" for label, path in paths.items() if not Path(path).exists()]
    if missing:
        raise FileNotFoundError("trained model not found (" + "; ".join(missing) +
                                "); run notebooks/sr_train.ipynb first, or pass `models`")
    return {label: load_model(path) for label, path in paths.items()}


def upscale(model, lr_rgb, scale=SCALE, rounded=True):
    """Upscale an RGB image with an SR net on luma and bilinear chroma; 8-bit output, or
    float32 in [0, 1] without ``rounded``."""
    luma = model(net_input(lr_rgb)[None], training=False)
    return with_chroma(lr_rgb, np.asarray(luma, np.float32)[0], scale, rounded)


def net_input(lr_rgb):
    """What the SR net sees of an RGB image: its full-range luma, HxWx1 float32."""
    return images.rgb_to_ycbcr(lr_rgb, range="full")[..., :1].astype(np.float32)


def with_chroma(lr_rgb, luma, scale=SCALE, rounded=True):
    """The upscaled RGB image from the net's luma output (HxWx1, ``scale`` times larger) and
    the low-resolution image's chroma upsampled bilinearly; 8-bit output, or float32 in
    [0, 1] without ``rounded``."""
    chroma = images.upscale_bilinear(images.rgb_to_ycbcr(lr_rgb, range="full")[:, :, 1:], scale)
    rgb = images.ycbcr_to_rgb(np.concatenate([luma, chroma], axis=-1), range="full")
    return images.round_8bit(rgb) if rounded else np.clip(rgb, 0, 1).astype(np.float32)


def figure_images(sr_set, wanted=()):
    """The names of ``sr_set``'s images to show in figures: those in ``wanted``, or else
    the set's first image."""
    names = [n for n, _ in sr_set.images]
    return [n for n in names if n in (wanted or ())] or names[:1]


def evaluate(models: dict, sr_sets, kernels=MULTI_KERNELS, scale=SCALE, keep_images=None,
             bicubic=True):
    """PSNR/SSIM of bicubic (unless ``bicubic=False``) and of each net, for every image, set
    and degradation kernel.

    ``models``: label -> Keras model, or a function from the low-resolution RGB image to the
    8-bit upscaled one (e.g. an ES 2.0 net's ``run``: the GPU output).  Returns ``(records,
    kept)``: one dict per (set, image, kernel, method) with ``psnr_y_studio``,
    ``ssim_y_studio`` and ``psnr_y_full``; ``kept[image][method]`` holds the outputs for the
    images named in ``keep_images`` (or, where a set has none of them, its first image)
    under the first kernel, for figures.
    """
    records, kept = [], {}
    for sr_set in sr_sets:
        keep = figure_images(sr_set, keep_images)
        for image_name, hr in sr_set.images:
            hr = images.modcrop(hr, scale)
            for kernel in kernels:
                lr = images.degrade(hr, scale, kernel)
                outputs = {"bicubic": images.upscale_bicubic(lr, scale)} if bicubic else {}
                outputs.update({label: upscale(m, lr, scale) if isinstance(m, keras.Model)
                                else m(lr) for label, m in models.items()})
                for method, out in outputs.items():
                    records.append({
                        "set": sr_set.name, "image": image_name, "kernel": kernel,
                        "method": method,
                        "psnr_y_studio": metrics.psnr(hr, out, scale, "studio"),
                        "ssim_y_studio": metrics.ssim(hr, out, scale, "studio"),
                        "psnr_y_full": metrics.psnr(hr, out, scale, "full"),
                    })
                if image_name in keep and kernel == kernels[0]:
                    kept[image_name] = {"ground truth": hr, **outputs}
    return records, kept


METRICS = ("psnr_y_studio", "ssim_y_studio", "psnr_y_full")


def summarize(records):
    """Mean of each metric per (set, kernel, method), in first-seen order."""
    groups: dict[tuple, list] = {}
    for r in records:
        groups.setdefault((r["set"], r["kernel"], r["method"]), []).append(r)
    return [{"set": s, "kernel": k, "method": m, "images": len(rs),
             **{key: float(np.mean([r[key] for r in rs])) for key in METRICS}}
            for (s, k, m), rs in groups.items()]


def psnr_table(model, sr_sets, quantize=None):
    """``{set name: PSNR}`` (studio Y, crop 2, ``bicubic_aa``) of ``collapse(model)``;
    with ``quantize`` (default: the model has Quantize8 layers) activations are rounded to 8
    bits at evaluation."""
    if quantize is None:
        quantize = any(isinstance(l, Quantize8) for l in model.layers)
    records, _ = evaluate({"net": sr_recipes.collapse(model, quantize)}, sr_sets,
                                   kernels=("bicubic_aa",))
    return {r["set"]: r["psnr_y_studio"] for r in summarize(records)
            if r["method"] == "net"}


def verdict(summary, baseline="bicubic", metric="psnr_y_studio"):
    """One line per (set, kernel, net): its gain over ``baseline`` in dB, and whether it wins."""
    base = {(r["set"], r["kernel"]): r[metric] for r in summary if r["method"] == baseline}
    lines = []
    for r in summary:
        if r["method"] != baseline:
            gain = r[metric] - base[(r["set"], r["kernel"])]
            lines.append(f"{r['set']:>8} {r['kernel']:>10} {r['method']:>18}: "
                         f"{gain:+.2f} dB vs {baseline} ({'beats' if gain > 0 else 'LOSES TO'} it)")
    return "\n".join(lines)


def markdown_table(summary):
    """One row per (set, kernel); for each method PSNR / SSIM (studio Y) and PSNR (full Y)."""
    methods = list(dict.fromkeys(r["method"] for r in summary))
    rows = {}
    for r in summary:
        row = rows.setdefault((r["set"], r["kernel"]), {"set": r["set"], "kernel": r["kernel"]})
        row.update({f"{r['method']}/{key}": f"{r[key]:.4f}" if key.startswith("ssim")
                    else f"{r[key]:.2f}" for key in METRICS})
    headers = {"psnr_y_studio": "PSNR Y601 dB", "ssim_y_studio": "SSIM Y601",
               "psnr_y_full": "PSNR Yfull dB"}
    columns = {"set": "set", "kernel": "kernel"}
    columns.update({f"{m}/{key}": f"{m}: {h}" for m in methods for key, h in headers.items()})
    return tables.markdown(list(rows.values()), columns)


# --- results and the report --------------------------------------------------------------------

RESULT = "sr_eval.json"
NOTEBOOK = "sr_eval"


def save_results(directory, models: dict, sr_sets, summary, records):
    """``sr_eval.json`` (every record and the summary) and ``sr_eval.md`` (the table)."""
    directory = Path(directory)
    write_json(directory / RESULT, {"models": {k: str(v) for k, v in models.items()},
                                    "sets": [s.name for s in sr_sets],
                                    "summary": summary, "records": records})
    write_text(directory / "sr_eval.md", markdown_table(summary) + "\n")


def report_section(directory) -> str | None:
    """PSNR/SSIM per set, kernel and method, with the published values beside ours."""
    results = read_json(Path(directory) / RESULT)
    if not results:
        return None
    rows = []
    for r in results["summary"]:
        published = references.SR_PUBLISHED.get(r["method"], {}).get(r["set"]) \
            if r["kernel"] == "bicubic_aa" else None
        rows.append({"set": r["set"], "kernel": r["kernel"], "method": r["method"],
                     "PSNR Y601": r["psnr_y_studio"], "SSIM Y601": f"{r['ssim_y_studio']:.4f}",
                     "PSNR Yfull": r["psnr_y_full"], "published": published or ""})
    published = ", ".join(f"{name} ({p['parameters']:,} parameters) {p['Set5']:.2f} / "
                          f"{p['Set14']:.2f}" for name, p in references.SR_PUBLISHED.items())
    return (tables.markdown(rows) + f"\n\nPublished x2 `bicubic_aa` Set5 / Set14 dB: {published}.")



