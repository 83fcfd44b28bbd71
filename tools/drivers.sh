#!/usr/bin/env bash
# Build the target GPUs' own GL drivers, compile-only, into $WORKBENCH_DRIVERS, default
# ~/.cache/workbench/mesa/<version>/ (one build per machine, shared by every checkout; a stamp
# file marks it done):
#   vc4 (VideoCore IV: Pi Zero-3), v3d (Pi 4/5), freedreno (Adreno), etnaviv (Vivante),
#   panfrost (Mali Midgard/Bifrost), lima (Mali-400/450),
# each with its drm-shim: an LD_PRELOAD library that fakes the kernel driver, so that the GL
# driver and its shader compiler run on any x86 machine without the hardware (as Mesa's own CI
# compiles its shader database).  Source: Debian bookworm's mesa source package (upstream
# 22.3.6, the version of the system's Mesa), with one patch (tools/mesa/*.patch).
# Only `python -m workbench drivers` and its tests use the build, and only in a child process.
# Installs the build tools with apt when missing and we are root; otherwise prints the command.
set -euo pipefail

VERSION=22.3.6
root="$(cd "$(dirname "$0")/.." && pwd)"
prefix="${WORKBENCH_DRIVERS:-${XDG_CACHE_HOME:-$HOME/.cache}/workbench/mesa/$VERSION}"
cache="$(dirname "$prefix")"
stamp="$prefix/.built"
mkdir -p "$cache"
[ -f "$stamp" ] && exit 0

# the Python that runs Mesa's code generators must be the system's, with mako
export PATH="/usr/bin:$PATH"
tools=(meson ninja-build pkg-config python3-mako libdrm-dev libexpat1-dev zlib1g-dev libzstd-dev
       flex bison dpkg-dev patch)
missing=()
for pkg in "${tools[@]}"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
need_src=
apt-cache showsrc mesa 2>/dev/null | grep "^Version: $VERSION-" >/dev/null || need_src=1  # no -q: SIGPIPE

src_list=/etc/apt/sources.list.d/workbench-mesa-src.sources
if [ ${#missing[@]} -gt 0 ] || [ -n "$need_src" ]; then
    cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "drivers: need ${missing[*]:-} ${need_src:+the mesa source package (a deb-src line for bookworm)}; as root: $cmd" >&2
        exit 1
    fi
    if [ -n "$need_src" ] && [ ! -f "$src_list" ]; then
        printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' > "$src_list"
    fi
    echo "drivers: installing ${missing[*]:-nothing} and reading Debian's source list"
    sh -c "$cmd" >"$cache.apt.log" 2>&1 || { tail -n 20 "$cache.apt.log" >&2; exit 1; }
fi

work="$cache/work-$VERSION"
rm -rf "$work" && mkdir -p "$work"
cd "$work"
echo "drivers: fetching Debian's mesa $VERSION source"
apt-get source --download-only "mesa" >/dev/null 2>&1 \
    || { echo "drivers: 'apt-get source mesa' failed (no deb-src line for bookworm, or offline)" >&2; exit 1; }
dsc=$(ls mesa_"$VERSION"-*.dsc | head -n 1)
dpkg-source --skip-debianization -x "$dsc" src >/dev/null 2>&1
(cd src && patch -p1 --quiet < "$root/tools/mesa/vc4_noop_shader_bo.patch")

echo "drivers: configuring (log: $work/build.log)"
meson setup build src --prefix="$prefix" --libdir=lib --buildtype=debug \
    -Dgallium-drivers=vc4,v3d,freedreno,etnaviv,panfrost,lima -Dvulkan-drivers= \
    -Dtools=drm-shim -Dllvm=disabled -Dplatforms= -Degl=enabled -Dgbm=enabled -Dglx=disabled \
    -Dgles1=disabled -Dgles2=enabled -Dopengl=true -Dshared-glapi=enabled -Dvalgrind=disabled \
    -Dlibunwind=disabled -Dzstd=enabled -Dbuild-tests=false >"$work/build.log" 2>&1 \
    || { tail -n 20 "$work/build.log" >&2; echo "drivers: meson setup failed (log above)" >&2; exit 1; }
echo "drivers: building (about 15 minutes on 2 cores)"
ninja -C build install >>"$work/build.log" 2>&1 \
    || { tail -n 30 "$work/build.log" >&2; echo "drivers: build failed (log above)" >&2; exit 1; }
mv "$work/build.log" "$prefix/build.log"
rm -rf "$work"
touch "$stamp"
echo "drivers: built into $prefix"
