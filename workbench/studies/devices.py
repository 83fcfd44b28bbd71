"""The same exported net on several devices: device reports gathered into one table.

``python -m workbench devices REPORT.json ... [--moderngl PAGE_DIR] [--out DIR]`` reads
device reports (``workbench-device-report/1``: the self-check page's download, the bundle
runner's, or :func:`workbench.web.check.moderngl_report` for this machine's GL with
``--moderngl``), all of one exported net, and writes ``devices.md``, ``devices.json`` and the
figure ``devices.png`` / ``.svg`` (pairwise PSNR, time of the passes) into the figures folder.

Pairwise PSNR of two devices: their output bytes for the same input (peak 255, over the
channels the net outputs, ``output_channels``; 3 when a report lacks it), the lowest over the
inputs both ran; ``None`` in ``devices.json`` (shown "identical") where every byte is equal.
"""
from __future__ import annotations

import base64
import json
import tempfile
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from workbench import references, tables
from workbench.data import metrics
from workbench.figures import plt, save_figure
from workbench.files import figures_dir, read_json, write_json, write_text
from workbench.web.check import REPORT_FORMAT

RESULT, TABLE, FIGURE = "devices.json", "devices.md", "devices"
REQUIRED = ("source", "model", "model_sha256", "device", "compile_ms", "first_draw_ms",
            "passes", "inputs")


def load_reports(paths) -> list[dict]:
    """The device reports in ``paths`` (see :func:`read_report`), all of one net."""
    return check_same_net([read_report(p) for p in paths])


def read_report(path) -> dict:
    """A device report, with ``path``; one clear error for a file that is missing, not JSON
    or not a device report."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such device report")
    try:
        report = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a JSON file ({err})") from None
    fmt = report.get("format") if isinstance(report, dict) else None
    if fmt != REPORT_FORMAT:
        raise ValueError(f"{path}: format {fmt!r}, not a device report ({REPORT_FORMAT!r})")
    missing = [k for k in REQUIRED if k not in report]
    if missing:
        raise ValueError(f"{path}: a device report without {', '.join(missing)}")
    return {**report, "path": str(path)}


def check_same_net(reports) -> list[dict]:
    """``reports`` if there are any and all are of one net (``model_sha256``), else ValueError."""
    if not reports:
        raise ValueError("no device reports: give REPORT.json files or --moderngl PAGE_DIR")
    first = reports[0]
    for r in reports[1:]:
        if r["model_sha256"] != first["model_sha256"]:
            raise ValueError(
                f"{r.get('path', r['source'])}: a report of {r['model']} (manifest sha256 "
                f"{r['model_sha256'][:12]}), but {first.get('path', first['source'])} is of "
                f"{first['model']} ({first['model_sha256'][:12]}): compare reports of one "
                "exported page")
    return reports


def outputs(report) -> dict[str, np.ndarray]:
    """``{input name: the output bytes the net defines, uint8 HxWxC}``."""
    channels = report.get("output_channels", 3)
    return {e["name"]: np.frombuffer(base64.b64decode(e["output"]), np.uint8)
            .reshape(e["height"], e["width"], 4)[..., :channels] for e in report["inputs"]}


def labels(reports) -> list[str]:
    """A short name per report: the (unmasked) renderer and the source, numbered if repeated."""
    names = []
    for r in reports:
        d = r["device"]
        name = f"{d.get('unmasked_renderer') or d['renderer']} ({r['source']})"
        names.append(name if name not in names else f"{name} #{names.count(name) + 1}")
    return names


def pairwise(reports) -> list[list[float | None]]:
    """Pairwise PSNR (dB) between the devices' outputs (see the module docstring); ``None``
    where all bytes are equal, NaN where two reports share no input."""
    outs = [outputs(r) for r in reports]
    table = []
    for a in outs:
        row = []
        for b in outs:
            values = [metrics.psnr(a[n], b[n]) for n in a if n in b]
            worst = min(values) if values else float("nan")
            row.append(None if worst == float("inf") else worst)
        table.append(row)
    return table


def summary_rows(reports) -> list[dict]:
    """One row per device: renderer, source, precision, limits, times, fidelity."""
    rows = []
    for name, r in zip(labels(reports), reports):
        d, entries = r["device"], r["inputs"]
        p = d["precision"]
        row = {"device": name,
               "highp": f"{p['highp']['precision']} bits, 2^±{p['highp']['rangeMax']}",
               "mediump": f"{p['mediump']['precision']} bits, 2^±{p['mediump']['rangeMax']}",
               "max texture": d["limits"]["MAX_TEXTURE_SIZE"],
               "compile ms": float(r["compile_ms"]), "first draw ms": float(r["first_draw_ms"]),
               "passes ms": float(sum(ms for _, ms in r["passes"]))}
        if "logits" in entries[0]:
            row["max logit diff vs TF"] = max(e["max_abs_logit_diff_vs_tf"] for e in entries)
            row["top-1 = TF"] = f"{sum(e['top1_equal_tf'] for e in entries)}/{len(entries)}"
        else:
            psnrs = [e["psnr_vs_tf"] for e in entries]
            row["min PSNR vs TF dB"] = min(float("inf") if v is None else v for v in psnrs)
        row["min bytes = emulator %"] = f"{100 * min(e['bytes_equal_emulator'] for e in entries):.4f}"
        rows.append(row)
    return rows


def figure(result):
    """Pairwise PSNR as a heatmap (identical outputs at the top of the scale) and the time of
    the passes per device."""
    names, table = result["labels"], result["pairwise"]
    values = np.array([[np.nan if v is None else v for v in row] for row in table], float)
    finite = values[np.isfinite(values)]
    top = float(finite.max()) + 5 if finite.size else 100.0
    shown = np.where([[v is None for v in row] for row in table], top, values)
    n = len(names)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(5 + 1.2 * n, 1.5 + 0.7 * n),
                                 gridspec_kw={"width_ratios": [1, 1]})
    im = ax.imshow(shown, cmap="viridis", vmin=min(float(np.nanmin(shown)), 40), vmax=top)
    low = im.norm.vmin
    for i in range(n):
        for j in range(n):
            text = "identical" if table[i][j] is None else f"{values[i, j]:.1f}"
            ax.text(j, i, text, ha="center", va="center", fontsize=8,
                    color="k" if shown[i, j] > (low + top) / 2 else "w")
    short = [f"{i + 1}" for i in range(n)]
    ax.set_xticks(range(n), short)
    ax.set_yticks(range(n), short)
    ax.set_title(f"pairwise PSNR, dB (reference: within {references.SR_DEVICES_PSNR_DB})",
                 fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046)
    ms = [row["passes ms"] for row in result["rows"]]
    bx.barh(range(n), ms, color="tab:blue")
    bx.set_yticks(range(n), [textwrap.fill(f"{i + 1}: {name}", 40, max_lines=3)
                             for i, name in enumerate(names)], fontsize=7)
    bx.invert_yaxis()
    bx.set_xlabel("all passes, ms (first input)")
    fig.tight_layout()
    return fig


def save_results(directory, reports) -> dict:
    """``devices.json`` (rows, pairwise PSNR), ``devices.md`` and the figure in ``directory``."""
    directory = Path(directory)
    result = {"model": reports[0]["model"], "model_sha256": reports[0]["model_sha256"],
              "inputs": [e["name"] for e in reports[0]["inputs"]], "labels": labels(reports),
              "sources": [r.get("path", r["source"]) for r in reports],
              "rows": summary_rows(reports), "pairwise": pairwise(reports)}
    write_json(directory / RESULT, result)
    write_text(directory / TABLE, f"# Devices: {result['model']}\n\n{report_section(directory)}\n")
    fig = figure(result)
    save_figure(fig, FIGURE, directory)
    plt.close(fig)
    return result


def report_section(directory) -> str | None:
    """The device table and the pairwise PSNR, beside the reference article's value."""
    result = read_json(Path(directory) / RESULT)
    if not result:
        return None
    rows = [{"#": i + 1, **row} for i, row in enumerate(result["rows"])]
    pair = [{"": f"{i + 1}", **{f"{j + 1}": ("identical" if v is None else v)
                                for j, v in enumerate(row)}}
            for i, row in enumerate(result["pairwise"])]
    off = [v for i, row in enumerate(result["pairwise"]) for j, v in enumerate(row)
           if i < j and v is not None]
    worst = f"{min(off):.2f} dB" if off else "identical outputs"
    return (f"{result['model']} (manifest sha256 {result['model_sha256'][:12]}), "
            f"{len(result['inputs'])} inputs ({', '.join(result['inputs'])}).\n\n"
            + tables.markdown(rows) + "\n\nPairwise PSNR between the devices' outputs (dB, "
            "peak 255, the lowest over the inputs):\n\n" + tables.markdown(pair)
            + f"\n\nLowest pairwise PSNR here: {worst}; the reference article's nets on three "
            f"devices (a Pi, a phone, a desktop GPU): within {references.SR_DEVICES_PSNR_DB} dB "
            "of each other.")


def run(paths, out=None, moderngl=None) -> dict:
    """The ``devices`` command: load ``paths`` (and, with ``moderngl`` an exported page
    folder, this machine's report, saved as ``device-moderngl.json`` in ``out``), write the
    results into ``out`` (default: the figures folder) and print the table."""
    out = Path(out) if out else figures_dir()
    reports = [read_report(p) for p in paths]
    if moderngl:
        from workbench.web.check import moderngl_report

        report = moderngl_report(moderngl)
        write_json(out / "device-moderngl.json", report)
        reports.append({**report, "path": str(out / "device-moderngl.json")})
    reports = check_same_net(reports)
    result = save_results(out, reports)
    print(report_section(out))
    print(f"\nwritten: {out / TABLE}, {out / RESULT}, {out / FIGURE}.png/.svg")
    return result


def _page_report(web, folder) -> dict:
    with web.session(folder) as page:
        return page.device_report()


def check_here(net, model, out=None) -> dict:
    """The devices table of this machine, for the main job: ``net``'s self-check page (with
    Keras ``model``'s outputs) exported into a temporary folder and run on this machine's GL
    (moderngl: llvmpipe here) and in headless Chromium (SwiftShader) when it is installed; both
    reports (``device-<source>.json``) and the table written into ``out`` (default: the
    figures folder)."""
    from workbench import web
    from workbench.web import browser
    from workbench.web.check import moderngl_report

    out = Path(out) if out else figures_dir()
    with tempfile.TemporaryDirectory() as tmp:
        folder = web.export(net, Path(tmp) / "page", check_model=model).parent
        reports = [moderngl_report(folder)]
        try:  # in a thread of its own: Playwright's sync API refuses to run beside an
            # asyncio loop, which a Jupyter kernel's main thread has
            with ThreadPoolExecutor(1) as pool:
                reports.append(pool.submit(_page_report, web, folder).result())
        except browser.BrowserUnavailable as err:
            print(f"devices: no headless Chromium, this machine's GL only ({err})")
    for report in reports:
        write_json(out / f"device-{report['source']}.json", report)
    return save_results(out, check_same_net(reports))

