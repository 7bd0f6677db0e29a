# spark-topic-router: `make demo` runs the main job end to end, `make test` passes the tests.
# Both install everything they need into .venv/ first.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
INSTALLED := $(VENV)/.installed

.PHONY: help install lint test test-fast demo bench clean

help:
	@echo "make demo   install everything and route the sample workload"
	@echo "make test   install everything, lint, type-check and run the whole test suite"
	@echo "make bench  run the benchmarks (tables and charts under bench/results/)"
	@echo "make clean  remove build products (keeps .venv/)"

$(INSTALLED): setup.py pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; Python 3.11 is required" >&2; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip setuptools wheel "setuptools-rust>=1.9"
	$(PIP) install --quiet -e ".[test,bench]"
	touch $@

install: $(INSTALLED)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: install lint
	$(PY) -m pytest

test-fast: install
	$(PY) -m pytest -m "not slow and not integration"

demo: install
	$(PY) -m routing demo

bench: install
	$(PY) bench/matchers.py

clean:
	rm -rf build dist *.egg-info native/target
