"""The ES 2.0 net: compile a Keras model, run it on the GPU or the emulator, save and load it.

``net = workbench.es2.compile(model)`` lowers a Keras model to the IR, checks the ES 2.0
limits and generates the passes (:mod:`workbench.es2.shaders`); ``net.run(image)`` runs them
on the GPU (moderngl, headless EGL), ``net.emulate(image)`` runs the numpy emulator that
predicts the GPU's bytes, ``net.save(dir)`` writes the shaders and a JSON manifest,
``workbench.es2.load(dir)`` reads them back.
"""
from __future__ import annotations

import json
from dataclasses import asdict, fields, replace
from pathlib import Path

import numpy as np

from workbench import ir
from workbench.es2 import drivers, emulate, fixed16, limits, mediump, plan
from workbench.es2.record import record, record_of_type
from workbench.es2.runner import Runner
from workbench.es2.shaders import (
    PRECISIONS,
    VERTEX_SHADER,
    Binding,
    Pass,
    constant_textures,
    generate,
    programs,
)
from workbench.files import checked_file, content_bytes, sha256, write_folder

CONVENTIONS = (
    "One RGBA8 texture per 4 channels (channel c = component c % 4 of pack c // 4); texture row "
    "r = tensor row r; pixel (col, row) = gl_FragCoord.xy - 0.5. Uniforms set from the tensor "
    "shapes: u_in_size = (width, height) of the first input tensor, u_out_size = of the output, "
    "u_pad = zero padding before the first column and row (TensorFlow 'SAME'). Samplers: "
    "CLAMP_TO_EDGE, filter as the binding says. A fullscreen quad is drawn per pass, into its "
    "outputs: gl_FragData[i] (GL_EXT_draw_buffers) to outputs[i], or gl_FragColor to the one.")


class Net:
    """A net as ES 2.0 passes.  Images are HxWxC float in [0, 1] (HxWx3 RGB for luma nets).
    ``target``: what its passes were generated for (:class:`workbench.es2.limits.Target`), so
    that programs generated again (the page's fallbacks) fit the same limits."""

    def __init__(self, graph: ir.Graph, passes: list[Pass], target=limits.Target()):
        self.graph, self.passes, self.target = graph, passes, target
        self.changes: list[str] = []  # what compile(fit=True or tune=True) changed for a driver
        self._runner = None

    @property
    def runner(self):
        """The GL runner, created (and every program compiled) on first use."""
        if self._runner is None:
            constants = {(key, 0): data for key, data in constant_textures(self.graph).items()}
            self._runner = Runner(self.graph, self.passes, VERTEX_SHADER, constants)
        return self._runner

    @property
    def compile_seconds(self):
        return self.runner.compile_seconds

    @property
    def timings(self):
        """Seconds per pass of the last :meth:`run`."""
        return self.runner.timings

    def run(self, image, keep=False):
        """Run on the GPU: the output as float32 (an image in 8-bit levels, or the logits of a
        dense layer), or with ``keep`` every texture as stored, ``{tensor: HxWx(4*packs)}``
        (uint8 for RGBA8, float32 for RGBA32F).  A dense layer's fixed-point overflow raises
        :class:`workbench.es2.fixed16.FixedPointOverflow`.  An input whose textures would not fit
        the memory available is refused first (:meth:`Runner.run`)."""
        arrays = self.runner.run(image, keep=keep)
        tensors = {}
        for (name, pack) in sorted(arrays, key=lambda k: k[1]):
            a = arrays[name, pack]
            tensors[name] = a if name not in tensors else np.concatenate([tensors[name], a], -1)
        self._check_overflow(tensors, image)
        return tensors if keep else output_values(self.graph, tensors[self.graph.output])

    def _check_overflow(self, tensors, image):
        """Saturated fixed16 codes on the GPU: let the emulator say where and how far."""
        for op in self.graph.ops:
            saturated = record(op).saturated
            mine = {name: t for name, t in tensors.items() if name.split("/")[0] == op.name}
            if saturated and saturated(op, mine):
                self.emulate(image)  # raises FixedPointOverflow with the exact values
                raise fixed16.FixedPointOverflow(
                    f"layer {op.name!r}: a partial sum saturated the 16-bit fixed-point "
                    "range on the GPU")

    def emulate(self, image, keep=False, arithmetic="float32"):
        """The numpy emulator's prediction of :meth:`run` on llvmpipe (a highp GPU: float32),
        or with ``arithmetic="float16"`` on a GPU whose mediump is float16 (:mod:`.emulate`).
        (Not the shaders' ``precision``, which :attr:`precision` is.)  Refused first where its
        tensors would not fit the memory available."""
        image = self.graph.input_image(image)
        plan.require_memory(self.graph, image.shape[:2], "emulate a smaller image",
                            ("emulator",))
        return emulate.run(self.graph, image, keep=keep, arithmetic=arithmetic)

    @property
    def precision(self) -> str:
        """The shaders' float precision (``"highp"`` or ``"mediump"``)."""
        return self.target.precision

    @property
    def draw_buffers(self) -> int:
        """The most render targets one of its programs writes (1: plain ES 2.0)."""
        return max(len(p.outputs) for p in self.passes)

    def cost(self, hw) -> dict[str, ir.Cost]:
        """Cost of every op for an input of ``hw = (height, width)``, as compiled (with draw
        buffers, ``single_target_fetches`` is the one-target form's count)."""
        return plan.cost(self.graph, hw, programs(self.graph, self.passes))

    def peak_texture_bytes(self, hw) -> int:
        """Texture memory at the busiest moment of a run (each texture freed after its last
        reader) for an input of ``hw = (height, width)``."""
        return plan.peak_texture_bytes(self.graph, hw)

    def save(self, directory, force=False):
        """Write :meth:`files` into the folder ``directory`` at once (a save interrupted over
        an older one leaves that intact); a folder the workbench did not write is replaced
        only with ``force`` (see :func:`workbench.files.write_folder`)."""
        return write_folder(directory, self.files(), force)

    def files(self) -> dict:
        """The saved net, ``{file name: content}``: ``<pass>.glsl``, ``vertex.glsl``,
        ``weights.npz``, the constant textures (``.npy``) and ``manifest.json``, whose
        ``files`` lists the sha256 of every other one."""
        files = {f"{p.name}.glsl": p.source for p in self.passes}
        arrays = {f"{p.name}.{name}.npy": rows for p in self.passes
                  for name, rows in p.arrays.items()}  # vec4 uniform arrays
        files.update({name: content_bytes(name, rows) for name, rows in arrays.items()})
        files["vertex.glsl"] = VERTEX_SHADER
        weights, ops = {}, []
        for op in self.graph.ops:
            desc = {"type": record(op).name}
            for key, value in vars(op).items():
                if isinstance(value, np.ndarray):
                    weights[f"{op.name}/{key}"] = value
                else:
                    desc[key] = value
            ops.append(desc)
        files["weights.npz"] = content_bytes("weights.npz", weights)  # the bytes hashed
        constants = {}
        for key, data in constant_textures(self.graph).items():  # as uploaded (HxWx4)
            constants[key] = f"{key.replace('/', '.')}.npy"
            files[constants[key]] = content_bytes(constants[key], data)
        hw = self.graph.input_size or (256, 256)
        files["manifest.json"] = {
            "format": "workbench-es2/1",
            "name": self.graph.name,
            "precision": self.precision,
            "target": _saved_target(self.target),
            "conventions": CONVENTIONS,
            "input": asdict(self.graph.input),
            "input_size": self.graph.input_size,
            "output": self.graph.output,
            "vertex_shader": "vertex.glsl",
            "tensors": {name: {"channels": c, "packs": ir.packs(c)}
                        for name, (h, w, c) in self.graph.shapes(hw).items()},
            "textures_for_input": {"height": hw[0], "width": hw[1], "textures": [
                {"tensor": k[0], "index": k[1], "width": w, "height": h,
                 "format": "RGBA8" if dtype == "f1" else "RGBA32F"}
                for k, (w, h, dtype) in plan.textures(self.graph, hw).items()]},
            "constant_textures": constants,
            "ops": ops,
            "passes": [{"name": p.name, "op": p.op, "shader": f"{p.name}.glsl",
                        "sha256": sha256(p.source.encode()),  # ties the pass to its shader
                        "inputs": [asdict(b) for b in p.inputs],
                        "outputs": [{"tensor": t, "pack": k} for t, k in p.outputs],
                        "uniforms": list(p.uniforms), "uniform_values": p.uniforms,
                        "viewport": p.viewport, "channels": p.channels,
                        "arrays": {name: f"{p.name}.{name}.npy" for name in p.arrays}}
                       for p in self.passes],
            "files": {name: sha256(content_bytes(name, c)) for name, c in files.items()},
        }
        return files


def output_values(graph: ir.Graph, stored):
    """The net's output from its stored texture: an image in [0, 1] (HxWxC float32), or the
    logits of a dense layer (float32 vector)."""
    op = graph.op(graph.output)
    if record(op).output:
        return record(op).output(op, stored)
    return (stored[..., :graph.channels(op.name)] / np.float32(255)).astype(np.float32)


def output_spec(graph: ir.Graph) -> dict:
    """What a runtime needs to read the output texture: ``tensor``, ``packs``, ``kind``
    (``"image"``: ``channels`` 8-bit levels; ``"logits"``: as its record decodes them)."""
    op = graph.op(graph.output)
    if record(op).output_spec:
        return {"tensor": graph.output, **record(op).output_spec(op)}
    c = graph.channels(graph.output)
    return {"tensor": graph.output, "packs": ir.packs(c), "kind": "image", "channels": c}


def compile(model, target: limits.Target | str | None = None, *, luma_input=None,
            dense="fixed16", mediump_warn_db=None, check_driver=False, fit=False, tune=False,
            shared=False, calibration=None) -> Net:
    """Keras or ONNX model -> IR -> limits check -> passes.

    ``target``: what to compile for, a :class:`workbench.es2.limits.Target` (the device's
    limits, the shaders' precision, the render targets a convolution's program may write:
    ``Target.of(device, precision, draw_buffers)`` checks them once), or for short a device
    profile's name (``"videocore4"``, see :data:`workbench.es2.limits.PROFILES`), meaning
    ``Target.of(name)`` (its precision and render targets); default ``Target()``: the
    :data:`~workbench.es2.limits.ES2` limits, highp, one render target.  ``dense``: number
    format of a final Dense layer, ``"fixed16"`` or ``"float"`` (see
    :class:`workbench.ir.Dense`).  ``mediump_warn_db``: warn
    (:class:`workbench.es2.mediump.MediumpWarning`) when on a float16-mediump GPU an op's
    output is predicted below this PSNR against highp.  ``check_driver``: compile every
    program with the device's own compiler (its Mesa driver on a drm-shim,
    :mod:`workbench.es2.drivers`; ``True``: the profile's ``driver``, or a driver's name,
    ``"vc4"``) and refuse, naming program, driver and message, what it refuses; ``fit``:
    instead split the refused layers' programs until it takes them (``net.changes`` says
    what changed);
    ``tune``: fit, then keep the form of each layer's programs that the driver runs fastest
    by its own numbers (:func:`workbench.es2.drivers.tune`).  ``shared``: the weights of
    each layer whose programs can hold them as uniform arrays set at each draw, so that one
    program serves every layer of its shape (fewer programs to compile; the same bytes).
    ``calibration``: HxWxC images in [0, 1] on which the ranges of unbounded tensors (a ReLU's,
    a linear add's) are measured, which are then stored with a scale
    (:mod:`workbench.es2.calibrate`); default the sample images
    (:func:`workbench.es2.samples.test_images`)."""
    from workbench.es2 import calibrate, samples

    target = _target(target)
    table = target.limits
    graph = ir.from_model(model, luma_input=luma_input, dense=dense)
    if calibrate.needed(graph):
        images = calibration if calibration is not None else \
            [x for _, x in samples.test_images(graph, count=4)]
        graph = calibrate.calibrated(graph, images)
    graph = prepared(graph, table)
    limits.check(graph, table)
    if mediump_warn_db is not None:
        mediump.warn_below(graph, mediump_warn_db)

    base = {op.name: {"weights": "uniforms"} for op in graph.ops
            if shared and "weights" in drivers.layer_options(op)}

    def passes_with(layer_options=None):
        options = {name: {**base.get(name, {}), **(layer_options or {}).get(name, {})}
                   for name in {*base, *(layer_options or {})}}
        passes = generate(graph, target, options)
        limits.check_passes(passes, table, graph)
        return passes

    changes = []
    fit = fit or tune
    gpu = (check_driver if isinstance(check_driver, str) else table.driver) \
        if (check_driver or fit) else None
    if (check_driver or fit) and gpu is None:
        raise ValueError(f"device {table.name!r} names no driver to check with; name one "
                         "(check_driver='vc4') or a device profile that has one")
    if fit:
        passes, _, changes, options = drivers.fit(graph, passes_with, gpu)
        if tune:
            passes, _, tuned, options = drivers.tune(graph, passes_with, gpu, options)
            changes += tuned
            graph = drivers.ordered(graph, options)
    else:
        passes = passes_with()
        if gpu:
            drivers.require(Net(graph, passes, target), gpu)
    net = Net(graph, passes, target)
    net.changes = changes
    return net


def _target(target) -> limits.Target:
    """``target`` as :func:`compile` takes it (a Target, a profile's name or None) -> a Target."""
    if target is None or isinstance(target, str):
        return limits.Target.of(target)
    if not isinstance(target, limits.Target):
        raise TypeError(f"target: an es2.Target (es2.Target.of(device, precision, "
                        f"draw_buffers)) or a device profile's name, not {type(target).__name__}")
    return target


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


def prepared(graph: ir.Graph, table) -> ir.Graph:
    """A copy of ``graph`` whose ops carry what this back end chose for ``table`` (each
    record's ``prepare``: a dense layer's block of input packs a program); ``graph`` itself
    is left as it is."""
    shapes = graph.shapes(graph.input_size or (64, 64))
    ops = [record(op).prepare(op, shapes, table) if record(op).prepare else op
           for op in graph.ops]
    return replace(graph, ops=ops)


def load_net(path, target: limits.Target | str | None = None, *, input_size=None):
    """A compiled net from a ``.keras`` or ``.onnx`` model (compiled for ``target``, see
    :func:`compile`; ``input_size`` ``(height, width)`` fixes an ONNX model's dynamic size)
    or from a folder written by :meth:`Net.save` (as saved, checked against the limits of
    ``target``, default its own: a program writing more render targets than they allow names
    its layer).  An ONNX model's 8-bit storage is checked on sample images first
    (:func:`workbench.es2.onnx_check.require`: refused, or a warning, where its values leave
    [0, 1]).  Returns ``(net, model_or_None)`` (the model: Keras, or an
    :class:`~workbench.nets.onnx_model.OnnxModel`).  A folder's shaders keep their
    precision: a target of another precision is refused in one line."""
    from workbench.es2 import onnx_check, samples

    path = Path(path)
    if path.is_dir():
        net = load(path)
        target = net.target if target is None else _target(target)
        if target.precision != net.precision:
            raise ValueError(f"{path}: its shaders were written for {net.precision}, not "
                             f"{target.precision}; compile the model again for "
                             f"{target.precision}")
        limits.check(net.graph, target.limits)
        limits.check_passes(net.passes, target.limits, net.graph)
        return net, None
    if not path.exists():
        raise FileNotFoundError(f"model {path} not found (a .keras or .onnx file, or a saved "
                                "shader folder)")
    from workbench.nets.models import load_model  # (Keras: only for a model file)

    model = load_model(path, input_size)
    net = compile(model, target)
    if net.graph.input_size:  # the checks below run it at that size
        plan.require_memory(net.graph, net.graph.input_size, "give a smaller --input-size")
    if ir.is_onnx(model):
        onnx_check.require(model, net, [x for _, x in samples.test_images(net.graph)])
    return net, model


def load(directory) -> Net:
    """Read a net written by :meth:`Net.save` (shaders as saved, graph for shapes/emulator).
    Refused in one line naming the file: a manifest that lacks a key, names an unknown op or
    precision, or a file outside the folder or one its ``files`` does not list with the sha256
    it has (every listed file is checked); a ``weights.npz`` holding pickled objects."""
    directory = Path(directory)
    manifest_path = directory / "manifest.json"
    if not manifest_path.exists():
        raise FileNotFoundError(f"{manifest_path}: no manifest; is this a saved net?")
    try:
        return _load(directory, json.loads(manifest_path.read_text()))
    except KeyError as err:
        raise ValueError(f"{manifest_path}: not a saved ES 2.0 net: key {err.args[0]!r} is "
                         "missing") from None
    except (TypeError, AttributeError, json.JSONDecodeError) as err:
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


def _arrays(data: bytes, path: Path):
    """The arrays of a ``weights.npz`` (a dict), or the array of a ``.npy``; pickled objects
    are refused, naming the file."""
    import io
    import zipfile

    try:
        if path.suffix == ".npy":
            return np.load(io.BytesIO(data), allow_pickle=False)
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return dict(npz)
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as err:
        raise ValueError(f"{path}: not arrays of numbers the workbench loads ({err}); "
                         "pickled objects are refused") from None


def _load(directory: Path, manifest: dict) -> Net:
    if manifest["precision"] not in PRECISIONS:
        raise ValueError(f"{directory / 'manifest.json'}: precision {manifest['precision']!r} "
                         f"unknown; {' or '.join(PRECISIONS)}")
    data = _verified(directory, manifest)
    weights = _arrays(data["weights.npz"], directory / "weights.npz")
    ops = []
    for desc in manifest["ops"]:
        kind = ir.OP_TYPES.get(desc.pop("type"))
        if kind is None:
            raise ValueError(f"{directory / 'manifest.json'}: layer {desc.get('name')!r} has an "
                             f"op type this workbench does not know; known: "
                             f"{', '.join(ir.OP_TYPES)}")
        arrays = {k.split("/", 1)[1]: v for k, v in weights.items()
                  if k.split("/", 1)[0] == desc["name"]}
        for key in ("input_order", "padding"):  # JSON lists back to tuples
            if isinstance(desc.get(key), list):
                desc[key] = tuple(desc[key])
        if set(desc) - {f.name for f in fields(kind)}:  # the back end's choices: as prepared
            kind = record_of_type(kind).prepared or kind
        ops.append(kind(**desc, **arrays))
    size = manifest.get("input_size")
    graph = ir.Graph(ir.Input(**manifest["input"]), ops, manifest["output"], manifest["name"],
                     tuple(size) if size else None)
    passes = [Pass(p["name"], p["op"], data[p["shader"]].decode(),
                   [Binding(**b) for b in p["inputs"]],
                   [(o["tensor"], o["pack"]) for o in p.get("outputs") or [p["output"]]],
                   {k: tuple(v) for k, v in p["uniform_values"].items()},
                   tuple(p["viewport"]) if p.get("viewport") else None,
                   tuple(p["channels"]) if p.get("channels") is not None else None,
                   {name: _arrays(data[file], directory / file)
                    for name, file in p.get("arrays", {}).items()})
              for p in manifest["passes"]]
    return Net(graph, passes, _loaded_target(manifest, passes))
