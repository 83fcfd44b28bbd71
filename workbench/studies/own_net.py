"""Your own net, end to end (``notebooks/my_net.ipynb``): built from a builder or a file,
trained as it is, deployed with the reference check, evaluated through the GPU beside the
shipped reference net, through a target's own compiler with the Pi's predicted time, and
written as a web page and a bundle; every file in the run's own folder.

Two kinds, told by the model's output (:func:`kind_of`): ``"sr"``, an x2 net (HxWx1 LR luma
in [0, 1] -> 2Hx2Wx1 HR luma; Set5 / Set14, PSNR on Y of BT.601 studio range with a 2-pixel
crop, the papers' "Y601", and on full-range Y, the reference article's "Yfull"), and
``"classifier"`` (HxWx3 RGB in [0, 1] -> class scores; top-1 on a test split).
"""
from __future__ import annotations

import functools
import importlib
import math
from pathlib import Path

from workbench import es2, figures, tables
from workbench.data import datasets
from workbench.figures import save_figure
from workbench.files import write_json
from workbench.nets import classify, named, superres
from workbench.nets.model_files import load_model
from workbench.nets.sr_recipes import SRRecipe

REFERENCES = {"sr": named.reference_sr, "classifier": named.reference_cifar10}


def built(builder, args=None):
    """The Keras model ``builder(**args)``; ``builder`` a callable or ``"module:function"``
    text (e.g. ``"workbench.nets.sr_recipes:sr_x2_recipe"``)."""
    if isinstance(builder, str):
        module, _, name = builder.partition(":")
        try:
            builder = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError) as err:
            raise ValueError(f"builder {module}:{name}: not found ({err}); give "
                             "'module:function', e.g. 'workbench.nets.models:sr_x2'") from None
    try:
        return builder(**(args or {}))
    except TypeError as err:  # an argument the builder has not
        raise ValueError(f"builder {getattr(builder, '__name__', builder)}: {err}") from None


def kind_of(model) -> str:
    """``"sr"`` (an image out) or ``"classifier"`` (a vector out); else one line naming it."""
    rank = len(model.output_shape)
    if rank == 4:
        return "sr"
    if rank == 2:
        return "classifier"
    raise ValueError(f"model {model.name!r}: its output {model.output_shape} is neither an "
                     "image (an x2 SR net) nor a vector of class scores")


def train(model, run_dir, steps, data=None, batch=16, patch=48, limit=None, seed=0):
    """Train ``model`` as it is for ``steps`` steps in ``run_dir`` (resumable) and return the
    deployable net it wrote (``model.keras``).  An SR net: on the SR training photos
    (``datasets.sr_images("train", data)``, ``limit`` of them), LR patches of ``patch``
    pixels; a classifier: on CIFAR-10 (or the image-folder dataset ``data``), ``limit``
    images a class, epochs of at most 100 steps."""
    if kind_of(model) == "sr":
        photos = datasets.sr_images("train", data, limit=limit)
        recipe = SRRecipe(steps=steps, steps_per_epoch=min(steps, 250), batch=batch, patch=patch,
                          seed=seed)
        superres.train(photos.images, run_dir, recipe, model=model)
    else:
        per_epoch = min(steps, 100)
        recipe = classify.ClassifierRecipe(data=data, input_size=model.input_shape[1],
                                           epochs=math.ceil(steps / per_epoch),
                                           steps_per_epoch=per_epoch, batch=batch, limit=limit,
                                           val_limit=limit, seed=seed, keep_best=1)
        classify.train(run_dir, recipe, model=model)
        classify.finish(run_dir, export="last")
    return load_model(Path(run_dir) / "model.keras")


def evaluate(model, net, kind, out, data=None, limit=None, sets=("Set5", "Set14"),
             reference=None):
    """Your net through the GPU (``net``, its deploy) beside the shipped reference net
    (``reference``: a path, default :data:`REFERENCES`' of the kind) and, for SR, bicubic.
    SR: ``(summary rows, markdown)`` of :func:`superres.summarize` (both PSNR conventions),
    and the figure ``my_net_crops`` (PNG, SVG) in ``out``: each set's first image; a
    classifier: rows of top-1 (TF and GPU) and agreement on the test split, ``limit``
    images a class."""
    from workbench.studies import deploy

    ref_model = load_model(reference or REFERENCES[kind]())
    ref_net = es2.compile(ref_model)
    if kind == "sr":
        sr_sets = [datasets.sr_images(name, data, limit=limit) for name in sets]
        nets = {"your net (GPU)": net.run, "reference (GPU)": ref_net.run}
        records, kept = superres.evaluate(nets, sr_sets, kernels=("bicubic_aa",))
        save_figure(figures.crops_side_by_side(kept), "my_net_crops", out)
        summary = superres.summarize(records)
        return summary, superres.markdown_table(summary) + "\n\n" + superres.verdict(summary)
    root = data or datasets.classification_root("cifar10")
    split = functools.cache(lambda size: datasets.classification_arrays(root, "test", size, limit))
    rows = []
    for label, (m, n) in {"your net": (model, net), "reference": (ref_model, ref_net)}.items():
        images, labels, _ = split(m.input_shape[1])  # (read once a size)
        result = deploy.compare_classifier(m, n, images, labels, emulate=False)
        rows.append({"net": label, "images": result["images"],
                     "top-1 TF %": 100 * result["top1_TF"],
                     "top-1 GPU %": 100 * result["top1_GPU"],
                     "GPU top-1 = TF top-1 %": 100 * result["gpu_top1_equals_tf"],
                     "GPU ms an image (steady)": 1000 * result["gpu_seconds_per_image"]})
    return rows, tables.markdown(rows, digits=2)


def target_compilers(model, label, drivers, out, options=None) -> dict | None:
    """Every program of ``model`` through each of ``drivers`` (``drivers --model``'s table,
    the Pi's predicted range: :mod:`workbench.studies.compilers`) into ``out``; None (and the
    reason printed) where the drivers are not built."""
    from workbench.gl import drivers as gl_drivers
    from workbench.studies import compilers

    why = gl_drivers.available()
    if why or not drivers:
        print(f"target compilers skipped: {why or 'no driver_targets'}")
        return None
    results = compilers.compile_nets({label: (model, options or {})}, drivers)
    side = compilers.pi_side(model)
    return compilers.save_results(out, results, pi_sizes={label: ("model", side)} if side else {})


def publish(net, model, out) -> dict:
    """The net as a web page (``page/``, with its self-check) and as a bundle that replays it
    on a device (``bundle/``) in ``out``; ``{"page": index.html, "bundle": folder}``."""
    from workbench import web
    from workbench.es2 import bundle

    return {"page": str(web.export(net, Path(out) / "page", check_model=model)),
            "bundle": str(bundle.bundle(net, model, Path(out) / "bundle"))}


def save(out, **results) -> Path:
    """``my_net.json`` in ``out``: what the notebook found."""
    path = Path(out) / "my_net.json"
    write_json(path, results)
    return path
