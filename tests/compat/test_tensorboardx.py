"""tensorboardX's import of torch (rlexp.compat.tensorboardx): a run's import of Tunix leaves torch unloaded, and
torch still imports, and tensorboardX still uses it, where something wants it."""

import subprocess
import sys

import pytest

from tests.helpers import REPO

PROBE = """
import sys
import rlexp
import tunix.sft.peft_trainer, tensorboardX.writer
print("torch after tunix:", "torch" in sys.modules, tensorboardX.writer.numpy_compatible.__module__)
import torch
print("torch imports:", torch.zeros(2).shape == (2,))
"""


@pytest.mark.slow
def test_tunix_imports_without_torch_and_torch_still_imports() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["torch after tunix: False numpy", "torch imports: True"]


@pytest.mark.slow
def test_a_process_that_imported_torch_first_keeps_it_in_tensorboardx() -> None:
    probe = "import torch, rlexp, tensorboardX.writer as w; print(w.numpy_compatible is torch.Tensor)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True"]
