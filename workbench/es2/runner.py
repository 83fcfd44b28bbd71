"""Runs the passes of an ES 2.0 net in the GL worker (:mod:`workbench.gl.fragment`).

Tensors live in RGBA8 textures (one per pack of 4 channels, CLAMP_TO_EDGE); every pass draws a
fullscreen quad into one of them, or into several as draw buffers.  This module plans textures and uniform values from the
graph's shapes and ships them to the worker; it never inspects an op.
"""
from __future__ import annotations

import numpy as np

from workbench import gl, ir
from workbench.es2 import plan
from workbench.es2.shaders import draw_area, uniform_values


class Runner:
    """Compiles the passes of a net once and runs them on images.

    ``constants``: textures uploaded once per allocation (``key -> HxWx4 array``), such as
    the weights texture of a dense layer.
    """

    def __init__(self, graph: ir.Graph, passes, vertex_shader, constants=None):
        self.graph, self.passes, self.constants = graph, passes, constants or {}
        self.worker = gl.worker()
        most, limit = max(len(p.outputs) for p in passes), self.worker.info["GL_MAX_DRAW_BUFFERS"]
        if most > limit:
            raise ValueError(f"the net writes {most} render targets per pass, over this GPU's "
                             f"GL_MAX_DRAW_BUFFERS of {limit}; compile it with draw_buffers={limit}")
        self.compile_seconds, self.program_ids = self.worker.call(
            "compile", vertex=vertex_shader, fragments=[p.source for p in passes],
            outputs=[len(p.outputs) for p in passes])
        self.timings: dict[str, float] = {}
        self._hw = None

    def _allocate(self, hw):
        """The textures of input size ``hw`` in the worker and the passes' plans (sent once:
        each run names none), unless they are there already (another net's run in the same
        worker since replaces them)."""
        if self._hw == hw and getattr(self.worker, "allocation", None) is self.textures:
            return
        try:
            plan.require_memory(self.graph, hw, "run it on a smaller image", ("GL textures",))
        except plan.OutOfMemory as err:
            from workbench.es2 import tiling
            raise plan.OutOfMemory(f"{err}{tiling.offer(self.graph, hw)}") from None
        self.textures = plan.textures(self.graph, hw)
        limit = self.worker.info["GL_MAX_TEXTURE_SIZE"]
        for (name, _), (w, h, _) in self.textures.items():
            if max(h, w) > limit:
                raise ValueError(f"tensor {name!r} would be {w}x{h} pixels, over this GPU's "
                                 f"GL_MAX_TEXTURE_SIZE of {limit}; use a smaller image")
        self.worker.call("allocate", sizes=self.textures)
        self.worker.allocation = self.textures
        self.worker.call("run", uploads=self.constants, passes=[], reads=[])
        self.shapes, self._hw = self.graph.shapes(hw), hw
        output_op = self.graph.output.split("/")[0]
        self._reads = {keep: [k for k in self.textures if k not in self.constants
                              and (keep or k[0].split("/")[0] == output_op)]
                       for keep in (False, True)}  # the textures run() reads back
        self.worker.call("plan", passes=[self._plan(p, i)
                                         for p, i in zip(self.passes, self.program_ids)])

    def _plan(self, p, program):
        """What the worker needs for pass ``p``: program, bindings, uniform values, outputs."""
        return {"program": program,
                "inputs": [(b.uniform, (b.tensor, b.pack), b.filter) for b in p.inputs],
                "uniforms": uniform_values(p, self.shapes),
                "arrays": {name: np.ascontiguousarray(rows, np.float32).tobytes()
                           for name, rows in p.arrays.items()},
                "outputs": p.outputs, "viewport": draw_area(p, self.shapes),
                "clear": p.border is not None, "channels": p.channels}

    def run(self, image, keep=False, timed=True):
        """Run every pass; returns ``{texture key: array}`` of the output textures (all of
        them with ``keep``): uint8 HxWx4 for RGBA8, float32 for RGBA32F; ``timed``: each pass
        waited for and timed (:attr:`timings`), else drawn back to back (no timings).  A new
        input size whose textures would not fit the memory available is refused before they
        are made (:func:`workbench.es2.plan.require_memory`)."""
        image = self.graph.input_image(image)
        c = image.shape[2]
        self._allocate(image.shape[:2])
        data = np.zeros((*image.shape[:2], 4 * ir.packs(c)), np.uint8)
        data[..., :c] = np.round(np.clip(image, 0, 1) * 255)
        if self.graph.input.rgb:
            data[..., 3] = 255
        uploads = {(self.graph.input.name, p): data[..., 4 * p:4 * p + 4] for p in range(ir.packs(c))}
        timings, arrays = self.worker.call("run", uploads=uploads, reads=self._reads[bool(keep)],
                                           timed=timed)
        self.timings = {p.name: t for p, t in zip(self.passes, timings)}
        return arrays
