"""The report: the results of a run gathered into ``figures/<profile>/report.md`` (and
``report.html``), with the reference articles' figures beside ours.

Each section belongs to the study that writes its results file (``save_results`` and
``report_section`` side by side), so the report cannot drift from what a notebook wrote; a
section whose file is missing says which notebook makes it.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path

from workbench.files import PROFILE_ENV, figures_dir, read_text, sha256, write_text
from workbench.folders import FolderNotReplaceable
from workbench.nets import superres
from workbench.studies import (
    activation_study,
    beatmup,
    compilers,
    conv_algorithms,
    deploy,
    devices,
    onnx_deploy,
    peers,
    shuffle,
    sr_ablation,
    sr_front,
)

# (title, the notebook that writes the results, the study function that reports them)
SECTIONS = [
    ("x2 super-resolution: Set5 / Set14, each degradation kernel", superres.NOTEBOOK,
     superres.report_section),
    ("x2 SR recipes (ablation, GPU output)", sr_ablation.NOTEBOOK, sr_ablation.report_section),
    ("x2 SR: quality against size (the checkpoints that ship)", sr_front.NOTEBOOK,
     sr_front.report_section),
    ("Deployment fidelity: ES 2.0 shaders vs TensorFlow", deploy.SR_NOTEBOOK, deploy.sr_section),
    ("Classifier: TensorFlow vs the GPU", deploy.CLASSIFIER_NOTEBOOK, deploy.classifier_section),
    ("Nets from PyTorch: ONNX files vs ONNX Runtime", onnx_deploy.NOTEBOOK,
     onnx_deploy.report_section),
    ("Cost per op", deploy.SR_NOTEBOOK, deploy.cost_section),
    ("Timings on this machine", deploy.SR_NOTEBOOK, deploy.timings_section),
    ("The target GPUs' own compilers (Mesa drivers on drm-shims)", deploy.SR_NOTEBOOK,
     compilers.report_section),
    ("Activation study", activation_study.NOTEBOOK, activation_study.report_section),
    ("Channel shuffle", shuffle.NOTEBOOK, shuffle.report_section),
    ("Convolution algorithms (ES 3.1 compute)", conv_algorithms.NOTEBOOK,
     conv_algorithms.report_section),
    # no notebook: `python -m workbench devices` writes it; the section only when it did
    ("Devices: one exported net on several GPUs", None, devices.report_section),
    # no notebook: `python -m workbench bench web` writes it
    ("Peers: the WebGL page vs TensorFlow.js and onnxruntime-web in one browser", None,
     peers.report_section),
    # no notebook: `python -m workbench bench beatmup` writes it
    ("The articles' own system (Beatmup) side by side", None, beatmup.report_section),
]


def build(directory=None, profile=None) -> str:
    """Write ``report.md`` and ``report.html`` in ``directory`` (the figures folder) from
    the results files there; returns the Markdown.  It names the profile (``profile`` or
    ``$WORKBENCH_PROFILE``) and the machine that made it."""
    directory = Path(directory or figures_dir(profile))
    profile = profile or os.environ.get(PROFILE_ENV)
    sections = [(title, section(directory) or
                 f"_Not in this run: `notebooks/{notebook}.ipynb` writes it._")
                for title, notebook, section in SECTIONS
                if notebook is not None or section(directory)]
    figures = [p.name for p in sorted(directory.glob("*.png"))]
    made_by = (f"Profile **{profile}**" if profile else "No profile (notebooks run by hand)")
    text = (f"# Workbench report\n\n{made_by}, on {machine()}.\n\n"
            + "\n\n".join(f"## {t}\n\n{body}" for t, body in sections))
    text += "\n\n## Figures\n\n" + "\n".join(f"![{f}]({f})" for f in figures) + "\n"
    write_text(directory / "report.md", text)
    write_text(directory / "report.html", _html(text))
    return text


BEGIN, END = "<!-- report: begin -->", "<!-- report: end -->"


def publish(report_text: str, path, source: str, force=False) -> Path:
    """Put a run's report into the Markdown file ``path`` (``docs/results.md``), between its
    ``BEGIN`` and ``END`` lines: the report's sections one heading level down, its figure
    list left out (the figures folder is not committed), led by ``source`` (the commit and
    the command that made it) and signed with its sha256 (:data:`SIGNED`).  The rest of the
    file is kept; ValueError naming the file when it lacks the two lines.  What is between
    them is replaced only when empty or signed and unchanged (else
    :class:`~workbench.folders.FolderNotReplaceable` naming the file, unless ``force``).  A
    symbolic link is written through (its target is the file); an empty path is refused."""
    if not str(path):
        raise ValueError("--publish '': give the Markdown file to publish into")
    text = read_text(path, "--publish")  # (a link loop, a FIFO, a folder: one line)
    path = Path(path).resolve() if Path(path).is_symlink() else Path(path)
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"{path}: needs one {BEGIN!r} line and, after it, one {END!r} line "
                         "to put the report between")
    head, rest = text.split(BEGIN)
    old, tail = rest.split(END, 1)
    if not force and old.strip() and _signed(old) is None:
        raise FolderNotReplaceable(
            f"{path}: what is between its report lines is not the report the workbench put "
            "there (edited since, or put there unsigned by an older version)",
            replaced="it")
    body = report_text.split("\n## Figures\n")[0].strip()
    body = "\n".join("#" + line if line.startswith("#") else line
                      for line in body.splitlines()[1:]).strip()  # no title, one level down
    region = f"_{source}_\n\n{body}\n"
    signature = SIGNED.format(sha256(region.encode()))
    write_text(path, f"{head}{BEGIN}\n{signature}\n{region}{END}{tail}")
    return path


SIGNED = "<!-- the report, sha256 {} (report --publish replaces it while unchanged) -->"


def _signed(region: str) -> str | None:
    """The report in ``region`` (what lies between the report lines) when it is signed and
    unchanged, else None."""
    first, _, report = region.removeprefix("\n").partition("\n")
    return report if first == SIGNED.format(sha256(report.encode())) else None


def machine() -> str:
    """This machine in one line: CPU model, whether it has AVX-512 (TensorFlow trains ~3x
    faster with it), cores, and the GL renderer where a context opens."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in
                   Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("flags"))
        cpu += " with AVX-512" if " avx512f" in flags else " without AVX-512"
    except (OSError, StopIteration):
        pass
    text = f"{cpu}, {os.cpu_count()} cores"
    from workbench import gl

    try:
        return f"{text}, GL renderer {gl.info()['GL_RENDERER']}"
    except (gl.GLUnavailable, gl.GLError, OSError):  # no GL here: the report is still worth it
        return text


def _html(markdown_text):
    try:
        import mistune  # comes with nbconvert (JupyterLab)

        body = mistune.html(markdown_text)
    except ImportError:
        import html

        body = f"<pre>{html.escape(markdown_text)}</pre>"
    return f"<!doctype html><meta charset='utf-8'><title>Workbench report</title>\n{body}\n"
