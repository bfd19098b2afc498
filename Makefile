# `make run` and `make test` work on a fresh machine: both create .venv/ first when needed.
PY := .venv/bin/python
VENV_STAMP := .venv/.installed

$(VENV_STAMP): pyproject.toml
	python3 -m venv .venv
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e ".[all,test]"
	touch $(VENV_STAMP)

.PHONY: venv run test lint
venv: $(VENV_STAMP)

run: $(VENV_STAMP)
	$(PY) -m rlexp

test: $(VENV_STAMP)
	scripts/install_system_deps.sh
	$(PY) -m ruff check .
	# Two pytest processes: the parity and export tests import torch at collection, and torch in the same
	# process as the in-process Hydra runs of the other tests breaks pytest's output capture.
	$(PY) -m pytest --ignore=tests/models --ignore=tests/test_export.py
	$(PY) -m pytest tests/models tests/test_export.py

lint: $(VENV_STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .
