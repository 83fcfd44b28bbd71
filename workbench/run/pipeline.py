"""Run the notebooks in dependency order with papermill, with a profile's parameters.

Profiles live in ``notebooks/profiles.yml``.  Each run writes the executed notebooks
to ``runs/<timestamp>/``; a notebook that fails keeps its partial output there and
stops the notebooks that depend on it.  A notebook whose source, parameters and upstream
steps did not change since its last successful run is skipped (``force`` re-runs it).
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import tempfile
import time
import uuid
from pathlib import Path

import yaml

from workbench.files import PROFILE_ENV, figures_dir, project_root, read_json, write_json

NOTEBOOKS_DIR = project_root() / "notebooks"
PROFILES = NOTEBOOKS_DIR / "profiles.yml"
# notebook -> the notebooks it needs; listed in the order they run
DEPENDENCIES = {
    "sr_train": [],
    "sr_eval": ["sr_train"],
    "glsl_deploy": ["sr_train"],
    "sr_recipes": [],
    "classifier_train": [],
    "classifier_deploy": ["classifier_train"],
    "activations": [],
    "shuffle": [],
    "conv_algorithms": [],
    "figures": [],  # last: the report of whatever the run produced
}
# notebook -> the data sets it reads (names of workbench/data/data_manifest.json); fetched
# before the run when missing
DATA = {
    "sr_train": ["train"], "sr_eval": ["Set5", "Set14"], "glsl_deploy": ["Set5", "Set14"],
    "sr_recipes": ["train", "Set5", "Set14"],
    "classifier_train": ["cifar10"], "classifier_deploy": ["cifar10"], "activations": ["cifar10"],
}


def ensure_data(notebooks, data=None, root=None, manifest=None):
    """Fetch the data sets ``notebooks`` read that are missing under ``root`` (default: the
    data root); raises ValueError in one line naming what to fetch, and how, when that fails
    (offline)."""
    from workbench.data import fetch

    data = DATA if data is None else data
    needed = list(dict.fromkeys(d for n in notebooks for d in data.get(n, ())))
    absent, command = fetch.missing(needed, root, manifest) if needed else ([], None)
    if absent:
        print(f"fetching the data the run needs: {', '.join(absent)}", flush=True)
        try:
            fetch.fetch(absent, root if root is not None else fetch.default_root(), manifest)
        except (fetch.FetchError, OSError) as err:
            first = str(err).splitlines()[0]
            raise ValueError(f"the run needs {', '.join(absent)}, which could not be fetched "
                             f"({first}); fetch with: {command}") from None


def load_profile(name, path=PROFILES, dependencies=None) -> dict:
    """The ``{notebook: parameters}`` of profile ``name``."""
    profiles = yaml.safe_load(Path(path).read_text())
    if name not in profiles:
        raise ValueError(f"{path}: no profile {name!r}; profiles: {', '.join(profiles)}")
    unknown = set(profiles[name]) - set(dependencies or DEPENDENCIES)
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


def notebook_parameters(path) -> set[str]:
    """The names in a notebook's ``parameters`` cell."""
    import papermill

    return set(papermill.inspect_notebook(str(path)))


def scope_overrides(overrides: dict, parameters: dict[str, set]) -> dict[str, dict]:
    """``{"NOTEBOOK.KEY" or "KEY": value}`` -> ``{notebook: {key: value}}``.

    ``parameters``: each notebook of the run and its parameter names.  A plain ``KEY`` goes
    to the one notebook that has it; a key no notebook has, or that several have, is an
    error that names them.
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
        scoped.setdefault(owners[0], {})[name] = value
    return scoped


def run(profile="quick", only=None, runs_dir=None, artifacts_dir=None, overrides=None,
        force=False, profiles=PROFILES, notebooks_dir=None, dependencies=None, data=None,
        data_root=None, manifest=None):
    """Execute the profile's notebooks (or those in ``only``) in dependency order; returns
    ``{name: status}``.  ``overrides``: ``{"NOTEBOOK.KEY" or "KEY": value}`` (see
    :func:`scope_overrides`).  Missing data is fetched first (:func:`ensure_data`; ``data``,
    ``data_root`` and ``manifest`` replace :data:`DATA`, the data root and the manifest).
    Figures go to ``figures/<profile>/`` (``files.figures_dir``).

    Statuses: ``ok``, ``unchanged`` (notebook, parameters and upstream steps as at its last
    successful run: skipped unless ``force``), ``failed in cell N: ...`` (the executed copy
    keeps its partial output), ``skipped (needs X)``.  Raises ``SystemExit`` naming the failed
    notebooks and cells when any failed.
    """
    import logging

    import papermill

    if not logging.getLogger().handlers:  # let papermill stream each cell's output
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    notebooks_dir = Path(notebooks_dir or NOTEBOOKS_DIR)
    dependencies = dependencies or DEPENDENCIES
    params = load_profile(profile, profiles, dependencies)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    runs_dir = Path(runs_dir or project_root() / "runs" / stamp)
    artifacts = Path(artifacts_dir or project_root() / "runs" / "artifacts" / profile)
    names = {"artifacts": str(artifacts), "figures": str(figures_dir(profile))}
    state_path = artifacts / "pipeline-state.json"
    state = read_json(state_path, default={})
    unknown = sorted(set(only or ()) - set(params))
    if unknown:
        raise ValueError(f"--only {' '.join(unknown)}: not a notebook of profile {profile!r} "
                         f"(its notebooks: {', '.join(params)})")
    selected = [n for n in dependencies if n in params and (not only or n in only)]
    overrides = scope_overrides(overrides, {n: notebook_parameters(notebooks_dir / f"{n}.ipynb")
                                            for n in selected})
    ensure_data(selected, data, data_root, manifest)
    runs_dir.mkdir(parents=True, exist_ok=True)
    status, prints = {}, {}
    for step, notebook in enumerate(selected, 1):
        needs = dependencies[notebook]
        broken = [n for n in needs if status.get(n, "ok") not in ("ok", "unchanged")]
        if broken:
            status[notebook] = f"skipped (needs {', '.join(broken)})"
            print(f"[{notebook}] {status[notebook]}")
            continue
        parameters = expand(params[notebook] or {}, names)
        parameters.update(overrides.get(notebook, {}))
        source = notebooks_dir / f"{notebook}.ipynb"
        prints[notebook] = fingerprint(source, parameters,
                                       [prints.get(n) or state.get(n) for n in needs])
        if not force and state.get(notebook) == prints[notebook]:
            status[notebook] = "unchanged"
            print(f"[{notebook}] unchanged since its last run: skipped (force to re-run)")
            continue
        output = runs_dir / f"{notebook}.ipynb"
        print(f"[{notebook}] running ({step}/{len(selected)}) -> {output}", flush=True)
        start = time.time()
        try:
            with profile_env(profile):
                papermill.execute_notebook(source, output, parameters=parameters,
                                           cwd=project_root(), progress_bar=False,
                                           log_output=True, **kernel_options())
            status[notebook] = "ok"
            state[notebook] = prints[notebook]
            write_json(state_path, state)
        except papermill.PapermillExecutionError as err:
            status[notebook] = f"failed in cell {err.exec_count}: {err.ename}: {err.evalue}"
            state.pop(notebook, None)
            write_json(state_path, state)
        print(f"[{notebook}] {status[notebook]} ({time.time() - start:.0f} s)", flush=True)
    failed = [f"{n} ({s})" for n, s in status.items() if s.startswith("failed")]
    print("summary: " + ", ".join(f"{n}: {s}" for n, s in status.items()))
    if failed:
        raise SystemExit(f"notebooks failed: {'; '.join(failed)}; partial output in {runs_dir}")
    return status
