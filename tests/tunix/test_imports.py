"""Tunix internals rlexp works around (rlexp.tunix.imports): the package `__init__` runs only when a top-level name
is asked for."""

import subprocess
import sys

import pytest

from tests.helpers import REPO

PROBE = """
import sys
import rlexp
from tunix.rl.grpo.grpo_learner import GRPOLearner
import tunix
print("init ran after a submodule import:", "GRPOLearner" in vars(tunix), "pandas" in sys.modules)
print("dunder probe:", hasattr(tunix, "__wrapped__"), "GRPOLearner" in vars(tunix))
from tunix import RLCluster
from tunix.rl.rl_cluster import RLCluster as ClusterClass
print("top-level names:", tunix.GRPOLearner is GRPOLearner, RLCluster is ClusterClass, tunix.__version__)
print("missing name:", hasattr(tunix, "NoSuchName"))
"""


@pytest.mark.slow
def test_submodules_import_without_the_package_init_and_top_level_names_still_resolve() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    from importlib.metadata import version

    assert out.stdout.splitlines() == [
        "init ran after a submodule import: False False",
        "dunder probe: False False",
        f"top-level names: True True {version('google-tunix')}",
        "missing name: False",
    ]


@pytest.mark.slow
def test_a_process_that_imported_tunix_first_keeps_the_real_package() -> None:
    probe = "import tunix, rlexp; print('GRPOLearner' in vars(tunix), '__getattr__' in vars(tunix))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "False"]
