"""The target GPUs' own shader compilers, without the hardware: Mesa's drivers on a drm-shim.

``tools/drivers.sh`` (``make drivers``) builds Mesa's GL drivers for VideoCore IV (vc4), the
Pi 4 (v3d), Adreno (freedreno), Vivante (etnaviv) and Mali (panfrost, lima) with their
drm-shims: libraries preloaded into a process that fake the kernel driver, so that the real
GL driver and its back-end compiler run on x86 (Mesa's own CI compiles its shader database
this way).  Nothing is drawn anywhere: command streams go to a no-op.

:func:`compile_programs` compiles ES 2.0 programs through one of the :data:`DRIVERS` in a child
process (:mod:`workbench.gl.driver_child`, with the shim preloaded and the build's EGL
first on the library path; never in the caller's process), draws each once (most of these
drivers run their back end at the first draw) and returns, per program, the GL status, the
driver's own statistics (its ``shaderdb`` debug messages, through KHR_debug) and every
message it printed.  A program the back end refused is marked failed even when
``GL_COMPILE_STATUS`` and ``GL_LINK_STATUS`` said success (etnaviv does that: "compiled
shaders are not okay" at draw time, and nothing drawn).
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from workbench.gl import GLError, driver_child

MESA_VERSION = "22.3.6"
BUILD_COMMAND = "make drivers"


def build_dir() -> Path:
    """Where ``tools/drivers.sh`` installs the build (one a machine): ``$WORKBENCH_DRIVERS`` if
    set, else ``~/.cache/workbench/mesa/<version>`` (``$XDG_CACHE_HOME`` for ``~/.cache``)."""
    env = os.environ.get("WORKBENCH_DRIVERS")
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(env) if env else Path(cache) / "workbench" / "mesa" / MESA_VERSION


class DriversUnavailable(FileNotFoundError):
    """The driver build is missing; the message says how to make it."""


@dataclass(frozen=True)
class Driver:
    """One GPU as a Mesa driver sees it.  ``dri``: the DRI driver the loader is told to
    use; ``shim``: the drm-shim library; ``env``: what selects the GPU model in the shim;
    ``debug``: the variable and value that make the compiler report its statistics."""

    name: str
    gpu: str
    dri: str
    shim: str
    debug: tuple[str, str]
    env: tuple = ()


def _adreno(gpu_id):
    return Driver(f"a{gpu_id}", f"Adreno {gpu_id}", "msm", "freedreno",
                  ("FD_MESA_DEBUG", "shaderdb"), (("FD_GPU_ID", str(gpu_id)),))


def _vivante(model):
    return Driver(model.lower(), f"Vivante {model}", "etnaviv", "etnaviv",
                  ("ETNA_MESA_DEBUG", "shaderdb,dbg_msgs"), (("ETNA_SHIM_GPU", model),))


def _mali(model, gpu_id, flag):
    return Driver(model.lower(), f"Mali-{model}", "panfrost", "panfrost",
                  (flag, "shaderdb"), (("PAN_GPU_ID", gpu_id),))


# Pi Zero-3 and Pi 4; Adreno 305 / 320 / 530 (Snapdragon 400, 600, 820 phones); Vivante GC2000 /
# GC3000 (i.MX6 Quad / QuadPlus boards); Mali-T720 / T860 (Midgard: budget phones, RK3399
# boards), Mali-G52 (Bifrost), Mali-400 (Utgard: Allwinner boards, phones of 2012-2014)
DRIVERS = {t.name: t for t in (
    Driver("vc4", "VideoCore IV", "vc4", "vc4", ("VC4_DEBUG", "shaderdb")),
    Driver("v3d", "VideoCore VI", "v3d", "v3d", ("V3D_DEBUG", "shaderdb")),
    _adreno(305), _adreno(320), _adreno(530),
    _vivante("GC2000"), _vivante("GC3000"),
    _mali("T720", "720", "MIDGARD_MESA_DEBUG"), _mali("T860", "860", "MIDGARD_MESA_DEBUG"),
    _mali("G52", "7212", "BIFROST_MESA_DEBUG"),
    Driver("mali400", "Mali-400", "lima", "lima", ("LIMA_DEBUG", "shaderdb")),
)}


# The drivers table's: the Pi 0-3 and Pi 4, Adreno 3xx/5xx, Vivante, Mali Midgard, Bifrost
# and Utgard.
TABLE_DRIVERS = ("vc4", "v3d", "a320", "a530", "gc2000", "t720", "t860", "g52", "mali400")
# The drivers that give an ES 3.1 context here (compute shaders; Mesa 22.3's v3d on its shim
# offers none)
ES31_DRIVERS = ("a530", "t860", "g52")


def driver(name) -> Driver:
    if name not in DRIVERS:
        raise ValueError(f"unknown driver {name!r}; valid: {', '.join(DRIVERS)}")
    return DRIVERS[name]


def available() -> str | None:
    """None when the driver build is there, else why not (one line naming the command)."""
    lib = build_dir() / "lib"
    missing = [f"lib{t.shim}_noop_drm_shim.so" for t in DRIVERS.values()
               if not (lib / f"lib{t.shim}_noop_drm_shim.so").exists()]
    if not (lib / "libEGL.so.1").exists() or missing:
        return (f"the target GPUs' drivers are not built ({build_dir()}): run `{BUILD_COMMAND}` "
                f"(Mesa {MESA_VERSION} from Debian's source, ~15-25 min on 2 cores)")
    return None


def environment(t: Driver) -> dict:
    """The child process's environment: the shim preloaded, the build's EGL and DRI drivers
    first, the compiler's statistics on, no shader cache (a cached shader is not compiled)."""
    lib = build_dir() / "lib"
    env = dict(os.environ)
    env.update({
        "LD_PRELOAD": str(lib / f"lib{t.shim}_noop_drm_shim.so"),
        "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(lib),
                                                         os.environ.get("LD_LIBRARY_PATH")])),
        "LIBGL_DRIVERS_PATH": str(lib / "dri"),
        "MESA_LOADER_DRIVER_OVERRIDE": t.dri,
        "EGL_PLATFORM": "surfaceless",
        "PYOPENGL_PLATFORM": "egl",
        "MESA_SHADER_CACHE_DISABLE": "true",
        "MESA_GLSL_CACHE_DISABLE": "true",
        t.debug[0]: t.debug[1],
        **dict(t.env),
    })
    return env


@dataclass
class ProgramReport:
    """What one driver said of one program.  ``ok``: compiled, linked and drawn without a
    driver error; ``stats``: the fragment shader's numbers as the driver names them
    (``instructions`` under that name for every driver; vc4 also ``threads``, ``uniforms``,
    ``max_temps``, ``estimated_cycles``...); ``errors``: the driver's error lines."""

    name: str
    ok: bool
    stats: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)
    messages: list = field(default_factory=list)


def compile_compute(driver_name, programs, timeout=600):
    """Compile and link ES 3.1 compute ``programs`` (``[(name, source)]``) through the driver
    ``driver_name`` (an ES 3.1 context: :data:`ES31_DRIVERS`); a :class:`ProgramReport`
    each."""
    t = driver(driver_name)
    raw = _ask_once(t, {"compute": True, "vertex": "",
                        "programs": [(name, source, 1) for name, source in programs]}, timeout)
    return [report(r, raw["info"]) for r in raw["records"]]


def compile_programs(driver_name, vertex, programs, timeout=600):
    """Compile ``programs`` (``[(name, fragment source, render targets)]``, or with a vertex
    source of its own as a 4th element) with the vertex shader ``vertex`` through the driver
    ``driver_name``; a :class:`ProgramReport` each.  Each is drawn once over a 4x4 quad that
    every vertex attribute reads."""
    t = driver(driver_name)
    raw = _ask_once(t, {"vertex": vertex, "programs": list(programs)}, timeout)
    return [report(r, raw["info"]) for r in raw["records"]]


def info(driver_name) -> dict:
    """What the driver ``driver_name`` answers: GL_RENDERER, its limits
    (``GL_MAX_TEXTURE_SIZE``, ...) and extensions (a list)."""
    return _ask(driver(driver_name), {"vertex": "", "programs": []}, 120)["info"]


def _ask_once(t: Driver, request: dict, timeout) -> dict:
    """:func:`_ask`, each program compiled once a driver build: what the driver said of a
    program (its raw record) is kept in the build's folder, ``reports/<sha256>.json``, keyed
    by the build's libraries (size and time), the driver, the stage and the program's sources
    and render targets; only programs not found there go to the child process.  The
    compilers are deterministic, so a record read back is what compiling again would say;
    a folder that cannot be written is left alone (each call then compiles)."""
    folder, stamp = _reports(t)
    context = (stamp, t.name, request.get("compute", False))

    def key(*what) -> str:
        return hashlib.sha256(repr(context + what).encode()).hexdigest()

    programs = request["programs"]
    keys = [key(request["vertex"], program[1:]) for program in programs]
    info_key = key()
    found = {k: _read_json(folder / f"{k}.json") for k in [info_key, *keys]}
    missing = [p for p, k in zip(programs, keys) if found[k] is None]
    if missing or found[info_key] is None:
        raw = _ask(t, {**request, "programs": missing}, timeout)
        fresh = [k for k in keys if found[k] is None]  # in the order of ``missing``
        found.update(zip(fresh, raw["records"]))
        found[info_key] = raw["info"]
        for k in {info_key, *fresh}:
            _write_json(folder / f"{k}.json", found[k])
    return {"info": found[info_key],
            "records": [{**found[k], "name": p[0]} for p, k in zip(programs, keys)]}


def _reports(t: Driver) -> tuple[Path, tuple]:
    """The folder of the build's kept records and the build's stamp: the size and time of
    its EGL library, the driver's shim and its DRI driver."""
    lib = build_dir() / "lib"
    files = [lib / "libEGL.so.1", lib / f"lib{t.shim}_noop_drm_shim.so",
             lib / "dri" / f"{t.dri}_dri.so"]
    stamp = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.exists())
    return build_dir() / "reports", (MESA_VERSION, stamp)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_json(path: Path, value):
    """``value`` as JSON at ``path``, written beside and then renamed (another process may
    read or write the same record at the same time); nothing where the folder is read-only."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f".{path.name}.{os.getpid()}")
        part.write_text(json.dumps(value))
        os.replace(part, path)
    except OSError:
        pass


def _ask(t: Driver, request: dict, timeout) -> dict:
    """Run the child process for the driver ``t`` on ``request``; its reply."""
    why = available()
    if why:
        raise DriversUnavailable(why)
    proc = subprocess.run([sys.executable, "-m", driver_child.__name__],
                          input=pickle.dumps(request), capture_output=True, env=environment(t),
                          timeout=timeout)
    raw = pickle.loads(proc.stdout) if proc.returncode == 0 and proc.stdout else None
    if not isinstance(raw, dict):
        tail = raw or " / ".join(proc.stderr.decode(errors="replace").strip().splitlines()[-3:])
        if proc.returncode < 0:
            tail = (f"killed by signal {signal.Signals(-proc.returncode).name}, a damaged "
                    f"build? ({BUILD_COMMAND} again after removing {build_dir()})"
                    + (f": {tail}" if tail else ""))
        raise GLError(f"the {t.gpu} driver's process ({t.name}) failed (exit "
                      f"{proc.returncode}): {tail or 'it printed nothing'}")
    return raw


# --- reading what the drivers say -------------------------------------------------------------

# "MESA_SHADER_FRAGMENT shader: 492 inst, 1 threads, ..." (vc4, v3d, panfrost, lima), "FRAG
# shader: 744 inst, ..." (freedreno, etnaviv): one "<number> <name>" item a comma.
_STAGES = ("FRAG", "MESA_SHADER_FRAGMENT",
           "CL", "MESA_SHADER_COMPUTE")  # compute (ES 3.1): freedreno "CL", the others
_ITEM = re.compile(r"(-?\d+(?:\.\d+)?)(?::(\d+))? (\S.*)")
_NAMES = {"inst": "instructions", "max-temps": "max_temps", "estimated-cycles": "estimated_cycles"}
_ERRORS = ("not okay", "failed", "exceeds", "error", "out of memory", "unsupported")
# what a shim says because it is no kernel driver (fences, sync files): not about the program
_SHIM_NOISE = ("export failed", "create syncobj failed")


def parse_stats(message: str) -> dict | None:
    """The numbers of one ``shaderdb`` line of a fragment or compute shader, ``{name: number}``
    (``spills:fills`` as ``spills`` and ``fills``), or None for another stage or message."""
    stage, _, rest = message.partition(" shader: ")
    if stage.strip() not in _STAGES or not rest:
        return None
    stats = {}
    for item in rest.strip().rstrip(".").split(", "):
        found = _ITEM.fullmatch(item.strip())
        if not found:
            continue
        number, second, name = found.groups()
        if name == "spills:fills":
            stats["spills"], stats["fills"] = int(number), int(second)
        else:
            value = float(number) if "." in number else int(number)
            stats[_NAMES.get(name, name.replace("-", "_").replace(" ", "_"))] = value
    return stats or None


def report(raw: dict, gl_info=None) -> ProgramReport:
    """A :class:`ProgramReport` from the child's raw record of one program (``gl_info``: the
    driver's :func:`info`, to say why a program of several render targets did not link)."""
    lines = [m.strip() for m in raw["messages"] if m.strip()]
    lines += [l.strip() for l in raw["stderr"].splitlines() if l.strip()]
    stats = {}
    for line in lines:
        parsed = parse_stats(line)
        if parsed:
            stats = parsed  # the last variant compiled is the one drawn
    errors = [l for l in lines if parse_stats(l) is None and any(e in l.lower() for e in _ERRORS)
              and not any(n in l for n in _SHIM_NOISE)]
    for what in ("compile", "link"):
        if not raw[what]:
            why = raw[what + "_log"].strip()
            most = (gl_info or {}).get("MAX_DRAW_BUFFERS", 1)
            if not why and raw["targets"] > most:
                why = (f"the program writes {raw['targets']} render targets, the driver's "
                       f"GL_MAX_DRAW_BUFFERS is {most}")
            errors.insert(0, f"GL {what} failed: {why or 'no log'}")
    if raw["gl_error"]:
        errors.append(f"GL error 0x{raw['gl_error']:04x} at the draw")
    if raw["compile"] and raw["link"] and not errors and not stats:
        errors.append("the driver reported no statistics for the program (nothing compiled)")
    return ProgramReport(raw["name"], not errors, stats, errors, lines)
