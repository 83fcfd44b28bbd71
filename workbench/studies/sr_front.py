"""The quality-cost front of tiny x2 SR nets: the GPU PSNR of the SR checkpoints that ship
(``models/sr_x2*.json``, their cards) against their parameters and cost per output pixel,
beside the published tiny nets (:data:`workbench.references.SR_PUBLISHED`) and the edge-SR
study's 395 retrained x2 nets (``sr/esr_x2_models.csv`` in the data root, when there; under
that study's own protocol, whose bicubic is 33.73 / 30.29 dB where ours is 33.68 / 30.33).

PSNR: dB on Y601, crop 2, ``bicubic_aa`` low resolution.  Cost per output pixel: the net's
multiply-adds and texel fetches as compiled for plain ES 2.0 (:meth:`workbench.es2.Net.cost`
at 256x256, divided by the 512x512 output pixels).  Time: a 256x256 input on a Raspberry Pi 3,
predicted from VideoCore IV's own compiler (vc4's estimated cycles,
:func:`workbench.studies.compilers.predict_pi`) where the target drivers are built.
"""
from __future__ import annotations

import csv
from dataclasses import asdict
from pathlib import Path

from workbench import references, tables
from workbench.files import project_root, read_json, write_json

RESULT, FIGURE = "sr_front.json", "sr_front"
NOTEBOOK = "figures"
ESR_BICUBIC = {"Set5": 33.73, "Set14": 30.29}  # the edge-SR study's protocol
SIZE = (256, 256)


def ours(models_dir=None) -> list[dict]:
    """One point per SR checkpoint with a card: name, parameters, GPU PSNR per set, cost."""
    from workbench import es2
    from workbench.nets.models import load_model

    points = []
    for card_path in sorted(Path(models_dir or project_root() / "models").glob("sr_x2*.json")):
        card = read_json(card_path)
        psnr = card["psnr_y_studio_crop2_bicubic_aa"]["GPU (ES 2.0, llvmpipe)"]
        net = es2.compile(load_model(card_path.with_suffix(".keras")))
        cost = net.cost(SIZE).values()
        pixels = 4 * SIZE[0] * SIZE[1]
        points.append({"net": card_path.stem, "parameters": card["deployed_parameters"],
                       "Set5": psnr["Set5"], "Set14": psnr["Set14"],
                       "MACs/pixel": sum(c.multiply_adds for c in cost) / pixels,
                       "fetches/pixel": sum(c.texel_fetches for c in cost) / pixels,
                       PI_MS: pi3_ms(net)})
    return points


PI_MS = "Pi 3 ms (predicted)"


def pi3_ms(net) -> float | None:
    """Predicted ms of ``net`` on a Raspberry Pi 3 for a :data:`SIZE` input, from vc4's
    cycle estimates; None where the target drivers are not built or vc4 refuses a program."""
    from workbench.es2 import drivers as es2_drivers
    from workbench.gl import drivers
    from workbench.studies import compilers

    if drivers.available() is not None:
        return None
    reports = es2_drivers.check(net, "vc4")
    if not all(r.ok for r in reports):
        return None
    return compilers.predict_pi(net, [asdict(r) for r in reports], SIZE)["ms"][PI3]


PI3 = "Raspberry Pi 3 B / B+"


def edge_sr(path) -> list[dict]:
    """The edge-SR study's nets from its CSV (parameters, PSNR per set); [] without it."""
    if path is None or not Path(path).is_file():
        return []
    with open(path, newline="") as f:
        return [{"net": r["model_id"], "parameters": int(r["params"]),
                 "Set5": float(r["psnr_Set5"]), "Set14": float(r["psnr_Set14"])}
                for r in csv.DictReader(f)]


def nearest_published(parameters) -> str:
    """The published net (not bicubic) nearest in parameters, on a log scale."""
    import math
    nets = {k: v for k, v in references.SR_PUBLISHED.items() if v["parameters"]}
    return min(nets, key=lambda k: abs(math.log(nets[k]["parameters"] / parameters)))


def save(directory, data_root=None, models_dir=None) -> dict:
    """Write ``sr_front.json`` and the figure ``sr_front.{png,svg}`` into ``directory``."""
    from workbench.data.datasets import data_root as default_root
    from workbench.figures import save_figure

    root = data_root or default_root()
    result = {"ours": ours(models_dir), "published": references.SR_PUBLISHED,
              "edge_sr": edge_sr(Path(root) / "sr" / "esr_x2_models.csv" if root else None)}
    write_json(Path(directory) / RESULT, result)
    save_figure(figure(result), FIGURE, directory)
    return result


def figure(result):
    """PSNR on Set5 and Set14 against parameters (log scale): the edge-SR nets as grey dots,
    the published nets as labelled squares, ours as labelled stars."""
    from workbench.figures import plt

    timed = [p for p in result["ours"] if p.get(PI_MS)]
    fig, axes = plt.subplots(1, 3 if timed else 2, figsize=(16 if timed else 11, 4.4))
    for ax, name in zip(axes, ("Set5", "Set14")):
        esr = result["edge_sr"]
        if esr:
            ax.scatter([n["parameters"] for n in esr], [n[name] for n in esr], s=8, c="0.7",
                       label=f"edge-SR study's {len(esr)} retrained nets (its protocol)")
        for label, p in result["published"].items():
            if p["parameters"]:
                ax.scatter(p["parameters"], p[name], marker="s", c="tab:blue")
                ax.annotate(label, (p["parameters"], p[name]), fontsize=8,
                            xytext=(4, -10), textcoords="offset points")
        for p in result["ours"]:
            ax.scatter(p["parameters"], p[name], marker="*", s=160, c="tab:red", zorder=3)
            ax.annotate(p["net"].removeprefix("sr_x2_"), (p["parameters"], p[name]),
                        fontsize=8, xytext=(0, 8), textcoords="offset points",
                        color="tab:red", ha="center")
        ax.axhline(references.SR_PUBLISHED["bicubic"][name], c="0.4", ls=":", lw=1,
                   label="bicubic (published)")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(lambda v, _: f"{v / 1000:g}K")
        ax.xaxis.set_minor_formatter(lambda v, _: "")
        ax.set_xlabel("parameters")
        ax.set_ylabel(f"{name} PSNR (dB, Y601, x2)")
        ax.set_ylim(references.SR_PUBLISHED["bicubic"][name] - 0.5, None)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower right")
    if timed:  # ours only: the published nets have no ES 2.0 time
        ax = axes[2]
        for name, colour in (("Set5", "tab:red"), ("Set14", "tab:purple")):
            ax.plot([p[PI_MS] for p in timed], [p[name] for p in timed], "*-", c=colour,
                    ms=12, label=name)
            for p in timed:
                ax.annotate(p["net"].removeprefix("sr_x2_"), (p[PI_MS], p[name]), fontsize=8,
                            xytext=(0, 8), textcoords="offset points", ha="center")
        ax.set_xlabel(f"predicted ms on a Pi 3, {SIZE[1]}x{SIZE[0]} input (vc4's cycles)")
        ax.set_ylabel("GPU PSNR (dB, Y601, x2)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle("x2 SR: quality against size (red: the checkpoints that ship, through the "
                 "ES 2.0 shaders)")
    fig.tight_layout()
    return fig


def report_section(directory) -> str | None:
    result = read_json(Path(directory) / RESULT)
    if not result:
        return None
    rows = []
    for p in result["ours"]:
        near = nearest_published(p["parameters"])
        ref = result["published"][near]
        rows.append({"net": p["net"], "parameters": p["parameters"], "Set5 GPU": p["Set5"],
                     "Set14 GPU": p["Set14"], "MACs/pixel": p["MACs/pixel"],
                     "fetches/pixel": p["fetches/pixel"], PI_MS: p.get(PI_MS) or "",
                     "nearest published": near,
                     "its Set5 / Set14": f"{ref['Set5']:.2f} / {ref['Set14']:.2f}",
                     "Set14 vs it": p["Set14"] - ref["Set14"]})
    esr = result["edge_sr"]
    return (tables.markdown(rows, digits={"MACs/pixel": 0, "fetches/pixel": 0, PI_MS: 0})
            + f"\n\n![quality against size]({FIGURE}.png)\n\n"
            + (f"Grey: the edge-SR study's {len(esr)} retrained x2 nets under its own protocol "
               f"(its bicubic {ESR_BICUBIC['Set5']} / {ESR_BICUBIC['Set14']} dB, the published "
               f"{references.SR_PUBLISHED['bicubic']['Set5']} / "
               f"{references.SR_PUBLISHED['bicubic']['Set14']})."
               if esr else "The edge-SR study's nets: not in this data root "
               "(sr/esr_x2_models.csv)."))
