"""The GL side of the runner, in a process of its own: ``python -m workbench.gl.fragment``.

TensorFlow and Mesa's llvmpipe both carry LLVM; in one process they crash (segfault at
the first draw, whichever is loaded first).  So GL work happens here, in a child process
that imports only numpy and moderngl, and :mod:`workbench.gl` talks to it over a pipe
(pickled ``(command, kwargs)`` requests on stdin, ``("ok", result)`` or ``("error", text)``
replies on stdout).  This module must never import TensorFlow or Keras.
"""
from __future__ import annotations

import ctypes
import os
import pickle
import signal
import sys
import time
import traceback
from typing import NamedTuple

import numpy as np

from workbench.gl.egl import gl_function


class _Step(NamedTuple):
    """A pass as :meth:`Worker.run` draws it: its program, vertex array and the uniform values
    the program holds now (shared by its passes); ``inputs`` ``[(unit, key, texture, filter,
    sampler uniform or None)]``, ``uniforms`` ``[(name, value)]`` (vec2), ``arrays``
    ``[(uniform, bytes)]``; the framebuffer, its colour mask (a one-target pass's; None:
    several targets, left as they are), whether it is cleared first and the viewport (None:
    all)."""

    program: object
    vao: object
    held: dict
    inputs: list
    uniforms: list
    arrays: list
    fbo: object
    mask: tuple | None
    clear: bool
    viewport: tuple | None


class Worker:
    def __init__(self):
        import moderngl

        self.mgl = moderngl
        self.ctx = moderngl.create_context(standalone=True, backend="egl")
        quad = np.array([-1, -1, 1, -1, -1, 1, 1, 1], np.float32)
        self.vbo = self.ctx.buffer(quad.tobytes())
        self.programs = {}   # fragment source -> (program, vao, its members' names)
        self.by_id = []      # (program, vao, names) in the order compile() returned their ids
        self.textures = {}   # key -> (texture, framebuffer)
        self.targets = {}    # (key, ...) -> framebuffer of several textures (draw buffers)
        self.planned = []    # the passes of the runs that name none (plan())
        self.filters = {}    # key -> the filter its texture has now
        self.set = {}        # program object -> {uniform: the value it holds now}

    LIMITS = ("GL_MAX_TEXTURE_SIZE", "GL_MAX_TEXTURE_IMAGE_UNITS", "GL_MAX_VARYING_VECTORS",
              "GL_MAX_FRAGMENT_UNIFORM_VECTORS", "GL_MAX_RENDERBUFFER_SIZE", "GL_MAX_DRAW_BUFFERS")

    def info(self):
        """GL_VENDOR, GL_RENDERER, GL_VERSION, GL_SHADING_LANGUAGE_VERSION, the :data:`LIMITS`
        and ``precision``: the fragment shader's float formats, ``{"highp" | "mediump":
        {"rangeMin", "rangeMax", "precision"}}`` (glGetShaderPrecisionFormat)."""
        info = {k: self.ctx.info[k] for k in ("GL_VENDOR", "GL_RENDERER", "GL_VERSION", *self.LIMITS)}
        info["GL_SHADING_LANGUAGE_VERSION"] = _gl_call("glGetString", ctypes.c_char_p, [ctypes.c_uint],
                                                       0x8B8C).decode()
        info["precision"] = {name: _precision_format(kind)
                             for name, kind in (("highp", 0x8DF2), ("mediump", 0x8DF1))}
        return info

    def compile(self, vertex, fragments, outputs=None):
        """Compile and link the programs not compiled yet, and draw each once into 1x1 targets,
        ``outputs[i]`` of them for program i (default 1; drivers such as llvmpipe translate a
        shader at its first draw); returns ``(seconds all that took, program ids for run())``."""
        start = time.perf_counter()
        outputs = outputs or [1] * len(fragments)
        targets = [self.ctx.texture((1, 1), 4, dtype="f1") for _ in range(max(outputs))]
        fbos = {n: self.ctx.framebuffer(color_attachments=targets[:n]) for n in set(outputs)}
        # Bind RGBA8 NEAREST textures as the real passes do: drivers compile a variant of a
        # shader per sampler state, and the warm-up should make the one that will be used.
        sampled = self.ctx.texture((3, 3), 4, dtype="f1")  # most tensors are not powers of 2
        sampled.filter = (self.mgl.NEAREST, self.mgl.NEAREST)
        sampled.repeat_x = sampled.repeat_y = False
        for unit in range(8):
            sampled.use(location=unit)
        for source, n in zip(fragments, outputs):
            if source not in self.programs:
                prog = self.ctx.program(vertex_shader=vertex, fragment_shader=source)
                vao = self.ctx.vertex_array(prog, [(self.vbo, "2f", "a_pos")])
                fbos[n].use()
                vao.render(self.mgl.TRIANGLE_STRIP)
                self.programs[source] = (prog, vao, frozenset(prog))
        self.ctx.finish()
        for obj in (*fbos.values(), *targets, sampled):
            obj.release()
        seconds = time.perf_counter() - start
        ids = []
        for source in fragments:
            ids.append(len(self.by_id))
            self.by_id.append(self.programs[source])
        return seconds, ids

    def allocate(self, sizes):
        """Textures with framebuffers, ``sizes[key] = (width, height, dtype)``; dtype "f1" is
        RGBA8, "f4" RGBA32F."""
        for fbo in self.targets.values():
            fbo.release()
        for tex, fbo in self.textures.values():
            fbo.release()
            tex.release()
        self.textures, self.targets, self.planned, self.filters = {}, {}, [], {}
        for key, (width, height, dtype) in sizes.items():
            tex = self.ctx.texture((width, height), 4, dtype=dtype)
            tex.repeat_x = tex.repeat_y = False
            self.textures[key] = (tex, self.ctx.framebuffer(color_attachments=[tex]))

    def plan(self, passes):
        """Keep ``passes`` (as :meth:`run` takes them) for the runs that name none: a net's
        passes, their weights with them, are sent and resolved once, not at every run (the dog
        classifier's 1,134 with their uniform arrays: 1.1 MB, ~10-40 ms to pickle and
        unpickle)."""
        self.planned = [self._step(p) for p in passes]

    def run(self, uploads, passes=None, reads=(), timed=True):
        """Write ``uploads[key]`` (HxWx4, the texture's dtype), draw every pass (None: the
        :meth:`plan`\ ned ones), return (seconds per pass, each until a ``finish`` after it,
        where ``timed``, else none; arrays).

        A pass: ``{"program": id, "inputs": [(uniform, key, filter)], "uniforms": {name: value},
        "arrays": {name: bytes of float32 (rows, 4)} (vec4 uniform arrays), "outputs": [key, ...],
        "viewport": (x, y, width, height) or None (all), "clear": whether its outputs are
        cleared to 0 first, "channels": the components written (a colour mask) or None}``;
        several outputs are drawn as draw buffers 0, 1, ... of one framebuffer.  GL state a
        pass finds as it needs it is not set again (a texture's filter, a unit's texture, a
        program's sampler units and ``vec2`` uniforms).
        """
        for key, data in uploads.items():
            self.textures[key][0].write(np.ascontiguousarray(data).tobytes())
        timings = []
        bound = {}  # texture unit -> the key of the texture this run bound there
        for step in self.planned if passes is None else [self._step(p) for p in passes]:
            start = time.perf_counter()
            held = step.held
            for unit, key, tex, f, uniform in step.inputs:
                if self.filters.get(key) != f:
                    tex.filter = (f, f)
                    self.filters[key] = f
                if bound.get(unit) != key:
                    tex.use(location=unit)
                    bound[unit] = key
                if uniform and held.get(uniform) != unit:
                    step.program[uniform].value = held[uniform] = unit
            for name, value in step.uniforms:
                if held.get(name) != value:
                    step.program[name].value = held[name] = value
            for member, rows in step.arrays:
                member.write(rows)
            if step.mask:  # (moderngl applies it at use())
                step.fbo.color_mask = step.mask
            step.fbo.use()
            if step.clear:
                step.fbo.clear(0.0, 0.0, 0.0, 0.0)
            if step.viewport:
                self.ctx.viewport = step.viewport
            step.vao.render(self.mgl.TRIANGLE_STRIP)
            if timed:
                self.ctx.finish()
                timings.append(time.perf_counter() - start)
        arrays = {}
        for key in reads:
            tex, fbo = self.textures[key]
            w, h = tex.size
            dtype = np.uint8 if tex.dtype == "f1" else np.float32
            arrays[key] = np.frombuffer(fbo.read(components=4, dtype=tex.dtype),
                                        dtype).reshape(h, w, 4)
        return timings, arrays

    def _step(self, p) -> _Step:
        """Pass ``p`` (as :meth:`run` takes it) resolved to the objects drawing it touches;
        the uniforms its program lacks (optimised away) left out."""
        program, vao, names = self.by_id[p["program"]]
        linear = {"linear": self.mgl.LINEAR}
        channels = p.get("channels")  # the colour mask of a one-target pass
        mask = tuple(channels is None or k in channels for k in range(4))
        return _Step(
            program, vao, self.set.setdefault(program.glo, {}),
            [(unit, key, self.textures[key][0], linear.get(filt, self.mgl.NEAREST),
              uniform if uniform in names else None)
             for unit, (uniform, key, filt) in enumerate(p["inputs"])],
            [(name, value) for name, value in p["uniforms"].items() if name in names],
            [(program[name], rows) for name, rows in p.get("arrays", {}).items()
             if name in names],
            self._framebuffer(tuple(p["outputs"])),
            mask if len(p["outputs"]) == 1 else None, bool(p.get("clear")),
            tuple(p["viewport"]) if p.get("viewport") else None)

    def _framebuffer(self, keys):
        """The framebuffer that draws into the textures ``keys`` (draw buffer i: ``keys[i]``)."""
        if len(keys) == 1:
            return self.textures[keys[0]][1]
        if keys not in self.targets:
            self.targets[keys] = self.ctx.framebuffer(
                color_attachments=[self.textures[k][0] for k in keys])
        return self.targets[keys]


def _gl_call(name, restype, argtypes, *args):
    """Call the GL function ``name`` of the current (EGL) context; moderngl does not wrap it."""
    return gl_function(name, restype, argtypes)(*args)


def _precision_format(kind):
    """glGetShaderPrecisionFormat(GL_FRAGMENT_SHADER, kind) as a dict."""
    value_range, precision = (ctypes.c_int * 2)(), ctypes.c_int()
    _gl_call("glGetShaderPrecisionFormat", None, [ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p,
             ctypes.c_void_p], 0x8B30, kind, value_range, ctypes.byref(precision))
    return {"rangeMin": value_range[0], "rangeMax": value_range[1], "precision": precision.value}


def serve(inp, out, factory=None):
    """Answer requests until ``inp`` closes; ``factory`` makes the worker (default
    :class:`Worker`) on the first request."""
    worker = None
    while True:
        try:
            command, kwargs = pickle.load(inp)
        except EOFError:
            return
        try:
            if worker is None:
                worker = (factory or Worker)()
            reply = ("ok", getattr(worker, command)(**kwargs))
        except Exception:  # report every failure to the parent, keep serving
            reply = ("error", traceback.format_exc())
        pickle.dump(reply, out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()


def main(factory=None):
    """Serve on stdin/stdout (the entry point of a worker process).  Ctrl-C and a Jupyter
    kernel's interrupt reach the whole process group: the parent decides, by closing stdin
    or killing the worker (:meth:`workbench.gl._Worker.call`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not corrupt the pipe
    serve(sys.stdin.buffer, protocol_out, factory)


if __name__ == "__main__":
    main()
