"""The ES 3.1 net: compile a Keras or ONNX model, run it on the GPU, cost, save and load it
(the interface every back end's net offers: :class:`workbench.ir.backend.Net`)."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np

from workbench import gl, ir
from workbench.es31 import saved
from workbench.es31.kernels import LOAD_COUNTER_BINDING, STORAGES, Kernel, Options, Target
from workbench.es31.record import rules, tensor_images
from workbench.files import content_bytes, sha256
from workbench.folders import write_folder
from workbench.ir.cost import Cost
from workbench.ir import entries


def generate(graph: ir.Graph, opts: Options) -> list[Kernel]:
    shapes = graph.shapes(graph.input_size or (64, 64))
    return [k for op in graph.ops for k in rules(op).kernels(op, shapes, opts)]


def image_specs(graph: ir.Graph, hw, opts: Options) -> dict[str, tuple[int, int, int, str]]:
    """Every image for input size ``hw``: ``tensor -> (width, height, layers, dtype)``."""
    shapes = graph.shapes(hw)
    specs = tensor_images(graph.input, shapes, STORAGES[opts.storage])
    for op in graph.ops:
        specs.update(rules(op).images(op, shapes, STORAGES[opts.storage]))
    return specs


def weight_buffers(graph: ir.Graph, opts: Options) -> dict[str, np.ndarray]:
    """The storage buffers of the ops that have weights, as uploaded: ``"<op>/weights"``."""
    return {f"{op.name}/weights": rules(op).weights(op, opts)
            for op in graph.ops if rules(op).weights}


_NEXT_ID = [0]


class Net:
    """A net as ES 3.1 compute programs.  Images are HxWxC float in [0, 1] (HxWx3 RGB for
    luma nets); :meth:`run` returns float32, unrounded (an image, or the logits).
    ``options``: what its kernels were generated with; ``target``: their :class:`Target`."""

    def __init__(self, graph: ir.Graph, kernels: list[Kernel], options: Options):
        self.graph, self.kernels, self.options = graph, kernels, options
        _NEXT_ID[0] += 1
        self.owner = f"es31-{_NEXT_ID[0]}"
        self._worker, self._hw, self.timings, self.loads = None, None, {}, {}
        self.compile_seconds = None

    @property
    def target(self) -> Target:
        return self.options.target

    @property
    def precision(self):
        return self.options.storage

    def _key(self, name):
        return (self.owner, name)

    def _ensure(self, hw):
        if self._worker is None or self._worker.proc.poll() is not None:
            self._worker = gl.worker(gl.COMPUTE)
            self.compile_seconds, self._ids = self._worker.call(
                "compile", sources=[k.source for k in self.kernels])
            self._hw = None
        if self._hw == tuple(hw):
            return
        specs = image_specs(self.graph, hw, self.options)
        buffers = {self._key(name): data.tobytes()
                   for name, data in weight_buffers(self.graph, self.options).items()}
        if self.options.count_loads:
            buffers.update({self._key(f"{k.name}/loads"): 4 for k in self.kernels})
        self._worker.call("allocate", images={self._key(k): v for k, v in specs.items()},
                          buffers=buffers, owner=self.owner)
        self.shapes, self._specs, self._hw = self.graph.shapes(hw), specs, tuple(hw)
        self._steps = [self._step(k, i) for k, i in zip(self.kernels, self._ids)]

    def _step(self, kernel: Kernel, program):
        lx, ly = self.options.local_size
        if kernel.grid[0] == "pixels":
            h, w, _ = self.shapes[kernel.grid[1]]
            groups = (-(-w // lx), -(-h // ly), kernel.jobs)
        else:
            groups = (1, 1, kernel.jobs)
        buffers = [(0, self._key(kernel.weights))] if kernel.weights else []
        if self.options.count_loads:
            buffers.append((LOAD_COUNTER_BINDING, self._key(f"{kernel.name}/loads")))
        return {"program": program, "groups": groups, "buffers": buffers,
                "images": [(u, self._key(t), a) for u, t, a in kernel.images],
                "uniforms": ir.uniform_values(kernel.uniforms, self.shapes)}

    def run(self, image, keep=False, timed=True):
        """Run on the GPU.  Returns the output (HxWxC image or logits vector), or with
        ``keep`` every tensor as stored, ``{tensor: HxWx(4*layers) float32}``.
        ``timed=False``: the kernels dispatched back to back, not each waited for
        (:attr:`timings` then empty)."""
        image = self.graph.input_image(image)
        c = image.shape[2]
        self._ensure(image.shape[:2])
        packs = ir.packs(c)
        data = np.zeros((*image.shape[:2], 4 * packs), np.float32)
        data[..., :c] = image
        if self.graph.input.rgb:
            data[..., 3] = 1.0
        data = data.reshape(*image.shape[:2], packs, 4).transpose(2, 0, 1, 3)
        names = list(self._specs) if keep else [self.graph.output]
        buffers = {}
        if self.options.count_loads:
            buffers = {self._key(f"{k.name}/loads"): np.zeros(1, np.uint32) for k in self.kernels}
        self._worker.call("write", images={self._key(self.graph.input.name): data}, buffers=buffers)
        timings, arrays, counters = self._worker.call(
            "run", steps=self._steps, reads=[self._key(n) for n in names],
            buffer_reads=list(buffers), timed=timed)
        self.timings = {k.name: t for k, t in zip(self.kernels, timings)} if timed else {}
        if self.options.count_loads:
            self.loads = {k.name: int(np.frombuffer(counters[self._key(f"{k.name}/loads")],
                                                    np.uint32)[0]) for k in self.kernels}
        tensors = {name: arrays[self._key(name)].transpose(1, 2, 0, 3).reshape(
            *arrays[self._key(name)].shape[1:3], -1) for name in names}
        if keep:
            return tensors
        return output_values(self.graph, tensors[self.graph.output])

    def emulate(self, image, keep=False):
        """Not offered: ES 2.0's emulator predicts its own arithmetic (8-bit RGBA8 storage of
        every tensor, 16-bit fixed-point sums, calibrated scales), not these kernels' float32
        or float16 storage, so it would not predict :meth:`run`."""
        raise NotImplementedError("ES 3.1 has no emulator: ES 2.0's predicts 8-bit storage, "
                                  "not ES 3.1's float storage; use run")

    def cost(self, hw) -> dict[str, Cost]:
        """Cost of every op for an input of ``hw = (height, width)``; ``texel_fetches`` are
        image loads (module docstring)."""
        shapes = self.graph.shapes(hw)
        return {op.name: rules(op).cost(op, shapes, self.options) for op in self.graph.ops}

    def save(self, directory, force=False):
        """Write :meth:`files` into the folder ``directory`` at once, as
        :meth:`workbench.es2.Net.save` does."""
        return write_folder(directory, self.files(), force)

    def files(self) -> dict:
        """The saved net, ``{file name: content}``: ``<kernel>.comp``, ``weights.npz`` (the
        storage buffers as uploaded, float32), ``ir.npz`` (the IR graph's arrays, which
        :func:`load` compiles again with the manifest's ``graph`` and ``options``) and
        ``manifest.json``, whose ``files`` lists the sha256 of every other one (as an ES 2.0
        folder's)."""
        graph, arrays = saved.graph_entries(self.graph)
        files = {f"{k.name}.comp": k.source for k in self.kernels}
        files["weights.npz"] = content_bytes(  # (the bytes hashed)
            "weights.npz", weight_buffers(self.graph, self.options))
        files["ir.npz"] = content_bytes("ir.npz", arrays)
        hw = self.graph.input_size or (256, 256)
        lx, ly = self.options.local_size
        files["manifest.json"] = {
            "format": saved.FORMAT,
            "name": self.graph.name,
            "options": asdict(self.options),
            "conventions": (
                "One 2D array image per tensor, layer p = channels 4p..4p+3 "
                f"({self.options.storage}); images bound layered at the units listed. Storage "
                "buffer binding 0 = the kernel's weights (weights.npz, float32): vec4 bias[out "
                "packs] then mat4 w[] (column i = input component i). Uniforms: u_in_size, "
                "u_out_size = (width, height); u_pad = zero padding before the first column "
                f"and row. Dispatch: grid ['pixels', tensor] = ceil(tensor w / {lx}) x "
                f"ceil(tensor h / {ly}) x jobs, ['jobs'] = 1 x 1 x jobs."),
            "input": asdict(self.graph.input),
            "input_size": self.graph.input_size,
            "output": self.graph.output,
            "images_for_input": {"height": hw[0], "width": hw[1], "images": {
                name: {"width": w, "height": h, "layers": n,
                       "format": "RGBA32F" if d == "f4" else "RGBA16F"}
                for name, (w, h, n, d) in image_specs(self.graph, hw, self.options).items()}},
            "kernels": [{"name": k.name, "op": k.op, "shader": f"{k.name}.comp",
                         "images": [{"unit": u, "tensor": t, "access": a} for u, t, a in k.images],
                         "weights": k.weights, "uniforms": list(k.uniforms),
                         "uniform_values": k.uniforms, "grid": k.grid,
                         "jobs": k.jobs} for k in self.kernels],
            "graph": graph,
            "files": {name: sha256(content_bytes(name, c)) for name, c in files.items()},
        }
        return files


def output_values(graph: ir.Graph, stored):
    op = graph.op(graph.output)
    if rules(op).output:
        return rules(op).output(op, stored)
    channels = 3 if graph.rgb_output else graph.channels(op.name)
    return stored[..., :channels].astype(np.float32)


def compile(model, target: Target | None = None, *, tile=True, luma_input=None,
            count_loads=False) -> Net:
    """Keras or ONNX model -> IR -> ES 3.1 compute kernels (:mod:`workbench.es31`).
    ``target``: an :class:`workbench.es31.Target` (storage, work group, output packs an
    invocation computes), default ``Target()``; ``tile``: stage convs' input tiles in shared
    memory; ``luma_input``: as :func:`workbench.ir.from_model`; ``count_loads``: count every
    image load on the GPU (``net.loads``, tests)."""
    target = Target() if target is None else target
    if not isinstance(target, Target):
        raise TypeError(f"target: an es31.Target, not {type(target).__name__}")
    graph = ir.from_model(model, luma_input=luma_input)
    return from_graph(graph, Options.of(target, tile, count_loads))


def from_graph(graph: ir.Graph, options: Options = Options()) -> Net:
    return Net(graph, generate(graph, options), options)


def load(directory) -> Net:
    """A net written by :meth:`Net.save`: its graph and options compiled again, refused in one
    line naming the file unless that gives the very files saved (:mod:`workbench.es31.saved`:
    a folder edited, or saved by another version of the workbench)."""
    manifest, data = saved.read(directory)
    path = Path(directory) / "manifest.json"
    try:
        graph = saved.graph_of(manifest["graph"],
                               entries.arrays(data["ir.npz"], path.parent / "ir.npz"), path)
        options = Options(**{**manifest["options"],
                             "local_size": tuple(manifest["options"]["local_size"])})
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{path}: not a saved ES 3.1 net ({err})") from None
    net = from_graph(graph, options)
    saved.require_same(net.files(), manifest, data, path)
    return net


