"""One run of the user's command whose compiled programs several tests read."""

from __future__ import annotations

import pytest

from tests.helpers import compiled_programs


@pytest.fixture(scope="session")
def user_command_programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """`python -m rlexp` as typed (2 steps) with XLA's dump of its train step and decoding programs: the optimized
    HLO text by file name. One run for every test that reads them (each ran the same command before)."""
    return compiled_programs(tmp_path_factory.mktemp("programs"), "train_step|decode")
