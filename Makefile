# Two commands on a fresh Debian/Ubuntu machine:
#   make reproduce   train, evaluate and deploy; tables and figures into figures/$(PROFILE)/
#   make test        the test suite (what CI runs)
# Each does its own set-up: system libraries (apt, when root), .venv, pip install (with the dev and
# jax extras; jax: 89 MB download, 380 MB installed, 16-60 s here, for the back-end comparison),
# TensorFlow.js and onnxruntime-web from npm into .cache/tfjs and .cache/onnxruntime-web (when npm
# is there; only `bench web` uses them), and the
# target GPUs' Mesa drivers with their drm-shims into ~/.cache/workbench/mesa (`make drivers`, once a machine),
# and the reference articles' own system, Beatmup, as a peer into ~/.cache/workbench/beatmup (`make beatmup`);
# in a git checkout, git's notebook filter (nbstripout: notebooks stored without outputs).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROFILE ?= quick

# Data: WORKBENCH_DATA if set, else ../shared/data next to the checkout, else data/.
SHARED_DATA := $(abspath ../shared/data)
ifeq ($(strip $(WORKBENCH_DATA)),)
ifneq ($(wildcard $(SHARED_DATA)/README.md),)
export WORKBENCH_DATA := $(SHARED_DATA)
endif
endif
export MPLBACKEND := Agg

.PHONY: setup system-deps tfjs drivers beatmup test reproduce clean

setup: system-deps $(STAMP) tfjs
	@bash tools/notebook_filter.sh $(PY) || echo "notebook filter: not configured (git config failed)"
	@bash tools/drivers.sh || echo "drivers: not built; their tests skip and say why (make drivers to retry)"
	@bash tools/beatmup.sh || echo "beatmup: not built; its tests skip and say why (make beatmup to retry)"

# TensorFlow.js and onnxruntime-web (pinned) for `bench web`, into .cache/ when npm is there; else a note
tfjs:
	@bash tools/tfjs.sh

# vc4, v3d, freedreno, etnaviv, panfrost, lima: compile-only, for `python -m workbench drivers`
drivers:
	@bash tools/drivers.sh

# Beatmup's X2 and Classify apps (the articles' system, GPL-3.0, run as separate programs)
beatmup:
	@bash tools/beatmup.sh

system-deps:
	@bash tools/system_deps.sh

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,jax]'
	touch $@

# ruff's pyflakes rules (unused or undefined names: pyproject.toml [tool.ruff.lint]), then
# the suite in one process a core (pytest-xdist; a test file stays in one process, so its
# module fixtures run once): 1.5x faster on 2 cores. TEST_JOBS=0 runs it in this process alone.
TEST_JOBS ?= auto

test: setup
	$(VENV)/bin/ruff check workbench tests tools
	$(PY) -m pytest -n $(TEST_JOBS) --maxprocesses 4 --dist loadfile

reproduce: setup
	$(PY) -m workbench run --profile $(PROFILE)

clean:
	rm -rf $(VENV) runs
