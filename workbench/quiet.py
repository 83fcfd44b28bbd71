"""Keep TensorFlow's start-up chatter out of the user's terminal and notebooks.

TensorFlow's C++ code logs a few INFO lines when it is imported ("oneDNN custom operations are
on", "Could not find cuda drivers", absl's "All log messages before absl::InitializeLog()"
notice).  They are written before absl's logging is set up, so ``TF_CPP_MIN_LOG_LEVEL`` does
not silence them.  :func:`filtered_stderr` passes the process's file descriptor 2, which the
kernels and workers it starts inherit, through a filter that drops exactly those lines and
forwards everything else unchanged: ``python -m workbench`` runs inside it, and
:func:`quiet_tensorflow_import` (installed by ``import workbench``) imports TensorFlow inside
it wherever a workbench function first needs it (a plain ``python``, a notebook's kernel).
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import re
import sys
import threading

# Each pattern: a line TensorFlow prints at import, on every machine, that says nothing the user
# must act on (the oneDNN option is set on purpose by workbench/__init__.py); the line it logs,
# as an error, the first time it computes in float16 on a CPU without AVX-512 FP16 (it then
# uses Eigen's kernels: the mediump study's TF float16 column); and the line an IPython kernel
# sometimes logs when papermill shuts it down after the last cell.
NOISE = re.compile(rb"WARNING: All log messages before absl::InitializeLog\(\) is called"
                   rb"|\] oneDNN custom operations are on\."
                   rb"|cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine"
                   rb"|util\.cc:\d+\] oneDNN supports DT_HALF only on platforms with AVX-512\."
                   rb"|^\[IPKernelApp\] ERROR \| KeyboardInterrupt caught in kernel\.$")


# How noise lines begin: a partial line that could still become one waits for its end; any
# other is forwarded at once (progress bars redraw a line with "\r" and never end it).
NOISE_STARTS = (b"I0", b"E0", b"WARNING: All log messages",
                b"[IPKernelApp] ERROR | KeyboardInterrupt")
LINE_END = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)")


def is_noise(line: bytes) -> bool:
    return NOISE.search(line) is not None


def _may_become_noise(tail: bytes) -> bool:
    return any(start.startswith(tail[:len(start)]) for start in NOISE_STARTS)


def _forward(read_fd, out_fd):
    """Copy ``read_fd`` to ``out_fd`` until end of file, dropping noise lines."""
    pending = b""
    while chunk := os.read(read_fd, 1 << 16):
        pending += chunk
        end = 0
        for match in LINE_END.finditer(pending):
            if match.start() != end:
                break
            end = match.end()
            if not is_noise(match.group()):
                os.write(out_fd, match.group())
        pending = pending[end:]
        if pending and not _may_become_noise(pending):
            os.write(out_fd, pending)
            pending = b""
    if pending:
        os.write(out_fd, pending)


@contextlib.contextmanager
def filtered_stderr():
    """Inside, every line written to file descriptor 2 (by this process or its children) goes
    to the real stderr unless :func:`is_noise` says it is TensorFlow's start-up chatter."""
    sys.stderr.flush()
    real = os.dup(2)
    read, write = os.pipe()
    os.dup2(write, 2)
    os.close(write)

    out = os.dup(real)
    thread = threading.Thread(target=_forward, args=(read, out), name="filtered-stderr",
                              daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)  # the pipe ends when the children holding it have exited too
        os.close(real)
        thread.join(timeout=2)
        if not thread.is_alive():
            os.close(read)
            os.close(out)


class _QuietImport(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` the first time it is imported, by whoever imports it, and runs its
    import inside :func:`filtered_stderr`; then steps aside."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def exec_module(module):
                with filtered_stderr():
                    run(module)

            spec.loader.exec_module = exec_module
        return spec


def quiet_tensorflow_import():
    """Import TensorFlow, when something first does, with its start-up lines dropped (nothing
    where it is imported already or the finder is installed)."""
    if "tensorflow" not in sys.modules and \
            not any(isinstance(f, _QuietImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietImport())
