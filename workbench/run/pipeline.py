"""Run the notebooks in the profile's order with papermill, with the profile's parameters.

Profiles live in ``notebooks/profiles.yml``.  Each run writes the executed notebooks
to ``runs/<timestamp>/``; a notebook that fails keeps its partial output there and
stops the notebooks that depend on it.  Results go to ``figures/<profile>/``; a notebook whose
parameters ``-p`` changes from the profile's writes its own into
``figures/<profile>-custom/<notebook>-<variant>/`` (:func:`variant_name`), never over the
profile's.  A notebook whose source, parameters and upstream
steps did not change since its last successful run is skipped (``force`` re-runs it).
With ``jobs`` > 1 notebooks whose upstream steps are done run side by side, except those
that declare ``# alone:`` (they time something, or gather the run's results): such a
notebook waits for every notebook listed before it and runs with nothing beside it.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import re
import tempfile
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import yaml

from workbench.files import PROFILE_ENV, figures_dir, project_root, read_json, write_json

NOTEBOOKS_DIR = project_root() / "notebooks"
PROFILES = NOTEBOOKS_DIR / "profiles.yml"
DECLARED = ("upstream", "data", "alone")  # a parameters cell's "# upstream: a, b" lines


def declarations(path) -> dict[str, list[str]]:
    """What a notebook's ``parameters`` cell declares beside its parameters: ``# upstream:``
    the notebooks whose results it reads, ``# data:`` the data sets it reads (names of
    ``workbench/data/data_manifest.json``), ``# alone:`` why it must run with no other
    notebook beside it (it times something, or gathers the run's results); ``none`` or no
    line: nothing."""
    import nbformat

    cell = next((c for c in nbformat.read(path, as_version=4).cells
                 if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    found = {key: [] for key in DECLARED}
    for line in (cell.source if cell else "").splitlines():
        key, _, value = line.lstrip("# ").partition(":")
        if line.startswith("#") and key.strip() in DECLARED and value.strip() != "none":
            found[key.strip()] = [v.strip() for v in value.split(",") if v.strip()]
    return found


def upstream_of(notebooks_dir, names) -> dict[str, list[str]]:
    """``{notebook: its upstream notebooks}`` for ``names`` in their run order; an upstream
    notebook must come earlier in that order."""
    deps = {}
    for name in names:
        deps[name] = declarations(Path(notebooks_dir) / f"{name}.ipynb")["upstream"]
        late = [n for n in deps[name] if n not in deps]
        if late:
            raise ValueError(f"notebook {name!r} declares upstream {late}, which must run before "
                             "it: list them earlier in the profile")
    return deps


def ensure_data(notebooks, data: dict, root=None, manifest=None):
    """Fetch the data sets ``notebooks`` read (``data[notebook]``) that are missing under
    ``root`` (default: the data root); raises ValueError in one line naming what to fetch,
    and how, when that fails (offline)."""
    from workbench.data import catalog, fetch

    needed = list(dict.fromkeys(d for n in notebooks for d in data.get(n, ())))
    absent, command = catalog.missing(needed, root, manifest) if needed else ([], None)
    if absent:
        print(f"fetching the data the run needs: {', '.join(absent)}", flush=True)
        try:
            fetch.fetch(absent, root if root is not None else catalog.default_root(), manifest)
        except (catalog.FetchError, OSError) as err:
            first = str(err).splitlines()[0]
            raise ValueError(f"the run needs {', '.join(absent)}, which could not be fetched "
                             f"({first}); fetch with: {command}") from None


def load_profile(name, path=PROFILES, notebooks_dir=None) -> dict:
    """The ``{notebook: parameters}`` of profile ``name``, in the order they run."""
    profiles = yaml.safe_load(Path(path).read_text())
    if name not in profiles:
        raise ValueError(f"{path}: no profile {name!r}; profiles: {', '.join(profiles)}")
    books = Path(notebooks_dir or NOTEBOOKS_DIR)
    unknown = [n for n in profiles[name] if not (books / f"{n}.ipynb").exists()]
    if unknown:
        raise ValueError(f"{path}: profile {name!r} names unknown notebooks {sorted(unknown)}")
    return profiles[name]


def expand(value, names):
    """Fill ``{artifacts}`` and ``{figures}`` into a profile's parameters."""
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, dict):
        return {k: expand(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v, names) for v in value]
    return value


def kernel_options() -> dict:
    """papermill's kernel options for one notebook: a fresh ``python3`` kernel talking over
    IPC sockets (files at a new temporary path) instead of TCP, so that ipykernel has no
    "running over TCP without encryption" warning to print and concurrent kernels never meet."""
    from traitlets.config import Config

    ip = Path(tempfile.gettempdir()) / f"workbench-kernel-{uuid.uuid4().hex[:16]}"
    return {"kernel_name": "python3",
            "config": Config({"KernelManager": {"transport": "ipc", "ip": str(ip)}})}


@contextlib.contextmanager
def profile_env(profile):
    """Set ``$WORKBENCH_PROFILE`` for the kernels started inside (``files.figures_dir`` reads
    it there), restoring the previous value after."""
    old = os.environ.get(PROFILE_ENV)
    os.environ[PROFILE_ENV] = profile
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(PROFILE_ENV, None)
        else:
            os.environ[PROFILE_ENV] = old


def fingerprint(notebook_path, parameters, upstream) -> str:
    """What a step's result depends on: the notebook, its parameters, its upstream steps."""
    digest = hashlib.sha256(Path(notebook_path).read_bytes())
    digest.update(json.dumps([parameters, upstream], sort_keys=True, default=str).encode())
    return digest.hexdigest()


def notebook_parameters(path) -> dict:
    """``{name: default value}`` of a notebook's ``parameters`` cell (a default that is not a
    Python literal as ``...``)."""
    import ast

    import papermill

    def literal(text):
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return ...
    return {name: literal(spec["default"])
            for name, spec in papermill.inspect_notebook(str(path)).items()}


_KINDS = ((bool, "true/false"), ((int, float), "a number"), (str, "a string"),
          ((list, tuple), "a list"), (dict, "a mapping"))


def _kind(value):
    """The kind of a parameter value, as a notebook reads it (an int is a number)."""
    if value is None:
        return "null"
    return next((name for types, name in _KINDS if isinstance(value, types)), "other")


def check_value(key, value, notebook, default, profile_value=None):
    """Raise ValueError, naming ``-p KEY``, when ``value`` is not of the kind of the notebook's
    default or the profile's value for it (null fits where the default is None; a parameter
    neither gives a kind, as a default ``None`` the profile does not set, takes anything)."""
    kinds = {_kind(v) for v in (default, profile_value) if v is not None and v is not ...}
    if not kinds or "other" in kinds or _kind(value) in kinds | (
            {"null"} if default is None else set()):
        return
    shown = profile_value if profile_value is not None else default
    raise ValueError(f"-p {key} {value!r}: {notebook}'s {key.rpartition('.')[2]} takes "
                     f"{' or '.join(sorted(kinds))} (as {shown!r}), not {_kind(value)}")


def scope_overrides(overrides: dict, parameters: dict[str, dict],
                    profile: dict | None = None) -> dict[str, dict]:
    """``{"NOTEBOOK.KEY" or "KEY": value}`` -> ``{notebook: {key: value}}``.

    ``parameters``: each notebook of the run and its parameters' defaults
    (:func:`notebook_parameters`); ``profile``: the profile's ``{notebook: parameters}``.  A
    plain ``KEY`` goes to the one notebook that has it; a key no notebook has, or that
    several have, or a value of the wrong kind (:func:`check_value`) is an error that names
    them.
    """
    scoped = {}
    for key, value in (overrides or {}).items():
        notebook, _, name = key.rpartition(".")
        if notebook:
            if notebook not in parameters:
                raise ValueError(f"-p {key}: no notebook {notebook!r} in this run "
                                 f"(notebooks: {', '.join(parameters)})")
            if name not in parameters[notebook]:
                raise ValueError(f"-p {key}: notebook {notebook!r} has no parameter {name!r} "
                                 f"(it has: {', '.join(sorted(parameters[notebook]))})")
            owners = [notebook]
        else:
            owners = [n for n, names in parameters.items() if name in names]
            if not owners:
                raise ValueError(f"-p {key}: no notebook of this run has a parameter {name!r}")
            if len(owners) > 1:
                raise ValueError(f"-p {key}: {', '.join(owners)} all have {name!r}; "
                                 f"say which, e.g. -p {owners[0]}.{name} VALUE")
        given = ((profile or {}).get(owners[0]) or {}).get(name)
        check_value(key, value, owners[0], parameters[owners[0]][name], given)
        scoped.setdefault(owners[0], {})[name] = value
    return scoped


def variant_name(changed: dict) -> str:
    """A short folder name for the parameters ``changed`` from a profile's (``{key: value}``):
    a string's file stem (``my.keras`` -> ``my``; ``mediump`` as it is), another value as
    ``KEY=VALUE``; joined by ``-``, characters other than letters, digits, ``._=+-`` dropped."""
    parts = [Path(v).stem if isinstance(v, str) else f"{k}={json.dumps(v)}"
             for k, v in changed.items()]
    return re.sub(r"[^\w.=+-]+", "", "-".join(parts))[:60].strip(".-") or "custom"


def custom_folders(profile, params, overrides, defaults, names) -> dict[str, Path]:
    """``{notebook: its results folder}`` for each notebook whose ``overrides`` change a
    parameter from the profile's value (or the notebook's default where the profile sets
    none): ``figures/<profile>-custom/<notebook>-<variant>``; printed."""
    folders = {}
    for notebook, given in overrides.items():
        base = {**defaults[notebook], **expand(params[notebook] or {}, names)}
        changed = {k: v for k, v in given.items() if base.get(k) != v}
        if changed:
            folders[notebook] = (figures_dir(f"{profile}-custom")
                                 / f"{notebook}-{variant_name(changed)}")
            print(f"[{notebook}] -p {', '.join(changed)} differs from profile {profile!r}: its "
                  f"results go to {folders[notebook]} (not {names['figures']})", flush=True)
    return folders


@dataclass(frozen=True)
class Places:
    """Where a run's files live and come from; None: the workbench's own.  ``profiles``: the
    profiles' YAML (:data:`PROFILES`); ``notebooks_dir``: the notebooks
    (:data:`NOTEBOOKS_DIR`); ``runs_dir``: the executed notebooks (``runs/<timestamp>/``);
    ``artifacts_dir``: the profile's artifacts and the run's state
    (``runs/artifacts/<profile>/``); ``data_root``: the data sets; ``manifest``: the data
    manifest's entries, where missing data is fetched from (:func:`ensure_data`)."""

    profiles: Path | str = PROFILES
    notebooks_dir: Path | str | None = None
    runs_dir: Path | str | None = None
    artifacts_dir: Path | str | None = None
    data_root: Path | str | None = None
    manifest: dict | None = None


def run(profile="quick", only=None, overrides=None, force=False, places=Places(),
        dependencies=None, data=None, verbose=False, jobs=1):
    """Execute the profile's notebooks (or those in ``only``) in the profile's order; returns
    ``{name: status}``; one line a notebook (``verbose``: papermill's cell-by-cell trace and
    every cell's output as it comes).  ``overrides``: ``{"NOTEBOOK.KEY" or "KEY": value}`` (see
    :func:`scope_overrides`).  ``places``: where its files live (:class:`Places`).  Each
    notebook declares its upstream notebooks and its data beside its parameters
    (:func:`declarations`; ``dependencies`` and ``data`` replace them).  Missing data is
    fetched first (:func:`ensure_data`).  Figures go to ``figures/<profile>/`` (the
    ``{figures}`` of the profile's values), those of a notebook whose overrides change its
    parameters to a folder of its own (:func:`custom_folders`: its ``{figures}`` and its
    ``results_dir``, unless ``-p`` gives one; its last run recorded apart from the profile's).
    ``jobs``: how many notebooks may run at once (each in its own kernel); a notebook that
    declares ``# alone:`` runs after every notebook listed before it, with none beside it.

    Statuses: ``ok``, ``unchanged`` (notebook, parameters and upstream steps as at its last
    successful run: skipped unless ``force``), ``failed in cell N: ...`` (the executed copy
    keeps its partial output), ``skipped (needs X)``.  Raises ``SystemExit`` naming the failed
    notebooks and cells when any failed.
    """
    import logging
    import sys

    import papermill

    jobs = max(1, int(jobs))
    trace = logging.getLogger("papermill")
    if verbose and not trace.handlers:  # let papermill stream each cell's output
        trace.addHandler(logging.StreamHandler(sys.stderr))
        trace.setLevel(logging.INFO)
    notebooks_dir = Path(places.notebooks_dir or NOTEBOOKS_DIR)
    params = load_profile(profile, places.profiles, notebooks_dir)
    dependencies = dependencies or upstream_of(notebooks_dir, params)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    runs_dir = Path(places.runs_dir or project_root() / "runs" / stamp)
    artifacts = Path(places.artifacts_dir or project_root() / "runs" / "artifacts" / profile)
    names = {"artifacts": str(artifacts), "figures": str(figures_dir(profile))}
    state_path = artifacts / "pipeline-state.json"
    state = read_json(state_path, default={})
    unknown = sorted(set(only or ()) - set(params))
    if unknown:
        raise ValueError(f"--only {' '.join(unknown)}: not a notebook of profile {profile!r} "
                         f"(its notebooks: {', '.join(params)})")
    selected = [n for n in dependencies if n in params and (not only or n in only)]
    defaults = {n: notebook_parameters(notebooks_dir / f"{n}.ipynb") for n in selected}
    overrides = scope_overrides(overrides, defaults, params)
    custom = custom_folders(profile, params, overrides, defaults, names)
    key = {n: f"{n}:{custom[n].name}" if n in custom else n for n in selected}  # in ``state``
    declared = {n: declarations(notebooks_dir / f"{n}.ipynb") for n in selected}
    data = data if data is not None else {n: declared[n]["data"] for n in selected}
    ensure_data(selected, data, places.data_root, places.manifest)
    runs_dir.mkdir(parents=True, exist_ok=True)
    status, prints = {}, {}

    def settled(notebook):  # its status without running it, or None: it must run
        needs = dependencies[notebook]
        broken = [n for n in needs if status.get(n, "ok") not in ("ok", "unchanged")]
        if broken:
            return f"skipped (needs {', '.join(broken)})"
        prints[notebook] = fingerprint(notebooks_dir / f"{notebook}.ipynb", parameters(notebook),
                                       [prints.get(n) or state.get(n) for n in needs])
        if not force and state.get(key[notebook]) == prints[notebook]:
            return "unchanged"
        return None

    def parameters(notebook):
        if notebook not in custom:
            return {**expand(params[notebook] or {}, names), **overrides.get(notebook, {})}
        folder = str(custom[notebook])
        own = expand(params[notebook] or {}, {**names, "figures": folder})
        if "results_dir" in defaults[notebook]:
            own.setdefault("results_dir", folder)
        return {**own, **overrides[notebook]}

    def execute(notebook, output):
        if notebook in custom:
            custom[notebook].mkdir(parents=True, exist_ok=True)
        try:  # quiet: a line a notebook, papermill's bar of cells on a terminal, every
            # cell's output in the executed notebook; verbose: the cell-by-cell trace
            papermill.execute_notebook(notebooks_dir / f"{notebook}.ipynb", output,
                                       parameters=parameters(notebook), cwd=project_root(),
                                       log_output=verbose,
                                       progress_bar=not verbose and jobs == 1
                                       and sys.stderr.isatty(), **kernel_options())
            return "ok"
        except papermill.PapermillExecutionError as err:
            return f"failed in cell {err.exec_count}: {err.ename}: {err.evalue}"

    pending, running, started = list(selected), {}, 0
    with profile_env(profile), ThreadPoolExecutor(jobs) as pool:
        while pending or running:
            batch = _startable(pending, running, selected, dependencies, declared, status, jobs)
            for notebook in batch:
                pending.remove(notebook)
                status[notebook] = settled(notebook)
                if status[notebook] is not None:
                    print(f"[{notebook}] " + ("unchanged since its last run: skipped (force to "
                          "re-run)" if status[notebook] == "unchanged" else status[notebook]))
                    continue
                started += 1
                output = runs_dir / f"{notebook}.ipynb"
                print(f"[{notebook}] running ({started}/{len(selected)}) -> {output}", flush=True)
                running[pool.submit(execute, notebook, output)] = (notebook, time.time())
            if not running or any(status[n] is not None for n in batch):
                continue  # a notebook skipped left its place free: fill it before waiting
            for future in wait(running, return_when=FIRST_COMPLETED).done:
                notebook, start = running.pop(future)
                status[notebook] = future.result()
                if status[notebook] == "ok":
                    state[key[notebook]] = prints[notebook]
                else:
                    state.pop(key[notebook], None)
                write_json(state_path, state)
                print(f"[{notebook}] {status[notebook]} ({time.time() - start:.0f} s)",
                      flush=True)
    status = {n: status[n] for n in selected}
    failed = [f"{n} ({s})" for n, s in status.items() if s.startswith("failed")]
    print("summary: " + ", ".join(f"{n}: {s}" for n, s in status.items()))
    if failed:
        raise SystemExit(f"notebooks failed: {'; '.join(failed)}; partial output in {runs_dir}")
    return status


def _startable(pending, running, order, dependencies, declared, status, jobs):
    """The pending notebooks that may start now, in the profile's order: their upstream
    steps done and a job free; a notebook that declares ``# alone:`` only once everything
    listed before it is done and nothing runs, and nothing listed after it before it is done.
    ``status``: a finished notebook's status; None while it runs."""
    def done(names):
        return all(status.get(n) is not None for n in names if n in order)

    chosen = []
    for notebook in pending:
        if declared[notebook]["alone"]:
            if not running and not chosen and done(order[:order.index(notebook)]):
                chosen.append(notebook)
            break
        if len(chosen) < jobs - len(running) and done(dependencies[notebook]):
            chosen.append(notebook)
    return chosen
