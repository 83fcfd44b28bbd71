#!/usr/bin/env bash
# onnxruntime-web for `python -m workbench bench web` (the peers benchmark), from the npm registry
# at a pinned version, into a cache folder that is not committed (as tools/tfjs.sh does TF.js):
#   tools/ort_web.sh [CACHE]     CACHE defaults to $WORKBENCH_ORT_WEB, else .cache/onnxruntime-web
# Without npm it says so and exits 0 (the benchmark then says in one line why its rows are
# skipped); with the pinned version already there it does nothing.  Keep the version in step with
# ORT_WEB_VERSION in workbench/web/ort.py.
set -euo pipefail

VERSION=1.30.0
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${1:-${WORKBENCH_ORT_WEB:-$ROOT/.cache/onnxruntime-web}}"

if ! command -v npm >/dev/null 2>&1; then
    echo "workbench: no npm on PATH; onnxruntime-web not installed (bench web will skip its rows)"
    exit 0
fi
installed="$(node -e "console.log(require(process.argv[1]).version)" \
    "$CACHE/node_modules/onnxruntime-web/package.json" 2>/dev/null || true)"
if [ "$installed" = "$VERSION" ]; then
    exit 0
fi
echo "workbench: installing onnxruntime-web $VERSION into $CACHE"
mkdir -p "$CACHE"
npm install --prefix "$CACHE" --no-audit --no-fund --save-exact --loglevel=error "onnxruntime-web@$VERSION" \
    || echo "workbench: npm could not install onnxruntime-web $VERSION (offline?); bench web will skip its rows"
