"""`rlexp eval` of a step that cannot be restored: the fix is to evaluate another step, not to export one."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlexp.errors import RunError
from rlexp.train.offline_eval import _other_step, check_restorable


def test_a_step_without_its_files_names_the_other_steps(tmp_path: Path) -> None:
    root = tmp_path / "run" / "checkpoints" / "actor"
    (root / "3").mkdir(parents=True)
    (root / "6").mkdir()
    with pytest.raises(
        RunError,
        match=r"actor/6: cannot be restored \(no .*; evaluate another step: rlexp eval .*run <step> \(saved: 3\)",
    ):
        check_restorable(root, 6)


def test_the_only_step_has_no_other_to_name(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints" / "actor"
    (root / "3").mkdir(parents=True)
    with pytest.raises(RunError, match="retrain, or restore the checkpoint from a copy"):
        check_restorable(root, 3)
    assert "export" not in _other_step(root)
