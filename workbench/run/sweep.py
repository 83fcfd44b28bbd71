"""Parameter sweeps: ``python -m workbench sweep NOTEBOOK -p KEY V1,V2 [-p KEY2 ...]``.

Every point of the grid runs the notebook through papermill (with the profile's parameters
and the point's) in a fresh kernel, one executed notebook per point in ``runs/sweep-<time>/``.
After the notebook's own cells, a cell appended by the sweep shows the variable ``collect``
(default ``summary``: a dict or a list of dicts of numbers) as JSON text; the sweep reads
it back from the executed notebook, gathers the points into one table (``sweep.csv`` and
``sweep.json``) and plots the first numeric column against the first swept parameter
(``figures/<profile>/sweep_<notebook>.{png,svg}``).

Points run one after another, on ``workers`` local processes, or on a Dask distributed
cluster (``dask``: the scheduler's address; its workers need the workbench installed). A
point is a picklable function call, :func:`execute_point`, whose result carries the executed
notebook back, so the outputs land in the same place wherever the point ran.
"""
from __future__ import annotations

import concurrent.futures
import copy
import csv
import datetime
import io
import itertools
import json
import multiprocessing
import tempfile
from pathlib import Path


from workbench.files import figures_dir, project_root, write_json, write_text
from workbench.run import pipeline

# a JSON text under a mime type of its own (an application/json output would come back with
# its keys sorted, and the table's columns with them)
COLLECT_MIME = "text/x-workbench-collect"
COLLECT_CELL = """import json as _json
from IPython.display import display as _display
_display({{{mime!r}: _json.dumps(globals().get({name!r}), default=str)}}, raw=True)"""


def grid(values: dict[str, list]) -> list[dict]:
    """All combinations of the swept values, in order."""
    keys = list(values)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(values[k] for k in keys))]


def rows(point: dict, collected) -> list[dict]:
    """Table rows of one point: its parameters and each collected record's scalars."""
    records = collected if isinstance(collected, list) else [collected or {}]
    return [{**point, **{k: v for k, v in r.items() if isinstance(v, (int, float, str))}}
            for r in records if isinstance(r, dict)]


def execute_point(nb: dict, parameters: dict, profile="quick", collect="summary"):
    """Run one point: notebook ``nb`` (a dict) with ``parameters`` and a cell that shows the
    variable ``collect``, in a fresh kernel, with the working directory and figures folder of
    the machine it runs on.  Returns ``(executed notebook, collected value, error or None)``."""
    import nbformat
    import papermill

    nb = nbformat.from_dict(copy.deepcopy(nb))
    nb.cells.append(nbformat.v4.new_code_cell(COLLECT_CELL.format(mime=COLLECT_MIME,
                                                                  name=collect)))
    error = None
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "point.ipynb"
        try:
            with pipeline.profile_env(profile):
                papermill.execute_notebook(nb, output, parameters=parameters,
                                           cwd=project_root(), progress_bar=False,
                                           **pipeline.kernel_options())
        except papermill.PapermillExecutionError as err:
            error = f"failed in cell {err.exec_count}: {err.ename}: {err.evalue}"
        executed = nbformat.read(output, as_version=4)
    shown = [json.loads(o.data[COLLECT_MIME]) for o in executed.cells[-1].get("outputs", [])
             if COLLECT_MIME in o.get("data", {})]
    return executed, (shown[0] if shown else None), error


def run(notebook, values: dict[str, list], profile="quick", collect="summary", out_dir=None,
        notebooks_dir=None, profiles=pipeline.PROFILES, workers=1, dask=None):
    """Run the grid (serially, on ``workers`` local processes, or on the Dask scheduler at
    address ``dask``); returns the collected table (a list of dicts, in grid order).  Raises
    ``SystemExit`` naming the failed points (their executed notebooks keep the output)."""
    import nbformat
    from tqdm import tqdm

    notebooks_dir = Path(notebooks_dir or pipeline.NOTEBOOKS_DIR)
    path = notebooks_dir / f"{notebook}.ipynb"
    if not path.exists():
        raise FileNotFoundError(f"no notebook {notebook!r} in {notebooks_dir}")
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"--workers {workers}: give a whole number >= 1")
    params = pipeline.load_profile(profile, profiles, notebooks_dir).get(notebook) or {}
    known = pipeline.notebook_parameters(path)
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"-p {unknown[0]}: notebook {notebook!r} has no parameter "
                         f"{unknown[0]!r} (it has: {', '.join(sorted(known))})")
    for key, options in values.items():
        for value in options:
            pipeline.check_value(key, value, notebook, known[key], params.get(key))
    client = _client(dask) if dask else None  # before any folder: the address may be wrong
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = Path(out_dir or project_root() / "runs" / f"sweep-{stamp}")
    out_dir.mkdir(parents=True, exist_ok=True)
    names = {"artifacts": str(project_root() / "runs" / "artifacts" / profile),
             "figures": str(figures_dir(profile))}
    nb = nbformat.read(path, as_version=4)
    points = grid(values)
    calls = [(nb, {**pipeline.expand(params, names), **point}, profile, collect)
             for point in points]
    where = f"on {dask}" if dask else f"on {workers} processes" if workers > 1 else "serially"
    print(f"sweep of {notebook}: {len(points)} points {where} -> {out_dir}", flush=True)
    results = {}  # point index -> (collected, error), as they finish
    with tqdm(total=len(points), desc=notebook, unit="point") as bar:
        for i, (executed, collected, error) in _map(calls, workers, client):
            write_text(out_dir / f"{notebook}-{i}.ipynb", nbformat.writes(executed))
            results[i] = collected, error
            bar.update()
    table, failed = [], []
    for i, point in enumerate(points):
        collected, error = results[i]
        if error:
            failed.append(f"{point} ({error})")
        table += rows(point, collected)
    if failed:
        raise SystemExit(f"sweep points failed: {'; '.join(failed)}; executed notebooks in "
                         f"{out_dir}")
    write_json(out_dir / "sweep.json", table)
    write_text(out_dir / "sweep.csv", to_csv(table))
    _figure(notebook, values, table, figures_dir(profile))
    print(f"{len(table)} rows -> {out_dir / 'sweep.csv'}")
    return table


CONNECT_SECONDS = 10  # how long a --dask scheduler has to answer


def _client(address):
    """A Dask client of the scheduler at ``address``; ConnectionError in one line naming
    ``--dask`` when none answers within :data:`CONNECT_SECONDS`."""
    from dask.distributed import Client

    try:
        return Client(address, timeout=CONNECT_SECONDS)
    except (OSError, ValueError) as err:
        raise ConnectionError(f"--dask {address}: no Dask scheduler answers there ("
                              f"{str(err).splitlines()[0]}); start one (dask scheduler) or "
                              "leave --dask out") from None


def _map(calls, workers=1, client=None):
    """Yield ``(index, execute_point(*call))`` as the points finish (on the Dask ``client``,
    which this closes, or ``workers`` local processes)."""
    if client is not None:
        from dask.distributed import as_completed

        with client:
            futures = {client.submit(execute_point, *call, pure=False): i
                       for i, call in enumerate(calls)}
            for future in as_completed(futures):
                yield futures[future], future.result()
    elif workers > 1:
        # spawn: the parent may hold TensorFlow's threads, which a fork does not copy safely
        with concurrent.futures.ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(execute_point, *call): i for i, call in enumerate(calls)}
            for future in concurrent.futures.as_completed(futures):
                yield futures[future], future.result()
    else:
        for i, call in enumerate(calls):
            yield i, execute_point(*call)


def to_csv(table) -> str:
    columns = list(dict.fromkeys(k for row in table for k in row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns)
    writer.writeheader()
    writer.writerows(table)
    return buffer.getvalue()


def _figure(notebook, values, table, directory):
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
    figures.save_figure(fig, f"sweep_{notebook}", directory)
