"""A headless OpenGL ES context through EGL (PyOpenGL), for the driver child process.

Mesa's surfaceless platform (``EGL_PLATFORM=surfaceless``), ``EGL_CONTEXT_CLIENT_VERSION 2``:
a real ES 2.0 context, as the target GPUs' drivers offer (they refuse desktop GL contexts).
The bundle's ``run.py`` has its own copy of this (it ships without the workbench).
:func:`gl_function` serves every GL child process (the moderngl worker too)."""
from __future__ import annotations

import ctypes
import ctypes.util
import os


EGL_OPENGL_ES3_BIT = 0x40
EGL_CONTEXT_MINOR_VERSION = 0x30FB


def es_context(version=(2, 0)):
    """Make an OpenGL ES context of ``version`` current (ES 2.0, or ``(3, 1)`` for compute
    shaders; no surface where EGL_KHR_surfaceless_context is offered, else a 1x1 pbuffer);
    returns the display."""
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")  # before PyOpenGL is imported
    from OpenGL import EGL

    display = EGL.eglGetDisplay(EGL.EGL_DEFAULT_DISPLAY)
    major, minor = EGL.EGLint(), EGL.EGLint()
    if not display or not EGL.eglInitialize(display, ctypes.pointer(major), ctypes.pointer(minor)):
        raise RuntimeError("eglInitialize failed (no EGL display)")
    renderable = EGL.EGL_OPENGL_ES2_BIT if version[0] == 2 else EGL_OPENGL_ES3_BIT
    attributes = (EGL.EGLint * 5)(EGL.EGL_RENDERABLE_TYPE, renderable,
                                  EGL.EGL_SURFACE_TYPE, EGL.EGL_PBUFFER_BIT, EGL.EGL_NONE)
    config, count = EGL.EGLConfig(), EGL.EGLint()
    if not EGL.eglChooseConfig(display, attributes, ctypes.pointer(config), 1,
                               ctypes.pointer(count)) or count.value < 1:
        raise RuntimeError(f"EGL offers no OpenGL ES {version[0]}.{version[1]} configuration")
    EGL.eglBindAPI(EGL.EGL_OPENGL_ES_API)
    try:
        context = EGL.eglCreateContext(display, config, EGL.EGL_NO_CONTEXT, (EGL.EGLint * 5)(
            EGL.EGL_CONTEXT_CLIENT_VERSION, version[0], EGL_CONTEXT_MINOR_VERSION, version[1],
            EGL.EGL_NONE))
    except EGL.EGLError:  # PyOpenGL raises where EGL returns no context
        context = None
    if not context:
        raise RuntimeError(f"eglCreateContext failed for OpenGL ES {version[0]}.{version[1]}")
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
