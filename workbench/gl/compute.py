"""Headless compute shaders (OpenGL ES 3.1 / GL 4.3), in a process of their own.

The parent (:func:`workbench.gl.worker` with ``workbench.gl.COMPUTE``) ships shader
sources, allocations and dispatch lists to ``python -m workbench.gl.compute``, the child that
owns a GL context (Mesa llvmpipe through EGL here).  As with :mod:`workbench.gl.fragment`, the
child must never import TensorFlow or Keras (both carry LLVM, as llvmpipe does; together they
crash): it imports numpy and moderngl only.

Resources, by key (any picklable name):

* images: 2D array textures ``(width, height, layers, dtype)``, dtype ``"f4"`` (RGBA32F) or
  ``"f2"`` (RGBA16F); bound layered, so a shader sees every layer through one
  ``image2DArray``;
* buffers: shader storage buffers of a byte size (or initial bytes).

A step: ``{"program": id, "images": [(unit, key, "read"|"write"|"readwrite")],
"buffers": [(binding, key)], "uniforms": {name: value}, "groups": (x, y, z)}``.  Steps run in
order with a memory barrier between them.
"""
from __future__ import annotations

import time

import numpy as np

# the minimum an OpenGL ES 3.1 implementation must offer (Table 20.47 of the ES 3.1 spec);
# generators keep within these so that the shaders run on any ES 3.1 GPU
ES31_MIN = {
    "shared_memory_bytes": 16384,
    "work_group_invocations": 128,
    "image_uniforms": 4,
    "storage_blocks": 4,
    "storage_block_bytes": 1 << 27,
}


class ComputeWorker:
    """The GL side, in the child process."""

    def __init__(self):
        import moderngl

        self.mgl = moderngl
        self.ctx = moderngl.create_context(standalone=True, backend="egl", require=430)
        self.programs = {}   # source -> compute shader
        self.by_id = []
        self.images = {}
        self.buffers = {}

    def info(self):
        keys = ("GL_RENDERER", "GL_VERSION", "GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS",
                "GL_MAX_SHADER_STORAGE_BLOCK_SIZE", "GL_MAX_TEXTURE_SIZE",
                "GL_MAX_ARRAY_TEXTURE_LAYERS")
        return {k: self.ctx.info[k] for k in keys if k in self.ctx.info}

    def compile(self, sources):
        """Compile the shaders not compiled yet; returns ``(seconds, ids)``."""
        start = time.perf_counter()
        for source in sources:
            if source not in self.programs:
                self.programs[source] = self.ctx.compute_shader(source)
        ids = []
        for source in sources:
            ids.append(len(self.by_id))
            self.by_id.append(self.programs[source])
        return time.perf_counter() - start, ids

    def allocate(self, images=None, buffers=None, owner=None):
        """Release the resources of ``owner`` (keys ``(owner, name)``; all when None), then
        create ``images`` (``key -> (width, height, layers, dtype)``) and ``buffers``
        (``key -> nbytes`` or bytes)."""
        for table in (self.images, self.buffers):
            for key in [k for k in table if owner is None or k[0] == owner]:
                table.pop(key).release()
        for key, (width, height, layers, dtype) in (images or {}).items():
            self.images[key] = self.ctx.texture_array((width, height, layers), 4, dtype=dtype)
        for key, spec in (buffers or {}).items():
            if isinstance(spec, (bytes, bytearray, memoryview)):
                self.buffers[key] = self.ctx.buffer(bytes(spec))
            else:
                self.buffers[key] = self.ctx.buffer(reserve=max(int(spec), 4))

    def write(self, images=None, buffers=None):
        """Upload arrays: images as (layers, height, width, 4) in the texture's dtype."""
        for key, data in (images or {}).items():
            tex = self.images[key]
            dtype = np.float16 if tex.dtype == "f2" else np.float32
            tex.write(np.ascontiguousarray(data, dtype).tobytes())
        for key, data in (buffers or {}).items():
            self.buffers[key].write(np.ascontiguousarray(data).tobytes())

    def _dispatch(self, step):
        shader = self.by_id[step["program"]]
        for unit, key, access in step.get("images", ()):
            self.images[key].bind_to_image(unit, read="read" in access, write="write" in access)
        for binding, key in step.get("buffers", ()):
            self.buffers[key].bind_to_storage_buffer(binding)
        for name, value in step.get("uniforms", {}).items():
            if name in shader:
                shader[name].value = value
        shader.run(*step["groups"])
        self.ctx.memory_barrier()

    def run(self, steps, reads=(), buffer_reads=(), timed=True):
        """Dispatch ``steps`` (each timed on its own, with a ``finish`` after it when
        ``timed``); returns ``(seconds per step, {image key: (layers, h, w, 4) float32},
        {buffer key: bytes})``."""
        timings = []
        for step in steps:
            start = time.perf_counter()
            self._dispatch(step)
            if timed:
                self.ctx.finish()
            timings.append(time.perf_counter() - start)
        self.ctx.finish()
        arrays = {}
        for key in reads:
            tex = self.images[key]
            w, h, layers = tex.size
            dtype = np.float16 if tex.dtype == "f2" else np.float32
            arrays[key] = np.frombuffer(tex.read(), dtype).reshape(layers, h, w, 4).astype(np.float32)
        return timings, arrays, {key: self.buffers[key].read() for key in buffer_reads}

    def time(self, steps, repeat=3, warmup=1):
        """Wall-clock seconds of the whole step list, ``repeat`` times (after ``warmup``
        untimed runs); each run ends with ``finish``."""
        for _ in range(warmup):
            for step in steps:
                self._dispatch(step)
            self.ctx.finish()
        seconds = []
        for _ in range(repeat):
            start = time.perf_counter()
            for step in steps:
                self._dispatch(step)
            self.ctx.finish()
            seconds.append(time.perf_counter() - start)
        return seconds


if __name__ == "__main__":
    from workbench.gl import fragment

    try:
        fragment.main(ComputeWorker)
    except KeyboardInterrupt:  # a notebook kernel interrupted with its process group
        pass
