# Two commands set everything up on a fresh machine (see README.md):
#   make demo   creates/reuses .venv, installs the runtime, runs the whole pipeline on a sample corpus
#   make test   creates/reuses .venv, installs runtime + test + bench extras, runs the test suite
#               in PYTEST_WORKERS pytest-xdist processes (default 2, one per core of the
#               reference machine; 0 runs it in this process); PYTEST_ARGS adds pytest arguments,
#               e.g. make test PYTEST_ARGS="-k finetune"; the 25 slowest tests are listed at the
#               end, so that a CI log shows where the suite's time goes
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
DEMO_DIR ?= demo_out
PYTEST_ARGS ?=
PYTEST_WORKERS ?= 2
# Whole test files per worker: module fixtures are built once; session fixtures that several
# files share are built once per run under a lock (tests/conftest.py build_once).
XDIST_ARGS = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)

.PHONY: demo test install install-test clean help

help:
	@echo "make demo | make test | make install | make install-test | make clean"

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade "pip>=24" "setuptools>=70" wheel

# Re-install only when the requirements change.
$(VENV)/.runtime-installed: setup.cfg constraints.txt pyproject.toml | $(PY)
	@echo "== installing the runtime into $(VENV) (pinned by constraints.txt)"
	$(PIP) install --quiet -c constraints.txt -e .
	@touch $@

$(VENV)/.test-installed: $(VENV)/.runtime-installed
	@echo "== installing the test and bench extras into $(VENV)"
	$(PIP) install --quiet -c constraints.txt -e ".[test,bench]"
	@touch $@

install: $(VENV)/.runtime-installed
install-test: $(VENV)/.test-installed

demo: $(VENV)/.runtime-installed
	$(PY) -m garden.demo --work_dir=$(DEMO_DIR)

test: $(VENV)/.test-installed
	$(PY) -m pytest -q $(XDIST_ARGS) --durations=25 $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache
