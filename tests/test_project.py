"""The project's own files: pip and conda dependency lists agree."""
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
