"""The perf patches' tests run with every patch installed (as `python -m rlexp` does by default) and leave the
process with none, as a fresh one has."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlexp import perf


@pytest.fixture(autouse=True, scope="module")
def perf_patches() -> Iterator[None]:
    perf.apply(perf.PATCHES)
    yield
    perf.apply([])
