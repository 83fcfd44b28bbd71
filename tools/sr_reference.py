"""Train the reference x2 SR checkpoint with a recipe, or export one from a (partial) run.

  python tools/sr_reference.py train RUN_DIR STEPS [option:value ...]   (resumable)

Options: the fields of ``sr_recipes.SRRecipe`` (``widths:32-16-16-12`` for another member of
the family) and ``data:NAME``, the SR training set under the data root's ``sr/`` (default
``train``; ``train291`` is T91 + BSD200).
  python tools/sr_reference.py export RUN_DIR [OUT_STEM]                (from checkpoint.keras)
  python tools/sr_reference.py anchor CHECKPOINT OUT.keras [anchor:nearest anchor_scale:0.75
                                                             anchor_storage:linear data:NAME]

Anchor writes a trained net with an anchor residual (another one, or another storage law of its
own), its L5 refitted: the ``init_model:`` of a fine-tune with that anchor.

Export writes ``OUT_STEM.keras`` (the collapsed, plain sr_x2-shaped net, and its anchor residual
if it has one), ``OUT_STEM.json`` and
``OUT_STEM.md`` (the card); default OUT_STEM: models/sr_x2_reference.  A card already at
OUT_STEM moves into the new card's history: export to another stem first and replace a
reference only by a better checkpoint.
"""
import json
import platform
import sys
import time
from pathlib import Path

import keras

import workbench  # noqa: F401  (TF settings first)
from workbench.data import datasets
from workbench.nets import sr_recipes, superres, training
from workbench.nets.sr_recipes import SRRecipe
from workbench.run.report import machine
from workbench.studies import sr_ablation

sys.path.insert(0, str(Path(__file__).parent))
from sr_ablation import parse  # noqa: E402


# What a run trained on, by its count of training images (the run's config keeps the count).
DATA = {80: "80 JPEG photos of sr/train",
        291: "sr/train291: T91 (91) + BSD200 (200), lossless PNG"}


def train(run_dir, steps, *opts):
    _, options = parse("ref=" + ",".join(opts))
    images = [im for _, im in datasets.sr_images(options.pop("data", "train")).images]
    superres.train(images, run_dir, SRRecipe.from_dict({"steps": int(steps), **options}))


def anchor(checkpoint, out, *opts):
    """A trained run's checkpoint -> ``out``, the same net with an anchor residual
    (``anchor:nearest``, ``anchor_scale:0.75``, ``anchor_storage:linear``), L5 refitted on
    every third image of ``data:`` (:func:`workbench.nets.sr_recipes.with_anchor`): the
    ``init_model`` of a fine-tune."""
    _, options = parse("a=" + ",".join(opts))
    images = datasets.sr_images(options.pop("data", "train")).images[::3]
    lumas = [lr[0][..., None] for lr in datasets.sr_training_pairs(images, superres.SCALE).lr]
    model = sr_recipes.with_anchor(keras.models.load_model(checkpoint), lumas, **options)
    training.save_model(model, Path(out))
    sets = [datasets.sr_images(n) for n in ("Set5", "Set14")]
    print(json.dumps({"8-bit": superres.psnr_table(model, sets, quantize=True)}))


def _text(value):
    """An option's value as the command line takes it (lists with dashes: ``scales:1.0-0.9``)."""
    return "-".join(map(str, value)) if isinstance(value, list) else value


# What a replaced card keeps in the new card's history.
HISTORY_KEYS = ("recipe", "steps_done", "training_minutes", "data", "machine",
                "psnr_y_studio_crop2_bicubic_aa", "exported")


def history_of(card_path):
    """The history for a new card at ``card_path``: the old card's history, then the old card
    itself (its numbers and recipe); empty when there is none."""
    if not card_path.exists():
        return []
    old = json.loads(card_path.read_text())
    return old.get("history", []) + [{k: old[k] for k in HISTORY_KEYS if k in old}]


def history_markdown(history):
    """The card's History section (empty text without history)."""
    if not history:
        return ""
    rows = "\n".join(
        f"| {h['exported']} | {h['data']} | {h['steps_done']:,} | {h['training_minutes']} | "
        + " | ".join(f"{h['psnr_y_studio_crop2_bicubic_aa']['GPU (ES 2.0, llvmpipe)'][n]:.2f}"
                     for n in ("Set5", "Set14")) + " |" for h in history)
    return f"""
## History

Replaced only by a better checkpoint; the ones before:

| exported | data | steps | training min | GPU Set5 | GPU Set14 |
|---|---|---:|---:|---:|---:|
{rows}
"""


def export(run_dir, stem="models/sr_x2_reference"):
    run_dir, stem = Path(run_dir), Path(stem)
    config = json.loads((run_dir / training.CONFIG).read_text())
    recipe = SRRecipe.from_dict(config)
    history = json.loads((run_dir / training.HISTORY).read_text())
    model = keras.models.load_model(run_dir / training.CHECKPOINT)
    deploy = sr_recipes.collapse(model)
    stem.parent.mkdir(parents=True, exist_ok=True)
    training.save_model(deploy, stem.with_suffix(".keras"))
    sets = [datasets.sr_images(n) for n in ("Set5", "Set14")]
    steps_done = len(history["loss"]) * recipe.steps_per_epoch
    anchor, law = recipe.anchor, recipe.anchor_storage
    net = "sr_x2 (workbench.nets.models)" + (
        f" + AnchorResidual({anchor}, {recipe.anchor_scale}"
        f"{', ' + repr(law) if law != 'linear' else ''}) (workbench.nets.layers)"
        if anchor else "")
    card = {
        "model": stem.with_suffix(".keras").name, "net": net,
        "deployed_parameters": deploy.count_params(),
        "widths": "-".join(str(deploy.get_layer(f"L{i}").filters) for i in range(1, 5)),
        "recipe": {"function": "workbench.nets.superres.train", **recipe.to_dict(),
                   "optimizer": "Adam, cosine decay to 1 %"},
        "steps_done": steps_done, "finished": steps_done >= recipe.steps,
        "training_minutes": round(history.get("seconds", 0) / 60, 1),
        "data": DATA.get(config["train_images"], f"{config['train_images']} images") +
                " (WORKBENCH_DATA), bicubic_aa LR",
        "machine": f"{machine()} (shared with other work), TF CPU, Python "
                   f"{platform.python_version()}",
        "psnr_y_studio_crop2_bicubic_aa": {
            "8-bit activations (as deployed)": superres.psnr_table(model, sets, quantize=True),
            "float activations": superres.psnr_table(model, sets, quantize=False),
            "GPU (ES 2.0, llvmpipe)": {name: r["psnr"] for name, r in
                                       sr_ablation.gpu_psnr(deploy, sets).items()}},
        "reproduce": (f"WORKBENCH_DATA=... PYTHONPATH=. python tools/sr_reference.py train {run_dir} "
                      f"{recipe.steps} "
                      + ("data:train291 " if config["train_images"] == 291 else "")
                      + " ".join(f"{k}:{_text(v)}" for k, v in recipe.changed().items()
                                 if k != "steps") +
                      f"; python tools/sr_reference.py export {run_dir}"),
        "exported": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    card["history"] = history_of(stem.with_suffix(".json"))
    stem.with_suffix(".json").write_text(json.dumps(card, indent=1) + "\n")
    psnr = card["psnr_y_studio_crop2_bicubic_aa"]
    anchor_text = (f"; its sub-pixels correct the {anchor} x2 upsampling of the input luma, "
                   f"`clip(anchor + {recipe.anchor_scale} (q - 0.5), 0, 1)`, which the SR "
                   "demux adds on the GPU from the chroma's own fetches" if anchor else "")
    if law != "linear":
        anchor_text += (f"; q is stored in its 8-bit texture by the {law} law "
                        "(workbench.nets.storage), finer for small corrections")
    rows = "\n".join(f"| {k} | {v['Set5']:.2f} | {v['Set14']:.2f} |" for k, v in psnr.items())
    stem.with_suffix(".md").write_text(f"""# {stem.name}: x2 SR reference checkpoint

Deployable net: `{card['model']}`, the plain `workbench.nets.models.sr_x2` layers
({card['deployed_parameters']:,} parameters, widths {card['widths']}){anchor_text}.
Recipe: `{json.dumps(card['recipe'])}`.
Steps: {steps_done:,} of {recipe.steps:,} ({'finished' if card['finished'] else 'INTERMEDIATE'}),
{card['training_minutes']} training minutes on {card['machine']}.
Data: {card['data']}.

PSNR (dB, Y of BT.601 studio range, crop_border 2, antialiased-bicubic LR), from TF and from
the ES 2.0 shaders on Mesa llvmpipe:

| output | Set5 | Set14 |
|---|---|---|
{rows}
| bicubic | 33.68 | 30.33 |

Reproduce: `{card['reproduce']}`
""" + history_markdown(card["history"]))
    print(json.dumps(card, indent=1))


if __name__ == "__main__":
    {"train": train, "export": export, "anchor": anchor}[sys.argv[1]](*sys.argv[2:])
