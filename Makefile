# Quick start:  make demo   (install into .venv, run the main job on the mock testbed)
#               make test   (install into .venv, run the test suite)
#               make lint   (ruff and mypy, as configured in pyproject.toml)
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint install clean

$(BIN)/mfctl: pyproject.toml
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

clean:
	rm -rf $(VENV) runs .pytest_cache
