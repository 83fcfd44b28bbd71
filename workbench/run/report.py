"""The study's report: the JSON results of the last run gathered into ``figures/report.md``
(and ``report.html``), with the reference articles' figures in a column beside ours.

Each section reads one results file the notebooks write; a section whose file is missing
says which notebook makes it.
"""
from __future__ import annotations

from pathlib import Path

from workbench import references as ref
from workbench import tables
from workbench.files import figures_dir, read_json, write_text


def _missing(notebook):
    return f"_Not in this run: `notebooks/{notebook}.ipynb` writes it._"


def sr_section(results):
    if not results:
        return _missing("sr_eval")
    rows = []
    for r in results["summary"]:
        published = ref.SR_PUBLISHED.get(r["method"], {}).get(r["set"]) \
            if r["kernel"] == "bicubic_aa" else None
        rows.append({"set": r["set"], "kernel": r["kernel"], "method": r["method"],
                     "PSNR Y601": r["psnr_y_studio"], "SSIM Y601": f"{r['ssim_y_studio']:.4f}",
                     "PSNR Yfull": r["psnr_y_full"], "published": published or ""})
    published = ", ".join(f"{name} ({p['parameters']:,} parameters) {p['Set5']:.2f} / "
                          f"{p['Set14']:.2f}" for name, p in ref.SR_PUBLISHED.items())
    return (tables.markdown(rows) + f"\n\nPublished x2 `bicubic_aa` Set5 / Set14 dB: {published}.")


def deploy_section(results):
    if not results:
        return _missing("glsl_deploy")
    return (tables.markdown(results["summary"]) + f"\n\nCompile + link of {len(results['pass_seconds'])} "
            f"programs: {results['compile_seconds']:.2f} s here (reference: {ref.SR_PI3_COMPILE_S[0]}-"
            f"{ref.SR_PI3_COMPILE_S[1]} s on a Pi 3). Reference: outputs of a Pi, a phone and a "
            f"desktop GPU within {ref.SR_DEVICES_PSNR_DB} dB of each other.")


def classifier_section(deployed):
    if not deployed:
        return _missing("classifier_deploy")
    r = deployed["result"]
    rows = [{"": "top-1 %", "TF": 100 * r["top1_TF"], "GPU": 100 * r["top1_GPU"],
             "reference TF": ref.DOGS120_TOP1_TF, "reference GPU": ref.DOGS120_TOP1_GPU},
            {"": "GPU top-1 = TF top-1 %", "GPU": 100 * r["gpu_top1_equals_tf"]},
            {"": "largest logit difference GPU - TF", "GPU": r["max_logit_diff_gpu_tf"]},
            {"": "GPU ms per image", "GPU": 1000 * r["gpu_seconds_per_image"]}]
    text = tables.markdown(rows, digits=3) + f"\n\n{r['images']} test images."
    if deployed.get("dogs120"):
        text += "\n\ndogs120 at 385x385 (random weights, BatchNorm calibrated):\n\n" + \
            tables.markdown([deployed["dogs120"]], digits=3)
    return text


def cost_section(sr, classifier):
    parts = []
    for title, results in (("x2 SR at 256x256", sr), ("classifier", classifier)):
        if results and results.get("cost_256", results.get("cost")):
            costs = results.get("cost_256", results.get("cost"))
            rows = [{"op": k, "multiply-adds": f"{v['multiply_adds']:,}",
                     "texel fetches": f"{v['texel_fetches']:,}",
                     "texture KiB": v["texture_bytes"] / 1024, "programs": v["programs"]}
                    for k, v in costs.items()]
            total = {key: sum(v[key] for v in costs.values())
                     for key in ("multiply_adds", "texel_fetches", "texture_bytes", "programs")}
            rows.append({"op": "**total**", "multiply-adds": f"{total['multiply_adds']:,}",
                         "texel fetches": f"{total['texel_fetches']:,}",
                         "texture KiB": total["texture_bytes"] / 1024,
                         "programs": total["programs"]})
            parts.append(f"**{title}**\n\n" + tables.markdown(rows))
    return "\n\n".join(parts) or _missing("glsl_deploy")


def timings_section(sr, classifier):
    rows = []
    for title, results in (("x2 SR (last image)", sr), ("classifier (last image)", classifier)):
        if results and results.get("pass_seconds"):
            seconds = results["pass_seconds"].values()
            rows.append({"net": title, "programs": len(seconds),
                         "all passes ms": 1000 * sum(seconds),
                         "slowest pass ms": 1000 * max(seconds),
                         "compile s": results["compile_seconds"]})
    return tables.markdown(rows) if rows else _missing("glsl_deploy")


def activation_section(results):
    if not results:
        return _missing("activations")
    p = results["parameters"]
    return (tables.markdown(results["summary"], digits=3) + f"\n\n{results['verdict']}\n\n"
            f"Preset `{p['preset']}`, {p['epochs']} epochs, {p['limit'] or 'all'} images per class, "
            f"seeds {p['seeds']}; mean ± sample standard deviation over seeds. The `article` column "
            "is the reference article's finding for its deeper net.")


def shuffle_section(results):
    if not results:
        return _missing("shuffle")
    table = results["order_table"]
    rows = [{"after": f"{i + 1} shuffle(s)", "texture order": ", ".join(map(str, order[:12])) + ", ..."}
            for i, order in enumerate(table["orders"])]
    mixing = [{"channels": r["channels"], "step": r["step"],
               "units until every output depends on every input":
                   r["units_to_mix"] if r["units_to_mix"] is not None else "never"}
              for r in results["mixing"] if r["channels"] == table["channels"]]
    return (f"{table['channels']} channels, step {table['step']} (reference: texture orders 0, 8, "
            "16, 24, 1, 9, ... / 0, 2, 4, 6, ...):\n\n" + tables.markdown(rows) + "\n\n"
            + tables.markdown(mixing) + "\n\n" + results["verdict"].replace("\n", " "))


def conv_algorithms_section(results):
    if not results:
        return _missing("conv_algorithms")
    sizes = dict.fromkeys(f"{r['width']}x{r['height']}" for r in results["records"])
    times = {(f"{r['width']}x{r['height']}", r["algorithm"]): r["ms"] for r in results["records"]}
    algorithms = list(dict.fromkeys(r["algorithm"] for r in results["records"]))
    rows = [{"input": size, **{f"{a} ms": times.get((size, a), "") for a in algorithms}}
            for size in sizes]
    shape = [{"input": r["size"], "direct / ConvMM here": r["direct / im2col_gemm here"],
              "direct / ConvMM Tegra K1": r.get("direct / im2col_gemm Tegra K1", "")}
             for r in results["shape"]]
    crossings = "; ".join(f"{pair}: " + (", ".join(f"{c['faster_before']} -> {c['faster_after']} "
                                                    f"between {' and '.join(c['between'])}"
                                                    for c in found) or "none")
                          for pair, found in results["crossovers"].items())
    return (f"3x3 conv, 3 -> 16 channels, ES 3.1 compute shaders on {results['renderer']}:\n\n"
            + tables.markdown(rows) + "\n\n" + tables.markdown(shape) + f"\n\nCrossovers: {crossings}.")


def build(directory=None) -> str:
    """Write ``report.md`` and ``report.html`` in ``directory`` (the figures folder) from
    the results files there; returns the Markdown."""
    directory = Path(directory or figures_dir())
    sr = read_json(directory / "sr_eval.json")
    deployed = read_json(directory / "glsl_deploy.json")
    classifier = read_json(directory / "classifier_deploy.json")
    activations_ = read_json(directory / "activations.json")
    sections = [
        ("x2 super-resolution: Set5 / Set14, each degradation kernel", sr_section(sr)),
        ("Deployment fidelity: ES 2.0 shaders vs TensorFlow", deploy_section(deployed)),
        ("Classifier: TensorFlow vs the GPU", classifier_section(classifier)),
        ("Cost per op", cost_section(deployed, classifier)),
        ("Timings on this machine (Mesa llvmpipe)", timings_section(deployed, classifier)),
        ("Activation study", activation_section(activations_)),
        ("Channel shuffle", shuffle_section(read_json(directory / "shuffle.json"))),
        ("Convolution algorithms (ES 3.1 compute)",
         conv_algorithms_section(read_json(directory / "conv_algorithms.json"))),
    ]
    figures = [p.name for p in sorted(directory.glob("*.png"))]
    text = "# Workbench report\n\n" + "\n\n".join(f"## {t}\n\n{body}" for t, body in sections)
    text += "\n\n## Figures\n\n" + "\n".join(f"![{f}]({f})" for f in figures) + "\n"
    write_text(directory / "report.md", text)
    write_text(directory / "report.html", _html(text))
    return text


def _html(markdown_text):
    try:
        import mistune  # comes with nbconvert (JupyterLab)

        body = mistune.html(markdown_text)
    except ImportError:
        import html

        body = f"<pre>{html.escape(markdown_text)}</pre>"
    return f"<!doctype html><meta charset='utf-8'><title>Workbench report</title>\n{body}\n"
