"""A headless OpenGL ES 2.0 context through EGL (PyOpenGL), for the driver child process.

Mesa's surfaceless platform (``EGL_PLATFORM=surfaceless``), ``EGL_CONTEXT_CLIENT_VERSION 2``:
a real ES 2.0 context, as the target GPUs' drivers offer (they refuse desktop GL contexts).
The bundle's ``run.py`` has its own copy of this (it ships without the workbench).
:func:`gl_function` serves every GL child process (the moderngl worker too)."""
from __future__ import annotations

import ctypes
import ctypes.util
import os


def es2_context():
    """Make an ES 2.0 context current (no surface where EGL_KHR_surfaceless_context is
    offered, else a 1x1 pbuffer); returns the display."""
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")  # before PyOpenGL is imported
    from OpenGL import EGL

    display = EGL.eglGetDisplay(EGL.EGL_DEFAULT_DISPLAY)
    major, minor = EGL.EGLint(), EGL.EGLint()
    if not display or not EGL.eglInitialize(display, ctypes.pointer(major), ctypes.pointer(minor)):
        raise RuntimeError("eglInitialize failed (no EGL display)")
    attributes = (EGL.EGLint * 5)(EGL.EGL_RENDERABLE_TYPE, EGL.EGL_OPENGL_ES2_BIT,
                                  EGL.EGL_SURFACE_TYPE, EGL.EGL_PBUFFER_BIT, EGL.EGL_NONE)
    config, count = EGL.EGLConfig(), EGL.EGLint()
    if not EGL.eglChooseConfig(display, attributes, ctypes.pointer(config), 1,
                               ctypes.pointer(count)) or count.value < 1:
        raise RuntimeError("EGL offers no OpenGL ES 2.0 configuration")
    EGL.eglBindAPI(EGL.EGL_OPENGL_ES_API)
    context = EGL.eglCreateContext(display, config, EGL.EGL_NO_CONTEXT, (EGL.EGLint * 3)(
        EGL.EGL_CONTEXT_CLIENT_VERSION, 2, EGL.EGL_NONE))
    if not context:
        raise RuntimeError("eglCreateContext failed for OpenGL ES 2.0")
    surface = EGL.EGL_NO_SURFACE
    if b"EGL_KHR_surfaceless_context" not in EGL.eglQueryString(display, EGL.EGL_EXTENSIONS):
        surface = EGL.eglCreatePbufferSurface(display, config, (EGL.EGLint * 5)(
            EGL.EGL_WIDTH, 1, EGL.EGL_HEIGHT, 1, EGL.EGL_NONE))
    if not EGL.eglMakeCurrent(display, surface, surface, context):
        raise RuntimeError("eglMakeCurrent failed")
    return display


def gl_function(name, restype, argtypes, missing_ok=False):
    """The GL entry point ``name`` of the current context (eglGetProcAddress), as a ctypes
    function; None when it is missing and ``missing_ok``."""
    egl = ctypes.CDLL(ctypes.util.find_library("EGL") or "libEGL.so.1")
    egl.eglGetProcAddress.restype = ctypes.c_void_p
    egl.eglGetProcAddress.argtypes = [ctypes.c_char_p]
    address = egl.eglGetProcAddress(name.encode())
    if not address:
        if missing_ok:
            return None
        raise RuntimeError(f"{name} is not available in this GL context")
    return ctypes.CFUNCTYPE(restype, *argtypes)(address)
