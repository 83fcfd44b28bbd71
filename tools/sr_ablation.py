"""Run SR recipe rows at one training budget; append one JSON line per (row, seed) to a file.

Usage: python tools/sr_ablation.py OUT.jsonl RUNS_DIR STEPS SEEDS ROW [ROW ...]
ROW: name=option:value,... e.g. "sesr=expand:256"; rows already in OUT are skipped.
Options: the fields of ``sr_recipes.SRRecipe``, lists with dashes (``widths:32-16-16-12``,
``scales:1-0.9-0.8`` or ``scales:fsrcnn``, ``degradations:bilinear-bicubic``), and ``data:NAME``,
the SR training set under the data root's ``sr/`` (default ``train``; ``train291`` is T91 +
BSD200).
"""
import json
import sys
import time
from pathlib import Path

import workbench  # noqa: F401  (TF settings first)
from workbench.data import datasets
from workbench.nets import superres
from workbench.nets.sr_recipes import SRRecipe


def parse(row):
    name, _, opts = row.partition("=")
    out = {}
    for item in filter(None, opts.split(",")):
        key, value = item.split(":")
        out[key] = _value(value)
    if "widths" in out:
        out["widths"] = tuple(int(w) for w in str(out["widths"]).split("-"))
    if "degradations" in out:
        out["degradations"] = tuple(out["degradations"].split("-"))
    if "scales" in out:
        out["scales"] = (datasets.FSRCNN_SCALES if out["scales"] == "fsrcnn" else
                         tuple(float(f) for f in str(out["scales"]).split("-")))
    return name, out


def _value(text):
    """An option's value: an int, a float, true/false, else the text (``32-16-16-12``)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def main(out, runs, steps, seeds, *rows):
    out, steps = Path(out), int(steps)
    done = {(r["row"], r["seed"], r["steps"]) for r in map(json.loads, out.read_text().splitlines())} \
        if out.exists() else set()
    data = {}
    sets = [datasets.sr_images(n) for n in ("Set5", "Set14")]
    for seed in map(int, seeds.split(",")):
        for row in rows:
            name, opts = parse(row)
            if (name, seed, steps) in done:
                continue
            start = time.time()
            source = opts.pop("data", "train")
            recipe = SRRecipe.from_dict({**opts, "steps": steps, "seed": seed})
            key = (source, recipe.degradations, recipe.scales)  # pairs made once per data set
            if key not in data:
                images = [im for _, im in datasets.sr_images(source).images]
                data[key] = datasets.sr_training_pairs(images, superres.SCALE, *key[1:])
            model, hist = superres.train(data[key], Path(runs) / f"{name}-s{seed}-{steps}",
                                         recipe, verbose=0)
            minutes = hist.get("seconds", time.time() - start) / 60
            rec = {"row": name, "seed": seed, "steps": steps, "data": source, "options": opts,
                   "minutes": round(minutes, 2), "loss": hist["loss"][-1]}
            rec["float"] = superres.psnr_table(model, sets, quantize=False)
            rec["8bit"] = superres.psnr_table(model, sets, quantize=True)
            print(json.dumps(rec), flush=True)
            with out.open("a") as f:
                f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
