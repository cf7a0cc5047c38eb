# Quick start:  make demo   (install into .venv, run the main job on the mock testbed)
#               make test   (install into .venv, run the test suite)
#               make lint   (ruff and mypy, as configured in pyproject.toml)
#               make clean  (the venv and caches; runs/ is kept: make distclean deletes it too)
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint install clean distclean

# the planner's compiled search is built by the install: a change to its C source installs again
$(BIN)/mfctl: pyproject.toml mfctl/fabric/_search_kernel.c
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $(BIN)/mfctl

install: $(BIN)/mfctl

demo: install
	$(BIN)/mfctl run playbooks/mixtral-prototype.yaml

test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check mfctl tests
	$(BIN)/mypy

# clean keeps the run history (runs/: summaries, metrics, journals); distclean deletes it too
clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

distclean: clean
	rm -rf runs
