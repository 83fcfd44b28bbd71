#!/usr/bin/env bash
# TensorFlow.js for `python -m workbench bench web` (the peers benchmark), from the npm registry at
# a pinned version, into a cache folder that is not committed:
#   tools/tfjs.sh [CACHE]     CACHE defaults to $WORKBENCH_TFJS, else .cache/tfjs in the checkout.
# Without npm it says so and exits 0 (the benchmark then says in one line why it is skipped);
# with the pinned versions already there it does nothing.  Keep the versions in step with
# TFJS_VERSION in workbench/web/tfjs.py.  Then the benchmark's other peer, onnxruntime-web, the
# same way (tools/ort_web.sh, into its own cache).
set -euo pipefail

VERSION=4.22.0
PACKAGES=("@tensorflow/tfjs@$VERSION" "@tensorflow/tfjs-backend-wasm@$VERSION")
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${1:-${WORKBENCH_TFJS:-$ROOT/.cache/tfjs}}"

if ! command -v npm >/dev/null 2>&1; then
    echo "workbench: no npm on PATH; TensorFlow.js and onnxruntime-web not installed (bench web will skip their rows)"
    exit 0
fi
installed() {  # the version in node_modules/<package>/package.json
    node -e "console.log(require(process.argv[1]).version)" "$CACHE/node_modules/$1/package.json" 2>/dev/null || true
}
if [ "$(installed @tensorflow/tfjs)" != "$VERSION" ] || [ "$(installed @tensorflow/tfjs-backend-wasm)" != "$VERSION" ]; then
    echo "workbench: installing TensorFlow.js $VERSION into $CACHE"
    mkdir -p "$CACHE"
    npm install --prefix "$CACHE" --no-audit --no-fund --save-exact --loglevel=error "${PACKAGES[@]}" \
        || echo "workbench: npm could not install TensorFlow.js $VERSION (offline?); bench web will skip its rows"
fi
bash "$ROOT/tools/ort_web.sh"
