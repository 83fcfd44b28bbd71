"""A compiled ES 2.0 net as a folder (:meth:`workbench.es2.net.Net.save`, :func:`files`):
``<pass>.glsl``, ``vertex.glsl``, ``weights.npz``, the constant textures (``.npy``) and
``manifest.json``, which states the conventions, the target, every op with the back end's
choices (its prepared form's fields: a convolution's stages, order, bits and borders, a dense
layer's number format and blocks) and every pass; and read back, every file checked against
its sha256 (:func:`read`) and the manifest against its own (``manifest_sha256``,
:func:`sealed`): an edit the workbench did not make is refused, not run.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path


from workbench import ir
from workbench.ir import entries
from workbench.es2 import limits, plan
from workbench.es2.ops.conv.orders import LAST
from workbench.es2.record import record, record_of_type
from workbench.es2.shaders import PRECISIONS, VERTEX_SHADER, Binding, Pass, constant_textures
from workbench.files import checked_file, content_bytes, json_text, read_json, sha256

CONVENTIONS = (
    "One RGBA8 texture per 4 channels (channel c = component c % 4 of pack c // 4); texture row "
    "r = tensor row r; pixel (col, row) = gl_FragCoord.xy - 0.5. Uniforms set from the tensor "
    "shapes: u_in_texel = 1 / (width, height) of the input, u_v_pad = zero padding before the "
    "first column and row (TensorFlow 'SAME'); the u_v_* uniforms are the vertex shader's "
    "(vertex.glsl: a window's first tap, the varying v_uv; the varying v_out, a fragment's own "
    "texel centre in a texture of the drawn area's size), left 0 where a pass has none. Samplers: "
    "CLAMP_TO_EDGE, filter as the binding says. A fullscreen quad is drawn per pass, into its "
    "outputs: gl_FragData[i] (GL_EXT_draw_buffers) to outputs[i], or gl_FragColor to the one; "
    "within its viewport where it has one; a pass with a border (left, top) clears its outputs "
    "to 0 first and draws (left, top, the output tensor's width, height) only.")
SEAL = "manifest_sha256"  # the manifest's own sha256 (:func:`sealed`)


def seal(obj: dict, key: str) -> str:
    """The sha256 of a JSON object without its ``key``: of its canonical text (keys sorted,
    no spaces, ASCII), which run.py of a bundle computes the same way."""
    body = {k: v for k, v in obj.items() if k != key}
    return sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def sealed(obj: dict, key: str = SEAL) -> dict:
    """``obj`` as its JSON file holds it (tuples as lists, numpy scalars as numbers), with
    ``key`` its :func:`seal`: a manifest's (``manifest_sha256``) or a bundle's."""
    obj = json.loads(json_text({k: v for k, v in obj.items() if k != key}))
    return {**obj, key: seal(obj, key)}


def check_seal(obj, key: str, path) -> dict:
    """``obj`` (a JSON file's content) where it holds its own :func:`seal` under ``key``; else
    ValueError in one line naming ``path``."""
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: not a JSON object")
    if key not in obj:
        raise ValueError(f"{path}: has no {key} (saved by an older workbench, or edited): "
                         "save it again")
    if obj[key] != seal(obj, key):
        raise ValueError(f"{path}: edited after it was saved ({key} differs); save it again")
    return obj


def files(graph: ir.Graph, passes: list[Pass], target: limits.Target, check=None,
          options=None, changes=()) -> dict:
    """A compiled net as a folder, ``{file name: content}``: ``<pass>.glsl``, ``vertex.glsl``,
    ``weights.npz``, the constant textures (``.npy``) and ``manifest.json``, whose
    ``files`` lists the sha256 of every other one, ``manifest_sha256`` its own
    (:func:`sealed`), ``reference_check`` what ``check``
    (:class:`workbench.es2.reference.Check`) measured and ``plan`` the compile options it
    was made with (``{"options": Net.plan, "changes": what fit / tune changed}``)."""
    files = {f"{p.name}.glsl": p.source for p in passes}
    arrays = {f"{p.name}.{name}.npy": rows for p in passes
              for name, rows in p.arrays.items()}  # vec4 uniform arrays
    files.update({name: content_bytes(name, rows) for name, rows in arrays.items()})
    files["vertex.glsl"] = VERTEX_SHADER
    ops, weights = entries.op_entries(graph.ops, lambda op: record(op).name)
    files["weights.npz"] = content_bytes("weights.npz", weights)  # the bytes hashed
    constants = {}
    for key, data in constant_textures(graph).items():  # as uploaded (HxWx4)
        constants[key] = f"{key.replace('/', '.')}.npy"
        files[constants[key]] = content_bytes(constants[key], data)
    hw = graph.input_size or (256, 256)
    files["manifest.json"] = sealed({
        "format": "workbench-es2/1",
        "name": graph.name,
        "precision": target.precision,
        "target": _saved_target(target),
        "conventions": CONVENTIONS,
        "input": asdict(graph.input),
        "input_size": graph.input_size,
        "output": graph.output,
        "vertex_shader": "vertex.glsl",
        "tensors": {name: {"channels": c, "packs": ir.packs(c)}
                    for name, (h, w, c) in graph.shapes(hw).items()},
        "textures_for_input": {"height": hw[0], "width": hw[1], "textures": [
            {"tensor": k[0], "index": k[1], "width": w, "height": h,
             "format": "RGBA8" if dtype == "f1" else "RGBA32F"}
            for k, (w, h, dtype) in plan.textures(graph, hw).items()]},
        "constant_textures": constants,
        "ops": ops,
        "passes": [{"name": p.name, "op": p.op, "shader": f"{p.name}.glsl",
                    "sha256": sha256(p.source.encode()),  # ties the pass to its shader
                    "inputs": [asdict(b) for b in p.inputs],
                    "outputs": [{"tensor": t, "pack": k} for t, k in p.outputs],
                    "uniforms": list(p.uniforms), "uniform_values": p.uniforms,
                    "viewport": p.viewport, "border": p.border, "channels": p.channels,
                    "arrays": {name: f"{p.name}.{name}.npy" for name in p.arrays}}
                   for p in passes],
        "files": {name: sha256(content_bytes(name, c)) for name, c in files.items()},
        "reference_check": check.to_json() if check else None,
        "plan": {"options": options or {}, "changes": list(changes)},
    })
    return files


def _saved_target(target: limits.Target) -> dict:
    """``target`` as a manifest keeps it beside its ``precision``: ``limits``, the profile's
    name where it is one (else every limit), and ``draw_buffers``."""
    table = target.limits
    named = limits.PROFILES.get(table.name) == table
    return {"limits": table.name if named else asdict(table), "draw_buffers": target.draw_buffers}


def _loaded_target(manifest: dict, passes) -> limits.Target:
    """The target of a saved net (checked again by ``Target.of``); a manifest written before
    nets kept theirs: the ES 2.0 limits with as many render targets as its passes write."""
    saved = manifest.get("target") or {"limits": None,
                                       "draw_buffers": max(len(p.outputs) for p in passes)}
    table = saved["limits"]
    if isinstance(table, dict):  # JSON lists back to tuples
        table = limits.Limits(**{k: tuple(v) if isinstance(v, list) else v
                                 for k, v in table.items()})
    return limits.Target.of(table, manifest["precision"], saved["draw_buffers"])


def read(directory) -> tuple[ir.Graph, list[Pass], limits.Target, dict | None, dict]:
    """The graph, passes, target, reference check (its JSON, or None) and plan (``{}`` where
    it was saved without one) of a net written by :meth:`~workbench.es2.net.Net.save`
    (shaders as saved, graph for shapes/emulator; each op as its record's ``prepared`` type
    with the back end's choices the manifest holds: their defaults where a folder saved before
    holds none, as of an unsplit conv).  Refused in one line naming the file: a manifest not
    JSON (:func:`workbench.files.read_json`: bounded in size and depth) or not holding its own
    sha256 (edited, or saved before manifests had one), that lacks a key, names an unknown op
    or precision, or a file outside the folder or one its ``files`` does not list with the
    sha256 it has (every listed file is checked); a ``weights.npz`` holding pickled objects."""
    directory = Path(directory)
    manifest_path = directory / "manifest.json"
    if not manifest_path.exists():
        raise FileNotFoundError(f"{manifest_path}: no manifest; is this a saved net?")
    manifest = check_seal(read_json(manifest_path), SEAL, manifest_path)
    try:
        return _read(directory, manifest)
    except KeyError as err:
        raise ValueError(f"{manifest_path}: not a saved ES 2.0 net: key {err.args[0]!r} is "
                         "missing") from None
    except (TypeError, AttributeError) as err:
        raise ValueError(f"{manifest_path}: not a saved ES 2.0 net ({err})") from None


def _verified(directory: Path, manifest: dict) -> dict[str, bytes]:
    """Every file the manifest lists and every one a net needs (shaders, weights, constant
    textures), checked against its sha256 (:func:`workbench.files.checked_file`); a pass's
    shader against the pass's own sha256 too (a pass pointing at another's shader fails)."""
    digests, path = manifest.get("files"), directory / "manifest.json"
    needed = [manifest["vertex_shader"], "weights.npz", *manifest["constant_textures"].values(),
              *(file for p in manifest["passes"] for file in p.get("arrays", {}).values())]
    listed = list(digests) if isinstance(digests, dict) else []
    data = {name: checked_file(directory, name, digests, path)
            for name in dict.fromkeys(needed + listed)}
    for p in manifest["passes"]:
        data[p["shader"]] = checked_file(directory, p["shader"], {p["shader"]: p.get("sha256")},
                                         f"{path} (pass {p['name']!r})")
    return data


def _read(directory: Path, manifest: dict):
    if manifest["precision"] not in PRECISIONS:
        raise ValueError(f"{directory / 'manifest.json'}: precision {manifest['precision']!r} "
                         f"unknown; {' or '.join(PRECISIONS)}")
    data = _verified(directory, manifest)
    weights = entries.arrays(data["weights.npz"], directory / "weights.npz")
    ops = []
    for entry in manifest["ops"]:
        kind = entries.op_type(entry, directory / "manifest.json")
        fields = entries.op_fields(entry, weights)
        if "residual_first" in fields:  # folders saved before residual_after: first or last
            fields["residual_after"] = 0 if fields.pop("residual_first") else LAST
        kind = record_of_type(kind).prepared or kind  # with the back end's choices
        ops.append(kind(**fields))
    size = manifest.get("input_size")
    graph = ir.Graph(ir.Input(**manifest["input"]), ops, manifest["output"], manifest["name"],
                     tuple(size) if size else None)
    passes = [Pass(p["name"], p["op"], data[p["shader"]].decode(),
                   [Binding(**b) for b in p["inputs"]],
                   [(o["tensor"], o["pack"]) for o in p.get("outputs") or [p["output"]]],
                   {k: tuple(v) for k, v in p["uniform_values"].items()},
                   tuple(p["viewport"]) if p.get("viewport") else None,
                   tuple(p["channels"]) if p.get("channels") is not None else None,
                   {name: entries.arrays(data[file], directory / file)
                    for name, file in p.get("arrays", {}).items()},
                   tuple(p["border"]) if p.get("border") else None)
              for p in manifest["passes"]]
    return (graph, passes, _loaded_target(manifest, passes), manifest.get("reference_check"),
            manifest.get("plan") or {})
