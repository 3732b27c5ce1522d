# The two set-up commands (README): `make verify` (main job) and `make test` (the test suite).
# Both build .venv from scratch on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: verify test lint typecheck imports install engine-tree

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[kernels,dev]'
	touch $(STAMP)

install: $(STAMP)

# The real vLLM 0.33.0 source tree (the wheel's .py files), cached under ~/.cache/fasttrack: the blast radius
# and the integration tests read it. Downloads about 336 MB once.
engine-tree: $(STAMP)
	$(BIN)/python -m fasttrack.engine_tree 0.33.0

verify: $(STAMP) engine-tree
	$(BIN)/fasttrack verify; rc=$$?; $(BIN)/fasttrack report --out site || true; exit $$rc

lint: $(STAMP)
	$(BIN)/ruff check fasttrack tests kernels benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy --strict fasttrack

# The layers contract of fasttrack itself ([tool.importlinter] in pyproject.toml).
imports: $(STAMP)
	$(BIN)/lint-imports

test: $(STAMP) lint typecheck imports engine-tree
	$(BIN)/python -m pytest -q -n 2 --dist loadfile
