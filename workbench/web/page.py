"""WebGL 1.0 back end: the ES 2.0 passes as a static web page, and a headless-browser harness.

``workbench.web.export(net, dir)`` for an ES 2.0 net (or ``python -m workbench export-web --model M --out DIR``) writes

* what :meth:`workbench.es2.Net.save` writes: ``manifest.json``, ``<pass>.glsl``,
  ``vertex.glsl``, the dense weights textures (``.npy``) and ``weights.npz``;
* ``webgl.json``: what the page needs beyond the manifest to plan a run for any image size
  (:func:`page_spec`: each op's shape rule, the fixed-size textures of a dense layer, the
  output's kind, class labels);
* ``index.html`` and ``workbench.js`` (from ``workbench/web/``): no build step, no framework,
  nothing fetched from the network.

The page mirrors :mod:`workbench.es2.runner` / :mod:`workbench.gl.fragment`: one RGBA8 texture per pack of
4 channels (CLAMP_TO_EDGE, filter as bound), a fullscreen quad per pass, the same uniforms
(``u_in_size``, ``u_out_size``, ``u_pad``), the output read back with ``readPixels``; a
classifier's logits are decoded (16-bit fixed point or float) and the softmax is computed in JS.

With ``check_model`` (``export-web --check``) it also embeds the self-check of
:mod:`workbench.web.check` (``check.json`` and its ``check.*.bin`` files; ``webgl.json``
``check`` names it): ``check=1`` or the page's button runs it and shows, offers for download
and puts in ``<script id="result">`` and ``window.workbench.deviceReport`` the device report
(:meth:`Session.device_report`).

URL parameters: ``image=URL`` runs that image on load; ``repeat=N`` times N more runs
without the per-pass waits (``repeat_ms`` in the result); ``max_texture_size=N``,
``max_texture_image_units=N``, ``max_draw_buffers=N``, ``no_float_textures=1``, ``no_webgl=1``
and ``no_draw_buffers=1`` make the page act as if the browser's limit were that small (to test
the messages, the tiling and the split of a pass with more render targets than the browser
offers into passes of as many as it does, one without ``WEBGL_draw_buffers``: same bytes, a
note in the ready message).  An image whose
textures would exceed MAX_TEXTURE_SIZE runs in overlapping tiles as in
:mod:`workbench.es2.tiling` (``receptive_field`` in ``webgl.json``; the result's ``tiles``).
The page reports its state in ``document.body.dataset.state`` (``loading``, ``ready``,
``running``, ``done``, ``error``), any message in ``#message``, and the last result as JSON in ``<script id="result">``; its
``window.workbench.runUrl(url)`` runs another image and returns the same result object.

Result (JSON): ``kind`` ``"image"`` (``width``, ``height``, base64 RGBA8 ``output``,
``bicubic`` and ``input`` bytes, rows top first) or ``"logits"`` (``logits``,
``probabilities``, ``top5``); both with ``passes`` (``[name, ms]``: each pass until a 1-pixel
``readPixels`` of its target returned), ``total_ms`` (their sum), ``run_ms`` (upload to
read-back, without the per-pass waits), ``compile_ms`` and ``renderer``.
"""
from __future__ import annotations

import base64
import contextlib
import io
import json
from importlib import resources
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
from PIL import Image

from workbench import ir
from workbench.data.images import to_uint8
from workbench.es2 import plan, tiling
from workbench.files import json_text, write_folder
from workbench.web import browser

PAGE_FILES = ("index.html", "workbench.js")
LIMIT_PARAMETERS = ("max_texture_size", "max_texture_image_units", "max_draw_buffers",
                    "no_float_textures", "no_webgl", "no_draw_buffers")
PAGE_PARAMETERS = LIMIT_PARAMETERS + ("repeat", "check")


class PageError(RuntimeError):
    """The page reported an error (no WebGL, a browser limit too small, a failed pass...)."""


def page_spec(net, labels=None) -> dict:
    """The content of ``webgl.json``: shape rules the page evaluates for each image size
    (as :meth:`workbench.ir.Graph.shapes` and ``textures``), and what the output is."""
    graph = net.graph
    hw = graph.input_size or (64, 64)
    shapes = graph.shapes(hw)
    ops = []
    for op in graph.ops:
        rule = {"name": op.name, "input": op.input, "channels": shapes[op.name][2]}
        if isinstance(op, ir.Conv):
            rule.update(kind="conv", size=op.size, stride=op.stride, padding=op.padding)
        elif isinstance(op, ir.DepthToSpace):
            rule.update(kind="depth_to_space", block=op.block)
        elif isinstance(op, ir.Dense):  # fixed sizes, whatever the input
            rule.update(kind="dense", textures=[
                {"tensor": k[0], "index": k[1], "width": w, "height": h,
                 "format": "RGBA8" if dtype == "f1" else "RGBA32F"}
                for k, (w, h, dtype) in plan.textures(graph, hw).items()
                if k[0].split("/")[0] == op.name])
        else:
            raise TypeError(f"op {op.name!r}: no WebGL plan for {type(op).__name__}")
        ops.append(rule)
    out = graph.op(graph.output)
    if isinstance(out, ir.Dense):
        output = {"kind": "logits", "number": out.number, "count": out.cout, "pairs": out.pairs}
        labels = list(labels) if labels is not None else [f"class {i}" for i in range(out.cout)]
        if len(labels) != out.cout:
            raise ValueError(f"{len(labels)} labels for the {out.cout} outputs of {out.name!r}")
    else:
        output = {"kind": "image", "channels": shapes[out.name][2]}
        labels = None
    try:  # the page runs an image over its texture limit in tiles that overlap this much
        receptive_field = tiling.receptive_field(graph)
    except ValueError:
        receptive_field = None  # not tileable (a stride, 'valid' padding, a dense layer)
    return {"format": "workbench-webgl/1", "name": graph.name,
            "input": {"name": graph.input.name, "channels": graph.input.channels,
                      "rgb": graph.input.rgb, "size": graph.input_size},
            "ops": ops, "output": {"tensor": graph.output, **output}, "labels": labels,
            "passes": len(net.passes), "receptive_field": receptive_field, "check": None}


def export(net, directory, labels=None, force=False, check_model=None) -> Path:
    """Write the page for ``net`` into the folder ``directory``, all at once (see the module
    docstring); returns the path of ``index.html``.  ``labels``: class names of a classifier's
    outputs.  ``check_model``: the net's Keras model, to embed the self-check (test inputs,
    TF's outputs, the emulator's bytes; :mod:`workbench.web.check`).  A folder the workbench
    did not write is replaced only with ``force`` (see :func:`workbench.files.write_folder`)."""
    web = resources.files("workbench") / "web"
    page = {name: (web / name).read_bytes() for name in PAGE_FILES}
    files = net.files()
    files["manifest.json"] = json_text(files["manifest.json"])  # the bytes check.json hashes
    spec = page_spec(net, labels)
    if check_model is not None:
        from workbench.web.check import check_files

        files.update(check_files(net, check_model, files["manifest.json"]))
        spec["check"] = "check.json"
    files.update({"webgl.json": spec, **page})
    return write_folder(directory, files, force) / "index.html"


def png_data_url(image) -> str:
    """An HxWx3 image (float [0, 1] or uint8) as a ``data:image/png`` URL."""
    buffer = io.BytesIO()
    Image.fromarray(to_uint8(image)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def decode_result(result: dict) -> dict:
    """The page's result with the base64 images as uint8 HxWx4 arrays and the logits as a
    float32 array."""
    result = dict(result)
    if result.get("kind") == "image":
        out = (result["height"], result["width"])
        sizes = {"output": out, "bicubic": out,
                 "input": (result["input_height"], result["input_width"])}
        for key, (h, w) in sizes.items():
            result[key] = np.frombuffer(base64.b64decode(result[key]), np.uint8).reshape(h, w, 4)
    elif result.get("kind") == "logits":
        result["logits"] = np.asarray(result["logits"], np.float32)
    return result


class Session:
    """A page of an exported net open in headless Chromium (see :func:`session`);
    ``console`` collects the page's console messages and uncaught errors, for diagnosis."""

    def __init__(self, page, url, console):
        self.page, self.url, self.console = page, url, console

    @property
    def state(self) -> str:
        return self.page.evaluate("document.body.dataset.state")

    @property
    def message(self) -> str:
        return self.page.inner_text("#message")

    def wait(self, states=("ready", "done", "error"), timeout=60_000):
        """Wait until the page's state is one of ``states``; returns it."""
        self.page.wait_for_function(f"{list(states)}.includes(document.body.dataset.state)",
                                    timeout=timeout)
        return self.state

    def result(self) -> dict:
        """The last result the page placed in the DOM (``<script id="result">``), decoded."""
        if self.wait() == "error":
            raise PageError(self.message)
        return decode_result(json.loads(self.page.text_content("#result")))

    def device_report(self, timeout=120_000) -> dict:
        """The self-check's device report (``?check=1``, or run now if the page has not run
        it; see :mod:`workbench.web.check`), as the page made it (JSON object)."""
        if self.wait() in ("ready", "done"):  # not run yet, or an image run last
            self.page.evaluate("window.workbench.deviceReport || window.workbench.runCheck()")
        self.page.wait_for_function("window.workbench.deviceReport !== null || "
                                    "document.body.dataset.state === 'error'", timeout=timeout)
        if self.state == "error":
            raise PageError(self.message)
        return self.page.evaluate("window.workbench.deviceReport")

    def run(self, image) -> dict:
        """Run an HxWx3 image (float [0, 1] or uint8; sent as a PNG data URL); the decoded
        result.  The page's error (not loaded, image over a limit...) raises :class:`PageError`."""
        self.wait()  # loaded (or failed to: then the page answers with that error)
        result = self.page.evaluate("url => window.workbench.runUrl(url)", png_data_url(image))
        if "error" in result:
            raise PageError(result["error"])
        return decode_result(result)


@contextlib.contextmanager
def session(directory, image=None, width=1280, height=900, gl="swiftshader", **params):
    """Serve ``directory`` (an exported page) on loopback and open it in headless Chromium
    with WebGL on ``gl`` (:data:`workbench.web.browser.GLS`); yields a :class:`Session` once
    the page is loaded (or shows an error).

    ``image``: a URL relative to the page, passed as ``?image=``; ``params``: the other URL
    parameters (``repeat=3``, ``max_texture_size=64``...; see the module docstring)."""
    with browser.serve(directory) as base, browser.open_page(width, height, gl) as page:
        yield _open(page, base, image, params)


@contextlib.contextmanager
def sessions(directories, width=1280, height=900, **params):
    """Several exported pages open at once in one headless Chromium, a tab each (to time them
    interleaved); yields a list of :class:`Session` (see :func:`session`)."""
    with contextlib.ExitStack() as stack:
        bases = [stack.enter_context(browser.serve(d)) for d in directories]
        first = stack.enter_context(browser.open_page(width, height))
        pages = [first] + [first.context.browser.new_page(viewport={"width": width, "height": height})
                           for _ in bases[1:]]
        yield [_open(page, base, None, params) for page, base in zip(pages, bases)]


def _open(page, base, image, params) -> Session:
    """Open ``base``'s ``index.html`` with URL parameters in ``page``; wait until loaded."""
    unknown = set(params) - set(PAGE_PARAMETERS)
    if unknown:
        raise ValueError(f"unknown page parameters {sorted(unknown)}; known: {PAGE_PARAMETERS}")
    query = {**({"image": image} if image else {}),
             **{k: (1 if v is True else v) for k, v in params.items()}}
    messages = []
    page.on("console", lambda m: messages.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: messages.append(f"page error: {e}"))
    url = f"{base}/index.html" + (f"?{urlencode(query)}" if query else "")
    page.goto(url)
    s = Session(page, url, messages)
    s.wait(("done", "error") if image else ("ready", "done", "error"))
    return s
