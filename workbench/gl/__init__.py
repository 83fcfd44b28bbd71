"""Headless OpenGL runner: moderngl on Mesa's EGL (llvmpipe here, any GL driver elsewhere).

Tensors live in RGBA8 textures (one per pack of 4 channels, CLAMP_TO_EDGE); every pass
draws a fullscreen quad into one of them.  The GL calls run in a child process
(:mod:`workbench.gl_worker`), because TensorFlow and llvmpipe cannot share one; this module
plans the passes (texture sizes, uniforms, bindings) and talks to it.
"""
from __future__ import annotations

import atexit
import pickle
import subprocess
import sys

import numpy as np

from workbench import ir

EGL_PACKAGES = "libegl1 libgl1 libgl1-mesa-dri libegl-mesa0"


class GLUnavailable(RuntimeError):
    """No OpenGL context could be created."""


class GLError(RuntimeError):
    """The GL worker reported a failure (shader compile error, GL error...)."""


class _Worker:
    """The child process that owns the GL context (``python -m <module>``, a module that calls
    :func:`workbench.gl_worker.main`)."""

    def __init__(self, module="workbench.gl_worker"):
        self.proc = subprocess.Popen([sys.executable, "-m", module],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            self.info = self.call("info")
        except (GLError, EOFError) as err:
            self.close()
            raise GLUnavailable(
                "could not create a headless OpenGL context through EGL. Install Mesa's EGL "
                f"and OpenGL: apt-get install {EGL_PACKAGES}\n{err}") from None

    def call(self, command, **kwargs):
        if self.proc.poll() is not None:
            raise GLError(f"the GL worker process has exited (code {self.proc.returncode}); "
                          "compile the net again to start a new one")
        try:
            pickle.dump((command, kwargs), self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
            status, result = pickle.load(self.proc.stdout)
        except EOFError:
            raise GLError(f"the GL worker died during {command!r} "
                          f"(exit code {self.proc.wait()})") from None
        except KeyboardInterrupt:  # its late reply would answer the next request
            self.proc.kill()
            self.proc.wait()
            raise
        if status == "error":
            raise GLError(f"GL worker, {command!r}:\n{result}")
        return result

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)


_WORKER = None


def worker() -> _Worker:
    """The process-wide GL worker, started on first use."""
    global _WORKER
    if _WORKER is None or _WORKER.proc.poll() is not None:
        _WORKER = _Worker()
        atexit.register(_WORKER.close)
    return _WORKER


def info() -> dict:
    """GL_RENDERER, GL_VERSION and GL_MAX_TEXTURE_SIZE of the context."""
    return worker().info


class Runner:
    """Compiles the passes of a net once and runs them on images.

    ``constants``: textures uploaded once per allocation (``key -> HxWx4 array``), such as
    the weights texture of a dense layer.
    """

    def __init__(self, graph: ir.Graph, passes, vertex_shader, constants=None):
        self.graph, self.passes, self.constants = graph, passes, constants or {}
        self.worker = worker()
        self.compile_seconds, self.program_ids = self.worker.call(
            "compile", vertex=vertex_shader, fragments=[p.source for p in passes])
        self.timings: dict[str, float] = {}
        self._hw = None

    def _allocate(self, hw):
        if self._hw == hw:
            return
        if self.graph.input_size and tuple(hw) != tuple(self.graph.input_size):
            raise ValueError(f"image of {hw[1]}x{hw[0]} pixels: net {self.graph.name!r} takes "
                             f"{self.graph.input_size[1]}x{self.graph.input_size[0]}")
        self.textures = self.graph.textures(hw)
        limit = self.worker.info["GL_MAX_TEXTURE_SIZE"]
        for (name, _), (w, h, _) in self.textures.items():
            if max(h, w) > limit:
                raise ValueError(f"tensor {name!r} would be {w}x{h} pixels, over this GPU's "
                                 f"GL_MAX_TEXTURE_SIZE of {limit}; use a smaller image")
        self.worker.call("allocate", sizes=self.textures)
        self.worker.call("run", uploads=self.constants, passes=[], reads=[])
        self.shapes, self._hw = self.graph.shapes(hw), hw
        self._plans = [self._plan(p, i) for p, i in zip(self.passes, self.program_ids)]

    def _plan(self, p, program):
        """What the worker needs for pass ``p``: program, bindings, uniform values, output."""
        def size(name):
            h, w, _ = self.shapes[name]
            return (float(w), float(h))

        op = self.graph.op(p.op)
        values = {"u_in_size": size(p.inputs[0].tensor) if p.inputs[0].tensor in self.shapes
                  else None, "u_out_size": size(p.output[0]) if p.output[0] in self.shapes else None}
        if isinstance(op, ir.Conv):
            top, left = op.pads(self.shapes[op.input][:2])
            values["u_pad"] = (float(left), float(top))
        return {"program": program,
                "inputs": [(b.uniform, (b.tensor, b.pack), b.filter) for b in p.inputs],
                "uniforms": {name: values[name] for name in p.uniforms},
                "output": p.output, "viewport": p.viewport}

    def run(self, image, keep=False):
        """Run every pass; returns ``{texture key: array}`` of the output textures (all of
        them with ``keep``): uint8 HxWx4 for RGBA8, float32 for RGBA32F."""
        image = self.graph.input_image(image)
        c = image.shape[2]
        self._allocate(image.shape[:2])
        data = np.zeros((*image.shape[:2], 4 * ir.packs(c)), np.uint8)
        data[..., :c] = np.round(np.clip(image, 0, 1) * 255)
        if self.graph.input.rgb:
            data[..., 3] = 255
        uploads = {(self.graph.input.name, p): data[..., 4 * p:4 * p + 4] for p in range(ir.packs(c))}
        output_op = self.graph.output.split("/")[0]
        reads = [k for k in self.textures if k not in self.constants
                 and (keep or k[0].split("/")[0] == output_op)]
        timings, arrays = self.worker.call("run", uploads=uploads, reads=reads,
                                           passes=self._plans)
        self.timings = {p.name: t for p, t in zip(self.passes, timings)}
        return arrays
