"""The perf patches' tests run with every patch installed (as `python -m rlexp` does by default) and leave the
process with none, as a fresh one has; the user command's compiled programs are made once for all of them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlexp import perf
from tests.helpers import compiled_programs


@pytest.fixture(autouse=True, scope="module")
def perf_patches() -> Iterator[None]:
    perf.apply(perf.PATCHES)
    yield
    perf.apply([])


@pytest.fixture(scope="session")
def user_command_programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """`python -m rlexp` as typed (2 steps) with XLA's dump of its train step and decoding programs: the optimized
    HLO text by file name. One run for every test that reads them."""
    return compiled_programs(tmp_path_factory.mktemp("programs"), "train_step|decode")
