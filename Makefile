# The two set-up commands (README): `make verify` (main job) and `make test` (the test suite).
# Both build .venv from scratch on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: verify test lint typecheck install

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[kernels,dev]'
	touch $(STAMP)

install: $(STAMP)

verify: $(STAMP)
	$(BIN)/fasttrack verify; rc=$$?; $(BIN)/fasttrack report --out site || true; exit $$rc

lint: $(STAMP)
	$(BIN)/ruff check fasttrack tests kernels benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy --strict fasttrack

test: $(STAMP) lint typecheck
	$(BIN)/python -m pytest -q -n 2 --dist loadfile
