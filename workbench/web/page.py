"""WebGL 1.0 back end: the ES 2.0 passes as a static web page, and a headless-browser harness.

``workbench.web.export(net, dir)`` for an ES 2.0 net (or ``python -m workbench export-web --model M --out DIR``) writes

* what :meth:`workbench.es2.Net.save` writes: ``manifest.json``, ``<pass>.glsl``,
  ``vertex.glsl``, the dense weights textures (``.npy``) and ``weights.npz``;
* ``webgl.json`` (:func:`page_spec`): everything the page runs, as rules it evaluates without
  knowing any op: each tensor's and texture's size for any input size, each pass's uniforms as
  formulas of those sizes, how to decode the output, the receptive field for tiling, and for
  each pass that writes several render targets the programs that write them with fewer
  (``fallback/<program>.glsl``, generated here);
* ``index.html`` and the ES modules of :data:`PAGE_FILES` (from ``workbench/web/``): no build
  step, no framework, nothing fetched from the network.

The page mirrors :mod:`workbench.es2.runner` / :mod:`workbench.gl.fragment`: one RGBA8 texture per pack of
4 channels (CLAMP_TO_EDGE, filter as bound), a fullscreen quad per pass, the same uniforms
(``u_in_texel``, the vertex shader's ``u_v_*``), the output read back with
``readPixels``; a classifier's logits are decoded (16-bit fixed point or float) and the
softmax is computed in JS.

With ``check_model`` (``export-web --check``) it also embeds the self-check of
:mod:`workbench.web.check` (``check.json`` and its ``check.*.bin`` files; ``webgl.json``
``check`` names it): ``check=1`` or the page's button runs it and shows, offers for download
and puts in ``<script id="result">`` and ``window.workbench.deviceReport`` the device report
(:meth:`Session.device_report`).

URL parameters: ``image=URL`` runs that image on load; ``repeat=N`` times N more runs
without the per-pass waits (``repeat_ms`` in the result); ``max_texture_size=N``,
``max_texture_image_units=N``, ``max_draw_buffers=N``, ``no_float_textures=1``, ``no_webgl=1``
and ``no_draw_buffers=1`` make the page act as if the browser's limit were that small (to test
the messages, the tiling and the fallback of a pass with more render targets than the browser
offers to the programs ``webgl.json`` ships with fewer, one without ``WEBGL_draw_buffers``:
same bytes, a note in the ready message).  An image whose
textures would exceed MAX_TEXTURE_SIZE runs in overlapping tiles as in
:mod:`workbench.es2.tiling` (``receptive_field`` in ``webgl.json``; the result's ``tiles``).
The page reports its state in ``document.body.dataset.state`` (``loading``, ``ready``,
``running``, ``done``, ``error``), any message in ``#message``, and the last result as JSON in ``<script id="result">``; its
``window.workbench.runUrl(url)`` runs another image and returns the same result object.

Result (JSON): ``kind`` ``"image"`` (``width``, ``height``, base64 RGBA8 ``output``,
``bicubic`` (null unless the net upscales by a whole factor) and ``input`` bytes, rows top
first) or ``"logits"`` (``logits``,
``probabilities``, ``top5``); both with ``passes`` (``[name, ms]``: each pass until a 1-pixel
``readPixels`` of its target returned), ``total_ms`` (their sum), ``run_ms`` (upload to
read-back, without the per-pass waits), ``compile_ms`` and ``renderer``.
"""
from __future__ import annotations

import base64
import contextlib
import io
import json
from dataclasses import asdict, replace
from importlib import resources
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
from PIL import Image

from workbench import ir
from workbench.data.images import to_uint8
from workbench.es2 import plan, saved, shaders, tiling
from workbench.es2.net import output_spec
from workbench.files import content_bytes, json_text, sha256
from workbench.folders import write_folder
from workbench.web import browser

PAGE_FILES = ("index.html", "workbench.js", "net.js", "gl.js", "tiles.js", "outputs.js",
              "check.js")
LIMIT_PARAMETERS = ("max_texture_size", "max_texture_image_units", "max_draw_buffers",
                    "no_float_textures", "no_webgl", "no_draw_buffers")
PAGE_PARAMETERS = LIMIT_PARAMETERS + ("repeat", "check")
SPEC_FORMAT = "workbench-webgl/2"
# Input sizes (height, width) the size rules are fitted on: every residue of small strides,
# height and width apart (so a rule is checked on two sizes at once), and large sizes.
SAMPLE_SIZES = [(n, 2 * n + 1) for n in range(24, 88)] + [(n, n + 999) for n in (2000, 2001, 2003)]
MAX_DENOMINATOR = 64  # the largest divisor a size rule may have (a stride)
FALLBACK = "fallback"  # the folder of the fewer-target programs


class PageError(RuntimeError):
    """The page reported an error (no WebGL, a browser limit too small, a failed pass...)."""


def page_spec(net, labels=None, manifest=None) -> dict:
    """The content of ``webgl.json`` (format ``workbench-webgl/2``, see docs/design.md, "The
    WebGL page"): ``tensors`` and ``textures`` with size rules (:func:`size_rules`), ``passes``
    with uniform formulas (:func:`uniform_formula`) and, where a pass writes several render
    targets, ``fallback`` programs (:func:`fallback_passes`), the ``output`` to decode, the
    ``receptive_field`` for tiling, class ``labels``.  ``manifest``: the net's
    ``manifest.json`` content (file names of shaders and constant textures), default
    :meth:`Net.files`."""
    return _page(net, labels, manifest)[0]


def _page(net, labels=None, manifest=None) -> tuple[dict, dict]:
    """(:func:`page_spec`, ``{file: source}`` of its fallback programs)."""
    graph = net.graph
    manifest = manifest or net.files()["manifest.json"]
    tensors, textures = size_rules(graph)
    output = output_spec(graph)
    if output["kind"] == "logits":
        count = output["count"]
        labels = list(labels) if labels is not None else [f"class {i}" for i in range(count)]
        if len(labels) != count:
            raise ValueError(f"{len(labels)} labels for the {count} outputs of {graph.output!r}")
    else:
        labels = None
    constants = manifest["constant_textures"]
    for texture in textures:
        texture["constant"] = constants.get(texture["tensor"]) if texture["index"] == 0 else None
    shader_files = {p["name"]: p["shader"] for p in manifest["passes"]}
    fallbacks, sources = fallback_passes(net), {}
    passes = []
    for p in net.passes:
        spec = pass_spec(p, shader_files[p.name])
        if p.name in fallbacks:
            spec["fallback"] = {str(room): [pass_spec(q, f"{FALLBACK}/{q.name}.glsl", name)
                                            for name, q in programs]
                                for room, programs in fallbacks[p.name].items()}
            sources.update({f"{FALLBACK}/{q.name}.glsl": q.source
                            for programs in fallbacks[p.name].values() for _, q in programs})
        passes.append(spec)
    try:  # the page runs an image over its texture limit in tiles that overlap this much
        receptive_field = tiling.receptive_field(graph)
    except ValueError:
        receptive_field = None  # not tileable (a stride, 'valid' padding, a dense layer)
    return {"format": SPEC_FORMAT, "name": graph.name, "compiled_with": net.plan_line(),
            "input": {"name": graph.input.name, "channels": graph.input.channels,
                      "rgb": graph.input.rgb, "size": graph.input_size},
            "vertex_shader": manifest["vertex_shader"], "tensors": tensors,
            "textures": textures, "passes": passes, "output": output, "labels": labels,
            "receptive_field": receptive_field, "check": None}, sources


def size_rules(graph) -> tuple[list, list]:
    """``(tensors, textures)`` of ``webgl.json``: each tensor but the input (``name``,
    ``channels``, ``size``) and each texture (``tensor``, ``index``, ``format`` RGBA8 or
    RGBA32F, ``layer``, ``size``), with a size rule that gives its (height, width) for any
    input size: ``{"fixed": [h, w]}``, or ``{"from": tensor, "num", "den", "offset"}``: on
    each axis ``floor((n * num + offset) / den)`` of that tensor's size ``n`` (an earlier
    tensor; the input's size is the image's).  Found from :meth:`workbench.ir.Graph.shapes`
    and :func:`workbench.es2.plan.textures` at :data:`SAMPLE_SIZES`, knowing no op.  A net of
    a fixed input size (the page fits every picture to it) whose sizes follow no such rule
    (a pooled dense layer that reads the pixels in chunks) gets fixed sizes, its own."""
    try:
        return _size_rules(graph, SAMPLE_SIZES)
    except ValueError:
        if not graph.input_size:
            raise
        return _size_rules(graph, [graph.input_size])


def _size_rules(graph, samples) -> tuple[list, list]:
    shapes = [graph.shapes(hw) for hw in samples]
    sizes = {name: [s[name][:2] for s in shapes] for name in shapes[0]}
    names = list(sizes)
    tensors = [{"name": name, "channels": shapes[0][name][2],
                "size": _size_rule(name, sizes[name], sizes, names[i - 1::-1])}
               for i, name in enumerate(names) if i > 0]
    texture_sizes = [plan.textures(graph, hw) for hw in samples]
    textures = []
    for key, (_, _, dtype) in texture_sizes[0].items():
        own = [(h, w) for w, h, _ in (t[key] for t in texture_sizes)]
        sources = ([key[0]] if key[0] in sizes else []) + names[::-1]
        textures.append({"tensor": key[0], "index": key[1],
                         "format": "RGBA8" if dtype == "f1" else "RGBA32F",
                         "layer": key[0].split("/")[0],  # a layer's own textures: layer/...
                         "size": _size_rule(f"texture {key}", own, sizes, sources)})
    return tensors, textures


def _size_rule(what, own, sizes, sources) -> dict:
    """The size rule (see :func:`size_rules`) of ``own`` ([(h, w)] at the sample sizes)
    from the first of the tensors ``sources`` whose sizes ``sizes[source]`` give it."""
    if len(set(own)) == 1:
        return {"fixed": list(own[0])}
    for source in sources:
        pairs = [(n, m) for ns, ms in zip(sizes[source], own) for n, m in zip(ns, ms)]
        rule = _fit(pairs)
        if rule:
            return {"from": source, **rule}
    raise ValueError(f"{what}: its size follows from no tensor's as floor((n * num + offset) "
                     f"/ den) with den <= {MAX_DENOMINATOR}; the page cannot size it")


def _fit(pairs) -> dict | None:
    """``{num, den, offset}`` with ``m == (n * num + offset) // den`` for every ``(n, m)`` of
    ``pairs``, the smallest ``den``, then the smallest ``offset``; None if there is none."""
    (n1, m1), (n2, m2) = min(pairs), max(pairs)
    if n1 == n2:
        return None
    for den in range(1, MAX_DENOMINATOR + 1):
        guess = round(den * (m2 - m1) / (n2 - n1))
        for num in (guess - 1, guess, guess + 1):
            low = max(den * m - n * num for n, m in pairs)  # (n*num + offset) // den == m
            high = min(den * m - n * num + den - 1 for n, m in pairs)
            if low <= high:
                return {"num": num, "den": den, "offset": low}
    return None


def uniform_formula(spec) -> dict:
    """A pass's uniform as the page evaluates it: on each axis (x from widths, y from
    heights) ``floor(max(sum(coef * ceil(size(tensor) / div)) + offset, at_least) / divide)``,
    its inverse where ``invert`` (``offset`` one number, or ``[x, y]``) over ``terms``
    ``[coef, tensor, div]`` (``at_least`` null: no floor).  ``spec``: how
    :func:`workbench.ir.uniform_values` reads it, ``("size", tensor)``, ``("texel",
    tensor)``, ``("window", output, kernel, stride)``, ``("pad", input, kernel, stride,
    padding)``: TensorFlow's 'SAME' padding before the first column and row, ``max((ceil(n /
    stride) - 1) * stride + kernel - n, 0) // 2`` (``("pad", ..., bx, by)``: plus ``(bx, by) *
    stride``), or ``("value", x, y)``, a constant."""
    kind, *args = spec
    if kind == "value":
        return {"terms": [], "offset": list(args), "at_least": None, "divide": 1}
    tensor, *conv = args
    if kind == "window":
        kernel, stride = conv
        return {"terms": [[stride, tensor, 1]], "offset": kernel - stride, "at_least": None,
                "divide": 1, "invert": True}
    if kind in ("size", "texel"):
        return {"terms": [[1, tensor, 1]], "offset": 0, "at_least": None, "divide": 1,
                **({"invert": True} if kind == "texel" else {})}
    if kind == "pad":  # (plus its output's border times the stride, where drawn with one)
        kernel, stride, padding, *shift = conv
        bx, by = shift or (0, 0)
        if padding != "same":  # constants: [left, top] of the padding (zeros for 'valid')
            top, left = ir.explicit_pads(padding)[:2]
            return {"terms": [], "offset": [left + bx * stride, top + by * stride],
                    "at_least": None, "divide": 1}
        return {"terms": [[stride, tensor, stride], [-1, tensor, 1]],
                "offset": [kernel - stride + 2 * b * stride for b in (bx, by)],
                "at_least": 0, "divide": 2}
    raise ValueError(f"uniform spec {spec!r}: the page knows 'size', 'texel', 'window', 'pad' "
                     "and 'value'")


def pass_spec(p, shader, name=None) -> dict:
    """A pass as the page runs it (``name``: the page's name for it, default its own)."""
    return {"name": name or p.name, "op": p.op, "shader": shader,
            "inputs": [asdict(b) for b in p.inputs],
            "outputs": [{"tensor": t, "pack": k} for t, k in p.outputs],
            "uniforms": {u: uniform_formula(s) for u, s in p.uniforms.items()},
            "arrays": {u: np.asarray(rows, np.float32).ravel().tolist()  # vec4 arrays
                       for u, rows in p.arrays.items()},
            "viewport": p.viewport, "border": p.border, "channels": p.channels}


def fallback_rooms(targets) -> list[int]:
    """The render targets per program of the fallbacks of a pass writing ``targets``: the
    powers of two below it (a browser offering 3 runs the 2-target programs)."""
    return [1 << k for k in range(targets.bit_length()) if 1 << k < targets]


def fallback_passes(net) -> dict[str, dict[int, list]]:
    """``{pass: {room: [(page name, Pass)]}}`` for each pass writing several render targets:
    programs that write its outputs in order, at most ``room`` each, generated here by
    :func:`workbench.es2.shaders.generate` with ``room`` draw buffers (a program of it whose
    outputs are the next ones of the pass; else the one-target program of the next output).
    Each output's arithmetic is its one-target program's, so the bytes are the pass's.
    Page name: ``<pass>/<index of its first output in the pass>``."""
    multi = [p for p in net.passes if len(p.outputs) > 1]
    rooms = fallback_rooms(max((len(p.outputs) for p in multi), default=1))
    generated = {room: {tuple(q.outputs): q for q in _generate(net, room) if q.channels is None}
                 for room in rooms}
    out = {}
    for p in multi:
        out[p.name] = {}
        for room in fallback_rooms(len(p.outputs)):
            programs, i = [], 0
            while i < len(p.outputs):
                q = next((generated[room][k] for k in generated[room]
                          if tuple(p.outputs[i:i + len(k)]) == k and len(k) <= room),
                         generated[1][(p.outputs[i],)])
                programs.append((f"{p.name}/{i}", q))
                i += len(q.outputs)
            out[p.name][room] = programs
    return out


def _generate(net, draw_buffers) -> list:
    """The passes of ``net``'s graph generated anew for its target (its limits and
    precision), up to ``draw_buffers`` render targets a program."""
    return shaders.generate(net.graph, replace(net.target, draw_buffers=draw_buffers))


def export(net, directory, labels=None, force=False, check_model=None) -> Path:
    """Write the page for ``net`` into the folder ``directory``, all at once (see the module
    docstring); returns the path of ``index.html``.  ``labels``: class names of a classifier's
    outputs.  ``check_model``: the net's Keras model, to embed the self-check (test inputs,
    TF's outputs, the emulator's bytes; :mod:`workbench.web.check`).  A folder the workbench
    did not write is replaced only with ``force`` (see :func:`workbench.folders.write_folder`)."""
    web = resources.files("workbench") / "web"
    files = net.files()
    manifest = files["manifest.json"]
    spec, sources = _page(net, labels, manifest)
    if check_model is not None:
        spec["check"] = "check.json"
    page = {"webgl.json": json_text(spec), **sources,
            **{name: (web / name).read_bytes() for name in PAGE_FILES}}
    manifest["files"].update({name: sha256(content_bytes(name, c)) for name, c in page.items()})
    manifest = saved.sealed(manifest)  # its own sha256 again, over the page's files too
    files.update({**page, "manifest.json": json_text(manifest)})  # the bytes check.json hashes
    if check_model is not None:
        from workbench.web.check import check_files

        files.update(check_files(net, check_model, files["manifest.json"]))
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
            if result[key] is not None:  # no bicubic beside a net that is not an upscaler
                result[key] = np.frombuffer(base64.b64decode(result[key]), np.uint8).reshape(
                    h, w, 4)
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
def session(directory, image=None, width=1280, height=900, gl="swiftshader", isolated=False,
            init_script=None, **params):
    """Serve ``directory`` (an exported page) on loopback and open it in headless Chromium
    with WebGL on ``gl`` (:data:`workbench.web.browser.GLS`); yields a :class:`Session` once
    the page is loaded (or shows an error).

    ``image``: a URL relative to the page, passed as ``?image=``; ``isolated``: served
    cross-origin isolated (:func:`workbench.web.browser.serve`); ``init_script``: JavaScript
    run before the page's own (:func:`workbench.web.browser.open_page`); ``params``: the other URL
    parameters (``repeat=3``, ``max_texture_size=64``...; see the module docstring)."""
    with browser.serve(directory, isolated) as base, \
            browser.open_page(width, height, gl, init_script) as page:
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
