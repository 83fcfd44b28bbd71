"""The child process of :mod:`workbench.gl.drivers` (``python -m workbench.gl.driver_child``):
run with a Mesa driver's drm-shim preloaded and the build's EGL first on the library path
(:func:`workbench.gl.drivers.environment`), never in the caller's process.

It reads a pickled request on stdin (``{"vertex", "programs": [(name, source, render
targets[, vertex source])], "compute"}``), compiles, links and draws each program once in a
surfaceless ES 2.0 context (ES 3.1 compute programs: compiled and linked), and writes a raw
record a program (GL status, logs, the driver's KHR_debug messages and its stderr) and the
driver's ``info`` as a pickle on stdout; an exception: one line instead.
"""
from __future__ import annotations

import ctypes
import os
import pickle
import sys
import tempfile

LIMITS = {"MAX_TEXTURE_SIZE": 0x0D33, "MAX_TEXTURE_IMAGE_UNITS": 0x8872,
          "MAX_FRAGMENT_UNIFORM_VECTORS": 0x8DFD, "MAX_VARYING_VECTORS": 0x8DFC,
          "MAX_DRAW_BUFFERS": 0x8824}
GL_COMPUTE_SHADER = 0x91B9
GL_DEBUG_OUTPUT = 0x92E0
GL_DEBUG_OUTPUT_SYNCHRONOUS = 0x8242
_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                             ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


class _Stderr:
    """The process's C-level stderr (fd 2) sent to a file, read piece by piece."""

    def __init__(self):
        self.file = tempfile.TemporaryFile()
        os.dup2(self.file.fileno(), 2)

    def take(self) -> str:
        self.file.seek(0)
        text = self.file.read().decode(errors="replace")
        self.file.seek(0)
        self.file.truncate()
        return text


def _serve(request):
    """Compile, link and draw every program of ``request`` (``"compute"``: compile and link
    ES 3.1 compute programs); a raw record each."""
    from OpenGL import EGL  # noqa: F401  (PYOPENGL_PLATFORM=egl: EGL before GLES2)
    from OpenGL import GLES3 as gl

    from workbench.gl.egl import es_context, gl_function

    compute = request.get("compute", False)
    es_context((3, 1) if compute else (2, 0))
    gl_info = {"renderer": _string(gl, gl.GL_RENDERER),
               "extensions": _string(gl, gl.GL_EXTENSIONS).split(),
               **{k: int(gl.glGetIntegerv(enum)) for k, enum in LIMITS.items()}}
    messages = []

    def on_message(source, kind, ident, severity, length, text, user):
        messages.append(ctypes.string_at(text, length).decode(errors="replace"))

    callback = _CALLBACK(on_message)
    gl_function("glDebugMessageCallbackKHR", None, [_CALLBACK, ctypes.c_void_p])(callback, None)
    gl.glEnable(GL_DEBUG_OUTPUT)
    gl.glEnable(GL_DEBUG_OUTPUT_SYNCHRONOUS)
    stderr = _Stderr()
    if not request["programs"]:
        return {"info": gl_info, "records": []}
    vertices = {}  # vertex source -> shader

    def vertex_shader(source):
        if source not in vertices:
            vertices[source] = _shader(gl, gl.GL_VERTEX_SHADER, source)[0]
        return vertices[source]

    quad = (ctypes.c_float * 8)(-1, -1, 1, -1, -1, 1, 1, 1)
    draw_buffers = gl_function("glDrawBuffersEXT", None, [ctypes.c_int, ctypes.c_void_p],
                               missing_ok=True)
    records = []
    for name, source, targets, *vertex_source in request["programs"]:
        vertex = None if compute else vertex_shader(vertex_source[0] if vertex_source
                                                    else request["vertex"])
        messages.clear()
        stderr.take()
        kind = GL_COMPUTE_SHADER if compute else gl.GL_FRAGMENT_SHADER
        shader, compiled, compile_log = _shader(gl, kind, source)
        record = {"name": name, "compile": compiled, "compile_log": compile_log, "link": False,
                  "link_log": "", "gl_error": 0, "targets": targets}
        if compiled:
            program = gl.glCreateProgram()
            if vertex:
                gl.glAttachShader(program, vertex)
            gl.glAttachShader(program, shader)
            gl.glBindAttribLocation(program, 0, "a_pos")
            gl.glLinkProgram(program)
            record["link"] = bool(gl.glGetProgramiv(program, gl.GL_LINK_STATUS))
            record["link_log"] = _text(gl.glGetProgramInfoLog(program))
            if record["link"] and not compute:  # a compute program is compiled at its link
                record["gl_error"] = _draw(gl, program, quad, targets, draw_buffers)
            gl.glDeleteProgram(program)
        gl.glDeleteShader(shader)
        record["messages"] = list(messages)
        record["stderr"] = stderr.take()
        records.append(record)
    return {"info": gl_info, "records": records}


def _string(gl, name) -> str:
    value = gl.glGetString(name)
    return (value if isinstance(value, bytes) else ctypes.string_at(value)).decode(errors="replace")


def _text(log):
    return log.decode(errors="replace") if isinstance(log, bytes) else str(log or "")


def _shader(gl, kind, source):
    shader = gl.glCreateShader(kind)
    gl.glShaderSource(shader, source)
    gl.glCompileShader(shader)
    return shader, bool(gl.glGetShaderiv(shader, gl.GL_COMPILE_STATUS)), _text(
        gl.glGetShaderInfoLog(shader))


def _draw(gl, program, quad, targets, draw_buffers):
    """Draw a 4x4 quad with the program into ``targets`` RGBA8 textures, every sampler bound
    to an RGBA8 NEAREST texture of its own unit; returns glGetError after the draw."""
    gl.glUseProgram(program)
    count = int(gl.glGetProgramiv(program, gl.GL_ACTIVE_UNIFORMS))
    unit = 0
    textures = []
    for i in range(count):
        name, size, kind = gl.glGetActiveUniform(program, i)
        if kind == gl.GL_SAMPLER_2D:
            textures.append(_texture(gl, 3, 3))
            gl.glActiveTexture(gl.GL_TEXTURE0 + unit)
            gl.glBindTexture(gl.GL_TEXTURE_2D, textures[-1])
            gl.glUniform1i(gl.glGetUniformLocation(program, name), unit)
            unit += 1
    outputs = [_texture(gl, 4, 4) for _ in range(targets)]
    fbo = gl.glGenFramebuffers(1)
    gl.glBindFramebuffer(gl.GL_FRAMEBUFFER, fbo)
    for i, tex in enumerate(outputs):
        gl.glFramebufferTexture2D(gl.GL_FRAMEBUFFER, gl.GL_COLOR_ATTACHMENT0 + i, gl.GL_TEXTURE_2D,
                                  tex, 0)
    if targets > 1 and draw_buffers:
        attachments = (ctypes.c_uint * targets)(*(gl.GL_COLOR_ATTACHMENT0 + i for i in range(targets)))
        draw_buffers(targets, attachments)
    gl.glViewport(0, 0, 4, 4)
    for i in range(int(gl.glGetProgramiv(program, gl.GL_ACTIVE_ATTRIBUTES))):  # each: the quad
        location = gl.glGetAttribLocation(program, gl.glGetActiveAttrib(program, i)[0])
        gl.glEnableVertexAttribArray(location)
        gl.glVertexAttribPointer(location, 2, gl.GL_FLOAT, False, 0, quad)
    gl.glDrawArrays(gl.GL_TRIANGLE_STRIP, 0, 4)
    gl.glFlush()  # not glFinish: lima's shim never signals the fence it would wait for
    error = int(gl.glGetError())
    gl.glBindFramebuffer(gl.GL_FRAMEBUFFER, 0)
    gl.glDeleteFramebuffers(1, [fbo])
    gl.glDeleteTextures(len(textures + outputs), textures + outputs)
    return error


def _texture(gl, width, height):
    tex = gl.glGenTextures(1)
    gl.glBindTexture(gl.GL_TEXTURE_2D, tex)
    gl.glTexImage2D(gl.GL_TEXTURE_2D, 0, gl.GL_RGBA, width, height, 0, gl.GL_RGBA,
                    gl.GL_UNSIGNED_BYTE, None)
    for key, value in ((gl.GL_TEXTURE_MIN_FILTER, gl.GL_NEAREST), (gl.GL_TEXTURE_MAG_FILTER, gl.GL_NEAREST),
                       (gl.GL_TEXTURE_WRAP_S, gl.GL_CLAMP_TO_EDGE), (gl.GL_TEXTURE_WRAP_T, gl.GL_CLAMP_TO_EDGE)):
        gl.glTexParameteri(gl.GL_TEXTURE_2D, key, value)
    return tex


def main():
    """The child: a pickled request on stdin, the pickled records (or a one-line error) on
    stdout; the driver's own output never reaches the terminal."""
    request = pickle.load(sys.stdin.buffer)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints must not corrupt the reply
    try:
        reply = _serve(request)
    except Exception as err:  # one line for the parent
        reply = f"{type(err).__name__}: {err}"
    pickle.dump(reply, out)
    out.flush()


if __name__ == "__main__":
    main()
