"""Git's notebook filter (.gitattributes, tools/notebook_filter.sh, `make setup`): a notebook run
and saved with its outputs leaves the checkout clean, and the stored notebooks pass it unchanged."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo, *args):
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def _as_run(path):
    """Write ``path`` back as JupyterLab or papermill leave it: outputs, counts, widget state,
    the kernel's language_info, papermill's metadata."""
    nb = nbformat.read(path, as_version=4)
    for count, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), 1):
        cell.execution_count = count
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"cell {count}\n")]
        cell.metadata.execution = {"iopub.status.busy": "2025-01-01T00:00:00.000000Z"}
        cell.metadata.papermill = {"duration": 0.5, "status": "completed"}
    nb.metadata.language_info.update(version="3.11.2", mimetype="text/x-python",
                                     file_extension=".py", pygments_lexer="ipython3",
                                     nbconvert_exporter="python",
                                     codemirror_mode={"name": "ipython", "version": 3})
    nb.metadata.widgets = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    nb.metadata.papermill = {"parameters": {}, "duration": 1.0}
    nbformat.write(nb, path)


def test_a_notebook_run_leaves_git_clean(tmp_path):
    """``git diff`` shows nothing and ``git add`` stages nothing (``git status`` lists a notebook
    whose size changed until then: git compares sizes before it runs a filter)."""
    repo = tmp_path / "checkout"
    (repo / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / "widgets.ipynb", repo / "notebooks")
    shutil.copy(ROOT / ".gitattributes", repo)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "notebooks")
    ran = repo / "notebooks" / "widgets.ipynb"
    _as_run(ran)
    assert _git(repo, "diff", "--name-only") == "notebooks/widgets.ipynb\n"  # no filter yet
    subprocess.run(["bash", str(ROOT / "tools" / "notebook_filter.sh"), sys.executable],
                   cwd=repo, check=True)
    assert _git(repo, "diff", "--name-only") == ""
    _git(repo, "add", "--all")
    assert _git(repo, "status", "--porcelain") == ""
    assert nbformat.read(ran, as_version=4).cells[2].outputs  # the work tree keeps its outputs


def test_the_stored_notebooks_pass_the_filter_unchanged():
    """Each is as nbstripout writes it (nbformat's JSON: sorted keys, indent 1, a final newline),
    so the filter never shows a notebook changed that was not."""
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        text = path.read_text(encoding="utf-8")
        assert nbformat.writes(nbformat.reads(text, as_version=nbformat.NO_CONVERT)) + "\n" \
            == text, f"{path.name}: rewrite it with nbformat.write (key order, indent)"


def test_outside_a_checkout_the_filter_script_does_nothing(tmp_path):
    script = ROOT / "tools" / "notebook_filter.sh"
    done = subprocess.run(["bash", str(script), sys.executable], cwd=tmp_path,
                          env={**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)},
                          capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
