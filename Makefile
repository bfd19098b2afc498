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
	# Separate pytest processes: some modules import torch at collection (parity, export), and the data-check
	# tests run Hydra apps in-process with a forkserver grader pool; beside each other they break pytest's
	# output capture ("I/O operation on closed file"), so each group gets a process of its own
	# (the sweep fan-out tests too: they pass alone but not after the in-process launches of tests/launch).
	$(PY) -m pytest --ignore=tests/models --ignore=tests/test_export.py --ignore=tests/checks \
		--ignore=tests/launch/test_sweep_fanout.py
	$(PY) -m pytest tests/checks
	$(PY) -m pytest tests/launch/test_sweep_fanout.py
	$(PY) -m pytest tests/models tests/test_export.py

lint: $(VENV_STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .
