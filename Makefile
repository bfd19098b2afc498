# `make run` and `make test` work on a fresh machine: both create .venv/ first when needed.
# A run installs what a user's run needs; the tests add their extra (pytest, ruff, selenium, and torch for the
# Hugging Face parity tests). Without torch a run starts ~3 s sooner: tensorboardX, imported by Tunix,
# imports torch whenever it is installed.
PY := .venv/bin/python
RUN_STAMP := .venv/.installed-run
TEST_STAMP := .venv/.installed-test

.venv/bin/python:
	python3 -m venv .venv
	$(PY) -m pip install --upgrade pip

$(RUN_STAMP): pyproject.toml | .venv/bin/python
	$(PY) -m pip install -e ".[all]"
	touch $(RUN_STAMP)

$(TEST_STAMP): pyproject.toml | .venv/bin/python
	$(PY) -m pip install -e ".[all,test]"
	touch $(TEST_STAMP) $(RUN_STAMP)

.PHONY: venv run test lint
venv: $(TEST_STAMP)

run: $(RUN_STAMP)
	$(PY) -m rlexp

test: $(TEST_STAMP)
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

lint: $(TEST_STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .
