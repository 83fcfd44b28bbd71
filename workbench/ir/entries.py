"""A graph's ops as a saved net's folder keeps them, for both back ends
(:mod:`workbench.es2.saved`, :mod:`workbench.es31.saved`): each op a JSON entry, its type's
name under ``"type"`` and its other fields as they are, and its arrays in an ``.npz`` under
``"<op name>/<field>"``; read back, JSON lists become tuples again.  Refusals are one line
naming the file."""
from __future__ import annotations

import io
import zipfile
from collections.abc import Callable

import numpy as np

from workbench.ir.ops import OP_TYPES


def op_entries(ops, type_name: Callable, keeps: Callable = lambda op, field: True
               ) -> tuple[list[dict], dict[str, np.ndarray]]:
    """``(entries, arrays)`` of ``ops``: ``type_name(op)`` the name each entry gives its type,
    ``keeps(op, field)`` which of its fields are saved (default all)."""
    entries, arrays = [], {}
    for op in ops:
        entry = {"type": type_name(op)}
        for field, value in vars(op).items():
            if not keeps(op, field):
                continue
            if isinstance(value, np.ndarray):
                arrays[f"{op.name}/{field}"] = value
            else:
                entry[field] = value
        entries.append(entry)
    return entries, arrays


def op_fields(entry: dict, arrays: dict[str, np.ndarray]) -> dict:
    """The fields of the op an entry of :func:`op_entries` saved (its ``type`` left out), with
    its arrays; JSON lists back to tuples (``padding``, ``input_order``, ``others``...)."""
    own = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.split("/", 1)[0] == entry["name"]}
    return {**{k: tuples(v) for k, v in entry.items() if k != "type"}, **own}


def op_type(entry: dict, path) -> type:
    """The IR op type an entry names; ValueError naming the file, the layer and the types
    known."""
    kind = OP_TYPES.get(entry.get("type"))
    if kind is None:
        raise ValueError(f"{path}: layer {entry.get('name')!r} has an op type this workbench "
                         f"does not know ({entry.get('type')!r}); known: {', '.join(OP_TYPES)}")
    return kind


def tuples(value):
    """JSON lists back to tuples, nested ones too."""
    return tuple(tuples(v) for v in value) if isinstance(value, list) else value


def arrays(data: bytes, path):
    """The arrays of an ``.npz`` file's bytes (a dict), or the array of an ``.npy``'s;
    pickled objects are refused, naming the file."""
    try:
        if str(path).endswith(".npy"):
            return np.load(io.BytesIO(data), allow_pickle=False)
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return dict(npz)
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as err:
        raise ValueError(f"{path}: not arrays of numbers the workbench loads ({err}); "
                         "pickled objects are refused") from None
