"""The activation study: one classifier preset trained with each activation, same data, same seeds.

The reference article chose its activation by experiment: a ReLU clipped to [0, 1] did not learn in
its deep net, ReLU6 rescaled to [0, 1] fell short, a piecewise-linear sigmoid won.  :func:`run`
redoes that comparison at a size this machine affords; :func:`summarize` gives mean and spread
over seeds, also after 8-bit storage of every activation (what the RGBA8 textures keep, computed
in TensorFlow by a :class:`workbench.nets.layers.Quantize8` copy of the trained net).

Accuracies are fractions in [0, 1]; "top-1 %" columns are percentages.  Validation and the
final accuracies use the dataset's validation split (CIFAR-10: the test split), limited
to ``val_limit`` images per class (default: ``limit``, as the training split); the final model
is the last epoch's.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from workbench import tables
from workbench.es2.emulate import quantize
from workbench.figures import plt
from workbench.files import read_json, write_json
from workbench.nets import activations, classify
from workbench.nets.models import CLASSIFIER_PRESETS, dogs_classifier

ARTICLE = {"bounded_relu": "did not learn", "relu6_scaled": "fell short", "sigmoid_like": "won"}


def quantized_copy(model, preset, activation):
    """``model`` rebuilt with 8-bit rounding after every activation (same weights)."""
    copy = dogs_classifier(preset, input_size=model.input_shape[1], classes=model.output_shape[-1],
                           activation=activation, quantize=True)
    copy.set_weights(model.get_weights())
    return copy


def train_one(out_dir, recipe: classify.ClassifierRecipe) -> dict:
    """Train (or resume) one run of ``recipe`` in ``<out_dir>/<activation>/seed<seed>``;
    returns its record (cached in ``record.json`` there, so a finished run is not evaluated
    again)."""
    run_dir = Path(out_dir) / recipe.activation / f"seed{recipe.seed}"
    model, history = classify.train(run_dir, recipe)
    record = read_json(run_dir / "record.json")
    if record and len(record["history"]["loss"]) == recipe.epochs:
        return record
    val_ds = classify.validation_data(classify.ClassifierRecipe.of_run(run_dir))
    copy = quantized_copy(model, recipe.preset, recipe.activation)
    record = {"activation": recipe.activation, "seed": recipe.seed,
              "top1": classify.evaluate(model, val_ds),
              "top1_8bit": classify.evaluate(copy, val_ds),
              "history": {k: history[k] for k in ("loss", "accuracy", "val_loss", "val_accuracy")},
              "minutes": history["seconds"] / 60}
    write_json(run_dir / "record.json", record)
    return record


def run(out_dir, activation_names, seeds, recipe: classify.ClassifierRecipe) -> list[dict]:
    """Every (activation, seed) pair: ``recipe`` with that activation and seed, keeping the
    best checkpoint only."""
    return [train_one(out_dir, recipe.replace(activation=name, seed=seed, keep_best=1))
            for name in activation_names for seed in seeds]


def _mean_spread(values):
    values = 100 * np.asarray(values, float)
    spread = values.std(ddof=1) if len(values) > 1 else 0.0
    return values.mean(), spread


def summarize(records) -> list[dict]:
    """One row per activation: top-1 mean and sample standard deviation over seeds (in %),
    the same after 8-bit storage, and the final training loss."""
    rows = []
    for name in dict.fromkeys(r["activation"] for r in records):
        runs = [r for r in records if r["activation"] == name]
        mean, spread = _mean_spread([r["top1"] for r in runs])
        mean8, spread8 = _mean_spread([r["top1_8bit"] for r in runs])
        rows.append({"activation": name, "seeds": len(runs),
                     "top-1 %": f"{mean:.1f} ± {spread:.1f}",
                     "8-bit top-1 %": f"{mean8:.1f} ± {spread8:.1f}",
                     "final loss": float(np.mean([r["history"]["loss"][-1] for r in runs])),
                     "article": ARTICLE.get(name, ""),
                     "mean": mean, "spread": spread, "mean_8bit": mean8})
    return rows


def verdict(summary, chance=None) -> str:
    """What the numbers say about the article's ranking (sigmoid-like > ReLU6/6 > bounded ReLU):
    each pair is called only where its means differ by more than the two seed spreads added;
    ``chance`` (top-1 % of guessing) flags a study too short to learn anything."""
    row = {r["activation"]: r for r in summary}
    if not set(ARTICLE) <= set(row):
        return "The article's three activations were not all trained: no verdict."
    means = ", ".join(f"{k} {row[k]['mean']:.1f} ± {row[k]['spread']:.1f} %" for k in ARTICLE)
    if any(r["seeds"] < 2 for r in row.values()):
        return f"One seed per activation: no seed spread, no verdict ({means})."
    if chance is not None and max(row[k]["mean"] for k in ARTICLE) < chance + 5:
        return (f"Cannot tell: every activation is within 5 points of chance ({chance:.0f} %); "
                f"the study needs more training ({means}).")
    calls = []
    for better, worse in (("sigmoid_like", "relu6_scaled"), ("relu6_scaled", "bounded_relu"),
                          ("sigmoid_like", "bounded_relu")):
        a, b = row[better], row[worse]
        gap, noise = a["mean"] - b["mean"], a["spread"] + b["spread"]
        if gap > noise:
            calls.append((True, f"{better} beats {worse} by {gap:.1f} points (spreads {noise:.1f})"))
        elif -gap > noise:
            calls.append((False, f"{worse} beats {better} by {-gap:.1f} points, against the article"))
        else:
            calls.append((None, f"{better} vs {worse}: {gap:+.1f} points, within the spreads "
                                f"({noise:.1f}): cannot tell"))
    if all(ok for ok, _ in calls):
        head = "The article's finding holds at this scale"
    elif any(ok is False for ok, _ in calls):
        head = "The article's finding does not hold at this scale"
    else:
        head = "Partly told apart"
    return f"{head}: " + "; ".join(text for _, text in calls) + f". ({means})"


def training_figure(records):
    """Validation top-1 and training loss per epoch: mean over seeds per activation, the band
    between the seeds' lowest and highest."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for name in dict.fromkeys(r["activation"] for r in records):
        runs = [r for r in records if r["activation"] == name]
        for ax, key, scale in ((axes[0], "val_accuracy", 100), (axes[1], "loss", 1)):
            values = scale * np.array([r["history"][key] for r in runs])
            epochs = np.arange(1, values.shape[1] + 1)
            line, = ax.plot(epochs, values.mean(0), marker=".", label=name)
            ax.fill_between(epochs, values.min(0), values.max(0), color=line.get_color(), alpha=0.2)
    axes[0].set_ylabel("validation top-1 %")
    axes[1].set_ylabel("training cross-entropy")
    for ax in axes:
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("activation study: mean over seeds, band = min..max")
    fig.tight_layout()
    return fig


RESULT, NOTEBOOK = "activations.json", "activations"


def save_results(directory, records, summary, parameters):
    """``activations.json`` in ``directory``: every run, the summary table and the verdict
    (``parameters["preset"]`` gives the chance level)."""
    classes = CLASSIFIER_PRESETS[parameters["preset"]]["classes"]
    write_json(Path(directory) / RESULT, {"parameters": parameters, "runs": records,
                      "summary": [{k: v for k, v in row.items()
                                   if k not in ("mean", "spread", "mean_8bit")} for row in summary],
                      "verdict": verdict(summary, chance=100 / classes)})


# The activations of the reference article's experiment, and the true sigmoid beside them.
STUDY_ACTIVATIONS = ("bounded_relu", "relu6_scaled", "sigmoid_like", "sigmoid")


def shape_figure(names=STUDY_ACTIVATIONS, low=-8.0, high=8.0, points=2001):
    """Each activation (left) and the gradient the training uses (right) over [low, high]."""
    x = np.linspace(low, high, points, dtype=np.float32)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for name in names:
        axes[0].plot(x, activations.get(name).np_fn(x), label=name)
        axes[1].plot(x, activations.gradient(name, x), label=name)
    for ax, title in zip(axes, ("value", "gradient (as trained)")):
        ax.set_title(title)
        ax.set_xlabel("x")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def levels_figure(names=STUDY_ACTIVATIONS, low=-8.0, high=8.0, points=4001):
    """How RGBA8 storage quantises each activation's output: the stored level (0..255) over
    [low, high] (left), and the width in x of one level, 1 / (255 |slope|) (right, log scale;
    where the activation is flat, every x there falls into one level and the line stops)."""
    x = np.linspace(low, high, points, dtype=np.float64)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for name in names:
        act = activations.get(name)
        levels = np.round(quantize(act.np_fn(x)) * 255)
        axes[0].plot(x, levels, label=name, drawstyle="steps-mid")
        slope = np.abs(np.gradient(act.np_fn(x).astype(np.float64), x))
        with np.errstate(divide="ignore"):
            width = np.where(slope > 1e-6, 1 / (255 * slope), np.nan)
        axes[1].plot(x, width, label=name)
    axes[0].set_ylabel("stored level (0..255)")
    axes[1].set_ylabel("width of one level in x")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("x")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def report_section(directory) -> str | None:
    results = read_json(Path(directory) / RESULT)
    if not results:
        return None
    p = results["parameters"]
    return (tables.markdown(results["summary"], digits=3) + f"\n\n{results['verdict']}\n\n"
            f"Preset `{p['preset']}`, {p['epochs']} epochs, {p['limit'] or 'all'} images per class"
            + (f" ({p['val_limit']} a class for validation)" if p.get("val_limit") else "") + ", "
            f"seeds {p['seeds']}; mean ± sample standard deviation over seeds. The `article` column "
            "is the reference article's finding for its deeper net.")
