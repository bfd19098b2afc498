"""Pod replay: the `rlexp` container of each seed preset's rendered JobSet, run here on CPU at tiny scale.

For the four MaxText presets (`experiment=gemma4_e4b_omi2`, `gpt_oss_20b_gsm8k`, `gemma4_26b_a4b_omi2`,
`qwen3_30b_a3b_omi2`) the user's dry run
(`python -m rlexp experiment=<preset> hydra.launcher.dry_run=true`) renders the JobSet; this test takes the
`rlexp` container's command, args and env from that jobset.yaml and runs exactly that, changing only:

  command  `python` -> this interpreter (the image's Python is the one rlexp is installed in)
  args     `output_dir=gs://...` -> a local dir; appended overrides:
           model   -> `model=<family>_tiny model.path=<random tiny checkpoint> model.max_context=1024`
                      (rlexp.models.tiny_random; its character tokenizer spends a token per character)
           slice   -> `slice=cpu` (one host device); for gemma4 also `slice.mesh.tp=1`, as the preset's TP=2
                      cannot split the tiny model's 17-token vocabulary
           rollout -> `trainer.rollout.engine=vanilla trainer.rollout.async_rollout=false`: the presets' vLLM
                      engine (vllm-tpu) runs on TPU only, and one CPU device has none to spare for sampling
           data    -> `dataset.source=<file>`: an OpenMathInstruct-2-shaped jsonl with over-long prompts,
                      a GSM8K-shaped train/test folder
           scale   -> batch 2 x 2 generations, 2 steps, completions of 8 tokens; for gpt-oss the prompt
                      budget 256 -> 768, since the harmony header alone is ~190 characters; for qwen3
                      `profile.steps=0`, as the preset traces steps 6-7
           (the MoE presets' tiny models, `gemma4_moe_tiny` / `qwen3_moe_tiny`, route 8 experts top-2);
           fewer layers for gemma4, as each layer is a part of every program XLA compiles (most of a run's cost
           here): gemma4_moe's `model.num_layers=3`, one sliding-sliding-global period of its 6; gemma4's 4
           (GEMMA4_LAYERS: sliding and global in turn, one of each sharing KV), with the checkpoint to match
  env      `JAX_PLATFORMS=proxy` -> `cpu` and `RLEXP_PATHWAYS=1` dropped (the proxy and pathwaysutils exist
           only on a Pathways head); `RLEXP_PLAN` (the submitter's plan) dropped: the swaps above make another
           config than the one it was made for, which a pod refuses, so the pod plans itself as a JobSet applied
           without a plan does (tests/train/test_plan.py replays a plan with no swap at all);
           `RLEXP_OUTPUT_DIR` -> the local dir; `PATHWAYS_HEAD` (from a label)
           -> the value the JobSet controller would give; secrets (optional secretKeyRefs) absent, so wandb
           stays offline; PATH and HOME (JAX compilation cache) from this machine; HF_HUB_OFFLINE=1 so
           nothing reaches the network.

Everything else (RLEXP_IN_CLUSTER=gke, so the process trains as a pod does instead of launching again;
the preset's templates, rewards, optimizer and sampling; `hydra.mode=RUN`) is as rendered. Each run must
reach a completed summary.json, the way a startup bug would be caught before anyone pays for a slice.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from rlexp.models import tiny_random
from tests.helpers import REPO, run_rlexp

pytestmark = pytest.mark.slow

LONG = " ".join(["Let x be the number of ways to tile a long hallway with square and domino tiles."] * 6)
SCALE = ["trainer.batch_size=2", "trainer.num_generations=2", "trainer.micro_batch_size=1",
         "trainer.rollout_micro_batch_size=2", "trainer.max_steps=2", "trainer.max_completion_tokens=8"]  # fmt: skip


# 4 layers, sliding and global in turn, the last 2 (one of each) sharing the first 2's keys and values: the
# tiny's 6 (2 sliding : 1 global, the last 3 sharing), cut by a third and every kind of layer kept
GEMMA4_LAYERS = ["model.num_layers=4", "model.extra.sliding_window_pattern=2", "model.extra.num_kv_shared_layers=2"]


def _omi2_file(path: Path) -> Path:
    rows = []
    for i in range(30):
        problem = f"{LONG} What is {i} + {i}?" if i % 3 == 0 else f"What is {i} + {i}?"
        rows.append({"problem": problem, "generated_solution": f"\\boxed{{{2 * i}}}", "expected_answer": str(2 * i),
                     "problem_source": "augmented_math"})  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _gsm8k_dir(folder: Path) -> Path:
    folder.mkdir()
    for split, n in (("train", 24), ("test", 6)):
        rows = [{"question": f"Tom has {i} apples and buys {i + 1} more. How many?",
                 "answer": f"{i}+{i + 1}=<<{i}+{i + 1}={2 * i + 1}>>{2 * i + 1}\n#### {2 * i + 1}"} for i in range(n)]  # fmt: skip
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _checkpoint(family: str, folder: Path, swaps: list[str], monkeypatch: pytest.MonkeyPatch) -> Path:
    """tiny_random's checkpoint of `family`, its option changed by the `model.*` swaps among `swaps`."""
    dims = OmegaConf.from_dotlist([a.removeprefix("model.") for a in swaps if a.startswith("model.")])
    build = tiny_random.TINY[family]
    monkeypatch.setitem(tiny_random.TINY, family, lambda opt: build(OmegaConf.merge(opt, dims)))
    return tiny_random.write(family, folder)


def _dry_run(preset: str, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The user's dry run, through `python -m rlexp`'s entry in this process (the pod's command below is a process
    of its own; tests/cli runs the dry-run command as typed); returns the rendered JobSet."""
    from rlexp.__main__ import entry

    for name in ("RLEXP_OUTPUT_ROOT", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(
        sys, "argv", ["rlexp", f"experiment={preset}", "hydra.launcher.dry_run=true", f"hydra.run.dir={run_dir}"]
    )
    try:
        entry()
    except SystemExit as e:
        assert not e.code, f"the dry run exited {e.code}"
    return yaml.safe_load((run_dir / "jobset.yaml").read_text())


def _container(jobset: dict) -> dict:
    (pod_job,) = [j for j in jobset["spec"]["replicatedJobs"] if j["name"] == "pathways-head"]
    (c,) = [c for c in pod_job["template"]["spec"]["template"]["spec"]["containers"] if c["name"] == "rlexp"]
    return c


def _pod_env(container: dict, name: str, output_dir: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for e in container["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "fieldRef" in e.get("valueFrom", {}) and e["name"] == "PATHWAYS_HEAD":
            env[e["name"]] = f"{name}-pathways-head-0-0.{name}"  # the coordinator label's value
        else:
            assert e["valueFrom"]["secretKeyRef"]["optional"] is True, e  # only optional secrets are left out
    assert env.pop("JAX_PLATFORMS") == "proxy" and env.pop("RLEXP_PATHWAYS") == "1"
    assert json.loads(env.pop("RLEXP_PLAN"))["run_dir"] == env["RLEXP_OUTPUT_DIR"]
    assert env["RLEXP_IN_CLUSTER"] == "gke" and env["RLEXP_OUTPUT_DIR"].startswith("gs://")
    return {
        **env,
        "JAX_PLATFORMS": "cpu",
        "RLEXP_OUTPUT_DIR": str(output_dir),
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(output_dir.parent)),
        "HF_HUB_OFFLINE": "1",
    }


@pytest.mark.parametrize(
    ("preset", "family", "data", "extra", "chat"),
    [
        ("gemma4_e4b_omi2", "gemma4", "omi2", ["slice=cpu", "slice.mesh.tp=1", *GEMMA4_LAYERS], "gemma"),
        ("gpt_oss_20b_gsm8k", "gpt_oss", "gsm8k", ["slice=cpu", "trainer.max_prompt_tokens=768"], "harmony"),
        # the MoE recipes: experts routed on CPU, the script's own engine knobs left in the config
        ("gemma4_26b_a4b_omi2", "gemma4_moe", "omi2", ["slice=cpu", "model.num_layers=3"], "gemma"),
        ("qwen3_30b_a3b_omi2", "qwen3_moe", "omi2", ["slice=cpu", "profile.steps=0"], "chatml"),
    ],
)
def test_the_pods_command_trains_here(
    preset: str, family: str, data: str, extra: list[str], chat: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobset = _dry_run(preset, tmp_path / "dry", monkeypatch)
    name = jobset["metadata"]["name"]
    container = _container(jobset)
    assert container["command"] == ["python", "-m", "rlexp"]
    args = container["args"]
    assert args[0] == f"experiment={preset}" and args[-1] == "hydra.mode=RUN"
    (gs_out,) = [a for a in args if a.startswith("output_dir=")]
    assert gs_out.startswith("output_dir=gs://")

    out = tmp_path / "run"
    ckpt = _checkpoint(family, tmp_path / "ckpt", extra, monkeypatch)
    source = _omi2_file(tmp_path / "omi2_train_1M.jsonl") if data == "omi2" else _gsm8k_dir(tmp_path / "gsm8k")
    assert "engine: vllm" in (REPO / "conf/experiment" / f"{preset}.yaml").read_text()  # the seeds' engine
    swaps = [f"model={family}_tiny", "trainer.rollout.engine=vanilla",
             "trainer.rollout.async_rollout=false", f"model.path={ckpt}", "model.max_context=1024", f"dataset.source={source}",
             *SCALE, *extra]  # fmt: skip
    replay = [*[f"output_dir={out}" if a == gs_out else a for a in args], *swaps]
    pod_cwd = tmp_path / "pod"
    pod_cwd.mkdir()
    proc = run_rlexp(*replay, cwd=pod_cwd, env=_pod_env(container, name, out), timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["train"]["steps"] == 2, summary
    assert summary["run_name"] == jobset["metadata"]["name"]  # the preset's run_name, as the pod's JobSet name
    if data == "omi2":
        assert summary["data"]["skipped"].get("prompt_too_long", 0) >= 1  # the over-long prompts were filtered
    cost = summary["cost"]
    assert cost["actual"]["wall_seconds"] == pytest.approx(summary["train"]["wall_seconds"], abs=0.01)
    assert cost["estimate"]["slice"].startswith("cpu") and cost["actual"]["chips"] == 0
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps if "rewards/sum" in r] == [1, 2]
    assert "score/mean" in steps[1] and {"rewards/check_numbers/mean", "rewards/match_format_exactly/mean"} <= set(
        steps[1]
    )  # the seeds' reward stack and metric names
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["chat_template"]["name"] == chat
    assert config["trainer"]["rollout"]["env"] == {
        k: v
        for k, v in ((e["name"], e.get("value")) for e in container["env"])
        if k in config["trainer"]["rollout"]["env"]
    }  # the preset's process env was the pod's
