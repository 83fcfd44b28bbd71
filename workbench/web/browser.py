"""Headless Chromium for the browser tests: WebGL 1.0 through ANGLE, driven by Playwright.

Playwright drives the system's Chromium (Debian package ``chromium``); it never downloads a browser
of its own. ``open_page()`` is the one entry point::

    with workbench.web.browser.open_page() as page:
        page.goto("http://127.0.0.1:8000/index.html")

Two software GLs behind WebGL (:data:`GLS`): ``swiftshader``, Chromium's own (ANGLE on SwiftShader's
Vulkan, shaders compiled by its Subzero JIT; the default, what Chromium uses without a GPU), and
``llvmpipe``, Mesa's (ANGLE's OpenGL ES back end on Mesa's EGL, as on a Linux machine whose GL is
Mesa; shaders compiled by LLVM).

``open_page(init_script=...)`` runs a script in every frame before the page's own:
:data:`NO_FLOAT_TEXTURES` masks the float-texture extensions (a device without float render
targets); :data:`FLOAT_PROBE` reports what a WebGL 1 and a WebGL 2 context then offer and
whether they still render to float textures.

:func:`serve` serves a folder on loopback; ``isolated=True`` adds the headers that make its pages
cross-origin isolated (``Cross-Origin-Opener-Policy: same-origin``,
``Cross-Origin-Embedder-Policy: require-corp``: ``SharedArrayBuffer``, so WebAssembly threads).
"""
from __future__ import annotations

import contextlib
import functools
import http.server
import json
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
def open_page(width: int = 1280, height: int = 900, gl: str = "swiftshader", init_script=None):
    """A Playwright page in headless Chromium with WebGL on ``gl`` (a key of :data:`GLS`); the
    browser is closed on exit.  :class:`BrowserUnavailable` when WebGL runs on another GL.
    ``init_script``: JavaScript run in every frame before its own scripts (from the first
    page on: the renderer check runs under it too)."""
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
            if init_script:
                page.context.add_init_script(init_script)
                page.goto("about:blank")  # the page under the script
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


# The extensions of float (and half-float) textures, their filtering, rendering and blending.
FLOAT_EXTENSIONS = ("OES_texture_float", "OES_texture_half_float", "OES_texture_float_linear",
                    "OES_texture_half_float_linear", "WEBGL_color_buffer_float",
                    "EXT_color_buffer_float", "EXT_color_buffer_half_float", "EXT_float_blend")
# An init script: WebGL 1 and 2 contexts without FLOAT_EXTENSIONS (getExtension answers null,
# getSupportedExtensions leaves them out).  WebGL 1 cannot then make float textures; WebGL 2
# makes them (core) but renders to them only with EXT_color_buffer_float(_half): FLOAT_PROBE
# checks that the masked contexts do not.
NO_FLOAT_TEXTURES = """(() => {
  const hidden = new Set(%s.map((e) => e.toLowerCase()));
  for (const context of [self.WebGLRenderingContext, self.WebGL2RenderingContext]) {
    if (!context) continue;
    const { getExtension, getSupportedExtensions } = context.prototype;
    context.prototype.getExtension = function (name) {
      return hidden.has(String(name).toLowerCase()) ? null : getExtension.call(this, name);
    };
    context.prototype.getSupportedExtensions = function () {
      const all = getSupportedExtensions.call(this);
      return all && all.filter((e) => !hidden.has(e.toLowerCase()));
    };
  }
})();""" % json.dumps(FLOAT_EXTENSIONS)
# {webgl, webgl2: {extensions: the float ones offered, rgba32f, rgba16f: a 4x4 texture of that
# format is a complete framebuffer attachment, every extension of FLOAT_EXTENSIONS asked for
# first} or null without that context}.
FLOAT_PROBE = """() => {
  const probe = (kind, formats) => {
    const gl = document.createElement("canvas").getContext(kind);
    if (!gl) return null;
    for (const name of %s) gl.getExtension(name);
    const renders = ([internal, type]) => {
      const texture = gl.createTexture(), framebuffer = gl.createFramebuffer();
      gl.bindTexture(gl.TEXTURE_2D, texture);
      gl.texImage2D(gl.TEXTURE_2D, 0, internal, 4, 4, 0, gl.RGBA, type, null);
      const made = gl.getError() === gl.NO_ERROR;
      gl.bindFramebuffer(gl.FRAMEBUFFER, framebuffer);
      gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, texture, 0);
      const complete = gl.checkFramebufferStatus(gl.FRAMEBUFFER) === gl.FRAMEBUFFER_COMPLETE;
      gl.getError();
      gl.deleteFramebuffer(framebuffer);
      gl.deleteTexture(texture);
      return made && complete;
    };
    const float = (gl.getSupportedExtensions() || []).filter((e) => /float/i.test(e));
    return { extensions: float, rgba32f: renders(formats[0]), rgba16f: renders(formats[1]) };
  };
  // WebGL 1: RGBA with FLOAT or HALF_FLOAT_OES; WebGL 2: RGBA32F, RGBA16F
  return { webgl: probe("webgl", [[0x1908, 0x1406], [0x1908, 0x8D61]]),
           webgl2: probe("webgl2", [[0x8814, 0x1406], [0x881A, 0x140B]]) };
}""" % json.dumps(FLOAT_EXTENSIONS)


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
