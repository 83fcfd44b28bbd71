"""The SR recipe ablation: the x2 net trained at one budget with each recipe row, measured on
the GPU output of its ES 2.0 shaders.

Each row adds one option of :mod:`workbench.nets.sr_recipes` to the one before (the order of
:data:`ROWS`); every row deploys the same 7,340-parameter net, so the cost per pixel is the
same unless a row changes the deployed net.  PSNR/SSIM are on Y of BT.601 studio range,
``crop_border = 2``, low resolution by ``bicubic_aa`` (docs/design.md, "Evaluation
convention"), computed on the GPU's 8-bit output.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from workbench import es2, references, tables
from workbench.data import datasets
from workbench.es2 import plan
from workbench.files import read_json, write_json
from workbench.ir import cost
from workbench.nets import superres
from workbench.nets.sr_recipes import SRRecipe

# (row, the options it trains with); each adds one thing to the row before it
ROWS = [
    ("base", {"init": "he"}),
    ("+ identity init", {"init": "identity"}),
    ("+ collapsible blocks", {"init": "identity", "expand": 256, "learning_rate": 5e-4}),
    ("+ QAT", {"init": "identity", "expand": 256, "learning_rate": 5e-4, "qat": True}),
]
RESULT, NOTEBOOK = "sr_ablation.json", "sr_recipes"


def gpu_psnr(model, sr_sets, kernel="bicubic_aa", scale=superres.SCALE, net=None):
    """``{set: {"psnr": mean dB, "ssim": mean}}`` of the net's ES 2.0 shaders' output
    (``net``: the model already compiled)."""
    net = net or es2.compile(model)
    records, _ = superres.evaluate({"gpu": net.run}, sr_sets, (kernel,), scale, bicubic=False)
    return {r["set"]: {"psnr": r["psnr_y_studio"], "ssim": r["ssim_y_studio"]}
            for r in superres.summarize(records) if r["method"] == "gpu"}


def per_pixel_cost(net):
    """Multiply-adds and texel fetches per output pixel of a compiled ES 2.0 net."""
    total = cost.total(plan.cost(net.graph, (64, 64)).values())
    pixels = (2 * 64) ** 2
    return {"multiply_adds_per_pixel": total.multiply_adds / pixels,
            "texel_fetches_per_pixel": total.texel_fetches / pixels}


def run(train_images, sr_sets, out_dir, recipe: SRRecipe, seeds=(0,), rows=ROWS):
    """Train every row (``recipe`` with the row's options) with each seed (resumable in
    ``out_dir``), then measure it on the GPU; one record per (row, seed)."""
    records, pairs = [], {}  # training pairs by their kernels and scales, made once
    for name, options in rows:
        row = recipe.replace(**options)
        data = (row.degradations, row.scales)
        if data not in pairs:
            pairs[data] = datasets.sr_training_pairs(train_images, superres.SCALE, *data)
        for seed in seeds:
            start = time.time()
            run_dir = Path(out_dir) / f"{name.strip('+ ').replace(' ', '_')}-s{seed}"
            model, history = superres.train(pairs[data], run_dir, row.replace(seed=seed),
                                            verbose=0)
            net = es2.compile(model)
            records.append({"row": name, "seed": seed, "steps": recipe.steps, "options": options,
                            "minutes": history.get("seconds", time.time() - start) / 60,
                            "loss": history["loss"][-1], "gpu": gpu_psnr(model, sr_sets, net=net),
                            **per_pixel_cost(net)})
    return records


def summarize(records) -> list[dict]:
    """One row per recipe row: mean ± spread over seeds of the GPU PSNR of each set."""
    out = []
    for name in dict.fromkeys(r["row"] for r in records):
        rs = [r for r in records if r["row"] == name]
        row = {"row": name, "seeds": len(rs), "steps": rs[0]["steps"],
               "minutes": float(np.mean([r["minutes"] for r in rs]))}
        for s in rs[0]["gpu"]:
            values = [r["gpu"][s]["psnr"] for r in rs]
            row[f"{s} PSNR"] = float(np.mean(values))
            row[f"{s} spread"] = float(np.std(values, ddof=1)) if len(rs) > 1 else None
            row[f"{s} SSIM"] = float(np.mean([r["gpu"][s]["ssim"] for r in rs]))
        row["MACs/pixel"] = rs[0]["multiply_adds_per_pixel"]
        row["fetches/pixel"] = rs[0]["texel_fetches_per_pixel"]
        out.append(row)
    return out


def bicubic_psnr(sr_sets, kernel="bicubic_aa") -> dict[str, float]:
    """``{set: mean PSNR of bicubic upscaling}`` (:func:`workbench.nets.superres.evaluate`)."""
    records, _ = superres.evaluate({}, sr_sets, kernels=(kernel,))
    return {r["set"]: r["psnr_y_studio"] for r in superres.summarize(records)}


# The seed-to-seed spread of one row's Set5 PSNR at short budgets (2,000-4,000 steps; docs/
# sr_recipes_log.md): with one seed per row, a smaller gap is not read as a gain or a loss.
ONE_SEED_NOISE_DB = 0.3


def _noise(rows, s):
    """The gap two rows must exceed on set ``s``: the sum of their seed spreads, or
    :data:`ONE_SEED_NOISE_DB` when a row has one seed."""
    spreads = [r[f"{s} spread"] for r in rows]
    return ONE_SEED_NOISE_DB if None in spreads else sum(spreads)


def verdict(summary, bicubic: dict) -> str:
    """What the ablation shows: each row's gap to the row before, read against the seed spread
    (:func:`_noise`); the rows that lose to bicubic (``{set: dB}``); the best rows (those no
    other row beats beyond the noise on any set) against bicubic and the published tiny nets."""
    lines = []
    for before, after in zip(summary, summary[1:]):
        calls = []
        for s in bicubic:
            gap = after[f"{s} PSNR"] - before[f"{s} PSNR"]
            told = "a gain" if gap > 0 else "a loss"
            calls.append(f"{s} {gap:+.2f} dB ({told if abs(gap) > _noise((before, after), s) else 'within the noise'})")
        lines.append(f"{after['row']}: " + ", ".join(calls))
    losing = [r["row"] for r in summary if any(r[f"{s} PSNR"] < b for s, b in bicubic.items())]
    if losing:
        lines.append(f"Below bicubic at this budget: {', '.join(losing)}.")
    best = [r for r in summary if not any(
        o[f"{s} PSNR"] - r[f"{s} PSNR"] > _noise((o, r), s) for o in summary for s in bicubic)]
    top = max(best, key=lambda r: sum(r[f"{s} PSNR"] for s in bicubic))
    gains = ", ".join(f"{s} {top[f'{s} PSNR']:.2f} dB ({top[f'{s} PSNR'] - b:+.2f} vs bicubic)"
                      for s, b in bicubic.items())
    tied = "" if len(best) == 1 else (
        f" ({', '.join(r['row'] for r in best)} are not told apart at this budget)")
    published = ", ".join(f"{n} {p['Set5']:.2f} / {p['Set14']:.2f}"
                          for n, p in references.SR_PUBLISHED.items() if n != "bicubic")
    noise = (f" One seed per row: gaps under {ONE_SEED_NOISE_DB} dB, the seed spread measured at "
             "2,000-4,000 steps, are read as noise." if summary[0]["seeds"] == 1 else
             " Gaps are read against the sum of the two rows' seed spreads.")
    return ("\n".join(lines) + f"\nBest: {top['row']}{tied}: {gains}. Published (Set5 / Set14): "
            f"{published}." + noise)


def save_results(directory, records, summary, verdict_text, parameters):
    write_json(Path(directory) / RESULT, {"parameters": parameters, "records": records,
                                          "summary": summary, "verdict": verdict_text})


def report_section(directory) -> str | None:
    results = read_json(Path(directory) / RESULT)
    if not results:
        return None
    p = results["parameters"]
    return (tables.markdown(results["summary"], digits={"fetches/pixel": 0}) + f"\n\n{p['steps']:,} steps per row, "
            f"seeds {p['seeds']}, PSNR/SSIM of the GPU output (ES 2.0 shaders).\n\n"
            + results["verdict"].replace("\n", "  \n"))


def figure(records):
    """GPU PSNR on each set against training minutes, one point per (row, seed)."""
    from workbench.figures import plt

    sets = list(records[0]["gpu"])
    fig, axes = plt.subplots(1, len(sets), figsize=(5 * len(sets), 3.6), squeeze=False)
    for ax, s in zip(axes[0], sets):
        for name in dict.fromkeys(r["row"] for r in records):
            rs = [r for r in records if r["row"] == name]
            ax.plot([r["minutes"] for r in rs], [r["gpu"][s]["psnr"] for r in rs], "o", label=name)
        ax.set_xlabel("training minutes")
        ax.set_ylabel(f"{s} PSNR Y601 (dB, GPU output)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
