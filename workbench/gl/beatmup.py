"""Beatmup, the reference articles' C++ library (GPL-3.0), run as a separate program.

``tools/beatmup.sh`` (``make beatmup``) builds its ``X2`` and ``Classify`` apps (EGL, OpenGL
ES 2.0) into :func:`build_dir`, one build a machine.  Here they run headless on this
machine's GL (``EGL_PLATFORM=surfaceless``: Mesa's llvmpipe) on pictures written as BMP (the
only format the apps read); what they hand to GL is captured with apitrace (:func:`capture`)
so that their programs go through the same driver checks as ours.  Nothing of Beatmup is
imported or copied: its model file is read as data (:mod:`workbench.nets.beatmup_model`).

Pictures are HxWx3 uint8 RGB; class probabilities (N, 120) float32 in the order of the chunk
file's labels.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

COMMIT = "64ab08c5405061d983b00e48ff2ad23863aea5fe"
BUILD_COMMAND = "make beatmup"
MODEL = Path("android/app/src/main/assets/dog_classifier.chunks")  # in its source tree
APPS = ("X2", "Classify")


class BeatmupUnavailable(FileNotFoundError):
    """The build is missing; the message says how to make it."""


class BeatmupError(ChildProcessError):
    """An app that failed; the message has its exit code and its last lines."""


def build_dir() -> Path:
    """``$WORKBENCH_BEATMUP`` if set, else ``~/.cache/workbench/beatmup/<commit>``
    (``$XDG_CACHE_HOME`` for ``~/.cache``): the source tree, the apps in ``build/``."""
    env = os.environ.get("WORKBENCH_BEATMUP")
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(env) if env else Path(cache) / "workbench" / "beatmup" / COMMIT


def available() -> str | None:
    """None when the apps are built, else one line saying why not and how."""
    missing = [a for a in APPS if not (build_dir() / "build" / a).is_file()]
    if missing or not (build_dir() / ".built").is_file():
        return (f"Beatmup (the articles' system) is not built in {build_dir()}: run "
                f"`{BUILD_COMMAND}` (needs ../shared/peers/beatmup or the network)")
    return None


def model_file() -> Path:
    """Its trained dog classifier (a chunk file) in the built source tree."""
    _require()
    return build_dir() / MODEL


def _require():
    why = available()
    if why:
        raise BeatmupUnavailable(why)


def _run(args, cwd, timeout=3600, trace=None) -> str:
    """Run an app (under ``apitrace trace`` into ``trace`` when given); its stdout."""
    command = [str(build_dir() / "build" / args[0]), *map(str, args[1:])]
    if trace:
        command = ["apitrace", "trace", "--api", "egl", "--output", str(trace), *command]
    env = {**os.environ, "EGL_PLATFORM": "surfaceless"}
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          errors="replace", timeout=timeout)
    if proc.returncode != 0:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
        raise BeatmupError(f"Beatmup {args[0]} failed (exit {proc.returncode}): {tail}")
    return proc.stdout


def write_bmp(path, picture):
    """``picture`` (HxWx3 uint8 RGB) as a 24-bit BMP."""
    from PIL import Image

    Image.fromarray(np.ascontiguousarray(picture, np.uint8), "RGB").save(path, "BMP")


def _read_rgb(path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


@dataclass
class Upscaled:
    """What ``X2`` gave for one picture: the 2Hx2W image, its compile time (all programs,
    with a first run on a dummy picture) and the time of each timed run (the inference
    alone, the picture already on the GPU)."""

    image: np.ndarray
    compile_ms: float
    times_ms: list = field(default_factory=list)


_MS = r"(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?) ms"


def upscale(pictures, repeat=1) -> list[Upscaled]:
    """Each picture through Beatmup's x2 net (its app, ``repeat`` timed runs)."""
    _require()
    results = []
    with tempfile.TemporaryDirectory(prefix="beatmup-x2-") as tmp:
        for picture in pictures:
            picture = np.asarray(picture)
            source, target = Path(tmp) / "in.bmp", Path(tmp) / "out.bmp"
            write_bmp(source, picture)
            out = _run(["X2", source, target, repeat], tmp, timeout=600)
            compiled = re.search(r"Compiling shaders\.\.\. " + _MS, out)
            runs = out.split("Processing...", 1)[-1]
            times = [float(t) for t in re.findall(r"^\s+" + _MS + r"\s*$", runs, re.M)]
            image = _read_rgb(target)
            if image.shape[:2] != (2 * picture.shape[0], 2 * picture.shape[1]) or \
                    compiled is None or len(times) != repeat:
                raise BeatmupError(f"Beatmup X2 gave {image.shape} and {len(times)} timings for "
                                   f"a {picture.shape} picture and {repeat} runs: {out[-200:]}")
            results.append(Upscaled(image, float(compiled.group(1)), times))
    return results


@dataclass
class Classified:
    """What ``Classify`` gave: probabilities (N, classes) and, for a timed picture, the time
    of each of its runs."""

    probs: np.ndarray
    times_ms: list = field(default_factory=list)


def classify(pictures, chunk=500, progress=None) -> Classified:
    """Each picture through Beatmup's classifier (its app's listing mode, ``chunk`` pictures
    a run: one model preparation each); pictures may be any size (its input step crops and
    resizes them).  ``progress``: a callable given the count done after each run."""
    _require()
    probs = []
    with tempfile.TemporaryDirectory(prefix="beatmup-classify-") as tmp:
        batch = []
        for i, picture in enumerate(pictures):
            name = f"{len(batch):05d}.bmp"
            write_bmp(Path(tmp) / name, picture)
            batch.append(name)
            if len(batch) == chunk:
                probs.append(_classify_listing(tmp, batch))
                batch = []
                if progress:
                    progress(i + 1)
        if batch:
            probs.append(_classify_listing(tmp, batch))
    return Classified(np.concatenate(probs) if probs else np.zeros((0, 0), np.float32))


def _classify_listing(tmp, names) -> np.ndarray:
    listing, report = Path(tmp) / "listing.txt", Path(tmp) / "probs.txt"
    listing.write_text("".join(f"{n}\n" for n in names))
    _run(["Classify", listing, report], build_dir())
    rows = [line.split() for line in report.read_text().splitlines() if line.strip()]
    if len(rows) != len(names):
        raise BeatmupError(f"Beatmup Classify gave {len(rows)} rows for {len(names)} pictures")
    return np.array(rows, np.float32)


def classify_timed(picture) -> Classified:
    """One picture through ``Classify``'s single-picture mode: 10 timed runs (each the whole
    inference task: upload, input step, the net, the probabilities read back) and the
    probabilities."""
    _require()
    with tempfile.TemporaryDirectory(prefix="beatmup-classify-") as tmp:
        source, report = Path(tmp) / "in.bmp", Path(tmp) / "probs.txt"
        write_bmp(source, picture)
        out = _run(["Classify", source, report], build_dir())
        runs = out.split("Inference:", 1)[-1]
        times = [float(t) for t in re.findall(r"^\s+" + _MS + r"\s*$", runs, re.M)]
        probs = [float(v) for v in report.read_text().replace(",", " ").split()]
    return Classified(np.array([probs], np.float32), times)


@dataclass
class Capture:
    """What an app handed to GL: ``programs`` ``[(vertex source, fragment source)]`` as
    linked (each distinct pair once), and ``draws`` ``[(program index, viewport width,
    viewport height)]`` of one inference (the trace holds a warm-up on a dummy picture and
    one inference with the same draws: the second half)."""

    app: str
    programs: list
    draws: list


def capture(app, picture) -> Capture:
    """Run ``app`` (``"X2"``, ``"Classify"``) once on ``picture`` under apitrace; what it
    handed to GL."""
    _require()
    with tempfile.TemporaryDirectory(prefix="beatmup-trace-") as tmp:
        source, trace = Path(tmp) / "in.bmp", Path(tmp) / "app.trace"
        write_bmp(source, picture)
        if app == "X2":
            _run(["X2", source, Path(tmp) / "out.bmp", 1], tmp, trace=trace)
        elif app == "Classify":
            (Path(tmp) / "listing.txt").write_text("in.bmp\n")
            _run(["Classify", Path(tmp) / "listing.txt"], build_dir(), trace=trace)
        else:
            raise ValueError(f"app {app!r}: one of {', '.join(APPS)}")
        dump = subprocess.run(["apitrace", "dump", "--color=never", str(trace)],
                              capture_output=True, text=True, errors="replace", check=True)
    return parse_dump(app, dump.stdout)


_CALL = re.compile(r"^\d+ (gl\w+)\((.*)", re.S)
_SOURCE = re.compile(r'string = &"(.*)", length = ', re.S)


def parse_dump(app, text) -> Capture:
    """:class:`Capture` from the text of ``apitrace dump`` (calls numbered one a line; a
    string argument may span lines)."""
    calls, current = [], None
    for line in text.splitlines():
        if re.match(r"^\d+ ", line):
            current = [line]
            calls.append(current)
        elif current is not None:
            current.append(line)
    sources, attached, linked, programs, draws = {}, {}, {}, [], []
    using, viewport = None, (0, 0)
    for call in calls:
        m = _CALL.match("\n".join(call))
        if not m:
            continue
        name, args = m.groups()
        if name == "glShaderSource":
            shader = int(re.match(r"shader = (\d+)", args).group(1))
            body = _SOURCE.search(args).group(1)
            sources[shader] = body.replace('\\"', '"').replace("\\\\", "\\")
        elif name == "glAttachShader":
            program, shader = map(int, re.findall(r"= (\d+)", args)[:2])
            attached.setdefault(program, []).append(shader)
        elif name == "glLinkProgram":
            program = int(re.search(r"= (\d+)", args).group(1))
            vertex, fragment = (sources[s] for s in attached[program][:2])
            if "gl_FragColor" in vertex or "gl_FragData" in vertex:
                vertex, fragment = fragment, vertex
            if (vertex, fragment) not in programs:
                programs.append((vertex, fragment))
            linked[program] = programs.index((vertex, fragment))
        elif name == "glUseProgram":
            using = int(re.search(r"= (\d+)", args).group(1))
        elif name == "glViewport":
            viewport = tuple(int(v) for v in re.findall(r"(?:width|height) = (\d+)", args))
        elif name in ("glDrawArrays", "glDrawElements"):
            draws.append((linked[using], *viewport))
    half = len(draws) // 2
    if not draws or len(draws) % 2 or draws[:half] != draws[half:]:
        raise BeatmupError(f"Beatmup {app}: the trace's {len(draws)} draws are not a warm-up "
                           "and an inference of the same draws")
    return Capture(app, programs, draws[half:])


def compile_captured(target, captured: Capture):
    """The captured programs through the Mesa driver of ``target``
    (:func:`workbench.gl.drivers.compile_programs`): a report each, in ``programs`` order."""
    from workbench.gl import drivers

    return drivers.compile_programs(
        target, "", [(f"{captured.app}.{i}", fragment, 1, vertex)
                     for i, (vertex, fragment) in enumerate(captured.programs)])
