"""An ES 3.1 net's folder, read back (:func:`workbench.es31.load`): every file checked against
the sha256 its manifest lists, the IR graph rebuilt from the manifest's ``graph`` and
``ir.npz``; the net then compiled again from it must give the very files saved
(:func:`require_same`), so an edit the workbench did not make is refused, not run.  Refusals
are one line naming the file."""
from __future__ import annotations

import io
import json
import zipfile
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np

from workbench import ir
from workbench.es31.record import OPS
from workbench.files import checked_file, json_text, read_json

FORMAT = "workbench-es31/2"


def graph_entries(graph: ir.Graph) -> tuple[dict, dict[str, np.ndarray]]:
    """``graph`` as a manifest keeps it (each op by its IR type's name and fields) and its
    arrays as ``ir.npz`` keeps them, ``{"<op>/<field>": array}``.  A back end's form of an
    op (es2's ``ConvForm``) is saved as its IR type."""
    ops, arrays = [], {}
    for op in graph.ops:
        kind = OPS.key(type(op))
        desc, names = {"type": kind.__name__}, {f.name for f in fields(kind)}
        for key, value in vars(op).items():
            if key in names and isinstance(value, np.ndarray):
                arrays[f"{op.name}/{key}"] = value
            elif key in names:
                desc[key] = value
        ops.append(desc)
    return {"input": asdict(graph.input), "ops": ops, "output": graph.output,
            "name": graph.name, "input_size": graph.input_size, "origin": graph.origin,
            "scaled": sorted(graph.scaled)}, arrays


def _tuples(value):
    """JSON lists back to tuples (an op's ``padding``, ``input_order``, ``others``)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def graph_of(entry: dict, arrays: dict) -> ir.Graph:
    """The graph :func:`graph_entries` saved; ValueError naming an unknown op type."""
    ops = []
    for desc in entry["ops"]:
        kind = ir.OP_TYPES.get(desc["type"])
        if kind is None:
            raise ValueError(f"op type {desc['type']!r} unknown; known: {', '.join(ir.OP_TYPES)}")
        own = {k.split("/", 1)[1]: v for k, v in arrays.items()
               if k.split("/", 1)[0] == desc["name"]}
        ops.append(kind(**{k: _tuples(v) for k, v in desc.items() if k != "type"}, **own))
    size = entry["input_size"]
    return ir.Graph(ir.Input(**entry["input"]), ops, entry["output"], entry["name"],
                    tuple(size) if size else None, entry["origin"], frozenset(entry["scaled"]))


def arrays(data: bytes, path) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file's bytes; pickled objects are refused, naming it."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return dict(npz)
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as err:
        raise ValueError(f"{path}: not arrays of numbers the workbench loads ({err}); "
                         "pickled objects are refused") from None


def read(directory) -> tuple[dict, dict[str, bytes]]:
    """The manifest of a saved ES 3.1 net and ``{file: bytes}`` of every file it lists, each
    checked against its sha256 (:func:`workbench.files.checked_file`)."""
    directory = Path(directory)
    path = directory / "manifest.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no manifest; is this a saved net?")
    manifest = read_json(path)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise ValueError(f"{path}: not a saved ES 3.1 net of this workbench (format {found!r}, "
                         f"not {FORMAT!r}); save it again")
    digests = manifest.get("files")
    listed = list(digests) if isinstance(digests, dict) else []
    return manifest, {name: checked_file(directory, name, digests, path) for name in listed}


def require_same(files: dict, manifest: dict, data: dict[str, bytes], path):
    """ValueError in one line unless ``files`` (the net compiled again from the folder's graph
    and options) are the folder's: ``data`` (its files' bytes; ``.npz`` compared by their
    arrays) and ``manifest`` but for its ``files`` (the digests of ``.npz`` bytes, which hold
    the time they were written)."""
    for name, content in files.items():
        if name == "manifest.json":
            same = ({**json.loads(json_text(content)), "files": None}
                    == {**manifest, "files": None})
        elif name not in data:
            same = False
        elif name.endswith(".npz"):
            saved, made = arrays(data[name], path), arrays(content, path)
            same = saved.keys() == made.keys() and all(np.array_equal(saved[k], made[k])
                                                       for k in made)
        else:
            same = data[name] == (content.encode() if isinstance(content, str) else content)
        if not same:
            raise ValueError(f"{Path(path).parent / name}: not what the folder's graph and "
                             "options compile to (edited, or saved by another version of the "
                             "workbench); save it again")
