# Conveyor: every target a new user needs sets itself up first (see README.md).
SHELL := /bin/bash
.DEFAULT_GOAL := help

# pyenv resolves `python` to .python-version (3.10.13); TFX 1.16 needs Python < 3.11.
PYTHON ?= $(shell command -v python3.10 || pyenv which python 2>/dev/null || echo python3)
VENV := .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.9
# Stamp that records which lock the venv was synced from: `setup` is a no-op until it changes.
SYNCED := $(VENV)/.synced-lock
ENV ?= local
PIPELINE ?= penguin
WORKDIR ?= $(CURDIR)/.conveyor

export TF_CPP_MIN_LOG_LEVEL ?= 3
export TF_USE_LEGACY_KERAS ?= 1

.PHONY: help setup lock pipeline-local data test test-unit test-e2e lint docs monitoring bench \
	bench-bucket bench-data bench-trainer bench-nightly bench-serving bench-infer bench-warm-start bench-report \
	gpu-check clean

help:
	@echo "make pipeline-local  set up, prepare the penguin data and run it locally (pushes a model)"
	@echo "make test            set up and run unit + end-to-end tests"
	@echo "make lint            ruff over the code"
	@echo "make docs            regenerate docs/spec-reference.md and docs/spec.schema.json"
	@echo "make monitoring      regenerate the Grafana dashboards in monitoring/dashboards/"
	@echo "make bench           Conveyor vs raw TFX penguin, then bench-bucket"
	@echo "make bench-bucket    penguin and a 1M-row taxi night in an emulated S3 bucket vs local disk"
	@echo "make bench-data      data path vs raw TFX at 150k and 1.5M taxi rows"
	@echo "make bench-trainer   trainer examples/s: XLA, mirrored, multi-worker (taxi)"
	@echo "make bench-nightly   one taxi night, Conveyor beside raw TFX, at 100k and 1M rows"
	@echo "make bench-serving   local model server :predict against the signature's own call (penguin)"
	@echo "make bench-infer     conveyor infer (Beam) against the model called row by row, 1M taxi rows"
	@echo "make bench-warm-start  a week of 300k-row taxi nights: warm start against from scratch"
	@echo "make bench-report    rewrite the benchmark tables of README.md and bench/README.md from bench/results/"
	@echo "make gpu-check       the gpu profile on penguin and taxi (needs GPUs)"
	@echo "make lock            re-resolve requirements.in into requirements.lock"
	@echo "make clean           remove the venv and generated run outputs"
	@echo "(bench targets pass BENCH_ARGS to their script, e.g. make bench-nightly BENCH_ARGS=\"--rows 10000000 --repeats 1 --no-raw-tfx --no-like-for-like\";"
	@echo " make bench passes BENCH_ARGS to the penguin benchmark and BUCKET_BENCH_ARGS to the bucket one)"

$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 10), "Python 3.10 is required, got " + sys.version'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)

# --compile-bytecode: uv installs sources only, and where PYTHONDONTWRITEBYTECODE is set (this
# machine, most containers) Python never caches its compiles, so every process would compile
# TensorFlow and TFX again: about 7 s of each run. Compiling once here takes about 30 s.
# The Makefile is a prerequisite so that a change to these steps re-syncs an existing venv.
$(SYNCED): requirements.lock pyproject.toml Makefile | $(BIN)/python
	$(BIN)/uv pip sync -q --compile-bytecode --python $(BIN)/python requirements.lock
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e .
	@cp requirements.lock $(SYNCED)

setup: $(SYNCED)

lock: | $(BIN)/python
	$(BIN)/uv pip compile -q requirements.in --python-version 3.10 -o requirements.lock

data: setup
	$(BIN)/conveyor data $(PIPELINE) --profile $(ENV) --workdir $(WORKDIR)

pipeline-local: data
	$(BIN)/conveyor run $(PIPELINE) --profile $(ENV) --workdir $(WORKDIR)

# Test files run on two workers (pytest-xdist), a file's tests on one, so module-scoped pipeline
# runs are shared as before; TEST_WORKERS=0 runs them in this process. Files are handed out in
# collection order: end-to-end, then faults, then unit, so the long files start first and the
# short unit files fill the gaps at the end. xdist's default (the files with the most tests
# first) left the few-test, minutes-long end-to-end files for last, one worker alone at the end.
# The slowest tests are listed at the end.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	--durations=25

test: setup
	$(PYTEST)

test-unit: setup
	$(PYTEST) -m "not e2e"

test-e2e: setup
	$(PYTEST) -m e2e

lint: setup
	$(BIN)/ruff check pipelines components tests bench monitoring
	$(BIN)/ruff format --check pipelines components tests bench monitoring

# The spec reference and JSON Schema are generated from pipelines/spec/ (models, components).
docs: setup
	$(BIN)/python -m pipelines.spec.reference

# The Grafana dashboards are generated from monitoring/dashboards.py (grafanalib); a test checks
# the committed JSON is fresh.
monitoring: setup
	$(BIN)/python monitoring/dashboards.py

# `make bench` is penguin beside raw TFX, then the same machine's bucket benchmark: the two
# scripts take different options, so the second has a variable of its own.
bench: setup
	$(BIN)/python bench/bench_penguin.py $(BENCH_ARGS)
	$(BIN)/python bench/bench_bucket.py $(BUCKET_BENCH_ARGS)

bench-bucket: setup
	$(BIN)/python bench/bench_bucket.py $(BENCH_ARGS)

bench-data: setup
	$(BIN)/python bench/bench_datapath.py $(BENCH_ARGS)

bench-trainer: setup
	$(BIN)/python bench/bench_trainer.py $(BENCH_ARGS)

bench-nightly: setup
	$(BIN)/python bench/bench_nightly.py $(BENCH_ARGS)

bench-serving: setup
	scripts/ensure_system_packages.sh wrk
	$(BIN)/python bench/bench_serving.py $(BENCH_ARGS)

bench-infer: setup
	$(BIN)/python bench/bench_infer.py $(BENCH_ARGS)

bench-warm-start: setup
	$(BIN)/python bench/bench_warm_start.py $(BENCH_ARGS)

# The tables between <!-- bench:NAME:start/end --> markers, from the results files the benchmarks
# write; a test checks the committed READMEs are fresh.
bench-report: setup
	$(BIN)/python bench/report.py

gpu-check: setup
	$(BIN)/python bench/gpu_check.py

clean:
	rm -rf $(VENV) .conveyor .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
