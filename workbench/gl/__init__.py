"""The GL child processes and the parent's side of their pipe.

GL calls run in a child process, because TensorFlow and Mesa's llvmpipe cannot share one
(both carry LLVM): :mod:`workbench.gl.fragment` draws fragment-shader passes (ES 2.0),
:mod:`workbench.gl.compute` dispatches compute shaders (ES 3.1).  This package imports
nothing else from the workbench and never TensorFlow; the back ends plan what to draw and
ship it here (pickled ``(command, kwargs)`` requests, ``("ok" | "error", result)`` replies).
"""
from __future__ import annotations

import atexit
import pickle
import subprocess
import sys

EGL_PACKAGES = "libegl1 libgl1 libgl1-mesa-dri libegl-mesa0"


class GLUnavailable(RuntimeError):
    """No OpenGL context could be created."""


class GLError(RuntimeError):
    """The GL worker reported a failure (shader compile error, GL error...)."""


class _Worker:
    """The child process that owns the GL context (``python -m <module>``, a module that calls
    :func:`workbench.gl.fragment.main`)."""

    def __init__(self, module):
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


FRAGMENT = "workbench.gl.fragment"
COMPUTE = "workbench.gl.compute"
_WORKERS: dict[str, _Worker] = {}


def worker(module=FRAGMENT) -> _Worker:
    """The process-wide worker running ``module`` (:data:`FRAGMENT` or :data:`COMPUTE`),
    started on first use and again after it exited."""
    w = _WORKERS.get(module)
    if w is None or w.proc.poll() is not None:
        w = _WORKERS[module] = _Worker(module)
        atexit.register(w.close)
    return w


def close_workers():
    """Close the workers now (each also closes at exit): ``python -m workbench`` does it before
    its stderr filter ends, which waits for every process holding that pipe."""
    for w in _WORKERS.values():
        w.close()


def info(module=FRAGMENT) -> dict:
    """The context's GL_RENDERER, GL_VERSION, GL_MAX_TEXTURE_SIZE (and more for compute)."""
    return worker(module).info
