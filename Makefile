# `make run` and `make test` work on a fresh machine: both create .venv/ first when needed.
# A run installs what a user's run needs; the tests add their extra (pytest, ruff, selenium, and torch for the
# Hugging Face parity tests). A run does not import torch even where it is installed (rlexp.compat.tensorboardx).
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
	# lm-eval (tests/test_export_outside.py) in a step of its own: its pytablewriter -> typepy[datetime] pins
	# python-dateutil<3 while kubernetes 37 (the gke extra) needs >=3, and one resolve of both settles on 2017's
	# typepy 0.3. typepy 1.3 runs on dateutil 4, so lm-eval's pins are installed, then dateutil>=3 put back.
	$(PY) -m pip install "lm-eval==0.4.13"
	$(PY) -m pip install "python-dateutil>=3"
	touch $(TEST_STAMP) $(RUN_STAMP)

.PHONY: venv run test lint
venv: $(TEST_STAMP)

# compileall: where PYTHONDONTWRITEBYTECODE is set (as in many containers), no process writes rlexp's bytecode and
# each start compiles the ~130 modules a run imports from source again (0.13 CPU-s a process; the suite starts ~500)
run: $(RUN_STAMP)
	$(PY) -m compileall -q rlexp launchers
	$(PY) -m rlexp

test: $(TEST_STAMP)
	scripts/install_system_deps.sh
	$(PY) -m compileall -q rlexp launchers tests
	$(PY) -m ruff check .
	# pytest-xdist runs the suite on one worker per core (pyproject addopts): tests/conftest.py puts back what a test changes in a worker
	# (logging handlers and levels, Hydra's global state, cwd, environment, JAX flags) and keeps absl's handler off
	# pytest's capture, so in-process Hydra runs, torch-importing modules and the sweep fan-out run side by side.
	# `pytest -m "not slow"` is the fast tier (no training runs, no servers).
	$(PY) -m pytest

lint: $(TEST_STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .
