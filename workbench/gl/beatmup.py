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

import itertools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
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


# Classify can hang in its first pass, idle, its progress bar short of full (1 run in 5-20 on
# 2 busy cores: its progress counter is a plain int that its worker threads increment); such
# a run is stopped after STALL_S seconds without CPU time and started again, ATTEMPTS in all.
# Every app is watched so (on llvmpipe a working app is never idle that long): an X2 that
# hangs is stopped in seconds, not at its time limit
STALL_S = 10
ATTEMPTS = 3


def _run(args, cwd, timeout=3600, trace=None) -> str:
    """Run an app (under ``apitrace trace`` into ``trace`` when given); its stdout."""
    command = [str(build_dir() / "build" / args[0]), *map(str, args[1:])]
    if trace:
        command = ["apitrace", "trace", "--api", "egl", "--output", str(trace), *command]
    env = {**os.environ, "EGL_PLATFORM": "surfaceless"}
    for _ in range(ATTEMPTS):
        code, out, err = _attempt(args[0], command, cwd, env, timeout)
        if code is not None:
            break
    else:
        raise BeatmupError(f"Beatmup {args[0]} hung {ATTEMPTS} times (no CPU time for "
                           f"{STALL_S} s): {_tail(out + err)}")
    if code != 0:
        raise BeatmupError(f"Beatmup {args[0]} failed (exit {code}): {_tail(out + err)}")
    return out


def _tail(text) -> str:
    return " | ".join(text.strip().splitlines()[-3:])


def _attempt(app, command, cwd, env, timeout):
    """One run: (exit code, stdout, stderr), the code None where it hung (no CPU time for
    :data:`STALL_S`) and was stopped.  The app runs in a process group of its own (apitrace
    and the app), killed whole when the run ends any way (an error, Ctrl-C); the app dies
    with this process, even killed (:func:`_die_with_parent`)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=err,
                                start_new_session=True, preexec_fn=_die_with_parent())
        start = last = time.monotonic()
        cpu, code = None, None
        try:
            while True:
                try:
                    code = proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                if now - start > timeout:
                    raise BeatmupError(f"Beatmup {app}: no result in {timeout} s")
                used = _cpu_ticks(proc.pid)
                if used != cpu:
                    cpu, last = used, now
                elif now - last > STALL_S:
                    break
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return code, *(_read(f).decode(errors="replace") for f in (out, err))


def _die_with_parent():
    """A ``preexec_fn`` that has the kernel kill the child when this process dies (Linux
    ``PR_SET_PDEATHSIG``), or None where there is no such call."""
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # (looked up before the fork)
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    return lambda: prctl(pr_set_pdeathsig, signal.SIGKILL)


def _read(file) -> bytes:
    return os.pread(file.fileno(), os.fstat(file.fileno()).st_size, 0)


def _cpu_ticks(session) -> int:
    """CPU time (clock ticks) of the processes of ``session`` (its leader's pid)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[3] == str(session):
            total += int(fields[11]) + int(fields[12])
    return total


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
    """What ``Classify`` gave: probabilities (N, classes); for a timed picture, the time of
    each of its runs (its listing mode prints only a moving average: no time a picture);
    with labels, the top-1 accuracy (0-1) as the app counted it, else None."""

    probs: np.ndarray
    times_ms: list = field(default_factory=list)
    accuracy: float | None = None


def classify(pictures, chunk=500, progress=None, labels=None) -> Classified:
    """Each picture through Beatmup's classifier (its app's listing mode, ``chunk`` pictures
    a run: one model preparation each; only one chunk's BMPs on disk at a time); pictures
    may be any size (its input step crops and resizes them).  ``labels``: the zero-based
    class of each picture, for the app's own top-1 count.  ``progress``: a callable given the
    count done after each run; without one, a tqdm bar over more than 20 pictures."""
    _require()
    labels = None if labels is None else [int(c) for c in labels]
    bar = None
    if progress is None:
        total = len(pictures) if hasattr(pictures, "__len__") else None
        if total is None or total > 20:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, desc="Beatmup Classify", unit="picture", leave=False)
            progress = lambda done: bar.update(done - bar.n)  # noqa: E731
    probs, right, done = [], [], 0
    try:
        with tempfile.TemporaryDirectory(prefix="beatmup-classify-") as tmp:
            batch = []
            for picture in itertools.chain(pictures, [None]):
                if picture is not None:
                    batch.append(f"{len(batch):05d}.bmp")
                    write_bmp(Path(tmp) / batch[-1], picture)
                if batch and (len(batch) == chunk or picture is None):
                    rows, ok = _classify_listing(tmp, batch, _labels(labels, done, batch))
                    probs.append(rows)
                    right.append(ok)
                    done += len(batch)
                    batch = []
                    if progress:
                        progress(done)
    finally:
        if bar is not None:
            bar.close()
    if labels is not None and len(labels) != done:
        raise ValueError(f"{len(labels)} labels for {done} pictures")
    return Classified(np.concatenate(probs) if probs else np.zeros((0, 0), np.float32),
                      accuracy=sum(right) / done if labels is not None and done else None)


def _labels(labels, done, batch):
    if labels is None:
        return None
    part = labels[done:done + len(batch)]
    if len(part) != len(batch):
        raise ValueError(f"{len(labels)} labels for more pictures")
    return part


# its listing mode's progress line: "\r[    N]   avg ms   acc%  name"
_PROGRESS = re.compile(r"\[\s*(\d+)\]\s+\S+ ms\s+(\d+(?:\.\d+)?)%")


def _classify_listing(tmp, names, labels=None) -> tuple[np.ndarray, int]:
    """One ``Classify`` run over ``names`` in ``tmp``: the probabilities and, with labels,
    how many the app counted right (from its last progress line's percentage)."""
    listing, report = Path(tmp) / "listing.txt", Path(tmp) / "probs.txt"
    listing.write_text("".join(f"{n} {c}\n" if labels else f"{n}\n"
                               for n, c in zip(names, labels or names)))
    out = _run(["Classify", listing, report], build_dir())
    rows = [line.split() for line in report.read_text().splitlines() if line.strip()]
    if len(rows) != len(names):
        raise BeatmupError(f"Beatmup Classify gave {len(rows)} rows for {len(names)} pictures")
    right = 0
    if labels:
        lines = _PROGRESS.findall(out.replace("\r", "\n"))
        if not lines or int(lines[-1][0]) != len(names) - 1:
            raise BeatmupError(f"Beatmup Classify printed no accuracy for {len(names)} "
                               f"labelled pictures: {out[-200:]!r}")
        right = round(float(lines[-1][1]) * len(names) / 100)
    return np.array(rows, np.float32), right


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
    one inference with the same draws: the second half); ``linked``: how many times
    glLinkProgram was called (each of Beatmup's is a distinct program: X2 32, Classify 27)."""

    app: str
    programs: list
    draws: list
    linked: int = 0


def capture(app, picture) -> Capture:
    """Run ``app`` (``"X2"``, ``"Classify"``) once on ``picture`` under apitrace; what it
    handed to GL."""
    _require()
    if not shutil.which("apitrace"):
        raise BeatmupUnavailable("apitrace is not installed: as root, apt-get install -y "
                                 "apitrace (or `make beatmup`, which installs it)")
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
                              capture_output=True, text=True, errors="replace")
        if dump.returncode != 0:
            raise BeatmupError(f"apitrace dump of the {app} trace failed (exit "
                               f"{dump.returncode}): {dump.stderr.strip()[-200:]}")
    return parse_dump(app, dump.stdout)


_CALL = re.compile(r"^\d+ (gl\w+)\((.*)", re.S)
_SOURCE = re.compile(r'string = &"(.*)", length = ', re.S)
# apitrace dump writes a string's quote and backslash escaped, a byte outside ASCII's printable
# range other than newline and tab as a backslash and octal digits, and drops carriage returns
_ESCAPE = re.compile(r'\\(["\\]|[0-7]{1,3})')


def _unescape(text: str) -> str:
    return _ESCAPE.sub(lambda m: m.group(1) if m.group(1) in '"\\' else chr(int(m.group(1), 8)),
                       text)


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
    links = 0
    using, viewport = None, (0, 0)
    for call in calls:
        m = _CALL.match("\n".join(call))
        if not m:
            continue
        name, args = m.groups()
        if name == "glShaderSource":
            shader = int(re.match(r"shader = (\d+)", args).group(1))
            body = _SOURCE.search(args).group(1)
            sources[shader] = _unescape(body)
        elif name == "glAttachShader":
            program, shader = map(int, re.findall(r"= (\d+)", args)[:2])
            attached.setdefault(program, []).append(shader)
        elif name == "glLinkProgram":
            program = int(re.search(r"= (\d+)", args).group(1))
            links += 1
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
    return Capture(app, programs, draws[half:], links)


def compile_captured(driver, captured: Capture):
    """The captured programs through the Mesa driver ``driver``
    (:func:`workbench.gl.drivers.compile_programs`): a report each, in ``programs`` order."""
    from workbench.gl import drivers

    return drivers.compile_programs(
        driver, "", [(f"{captured.app}.{i}", fragment, 1, vertex)
                     for i, (vertex, fragment) in enumerate(captured.programs)])
