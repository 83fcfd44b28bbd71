"""Check GLSL ES 1.00 shaders with Khronos' glslangValidator under the OpenGL ES 2.0 limits.

Mesa does not enforce the ES 2.0 limits, so every generated `#version 100` shader is compiled and
linked (`-l`) by `glslangValidator` with `es2_limits.conf`: ES 2.0 minimum gl_Max* values and every
GLSL ES 1.00 Appendix A relaxation off. glslang then refuses while/do-while loops, for loops not in
the inductive form (constant bounds, index not modified), dynamic indexing other than by a for-loop
index (except vertex-shader uniforms), syntax/type errors, a missing main() and recursion.
It does NOT count the samplers or uniform vectors a shader uses against MaxTextureImageUnits 8 /
MaxFragmentUniformVectors 16: the workbench's own limits table has to check those.
Warnings are accepted; errors raise ShaderValidationError.
glslang does not know GL_EXT_draw_buffers: a shader that requires it is checked without that line
and with MaxDrawBuffers raised to ``draw_buffers`` (gl_FragData has gl_MaxDrawBuffers entries in
GLSL ES 1.00, so an index past it is refused), everything else as above.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

EXECUTABLE = "glslangValidator"
PACKAGE = "glslang-tools"
INSTALL_COMMAND = ("sudo sh -c 'apt-get update && "
                   f"apt-get install -y --no-install-recommends {PACKAGE}'")
LIMITS_FILE = Path(__file__).with_name("es2_limits.conf")
STAGES = ("vert", "frag")  # the only stages OpenGL ES 2.0 has

_VERSION = re.compile(r"^[ \t]*#[ \t]*version[ \t]+(\d+)", re.MULTILINE)


class ShaderValidationError(ValueError):
    """glslangValidator refused one or more shaders; `failures` maps shader name -> log text."""

    def __init__(self, failures: Mapping[str, str]):
        self.failures = dict(failures)
        parts = [f"shader {name!r} refused by {EXECUTABLE} under the OpenGL ES 2.0 limits:\n"
                 + _indent(log) for name, log in self.failures.items()]
        if len(parts) > 1:
            parts.insert(0, f"{len(parts)} shaders refused: {', '.join(map(repr, self.failures))}")
        super().__init__("\n".join(parts))

    @property
    def names(self) -> list[str]:
        """Names of the refused shaders, in the order given."""
        return list(self.failures)


def available() -> bool:
    """True if `glslangValidator` is on PATH."""
    return shutil.which(EXECUTABLE) is not None


DRAW_BUFFERS_EXTENSION = re.compile(r"^[ \t]*#[ \t]*extension[ \t]+GL_EXT_draw_buffers[ \t]*:.*\n",
                                    re.MULTILINE)


def limits_config(draw_buffers=1) -> str:
    """The ES 2.0 limits file without its comment lines, as glslangValidator reads it;
    ``draw_buffers``: its MaxDrawBuffers (1 in ES 2.0 without GL_EXT_draw_buffers)."""
    lines = LIMITS_FILE.read_text().splitlines()
    lines = [f"MaxDrawBuffers {draw_buffers}" if ln.split()[:1] == ["MaxDrawBuffers"] else ln
             for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    return "\n".join(lines) + "\n"


def validate(source: str, stage: str = "frag", name: str = "shader", draw_buffers=1) -> None:
    """Compile and link one `#version 100` shader under the ES 2.0 limits (with
    ``draw_buffers`` render targets for a shader that requires GL_EXT_draw_buffers).

    Raises ShaderValidationError (naming `name`, with glslang's log) on errors; warnings pass."""
    validate_many({name: source}, stage=stage, draw_buffers=draw_buffers)


def validate_many(shaders: Mapping[str, str], stage: str = "frag", draw_buffers=1) -> None:
    """Validate every shader (name -> source, all of one `stage`; see :func:`validate`).

    Raises one ShaderValidationError listing every refused name and its log."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES} for OpenGL ES 2.0, got {stage!r}")
    for name, source in shaders.items():
        _check_version(name, source)
    exe = _executable()
    failures = {}
    with tempfile.TemporaryDirectory(prefix="workbench-glslang-") as tmp:
        tmp = Path(tmp)
        plain, mrt = tmp / "es2_limits.conf", tmp / "es2_draw_buffers.conf"
        plain.write_text(limits_config())
        mrt.write_text(limits_config(draw_buffers))
        for i, (name, source) in enumerate(shaders.items()):
            path = tmp / f"{i:04d}_{_safe(name)}.{stage}"
            stripped = DRAW_BUFFERS_EXTENSION.sub("", source)
            path.write_text(stripped)
            log = _run(exe, plain if stripped == source else mrt, path, label=f"{name}.{stage}")
            if log is not None:
                failures[name] = log
    if failures:
        raise ShaderValidationError(failures)


def _run(exe: str, conf: Path, path: Path, label: str) -> str | None:
    """Run the validator on one file; its log (file shown as `label`) on errors, else None."""
    proc = subprocess.run([exe, "-l", conf.name, path.name], cwd=path.parent, capture_output=True,
                          text=True, timeout=120)
    out = (proc.stdout + proc.stderr).splitlines()
    if any("bad .conf file" in ln or "Unable to parse built-ins" in ln for ln in out):
        raise RuntimeError(f"{EXECUTABLE} could not use {LIMITS_FILE.name}:\n" + "\n".join(out))
    lines = [ln.replace(path.name, label) for ln in out if ln.strip() and ln.strip() != path.name]
    has_error = any(ln.lstrip().startswith(("ERROR", "INTERNAL ERROR")) for ln in lines)
    if proc.returncode == 0 and not has_error:
        return None  # warnings are fine
    return "\n".join(lines) or f"{EXECUTABLE} exited with status {proc.returncode}"


def _executable() -> str:
    exe = shutil.which(EXECUTABLE)
    if exe is None:
        raise RuntimeError(
            f"{EXECUTABLE} not found: install the Debian/Ubuntu package {PACKAGE!r}, e.g.\n"
            f"  {INSTALL_COMMAND}\n"
            f"(`make test` does this through tools/system_deps.sh when run as root).")
    return exe


def _check_version(name: str, source: str) -> None:
    m = _VERSION.search(source)
    if m and m.group(1) != "100":
        raise ValueError(f"shader {name!r}: the ES 2.0 limits apply to '#version 100' shaders "
                         f"only, got '#version {m.group(1)}'")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80] or "shader"


def _indent(text: str) -> str:
    return "\n".join("  " + ln for ln in text.splitlines())
