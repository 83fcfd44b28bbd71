"""Headless Chromium for the browser tests: WebGL 1.0 through ANGLE, driven by Playwright.

Playwright drives the system's Chromium (Debian package ``chromium``); it never downloads a browser
of its own. ``open_page()`` is the one entry point::

    with workbench.web.browser.open_page() as page:
        page.goto("http://127.0.0.1:8000/index.html")

Two software GLs behind WebGL (:data:`GLS`): ``swiftshader``, Chromium's own (ANGLE on SwiftShader's
Vulkan, shaders compiled by its Subzero JIT; the default, what Chromium uses without a GPU), and
``llvmpipe``, Mesa's (ANGLE's OpenGL ES back end on Mesa's EGL, as on a Linux machine whose GL is
Mesa; shaders compiled by LLVM).

:func:`serve` serves a folder on loopback; ``isolated=True`` adds the headers that make its pages
cross-origin isolated (``Cross-Origin-Opener-Policy: same-origin``,
``Cross-Origin-Embedder-Policy: require-corp``: ``SharedArrayBuffer``, so WebAssembly threads).
"""
from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import threading
from pathlib import Path

# Flags for every session: no sandbox (root in CI), nothing that reaches the network; the GL: GLS.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# WebGL's GL -> Chromium flags.  Chromium keeps software GLs off its GPU list: llvmpipe needs the
# block list ignored (and falls back to SwiftShader where Mesa's EGL is missing; see ``open_page``).
GLS = {
    "swiftshader": ["--use-angle=swiftshader", "--enable-unsafe-swiftshader"],
    "llvmpipe": ["--use-angle=gl-egl", "--ignore-gpu-blocklist"],
}


class BrowserUnavailable(RuntimeError):
    """No Chromium, or no Playwright, on this machine."""


def chromium_path() -> str:
    """The Chromium executable: ``WORKBENCH_CHROMIUM``, else ``chromium`` / ``chromium-browser`` on PATH."""
    candidates = [os.environ.get("WORKBENCH_CHROMIUM"), "chromium", "chromium-browser"]
    for name in filter(None, candidates):
        found = shutil.which(name)
        if found:
            return found
    raise BrowserUnavailable(
        "no Chromium found (tried $WORKBENCH_CHROMIUM, chromium, chromium-browser); install it with "
        "`apt-get install -y --no-install-recommends chromium` (make test does this as root)")


@contextlib.contextmanager
def open_page(width: int = 1280, height: int = 900, gl: str = "swiftshader"):
    """A Playwright page in headless Chromium with WebGL on ``gl`` (a key of :data:`GLS`); the
    browser is closed on exit.  :class:`BrowserUnavailable` when WebGL runs on another GL."""
    if gl not in GLS:
        raise ValueError(f"unknown GL {gl!r} for WebGL; known: {', '.join(GLS)}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        raise BrowserUnavailable("Playwright is not installed: pip install -e '.[dev]'") from error
    executable = chromium_path()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True,
                                             args=CHROMIUM_FLAGS + GLS[gl])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            renderer = page.evaluate(_RENDERER)
            if gl not in renderer.lower():
                raise BrowserUnavailable(f"Chromium's WebGL runs on {renderer!r}, not on {gl} "
                                         f"(flags {' '.join(GLS[gl])})")
            yield page
        finally:
            browser.close()


_RENDERER = """() => {
  const gl = document.createElement("canvas").getContext("webgl");
  if (!gl) return "no WebGL";
  const debug = gl.getExtension("WEBGL_debug_renderer_info");
  return gl.getParameter(debug ? debug.UNMASKED_RENDERER_WEBGL : gl.RENDERER);
}"""


# Response headers that make a page cross-origin isolated (``self.crossOriginIsolated``).
ISOLATION_HEADERS = {"Cross-Origin-Opener-Policy": "same-origin",
                     "Cross-Origin-Embedder-Policy": "require-corp"}


@contextlib.contextmanager
def serve(directory, isolated=False) -> str:
    """Serve ``directory`` over HTTP on loopback (a free port); yields the base URL.
    ``isolated``: every response carries :data:`ISOLATION_HEADERS`."""
    handler = functools.partial(_IsolatedHandler if isolated else _QuietHandler,
                                directory=str(Path(directory)))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    # ES modules (onnxruntime-web's .mjs, loaded by import() and as module workers) need a
    # JavaScript type; WebAssembly.instantiateStreaming needs application/wasm
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".mjs": "text/javascript", ".wasm": "application/wasm"}

    def log_message(self, *args):
        pass


class _IsolatedHandler(_QuietHandler):
    def end_headers(self):
        for name, value in ISOLATION_HEADERS.items():
            self.send_header(name, value)
        super().end_headers()
