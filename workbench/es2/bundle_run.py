"""Replay a workbench bundle on an OpenGL ES 2.0 GPU and check its bytes (``run.py``).

A bundle (``python -m workbench bundle --model M --out DIR``) holds an ES 2.0 net's shaders
(``manifest.json``, ``*.glsl``), a few test inputs and, for each, the bytes the workbench's
numpy emulator predicts and TensorFlow's float output (``checks/``).  This script needs only
Python 3, numpy and PyOpenGL with an EGL + OpenGL ES 2.0 driver: no TensorFlow, no workbench.

On a Raspberry Pi (Raspberry Pi OS with its default KMS driver, Mesa vc4 on a Pi 0-3 or v3d
on a Pi 4/5; the old closed Broadcom driver of /opt/vc is not supported):

    sudo apt install python3-numpy python3-opengl libegl1 libgles2
    python3 run.py                       # prints a table, writes report.json
    python3 run.py --threshold 1.0 --report pi3.json

Elsewhere: ``pip install numpy pyopengl`` and the system's EGL/GLES libraries (Mesa:
libegl1, libgles2).  No window or X server is needed: the script asks for Mesa's
surfaceless platform (EGL_MESA_platform_surfaceless), else the default display (there
``EGL_PLATFORM=surfaceless`` may help), and renders into framebuffers (with a 1x1 pbuffer
current where EGL lacks surfaceless contexts).

It compiles every program, runs each test input as the workbench runs it (one RGBA8 texture
per pack of 4 channels, CLAMP_TO_EDGE, filter as bound; a fullscreen quad per pass; the
uniforms of ``bundle.json`` and its areas drawn, where an output lies in a zero border
cleared first), reads the output texture back and compares it with the emulator's bytes
(share equal; for a mediump net, whose GPU may compute in float16 or float32, the share
within the bundle's ``levels`` of the float16 prediction) and TF's
output (PSNR, or the logits of a classifier).  Writes a device report
(``workbench-device-report/1``, source ``bundle``) for ``python -m workbench devices``.
Exit status 1 when an input's share of bytes equal to the emulator (within ``levels``) is
below ``--threshold`` (a share in [0, 1]).  ``manifest.json`` and ``bundle.json`` must each
hold its own sha256 (``manifest_sha256``, ``bundle_sha256``: of the file's JSON without it,
keys sorted, no spaces, as the workbench wrote it; at most 256 MiB) and every file they name
must lie in the bundle's folder with the sha256 their ``files`` list; else one line naming
it, exit status 2.  For a net with 16-bit tensors, whose codes a GPU's float32 sums may move
by a step from the emulator's, ``levels`` is the band that spreads to the output (steps of
it; a classifier's: its logits' 16-bit codes).

``first_draw_ms`` includes the driver's own shader translation, which Mesa does at the first
draw and keeps in its on-disk cache: a second run is much faster (set
``MESA_SHADER_CACHE_DISABLE=true`` to time a cold start).  A classifier's output is its 16-bit
fixed-point logits texture (a few bytes), where one logit a step (1/256) off the emulator's
costs one or two bytes of a handful: judge it by ``top1_equal_tf`` and
``max_abs_logit_diff_vs_tf`` too (``--threshold 0`` to only report).
"""
import argparse
import base64
import ctypes
import hashlib
import io
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("PYOPENGL_PLATFORM", "egl")  # before OpenGL is imported
from OpenGL import EGL
from OpenGL import GLES2 as gl

HERE = Path(__file__).resolve().parent
EGL_PLATFORM_SURFACELESS_MESA = 0x31DD
QUAD = np.array([-1, -1, 1, -1, -1, 1, 1, 1], np.float32)
MAX_JSON_BYTES = 256 << 20  # as workbench.files
FORMATS = {"manifest.json": ("workbench-es2/1", "manifest_sha256"),
           "bundle.json": ("workbench-bundle/1", "bundle_sha256")}
LIMITS = ("MAX_TEXTURE_SIZE", "MAX_TEXTURE_IMAGE_UNITS", "MAX_VARYING_VECTORS",
          "MAX_FRAGMENT_UNIFORM_VECTORS", "MAX_RENDERBUFFER_SIZE")


def egl_display():
    """An initialised EGL display: Mesa's surfaceless platform if offered, else the default;
    returns (display, platform, EGL version)."""
    try:
        client = EGL.eglQueryString(EGL.EGL_NO_DISPLAY, EGL.EGL_EXTENSIONS) or b""
    except EGL.EGLError:  # EGL 1.4 without client extensions
        client = b""
    candidates = [("default", lambda: EGL.eglGetDisplay(EGL.EGL_DEFAULT_DISPLAY))]
    if b"EGL_MESA_platform_surfaceless" in client:
        from OpenGL.EGL.EXT.platform_base import eglGetPlatformDisplayEXT
        candidates.insert(0, ("surfaceless", lambda: eglGetPlatformDisplayEXT(
            EGL_PLATFORM_SURFACELESS_MESA, EGL.EGL_DEFAULT_DISPLAY, None)))
    for platform, get in candidates:
        major, minor = EGL.EGLint(), EGL.EGLint()
        try:
            display = get()
            if display and EGL.eglInitialize(display, ctypes.pointer(major), ctypes.pointer(minor)):
                return display, platform, f"{major.value}.{minor.value}"
        except EGL.EGLError:
            continue
    sys.exit("error: no EGL display could be initialised (headless Mesa: set "
             "EGL_PLATFORM=surfaceless; a Raspberry Pi: use the KMS driver, vc4/v3d)")


def egl_context():
    """A current OpenGL ES 2.0 context without a window; returns how it was made."""
    display, platform, version = egl_display()
    attributes = (EGL.EGLint * 5)(EGL.EGL_RENDERABLE_TYPE, EGL.EGL_OPENGL_ES2_BIT,
                                  EGL.EGL_SURFACE_TYPE, EGL.EGL_PBUFFER_BIT, EGL.EGL_NONE)
    config, count = EGL.EGLConfig(), EGL.EGLint()
    if not EGL.eglChooseConfig(display, attributes, ctypes.pointer(config), 1,
                               ctypes.pointer(count)) or count.value < 1:
        sys.exit("error: EGL offers no OpenGL ES 2.0 configuration with pbuffers")
    EGL.eglBindAPI(EGL.EGL_OPENGL_ES_API)
    context = EGL.eglCreateContext(display, config, EGL.EGL_NO_CONTEXT, (EGL.EGLint * 3)(
        EGL.EGL_CONTEXT_CLIENT_VERSION, 2, EGL.EGL_NONE))
    surface = EGL.EGL_NO_SURFACE
    if b"EGL_KHR_surfaceless_context" not in EGL.eglQueryString(display, EGL.EGL_EXTENSIONS):
        surface = EGL.eglCreatePbufferSurface(display, config, (EGL.EGLint * 5)(
            EGL.EGL_WIDTH, 1, EGL.EGL_HEIGHT, 1, EGL.EGL_NONE))
    if not EGL.eglMakeCurrent(display, surface, surface, context):
        sys.exit("error: eglMakeCurrent failed")
    return {"platform": platform, "version": version,
            "surface": "none" if surface == EGL.EGL_NO_SURFACE else "pbuffer"}


def gl_string(name):
    s = gl.glGetString(name)
    return (s if isinstance(s, bytes) else ctypes.string_at(s)).decode(errors="replace")


def device_info():
    """GL strings, fragment-shader float precision and limits, as the report has them."""
    precision = {}
    for key, kind in (("highp", gl.GL_HIGH_FLOAT), ("mediump", gl.GL_MEDIUM_FLOAT)):
        range_, bits = (gl.GLint * 2)(), gl.GLint()
        gl.glGetShaderPrecisionFormat(gl.GL_FRAGMENT_SHADER, kind, range_, ctypes.byref(bits))
        precision[key] = {"rangeMin": range_[0], "rangeMax": range_[1], "precision": bits.value}
    return {"vendor": gl_string(gl.GL_VENDOR), "renderer": gl_string(gl.GL_RENDERER),
            "version": gl_string(gl.GL_VERSION),
            "shading_language_version": gl_string(gl.GL_SHADING_LANGUAGE_VERSION),
            "unmasked_vendor": None, "unmasked_renderer": None, "precision": precision,
            "limits": {k: int(np.ravel(gl.glGetIntegerv(getattr(gl, "GL_" + k)))[0])
                       for k in LIMITS}}


def refuse(message):
    """A bundle that is not as written: ``error: <message>`` and exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def load_json(name):
    """``(content, bytes)`` of the bundle's ``manifest.json`` or ``bundle.json``: JSON of its
    format holding its own sha256 (:data:`FORMATS`), as workbench.es2.saved.seal computes
    it; else exit in one line naming it."""
    path, (kind, key) = HERE / name, FORMATS[name]
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            refuse(f"{path}: over the {MAX_JSON_BYTES} bytes a bundle's JSON may hold")
        data = path.read_bytes()
        obj = json.loads(data)
    except OSError as err:
        refuse(f"{path}: cannot be read ({err.strerror or err})")
    except RecursionError:
        refuse(f"{path}: nested too deep to be JSON the workbench wrote")
    except ValueError as err:  # not UTF-8, not JSON (truncated)
        refuse(f"{path}: not valid JSON ({err})")
    if not isinstance(obj, dict) or obj.get("format") != kind:
        refuse(f"{path}: not a {kind} file; write the bundle again")
    body = json.dumps({k: v for k, v in obj.items() if k != key}, sort_keys=True,
                      separators=(",", ":"))
    if obj.get(key) != hashlib.sha256(body.encode()).hexdigest():
        refuse(f"{path}: edited after it was written, or by an older workbench ({key} "
               "differs or is missing); write the bundle again")
    return obj, data


def share(text):
    """``--threshold``: a share of bytes, a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 <= value <= 1:  # NaN too
        raise argparse.ArgumentTypeError(f"{text!r} is not a share of bytes in [0, 1]")
    return value


def read(name, digests, listing):
    """The bytes of the file ``name`` that ``listing`` (manifest.json or bundle.json) names:
    inside this folder, with the sha256 its ``digests`` give; else exit in one line."""
    path = (HERE / str(name)).resolve()
    if not path.is_relative_to(HERE):
        refuse(f"{HERE / listing}: names a file outside the bundle ({name})")
    if not isinstance(digests, dict) or not isinstance(digests.get(name), str):
        refuse(f"{HERE / listing}: lists no sha256 of {name}; write the bundle again")
    try:
        data = path.read_bytes()
    except OSError as err:
        refuse(f"{path}: cannot be read ({err.strerror or err})")
    if hashlib.sha256(data).hexdigest() != digests[name]:
        refuse(f"{path}: not the file {listing} lists (sha256 differs); write the bundle again")
    return data


def array(name, digests, listing):
    """A numpy array file of the bundle (:func:`read`); pickled objects are refused."""
    try:
        return np.load(io.BytesIO(read(name, digests, listing)), allow_pickle=False)
    except (ValueError, OSError) as err:
        refuse(f"{HERE / name}: not an array of numbers ({err})")


def shader(kind, source, name):
    s = gl.glCreateShader(kind)
    gl.glShaderSource(s, source)
    gl.glCompileShader(s)
    if not gl.glGetShaderiv(s, gl.GL_COMPILE_STATUS):
        sys.exit(f"error: {name}: {gl.glGetShaderInfoLog(s).decode(errors='replace')}")
    return s


def program(vertex, source, name):
    p = gl.glCreateProgram()
    gl.glAttachShader(p, vertex)
    gl.glAttachShader(p, shader(gl.GL_FRAGMENT_SHADER, source, name))
    gl.glBindAttribLocation(p, 0, "a_pos")
    gl.glLinkProgram(p)
    if not gl.glGetProgramiv(p, gl.GL_LINK_STATUS):
        sys.exit(f"error: {name}: {gl.glGetProgramInfoLog(p).decode(errors='replace')}")
    return p


class Net:
    """The bundle's passes on the current context: every texture with its framebuffer."""

    def __init__(self, manifest, plan):
        start = time.perf_counter()
        digests = manifest.get("files")
        vertex = shader(gl.GL_VERTEX_SHADER, read(manifest["vertex_shader"], digests,
                                                  "manifest.json").decode(), "vertex shader")
        self.input, self.passes, programs = manifest["input"]["name"], [], {}
        for p in manifest["passes"]:
            source = read(p["shader"], {p["shader"]: p.get("sha256")}, "manifest.json")
            if source not in programs:  # passes of one shape share a program (weights as
                programs[source] = program(vertex, source.decode(), p["shader"])  # uniforms)
            prog = programs[source]
            units = [(gl.glGetUniformLocation(prog, b["uniform"]), (b["tensor"], b["pack"]),
                      gl.GL_LINEAR if b["filter"] == "linear" else gl.GL_NEAREST)
                     for b in p["inputs"]]
            uniforms = [(gl.glGetUniformLocation(prog, k), v)
                        for k, v in plan["uniforms"][p["name"]].items()]
            uniforms += [(gl.glGetUniformLocation(prog, k),
                          np.ascontiguousarray(array(file, digests, "manifest.json"), np.float32))
                         for k, file in p.get("arrays", {}).items()]  # vec4 arrays
            output = (p.get("outputs") or [p["output"]])[0]  # bundles are one-target nets
            mask = tuple(p.get("channels") is None or k in p["channels"] for k in range(4))
            area = plan.get("areas", {}).get(p["name"])  # its output's own pixels in a zero border
            self.passes.append((p["name"], prog, units, uniforms,
                                (output["tensor"], output["pack"]), area or p.get("viewport"),
                                area is not None, mask))
        gl.glFinish()
        self.compile_ms = 1000 * (time.perf_counter() - start)
        gl.glBindBuffer(gl.GL_ARRAY_BUFFER, gl.glGenBuffers(1))
        gl.glBufferData(gl.GL_ARRAY_BUFFER, QUAD.nbytes, QUAD, gl.GL_STATIC_DRAW)
        gl.glVertexAttribPointer(0, 2, gl.GL_FLOAT, gl.GL_FALSE, 0, None)
        gl.glEnableVertexAttribArray(0)
        gl.glPixelStorei(gl.GL_UNPACK_ALIGNMENT, 1)
        gl.glPixelStorei(gl.GL_PACK_ALIGNMENT, 1)
        self.textures = {}  # (tensor, pack) -> (texture, framebuffer, width, height)
        for t in plan["textures"]:
            tex, fbo = gl.glGenTextures(1), gl.glGenFramebuffers(1)
            gl.glBindTexture(gl.GL_TEXTURE_2D, tex)
            for wrap in (gl.GL_TEXTURE_WRAP_S, gl.GL_TEXTURE_WRAP_T):
                gl.glTexParameteri(gl.GL_TEXTURE_2D, wrap, gl.GL_CLAMP_TO_EDGE)
            gl.glTexImage2D(gl.GL_TEXTURE_2D, 0, gl.GL_RGBA, t["width"], t["height"], 0,
                            gl.GL_RGBA, gl.GL_UNSIGNED_BYTE, None)
            gl.glBindFramebuffer(gl.GL_FRAMEBUFFER, fbo)
            gl.glFramebufferTexture2D(gl.GL_FRAMEBUFFER, gl.GL_COLOR_ATTACHMENT0,
                                      gl.GL_TEXTURE_2D, tex, 0)
            if gl.glCheckFramebufferStatus(gl.GL_FRAMEBUFFER) != gl.GL_FRAMEBUFFER_COMPLETE:
                sys.exit(f"error: texture {t['tensor']}.{t['index']} ({t['width']}x"
                         f"{t['height']} RGBA8) cannot be rendered to on this GPU")
            self.textures[t["tensor"], t["index"]] = (tex, fbo, t["width"], t["height"])
        for name, file in manifest["constant_textures"].items():  # e.g. dense weights
            self.upload((name, 0), array(file, digests, "manifest.json"))

    def upload(self, key, data):
        tex, _, w, h = self.textures[key]
        gl.glBindTexture(gl.GL_TEXTURE_2D, tex)
        gl.glTexSubImage2D(gl.GL_TEXTURE_2D, 0, 0, 0, w, h, gl.GL_RGBA, gl.GL_UNSIGNED_BYTE,
                           np.ascontiguousarray(data, np.uint8))

    def run(self, name, packs, image, finish=False):
        """Upload the input packs (uint8 HxWx(4*packs)), draw every pass, read back the
        output tensor ``name``'s packs (uint8 HxWx(4*packs)); ms per pass with ``finish``."""
        for p in range(image.shape[2] // 4):
            self.upload((self.input, p), image[..., 4 * p:4 * p + 4])
        timings = []
        for pass_name, prog, units, uniforms, output, viewport, clear, mask in self.passes:
            start = time.perf_counter()
            gl.glUseProgram(prog)
            for unit, (location, key, filt) in enumerate(units):
                gl.glActiveTexture(gl.GL_TEXTURE0 + unit)
                gl.glBindTexture(gl.GL_TEXTURE_2D, self.textures[key][0])
                gl.glTexParameteri(gl.GL_TEXTURE_2D, gl.GL_TEXTURE_MIN_FILTER, filt)
                gl.glTexParameteri(gl.GL_TEXTURE_2D, gl.GL_TEXTURE_MAG_FILTER, filt)
                if location >= 0:
                    gl.glUniform1i(location, unit)
            for location, value in uniforms:
                if location >= 0 and isinstance(value, np.ndarray):
                    gl.glUniform4fv(location, len(value), value)
                elif location >= 0:
                    gl.glUniform2f(location, *value)
            _, fbo, w, h = self.textures[output]
            gl.glBindFramebuffer(gl.GL_FRAMEBUFFER, fbo)
            if clear:  # a zero border around the output: cleared, the output's pixels drawn
                gl.glClearColor(0.0, 0.0, 0.0, 0.0)
                gl.glClear(gl.GL_COLOR_BUFFER_BIT)
            gl.glViewport(*(viewport or (0, 0, w, h)))
            gl.glColorMask(*mask)  # a program may write some components of its output only
            gl.glDrawArrays(gl.GL_TRIANGLE_STRIP, 0, 4)
            gl.glColorMask(True, True, True, True)
            if finish:
                gl.glFinish()
                timings.append([pass_name, 1000 * (time.perf_counter() - start)])
        return np.concatenate([self.read((name, p)) for p in range(packs)], axis=-1), timings

    def read(self, key):
        _, fbo, w, h = self.textures[key]
        gl.glBindFramebuffer(gl.GL_FRAMEBUFFER, fbo)
        out = np.empty((h, w, 4), np.uint8)
        gl.glReadPixels(0, 0, w, h, gl.GL_RGBA, gl.GL_UNSIGNED_BYTE, out)
        return out


def psnr(ref, out):
    """PSNR in dB, peak 1 (None for identical images: JSON has no infinity)."""
    mse = np.mean((np.asarray(ref, np.float64) - np.asarray(out, np.float64)) ** 2)
    return None if mse == 0 else float(10 * np.log10(1 / mse))


def fixed16_codes(stored, output):
    """A dense layer's output texture (uint8 1 x pairs x 4) -> its values' 16-bit codes: each
    in two bytes, high then low, ``256 hi + lo``."""
    b = stored[0, :output["pairs"]].reshape(-1, 2).astype(np.int64)
    return (b[:, 0] * 256 + b[:, 1])[:output["count"]]


def fixed16_logits(stored, output):
    """A dense layer's output texture -> its logits, ``(code - 32768) / 256``."""
    return (fixed16_codes(stored, output) - 32768) / 256.0


def check(stored, expected, tf, output, levels=0):
    """One input's entry of the report: its output against the emulator and TF;
    ``levels``: the bundle's band (0: bytes must be equal), for a mediump net or one with
    16-bit tensors (a dense layer's output: its values' codes within the band)."""
    entry = {"bytes_equal_emulator": float(np.mean(stored == expected))}
    if levels:
        if output["kind"] == "logits":
            diff = np.abs(fixed16_codes(stored, output) - fixed16_codes(expected, output))
        else:
            diff = np.abs(stored.astype(np.int16) - expected)
        entry["bytes_within_levels"] = float(np.mean(diff <= levels))
    if output["kind"] == "logits":
        logits = fixed16_logits(stored, output)
        entry.update(logits=logits.tolist(),
                     max_abs_logit_diff_vs_tf=float(np.abs(logits - tf).max()),
                     top1_equal_tf=bool(np.argmax(logits) == np.argmax(tf)))
    else:
        entry["psnr_vs_tf"] = psnr(tf, stored[..., :output["channels"]] / 255.0)
    return entry


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.error = refuse  # one line, exit status 2
    parser.add_argument("--threshold", type=share, default=None,
                        help="least share of output bytes equal to the emulator's for exit "
                        "status 0 (default: the bundle's, 0.999)")
    parser.add_argument("--report", default=str(HERE / "report.json"),
                        help="device report to write (default: report.json in the bundle)")
    args = parser.parse_args(argv)
    (manifest, manifest_bytes), (bundle, _) = load_json("manifest.json"), load_json("bundle.json")
    threshold = bundle["threshold"] if args.threshold is None else args.threshold
    output, levels = bundle["output"], bundle.get("levels", 0)
    judged = "bytes_within_levels" if levels else "bytes_equal_emulator"

    egl = egl_context()
    device = device_info()
    net = Net(manifest, bundle["plan"])
    checks = [(c["name"], *(array(c[k], bundle.get("files"), "bundle.json")
                            for k in ("input", "expected", "tf"))) for c in bundle["inputs"]]
    start = time.perf_counter()
    net.run(output["tensor"], output["packs"], checks[0][1])
    first_draw_ms = 1000 * (time.perf_counter() - start)
    _, passes = net.run(output["tensor"], output["packs"], checks[0][1], finish=True)
    inputs = []
    for name, image, expected, tf in checks:
        stored, _ = net.run(output["tensor"], output["packs"], image)
        inputs.append({"name": name, "width": stored.shape[1], "height": stored.shape[0],
                       **check(stored, expected, tf, output, levels),
                       "output": base64.b64encode(stored.tobytes()).decode()})
    report = {"format": "workbench-device-report/1", "source": "bundle",
              "model": manifest["name"],
              "model_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
              "output_channels": 4 if output["kind"] == "logits" else output["channels"],
              "device": device, "user_agent": None, "egl": egl,
              "compile_ms": net.compile_ms, "first_draw_ms": first_draw_ms,
              "passes": passes, "inputs": inputs}
    partial = Path(args.report + ".partial")
    partial.write_text(json.dumps(report, indent=1) + "\n")
    os.replace(partial, args.report)  # a whole report or none

    print(f"{device['renderer']} ({device['version']}), EGL {egl['version']} "
          f"{egl['platform']}; highp: {device['precision']['highp']['precision']} bits")
    print(bundle.get("compiled_with", "plan: not recorded"))
    print(f"compile {net.compile_ms:.0f} ms, first draw {first_draw_ms:.0f} ms, "
          f"{len(passes)} passes {sum(ms for _, ms in passes):.1f} ms")
    tf_column = "top1 = TF" if output["kind"] == "logits" else "PSNR vs TF dB"
    print(f"{'input':24} {'output':>9} {'bytes = emulator %':>19} {tf_column:>14}")
    for e in inputs:
        vs_tf = e["top1_equal_tf"] if output["kind"] == "logits" else (
            "identical" if e["psnr_vs_tf"] is None else f"{e['psnr_vs_tf']:.2f}")
        print(f"{e['name']:24} {e['width']:>4}x{e['height']:<4} "
              f"{100 * e['bytes_equal_emulator']:>19.3f} {vs_tf!s:>14}")
    worst = min(e[judged] for e in inputs)
    unit = "codes" if output["kind"] == "logits" else "levels"
    band = f" (within {levels} {unit})" if levels else ""
    print(f"{args.report}: written; bytes equal to the emulator{band}: worst "
          f"{100 * worst:.3f} % ({'ok' if worst >= threshold else 'BELOW'} threshold "
          f"{100 * threshold:.1f} %)")
    return 0 if worst >= threshold else 1


if __name__ == "__main__":
    sys.exit(main())
