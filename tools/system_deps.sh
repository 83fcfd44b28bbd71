#!/usr/bin/env bash
# Make sure the system libraries the workbench needs are present:
#   python3-venv (to create .venv), Mesa's EGL/OpenGL (headless llvmpipe for moderngl) and
#   glslang-tools (Khronos' glslangValidator, checks the shaders under ES 2.0 limits) and
#   chromium (headless browser: WebGL 1.0 through SwiftShader, JupyterLab widget tests).
# Installs them with apt when missing and we are root; otherwise prints the exact
# command and exits non-zero.
set -euo pipefail

missing=()

have_lib() { ldconfig -p 2>/dev/null | grep -q "$1"; }
have_lib 'libEGL.so.1' || missing+=(libegl1)
have_lib 'libGL.so.1' || missing+=(libgl1)
have_lib 'libEGL_mesa.so.0' || missing+=(libegl-mesa0)
compgen -G '/usr/lib/*/dri/swrast_dri.so' >/dev/null || compgen -G '/usr/lib/dri/swrast_dri.so' >/dev/null \
    || missing+=(libgl1-mesa-dri)
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
command -v glslangValidator >/dev/null 2>&1 || missing+=(glslang-tools)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "workbench: missing system packages: ${missing[*]}" >&2
    echo "Install them as root, then run make again:" >&2
    echo "  sudo sh -c '$cmd'" >&2
    exit 1
fi
echo "workbench: installing system packages: ${missing[*]}"
sh -c "$cmd"
