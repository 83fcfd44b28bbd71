"""The project's own files: pip and conda dependency lists agree; notebooks stored bare; README
and the design record as a newcomer reads them."""
import re
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
# conda-forge names that differ from PyPI's
CONDA_TO_PIP = {}


def _split(requirement):
    name, spec = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", requirement.strip()).groups()
    return name.lower().replace("_", "-"), spec.replace(" ", "")


def test_environment_yml_mirrors_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    pip = dict(_split(r) for r in project["dependencies"] + extras["dev"] + extras["jax"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = dict(_split(d) for d in env["dependencies"]
                 if isinstance(d, str) and not d.startswith(("python", "pip")))
    conda = {CONDA_TO_PIP.get(name, name): spec for name, spec in conda.items()}
    assert conda == pip


def test_notebooks_are_stored_without_outputs():
    import nbformat
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        assert nb.metadata.get("kernelspec", {}).get("language") == "python", path.name
        tagged = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
        assert len(tagged) == 1, f"{path.name}: needs exactly one 'parameters' cell"
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, \
                    f"{path.name}: stored with outputs"


def test_readme_is_a_front_door():
    """README: at most 100 lines, no commit hash (history lives in docs/results.md), and
    every link into the docs names a section that exists."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 100
    hashes = [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", text)
              if re.search(r"\d", w) and re.search(r"[a-f]", w)]
    assert hashes == []
    for doc, section in re.findall(r"\]\((docs/[\w.]+)#([\w-]+)\)", text):
        assert section in _anchors(ROOT / doc), f"README links {doc}#{section}"


def _anchors(path, deepest=4) -> list[str]:
    """GitHub's anchors of a Markdown file's headings of levels 2 to ``deepest`` (outside
    code blocks)."""
    text = re.sub(r"```.*?```", "", Path(path).read_text(), flags=re.S)
    return [re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
            for title in re.findall(rf"^#{{2,{deepest}}} (.+)$", text, re.M)]


def test_design_record_lists_every_section():
    """docs/design.md's contents list links every section and subsection, in order."""
    text = (ROOT / "docs" / "design.md").read_text()
    contents = text.split("## Contents", 1)[1].split("\n## ", 1)[0]
    linked = re.findall(r"\]\(#([\w-]+)\)", contents)
    assert linked == [a for a in _anchors(ROOT / "docs" / "design.md", 3) if a != "contents"]
