#!/usr/bin/env bash
# Build Beatmup, the reference articles' C++ library (GPL-3.0), as a peer: its X2 and Classify
# apps, headless EGL + OpenGL ES 2.0, into $WORKBENCH_BEATMUP, default
# ~/.cache/workbench/beatmup/<commit>/ (one build a machine, shared by every checkout; a stamp
# file marks it done).  The project only runs these apps as separate programs and reads the
# model files as data (workbench.gl.beatmup, workbench.nets.beatmup_model); nothing of Beatmup
# enters the repository.
# Source: ../shared/peers/beatmup next to the checkout when it is there, else a clone of
# github.com/lnstadrum/beatmup at the pinned commit (its hash is the integrity check).
# Also installs apitrace (what the apps hand to GL is captured with it) when missing and root.
set -euo pipefail

COMMIT=64ab08c5405061d983b00e48ff2ad23863aea5fe
URL=https://github.com/lnstadrum/beatmup
root="$(cd "$(dirname "$0")/.." && pwd)"
prefix="${WORKBENCH_BEATMUP:-${XDG_CACHE_HOME:-$HOME/.cache}/workbench/beatmup/$COMMIT}"
stamp="$prefix/.built"
[ -f "$stamp" ] && exit 0
mkdir -p "$(dirname "$prefix")"

shared="$root/../shared/peers/beatmup"
tools=(cmake g++ make libegl-dev libgles-dev apitrace)
[ -f "$shared/CMakeLists.txt" ] || tools+=(git ca-certificates)
missing=()
for pkg in "${tools[@]}"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
if [ ${#missing[@]} -gt 0 ]; then
    cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "beatmup: need ${missing[*]}; as root: $cmd" >&2
        exit 1
    fi
    echo "beatmup: installing ${missing[*]}"
    sh -c "$cmd" >"$prefix.apt.log" 2>&1 || { tail -n 20 "$prefix.apt.log" >&2; exit 1; }
fi

work="$prefix.work"
rm -rf "$work" && mkdir -p "$work"
if [ -f "$shared/CMakeLists.txt" ]; then
    cp -r "$shared" "$work/src"
    chmod -R u+w "$work/src"
else
    echo "beatmup: cloning $URL at $COMMIT"
    if ! git clone --quiet "$URL" "$work/src" >"$work/clone.log" 2>&1 \
            || ! git -C "$work/src" checkout --quiet "$COMMIT" >>"$work/clone.log" 2>&1; then
        echo "beatmup: no ../shared/peers/beatmup and cannot clone $URL at $COMMIT (offline?): its tests skip" >&2
        rm -rf "$work"
        exit 1
    fi
fi
# its top-level CMakeLists ends with the Python binding (an empty pybind11 submodule here):
# keep everything before that block
sed -i '/^add_subdirectory(pybind11)/,$d' "$work/src/CMakeLists.txt"

echo "beatmup: building X2 and Classify (log: $work/build.log; about 8 minutes on 2 cores)"
if ! (cmake -S "$work/src" -B "$work/src/build" -DUSE_EGL=ON -DGLES_VERSION=20 \
        -DCMAKE_BUILD_TYPE=Release && make -C "$work/src/build" -j"$(nproc)" X2 Classify) \
        >"$work/build.log" 2>&1; then
    tail -n 30 "$work/build.log" >&2
    echo "beatmup: build failed (log above)" >&2
    exit 1
fi
mv "$work/build.log" "$work/src/build/build.log"
rm -rf "$prefix"
mv "$work/src" "$prefix"
rm -rf "$work"
touch "$stamp"
echo "beatmup: built into $prefix"
