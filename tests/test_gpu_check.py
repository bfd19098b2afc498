"""`scripts/gpu_check.sh OUTDIR`, the GPU check, run as on the GPU machine but at tiny sizes on this CPU
(GPU_CHECK_DRY=1), so that every part it runs there and every figure it writes stays working."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlexp.config.schema import ModelConfig
from rlexp.estimates.flops import forward_flops_per_token
from tests.helpers import REPO, rlexp_env


def gpu_check(outdir: Path, work: Path) -> subprocess.CompletedProcess[str]:
    env = {**rlexp_env(), "GPU_CHECK_DRY": "1", "GPU_CHECK_WORK": str(work), "JAX_PLATFORMS": "cpu"}
    env["PY"] = sys.executable
    cmd = [str(REPO / "scripts" / "gpu_check.sh"), str(outdir)]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_gpu_check_runs_every_part_and_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = gpu_check(out, tmp_path / "work")
    report = json.loads((out / "gpu_check.json").read_text())
    parts = report["parts"]
    has_trl = importlib.util.find_spec("trl") is not None  # the bench extra; without it part d fails, and says so
    assert proc.returncode == (0 if has_trl else 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    assert [n for n, p in parts.items() if p["ok"]] == (["a", "b", "c", "d"] if has_trl else ["a", "b", "c"])
    # a: versions and devices in use
    assert parts["a"]["versions"]["jax"] and parts["a"]["backend"] == "cpu"
    # b: the default task through `python -m rlexp slice=h200`, learned or not
    b = parts["b"]
    assert b["steps"] == 2 and b["pass_at_1_gain"] == pytest.approx(b["pass_at_1_after"] - b["pass_at_1_before"])
    assert b["step_time_s"] > 0 and b["train_wall_s"] > 0
    # c: throughput and MFU of the random model, with rlexp's FLOP count for its dimensions
    c, w = parts["c"], parts["c"]["workload"]
    assert c["rollout_tokens_per_s"] > 0 and c["update_tokens_per_s"] > 0 and 0 < c["mfu"] < 1
    dims = {k: w[k] for k in ("num_layers", "vocab_size", "embed_dim", "hidden_dim", "num_heads", "num_kv_heads")}
    model = ModelConfig(name="m", head_dim=w["head_dim"], max_context=w["max_context"], **dims)
    model.extra = {"tie_word_embeddings": True}
    seq = w["max_prompt_tokens"] + c["completion_tokens_mean"]
    assert c["forward_flops_per_token"] == forward_flops_per_token(model, seq)
    assert c["peak_flops"] == 790e12 and w["precision"] == "bfloat16"
    # d: TRL on the same checkpoint, per step against rlexp
    if has_trl:
        assert parts["d"]["trl_over_rlexp"] == pytest.approx(parts["d"]["step_time_s"] / c["step_time_s"])
    else:
        assert "No module named 'trl'" in parts["d"]["error"]
    assert f"parts ok in {report['wall_s']:.0f} s" in proc.stdout
    # what comes back from the GPU machine: at most 8 files, named in letters, digits, '.', '_' and '-'
    files = sorted(p.name for p in out.rglob("*"))
    assert files == ["b_metrics.jsonl", "c_metrics.jsonl", "gpu_check.json", "gpu_check.log"]
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", f) for f in files)


def test_the_gpu_check_needs_an_outdir() -> None:
    proc = subprocess.run([str(REPO / "scripts" / "gpu_check.sh")], capture_output=True, text=True, env=os.environ)
    assert proc.returncode != 0 and "usage: scripts/gpu_check.sh OUTDIR" in proc.stderr
