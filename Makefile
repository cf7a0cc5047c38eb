# Quick start:  make demo   (install into .venv, run the main job on the mock testbed)
#               make test   (install into .venv, run the test suite)
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test install clean

$(BIN)/mfctl: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $(BIN)/mfctl

install: $(BIN)/mfctl

demo: install
	$(BIN)/mfctl run playbooks/mixtral-prototype.yaml

test: install
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) runs .pytest_cache
