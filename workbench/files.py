"""Files the workbench writes: always atomically (temp file in the same folder, then
``os.replace``), so an interrupted run never leaves a half-written output behind."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path


def project_root() -> Path:
    """The checkout this package lives in (the folder holding ``pyproject.toml``),
    or the current directory for an installed copy."""
    here = Path(__file__).resolve().parents[1]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


def figures_dir() -> Path:
    """Where figures go: ``$WORKBENCH_FIGURES`` or ``<project>/figures``."""
    return Path(os.environ.get("WORKBENCH_FIGURES") or project_root() / "figures")


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path next to ``path``; it replaces ``path`` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_json(path, obj):
    """Write ``obj`` as indented JSON, atomically."""
    write_text(path, json.dumps(obj, indent=2, default=_to_builtin) + "\n")


def read_json(path, default=None):
    path = Path(path)
    if not path.exists():
        return default
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None


def _to_builtin(obj):
    """JSON fallback for numpy scalars and paths."""
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def write_text(path, text):
    """Write ``text`` to ``path``, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
