# The two commands of the README: `make demo` (the main job) and `make test` (the whole suite on the `test` tier
# of image-tiers.yaml: every cpu image and one cuda image); `make test-full` adds every other cuda image.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
LEARNERKIT := $(BIN)/learnerkit
# Builds take their index, find-links and CA bundle from the host's pip configuration, as the plain
# `learnerkit image build` does: make passes nothing the command would not find by itself.
# TIER: the images `images` builds and the suite tests (image-tiers.yaml; docs/build-tool.md, "Tiers").
TIER ?= test
# The suite's workers: its test files run on this many processes at once (pytest-xdist), most of a test's time being
# spent waiting on containers and servers; the files marked `serial` then run alone (docs/testing.md).
TEST_WORKERS ?= 3

.PHONY: setup images demo lint typecheck test test-full unit bench gpu-check clean k8s-binaries test-k8s repro

setup:
	@scripts/setup.sh

images: setup
	$(LEARNERKIT) image build --tier $(TIER) --quiet-log
	$(LEARNERKIT) sidecar build --quiet-log
	$(LEARNERKIT) image prune --all

# The demo's setup leaves out the dev tools (scripts/setup.sh --demo); any other target adds them.
demo:
	@scripts/setup.sh --demo
	@scripts/demo.sh

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check learnerkit build learner_base/learner controller_sidecar tests bench
	@mkdir -p .learnerkit/typecheck && ln -sfn ../../build .learnerkit/typecheck/learnerkit_build
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: setup
	$(BIN)/pytest tests/unit

# Both parts run whatever the first one's outcome, so that one run reports every failure; either failing fails it.
test: setup lint images
	LEARNERKIT_IMAGE_TIER=$(TIER) $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile -m "not serial"; parallel=$$?; \
	LEARNERKIT_IMAGE_TIER=$(TIER) $(BIN)/pytest -m serial; serial=$$?; \
	exit $$(( parallel != 0 ? parallel : serial ))

# Every image of the matrix, cuda included, built and tested (about an hour more than `make test` from cold).
test-full:
	$(MAKE) test TIER=full

# Every locked cpu image, the sidecar and the base built twice from scratch, apart, compared by image ID
# (docs/supply-chain.md); not part of `make test`: about 2 minutes per image on 2 cores, more for large ones.
repro: setup
	$(BIN)/python scripts/repro.py

# On a GPU machine, outside containers (docs/gpu.md): PYTHON=/path/to/python make gpu-check. The smoke, job-sized
# and overhead runs of every framework installed there, a few minutes per framework.
gpu-check:
	@scripts/gpu-check.sh

# The real-cluster tier: Kubernetes built from Debian's source (cached by version; seconds when cached).
k8s-binaries:
	@scripts/k8s-binaries.sh >/dev/null

test-k8s: setup images k8s-binaries
	$(BIN)/pytest tests/k8s

bench: setup images
	$(BIN)/python bench/images.py
	$(BIN)/python bench/scheduler_admission.py
	$(BIN)/python bench/scan.py
