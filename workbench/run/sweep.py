"""Parameter sweeps: ``python -m workbench sweep NOTEBOOK -p KEY V1,V2 [-p KEY2 ...]``.

Every point of the grid runs the notebook through papermill (with the profile's parameters
and the point's), one executed notebook per point in ``runs/sweep-<time>/``.  After the
notebook's own cells, a cell appended by the sweep saves the variable ``collect`` (default
``summary``: a dict or a list of dicts of numbers) as JSON; the sweep gathers them into one
table (``sweep.csv`` and ``sweep.json``) and plots the first numeric column against the
first swept parameter (``figures/sweep_<notebook>.{png,svg}``).
"""
from __future__ import annotations

import csv
import datetime
import io
import itertools
import json
from pathlib import Path

import yaml

from workbench.files import figures_dir, project_root, write_json, write_text
from workbench.run import pipeline

COLLECT_CELL = """import json as _json, pathlib as _pathlib
_pathlib.Path({path!r}).write_text(_json.dumps(globals().get({name!r}), default=str))"""


def grid(values: dict[str, list]) -> list[dict]:
    """All combinations of the swept values, in order."""
    keys = list(values)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(values[k] for k in keys))]


def rows(point: dict, collected) -> list[dict]:
    """Table rows of one point: its parameters and each collected record's scalars."""
    records = collected if isinstance(collected, list) else [collected or {}]
    return [{**point, **{k: v for k, v in r.items() if isinstance(v, (int, float, str))}}
            for r in records if isinstance(r, dict)]


def run(notebook, values: dict[str, list], profile="quick", collect="summary", out_dir=None,
        notebooks_dir=None, profiles=pipeline.PROFILES):
    """Run the grid; returns the collected table (a list of dicts)."""
    import nbformat
    import papermill

    notebooks_dir = Path(notebooks_dir or pipeline.NOTEBOOKS_DIR)
    params = yaml.safe_load(Path(profiles).read_text()).get(profile, {}).get(notebook) or {}
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = Path(out_dir or project_root() / "runs" / f"sweep-{stamp}")
    out_dir.mkdir(parents=True, exist_ok=True)
    names = {"artifacts": str(project_root() / "runs" / "artifacts" / profile),
             "figures": str(figures_dir())}
    table, points = [], grid(values)
    for i, point in enumerate(points):
        result = out_dir / f"{notebook}-{i}.json"
        nb = nbformat.read(notebooks_dir / f"{notebook}.ipynb", as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(COLLECT_CELL.format(path=str(result), name=collect)))
        source = out_dir / f".{notebook}-{i}.source.ipynb"
        nbformat.write(nb, source)
        print(f"[{notebook} {i + 1}/{len(points)}] {point}", flush=True)
        papermill.execute_notebook(source, out_dir / f"{notebook}-{i}.ipynb",
                                   parameters={**pipeline.expand(params, names), **point},
                                   cwd=project_root(), kernel_name="python3",
                                   progress_bar=False)
        source.unlink()
        table += rows(point, json.loads(result.read_text()))
    write_json(out_dir / "sweep.json", table)
    write_text(out_dir / "sweep.csv", to_csv(table))
    _figure(notebook, values, table)
    print(f"{len(table)} rows -> {out_dir / 'sweep.csv'}")
    return table


def to_csv(table) -> str:
    columns = list(dict.fromkeys(k for row in table for k in row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns)
    writer.writeheader()
    writer.writerows(table)
    return buffer.getvalue()


def _figure(notebook, values, table):
    from workbench import figures

    key = next(iter(values))
    numeric = [k for k in (table[0] if table else {}) if k not in values
               and all(isinstance(r.get(k), (int, float)) for r in table)]
    if not numeric:
        return
    fig, ax = figures.plt.subplots(figsize=(5, 3.2))
    ax.plot([str(r[key]) for r in table], [r[numeric[0]] for r in table], "o-")
    ax.set_xlabel(key)
    ax.set_ylabel(numeric[0])
    ax.set_title(f"sweep of {notebook}")
    ax.grid(alpha=0.3)
    figures.save_figure(fig, f"sweep_{notebook}")
