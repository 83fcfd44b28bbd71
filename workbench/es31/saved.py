"""An ES 3.1 net's folder, read back (:func:`workbench.es31.load`): every file checked against
the sha256 its manifest lists, the IR graph rebuilt from the manifest's ``graph`` and
``ir.npz``; the net then compiled again from it must give the very files saved
(:func:`require_same`), so an edit the workbench did not make is refused, not run.  Refusals
are one line naming the file."""
from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np

from workbench import ir
from workbench.ir import entries
from workbench.es31.record import OPS
from workbench.files import checked_file, json_text, read_json

FORMAT = "workbench-es31/2"


def graph_entries(graph: ir.Graph) -> tuple[dict, dict[str, np.ndarray]]:
    """``graph`` as a manifest keeps it (each op by its IR type's name and fields:
    :func:`workbench.ir.entries.op_entries`) and its arrays as ``ir.npz`` keeps them,
    ``{"<op>/<field>": array}``.  A back end's form of an op (es2's ``ConvForm``) is saved as
    its IR type."""
    def ir_type(op):
        return OPS.key(type(op))

    ops, arrays = entries.op_entries(
        graph.ops, lambda op: ir_type(op).__name__,
        lambda op, field: field in {f.name for f in fields(ir_type(op))})
    return {"input": asdict(graph.input), "ops": ops, "output": graph.output,
            "name": graph.name, "input_size": graph.input_size, "origin": graph.origin,
            "scaled": sorted(graph.scaled)}, arrays


def graph_of(entry: dict, arrays: dict, path) -> ir.Graph:
    """The graph :func:`graph_entries` saved; ValueError naming ``path`` and an unknown op
    type."""
    ops = [entries.op_type(op, path)(**entries.op_fields(op, arrays)) for op in entry["ops"]]
    size = entry["input_size"]
    return ir.Graph(ir.Input(**entry["input"]), ops, entry["output"], entry["name"],
                    tuple(size) if size else None, entry["origin"], frozenset(entry["scaled"]))


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
            saved, made = entries.arrays(data[name], path), entries.arrays(content, path)
            same = saved.keys() == made.keys() and all(np.array_equal(saved[k], made[k])
                                                       for k in made)
        else:
            same = data[name] == (content.encode() if isinstance(content, str) else content)
        if not same:
            raise ValueError(f"{Path(path).parent / name}: not what the folder's graph and "
                             "options compile to (edited, or saved by another version of the "
                             "workbench); save it again")
