"""Run the notebooks in dependency order with papermill, with a profile's parameters.

Profiles live in ``notebooks/profiles.yml``.  Each run writes the executed notebooks
to ``runs/<timestamp>/``; a notebook that fails keeps its partial output there and
stops the notebooks that depend on it.
"""
from __future__ import annotations

import datetime
import sys
import time
from pathlib import Path

import yaml

from workbench.files import figures_dir, project_root

NOTEBOOKS_DIR = project_root() / "notebooks"
PROFILES = NOTEBOOKS_DIR / "profiles.yml"
# notebook -> the notebooks it needs; listed in the order they run
DEPENDENCIES = {
    "sr_train": [],
    "sr_eval": ["sr_train"],
    "glsl_deploy": ["sr_train"],
    "classifier_train": [],
    "classifier_deploy": ["classifier_train"],
}


def load_profile(name, path=PROFILES) -> dict:
    """The ``{notebook: parameters}`` of profile ``name``."""
    profiles = yaml.safe_load(Path(path).read_text())
    if name not in profiles:
        raise ValueError(f"{path}: no profile {name!r}; profiles: {', '.join(profiles)}")
    unknown = set(profiles[name]) - set(DEPENDENCIES)
    if unknown:
        raise ValueError(f"{path}: profile {name!r} names unknown notebooks {sorted(unknown)}")
    return profiles[name]


def _expand(value, names):
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, dict):
        return {k: _expand(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, names) for v in value]
    return value


def run(profile="quick", only=None, runs_dir=None, artifacts_dir=None, overrides=None):
    """Execute the profile's notebooks (or those in ``only``); returns ``{name: status}``.

    Statuses: ``ok``, ``failed``, ``skipped (needs X)``.  Raises ``SystemExit`` naming the
    failed notebooks when any failed.
    """
    import logging

    import papermill

    if not logging.getLogger().handlers:  # let papermill stream each cell's output
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    params = load_profile(profile)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    runs_dir = Path(runs_dir or project_root() / "runs" / stamp)
    names = {"artifacts": str(Path(artifacts_dir or project_root() / "runs" / "artifacts" / profile)),
             "figures": str(figures_dir())}
    runs_dir.mkdir(parents=True, exist_ok=True)
    status = {}
    for notebook, needs in DEPENDENCIES.items():
        if notebook not in params or (only and notebook not in only):
            continue
        broken = [n for n in needs if status.get(n, "ok") != "ok"]
        if broken:
            status[notebook] = f"skipped (needs {', '.join(broken)})"
            print(f"[{notebook}] {status[notebook]}")
            continue
        parameters = _expand(params[notebook] or {}, names)
        parameters.update(overrides or {})
        output = runs_dir / f"{notebook}.ipynb"
        print(f"[{notebook}] running -> {output}", flush=True)
        start = time.time()
        try:
            papermill.execute_notebook(NOTEBOOKS_DIR / f"{notebook}.ipynb", output,
                                       parameters=parameters, cwd=project_root(),
                                       kernel_name="python3", progress_bar=False,
                                       log_output=True)
            status[notebook] = "ok"
        except papermill.PapermillExecutionError as err:
            status[notebook] = f"failed in cell {err.exec_count}: {err.ename}: {err.evalue}"
        print(f"[{notebook}] {status[notebook]} ({time.time() - start:.0f} s)", flush=True)
    failed = [n for n, s in status.items() if s.startswith("failed")]
    print("summary: " + ", ".join(f"{n}: {s}" for n, s in status.items()))
    if failed:
        raise SystemExit(f"notebooks failed: {', '.join(failed)} (partial output in {runs_dir})")
    return status


def add_parser(subparsers):
    p = subparsers.add_parser("run", help="execute the notebooks of a profile with papermill")
    p.add_argument("--profile", default="quick", help="quick (default), full or ci")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these notebooks")
    p.add_argument("-p", nargs=2, action="append", metavar=("KEY", "VALUE"), default=[],
                   help="override a parameter in every notebook (VALUE parsed as YAML)")
    p.set_defaults(func=_cli)


def _cli(args):
    run(args.profile, args.only, overrides={k: yaml.safe_load(v) for k, v in args.p})
    return 0


if __name__ == "__main__":
    sys.exit(run())
