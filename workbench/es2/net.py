"""The ES 2.0 net: compile a Keras or ONNX model, run it on the GPU or the emulator, save and
load it.

``net = workbench.es2.compile(model, target)`` lowers the model to the IR, calibrates and
checks it against its reference runtime where it must (:mod:`workbench.es2.calibrate`,
:mod:`workbench.es2.reference`), checks the target's limits and generates the passes
(:mod:`workbench.es2.shaders`); ``net.run(image)`` runs them on the GPU (moderngl, headless
EGL), ``net.emulate(image)`` runs the numpy emulator that predicts the GPU's bytes,
``net.save(dir)`` writes the shaders and a JSON manifest with the plan they were made with
(:mod:`workbench.es2.saved`), ``workbench.es2.load(dir)`` reads them back;
``workbench.es2.load_net(path)`` takes a model file or a saved folder.
"""
from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np

from workbench import ir
from workbench.es2 import drivers, emulate, fixed16, limits, mediump, plan, saved
from workbench.es2.ops import conv
from workbench.es2.ops.conv.padding import producer_borders
from workbench.es2.options import Options
from workbench.es2.record import record
from workbench.es2.runner import Runner
from workbench.es2.shaders import VERTEX_SHADER, Pass, constant_textures, generate, programs
from workbench.folders import write_folder


class Net:
    """A net as ES 2.0 passes.  Images are HxWxC float in [0, 1] (HxWx3 RGB for luma nets).
    ``target``: what its passes were generated for (:class:`workbench.es2.limits.Target`), so
    that programs generated again (the page's fallbacks) fit the same limits."""

    def __init__(self, graph: ir.Graph, passes: list[Pass], target=limits.Target()):
        self.graph, self.passes, self.target = graph, passes, target
        self.changes: list[str] = []  # what compile(fit=True or tune=True) changed for a driver
        self.reference = None  # the reference check of its deploy (es2.reference.Check)
        self.plan: dict = {}  # the compile options it was made with (compile's; plan_line)
        self._runner = None

    def plan_line(self) -> str:
        """The plan asked for, in one line: ``"plan: ES 2.0 limits, highp, 1 render target;
        tune=True (5 changes); shared weights (uniforms); calibrated on Set5, scaled tensors
        16-bit"``
        (a net saved before plans were recorded: ``"plan: not recorded"``)."""
        p = self.plan
        if not p:
            return "plan: not recorded"
        parts = [f"{p['limits']} limits, {p['precision']}, {p['draw_buffers']} render "
                 f"target{'s' if p['draw_buffers'] > 1 else ''}"]
        if p.get("tune"):
            parts.append(f"tune={p['tune']!r} ({len(self.changes)} changes)")
        elif p.get("fit"):
            parts.append(f"fit=True ({len(self.changes)} changes)")
        if p.get("shared") is True:
            parts.append("shared weights (uniforms)")
        elif p.get("shared"):
            parts.append(f"shared weights (uniforms) in layers of at most {p['shared']:,} "
                         "pixels")
        if p.get("mean") is not None or p.get("std") is not None:
            parts.append(f"input normalised (mean {p['mean']}, std {p['std']})")
        parts.append(f"calibrated on {p['calibration']}, scaled tensors {p['scaled_bits']}-bit"
                     if p.get("calibration") else "no calibration needed")
        return "plan: " + "; ".join(parts)

    def deployed_lines(self) -> str:
        """What a command says of a net it deployed: :meth:`plan_line`, then the reference
        check's line where it has one."""
        check = f"\n{self.reference.line()}" if self.reference is not None else ""
        return self.plan_line() + check

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
        """Seconds per pass of the last :meth:`run` (each until the GPU finished it; none after
        a run with ``timed=False``, or before the first)."""
        return self._runner.timings if self._runner is not None else {}

    def run(self, image, keep=False, timed=True):
        """Run on the GPU: the output as float32 (an image in 8-bit levels, or the logits of a
        dense layer), or with ``keep`` every texture as stored, ``{tensor: HxWx(4*packs)}``
        (uint8 for RGBA8, float32 for RGBA32F).  ``timed=False``: the passes drawn back to
        back, without waiting for each to time it (:attr:`timings` then empty; the dog
        classifier's 1,134 passes on llvmpipe 193 -> 169 ms).  A dense layer's fixed-point
        overflow raises :class:`workbench.es2.fixed16.FixedPointOverflow`.  An input whose
        textures would not fit the memory available is refused first (:meth:`Runner.run`)."""
        arrays = self.runner.run(image, keep=keep, timed=timed)
        tensors = {}
        for (name, pack) in sorted(arrays, key=lambda k: k[1]):
            a = arrays[name, pack]
            tensors[name] = a if name not in tensors else np.concatenate([tensors[name], a], -1)
        for op in self.graph.ops:  # an output drawn with a border: the output alone
            at = record(op).origin(op) if keep and record(op).origin else None
            if at and op.name in tensors:
                (h, w, _), (left, top) = self.runner.shapes[op.name], at
                tensors[op.name] = tensors[op.name][top:top + h, left:left + w]
        self._check_overflow(tensors, image)
        return tensors if keep else output_values(self.graph, tensors[self.graph.output])

    def _check_overflow(self, tensors, image):
        """Saturated fixed16 codes on the GPU: let the emulator say where and how far."""
        for op in self.graph.ops:
            saturated = record(op).saturated
            if not saturated:
                continue
            mine = {name: t for name, t in tensors.items() if name.split("/")[0] == op.name}
            if saturated(op, mine):
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
        only with ``force`` (see :func:`workbench.folders.write_folder`)."""
        return write_folder(directory, self.files(), force)
    def files(self) -> dict:
        """The saved net, ``{file name: content}`` (:func:`workbench.es2.saved.files`)."""
        return saved.files(self.graph, self.passes, self.target, self.reference, self.plan,
                           self.changes)


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


def compile(model, target: limits.Target | str | None = None, options: Options | None = None,
            **keywords) -> Net:
    """Keras or ONNX model -> IR -> limits check -> passes.

    ``target``: what to compile for, a :class:`workbench.es2.limits.Target` (the device's
    limits, the shaders' precision, the render targets a convolution's program may write:
    ``Target.of(device, precision, draw_buffers)`` checks them once), or for short a device
    profile's name (``"videocore4"``, see :data:`workbench.es2.limits.PROFILES`), meaning
    ``Target.of(name)`` (its precision and render targets); default ``Target()``: the
    :data:`~workbench.es2.limits.ES2` limits, highp, one render target.  ``options``: how
    (:class:`workbench.es2.Options`, where each is documented; default ``Options()``);
    ``keywords``: its fields for short, over those of ``options`` (``compile(model,
    tune=True)``; an unknown one: TypeError, as Python's)."""
    from workbench.es2 import calibrate, reference
    from workbench.nets.normalise import normalised

    opts = Options.of(options, keywords)
    target = _target(target)
    table = target.limits
    model = normalised(model, opts.mean, opts.std)
    graph = source = ir.from_model(model, luma_input=opts.luma_input)  # (the check's: float)
    graph = calibrate.images_clamped(graph)
    calibrated = calibrate.needed(graph)
    check = (calibrated or graph is not source) if opts.check is None else opts.check
    checked = calibrated or check
    calibration = opts.calibration
    if checked and isinstance(calibration, (str, Path)):  # a source's files, listed once
        from workbench.data import calibration as sources
        calibration = sources.Listed(calibration, *sources.listed(calibration))
    storage = {"dense": opts.dense}
    if graph.input_size:  # its programs, and the images below at that size: before any is made
        plan.require_memory(prepared(graph, table, storage), graph.input_size,
                            "give a smaller --input-size",
                            plan.COMPILE_CHECKED if checked else ("programs",),
                            image_count(calibration) if checked else 0)
    if calibrated:
        calibrate.require_foldable(graph)  # (before any image runs)
    images, held, described = calibration_images(graph, calibration) if checked \
        else ([], 0, "")
    stored = {}
    if not calibrated:
        described, held = f"none needed (checked on {described})", 0
    else:
        if calibration is None:
            warnings.warn(f"calibrated on {described}, not on images like the net's own data: "
                          "give some (--calibration cifar10:100, a folder or a glob)",
                          CalibrationWarning, stacklevel=2)
        used = images[:len(images) - held]
        graph, stored = calibrate.calibrated(graph, used, opts.calibration_headroom)
        graph = conv.measured(graph, used)
    if opts.scaled_bits == 16 and target.precision == "highp":  # (float16 cannot hold its codes)
        graph = conv.widened(graph, conv.wide_tensors(graph, table))
    graph = prepared(graph, table, storage)
    limits.check(graph, table)
    if opts.mediump_warn_db is not None:
        mediump.warn_below(graph, opts.mediump_warn_db)

    base = {name: {"weights": kind} for name, kind in shared_weights(graph, opts.shared).items()}

    def passes_with(layer_options=None):
        options = {name: {**base.get(name, {}), **(layer_options or {}).get(name, {})}
                   for name in {*base, *(layer_options or {})}}
        passes = generate(graph, target, producer_borders(graph, options))
        limits.check_passes(passes, table, graph)
        return passes

    changes = []
    check_driver, tune = opts.check_driver, opts.tune
    fit = opts.fit or tune
    gpu = (check_driver if isinstance(check_driver, str) else table.driver) \
        if (check_driver or fit) else None
    if (check_driver or fit) and gpu is None:
        raise ValueError(f"device {table.name!r} names no driver to check with; name one "
                         "(check_driver='vc4') or a device profile that has one")
    if fit:
        passes, _, changes, layers = drivers.fit(graph, passes_with, gpu)
        if tune:
            passes, _, tuned, layers = drivers.tune(graph, passes_with, gpu, layers,
                                                    None if tune is True else tune)
            changes += tuned
        graph = drivers.ordered(graph, layers)
    else:
        passes = passes_with()
        if gpu:
            drivers.require(Net(graph, passes, target), gpu)
    net = Net(graph, passes, target)
    net.changes = changes
    net.plan = opts.plan(target, described if calibrated else None)
    if check:
        net.reference = reference.require(
            reference.check(model, source, net, images, held, described, stored), opts.force)
    return net


def shared_weights(graph: ir.Graph, shared) -> dict[str, str]:
    """The ``weights`` (:data:`workbench.es2.ops.conv.weights.WEIGHTS`) that :func:`compile`'s
    ``shared`` gives each layer whose programs can hold them as uniforms: none (False),
    ``"uniforms"`` to every such layer (True), or to those whose output has at most
    ``shared`` pixels at the net's input size (a count; a net of any size is refused) and
    ``"uniform bias"`` to the larger ones: the weights literals, a program a pass, the bias a
    uniform so that every sum is added in the shared programs' order (their bytes).  What a
    pixel count buys on llvmpipe (Mesa 22.3): its fragment shaders read a uniform lane by
    lane, with a bounds check (a shader may start with its first lane off), where a literal
    is one vector constant, so a uniform weight costs ~5x a literal one at every fragment (the
    dog classifier's 191x191 layers 2.2 -> 0.45 ms a draw) and a shared program compiles ~5x
    slower; a literal program is compiled once a pass (~0.1 s): worth it where a draw covers
    many fragments."""
    if shared is not True and shared and not graph.input_size:
        raise ValueError(f"shared={shared} (a pixel count) needs a net of a fixed input size")
    shapes = graph.shapes(graph.input_size or (64, 64))
    return {op.name: "uniforms" if shared is True or np.prod(shapes[op.name][:2]) <= shared
            else "uniform bias"
            for op in graph.ops if shared and "weights" in drivers.layer_options(op)}


def calibration_images(graph: ir.Graph, calibration) -> tuple[list, int, str]:
    """``(images, held back, description)`` for :func:`compile`'s ``calibration``: arrays as
    given (from 10 on, the last fifth held back from calibration for the check), a source
    read by :func:`workbench.data.calibration.images` (the same), or the built-in samples (4
    calibrated on, 2 held back)."""
    from workbench.data import calibration as sources
    from workbench.es2 import samples

    if calibration is None:
        found = samples.test_images(graph, count=image_count(None))
        kinds = sorted({name.split("-")[0] for name, _ in found})
        return [x for _, x in found], 2, f"the built-in samples ({' and '.join(kinds)} images)"
    if isinstance(calibration, sources.Listed):
        channels = 3 if graph.input.rgb else graph.input.channels
        images, described = sources.images(calibration, graph.input_size, channels)
    else:
        images = [graph.input_image(x) for x in calibration]
        described = f"{len(images)} given images"
    if not images:
        raise ValueError("calibration: no images")
    return images, len(images) // 5 if len(images) >= 10 else 0, described


def image_count(calibration) -> int:
    """How many images :func:`calibration_images` makes of ``calibration`` (a source's
    :class:`~workbench.data.calibration.Listed` files: counted, not read)."""
    from workbench.data import calibration as sources

    if calibration is None:
        return 6
    return len(calibration.paths if isinstance(calibration, sources.Listed) else calibration)


class CalibrationWarning(UserWarning):
    """A net calibrated on images that are not the user's own."""


def _target(target) -> limits.Target:
    """``target`` as :func:`compile` takes it (a Target, a profile's name or None) -> a Target."""
    if target is None or isinstance(target, str):
        return limits.Target.of(target)
    if not isinstance(target, limits.Target):
        raise TypeError(f"target: an es2.Target (es2.Target.of(device, precision, "
                        f"draw_buffers)) or a device profile's name, not {type(target).__name__}")
    return target

def prepared(graph: ir.Graph, table, options=None) -> ir.Graph:
    """A copy of ``graph`` whose ops carry what this back end chose for ``table`` and for
    compile's ``options`` (each record's ``prepare``: a dense layer's number format and block
    of input packs a program); ``graph`` itself is left as it is.  ``options``: compile's
    storage choices by their keyword (``{"dense": "fixed16"}``, the default); one mapping
    handed to every record, which reads those it knows, so that the IR carries none of them
    and a new choice changes no other record's ``prepare``."""
    shapes = graph.shapes(graph.input_size or (64, 64))
    ops = [record(op).prepare(op, shapes, table, options or {}) if record(op).prepare else op
           for op in graph.ops]
    return replace(graph, ops=ops)


def load_net(path, target: limits.Target | str | None = None, *, input_size=None, mean=None,
             std=None, **options):
    """A compiled net from a ``.keras`` or ``.onnx`` model, compiled for ``target`` with
    :func:`compile`'s ``options`` (``calibration``, ``tune``, ``shared``, ...) and always
    checked against the model's reference runtime (``net.reference``; refused below its
    bound unless ``force``); ``input_size`` ``(height, width)`` fixes an ONNX model's dynamic
    size; ``mean``, ``std`` its input normalisation, prepended to the model returned.  Or
    from a folder written by :meth:`Net.save` (as saved, checked against the limits of
    ``target``, default its own: a program writing more render targets than they allow
    names its layer; it takes no compile option).  Returns ``(net, model_or_None)`` (the
    model: Keras, or an :class:`~workbench.nets.onnx_model.OnnxModel`).  A folder's shaders
    keep their precision: a target of another precision is refused in one line."""
    path = Path(path)
    if path.is_dir():
        given = [k for k, v in {"mean": mean, "std": std, **options}.items()
                 if v is not None and k != "force"]
        if given:
            raise ValueError(f"{path}: a saved shader folder is compiled already; "
                             f"{', '.join(given)} apply to a .keras or .onnx model")
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
    from workbench.nets.model_files import load_model  # (Keras: only for a .keras file)
    from workbench.nets.normalise import normalised

    model = normalised(load_model(path, input_size), mean, std)
    return compile(model, target, **{"check": True, **options}), model


def load(directory) -> Net:
    """A net written by :meth:`Net.save` (:func:`workbench.es2.saved.read`), with the
    reference check it was deployed with (``net.reference``, None if it had none)."""
    from workbench.es2 import reference

    graph, passes, target, check, recorded = saved.read(directory)
    net = Net(graph, passes, target)
    net.reference = reference.Check.from_json(check) if check else None
    net.plan, net.changes = recorded.get("options", {}), recorded.get("changes", [])
    return net
