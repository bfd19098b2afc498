"""env=openenv trains end to end through the user's command: rlexp starts the guessing game (tests/envs/guess_server.py,
OpenEnv's own server package) from `env.command`, trains tiny_tools on its tasks, and stops it at the end. The
rewards are the server's (its log of every step is compared with samples.jsonl), the observations environment
turns; tasks on the fault splits (slower than env.timeout_s, a NaN reward, a malformed observation) are errored
rewards counted per task, never a number in the metrics; a server dying mid-run stops the run in one line with
its checkpoint."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.envs.guess import SERVER
from tests.helpers import run_rlexp, start_rlexp

RUN = ["env=openenv", "model=tiny_tools", "chat_template=chatml", "env.timeout_s=2", "trainer.max_prompt_tokens=48",
       "trainer.max_completion_tokens=96", "agent.max_turn_tokens=4", "trainer.batch_size=4",
       "trainer.num_generations=4", "trainer.eval_samples=1", "logger=none"]  # fmt: skip


def command(*flags: str) -> str:
    return f'"{sys.executable} {SERVER} --port {{port}} {" ".join(flags)}"'


def servers_running(tag: str) -> list[str]:
    """The game's servers still running whose command line holds `tag` (the test's own folder: other tests on the
    other pytest worker run servers of their own)."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if SERVER in line and "--port" in line and tag in line]


@pytest.mark.slow
def test_the_guessing_game_trains_with_the_servers_rewards_and_faults_counted_per_task(tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    cmd = command("--log", str(log), "--slow-s", "6")
    tasks = [f"+env.tasks.guess={{weight: 6, command: {cmd}}}"] + [  # one server: the same command
        f"+env.tasks.{name}={{command: {cmd}, split: {split}, eval_split: {split}}}"
        for name, split in (("slow", "slow"), ("noreward", "nanreward"), ("bad", "malformed"))
    ]
    run_rlexp(*RUN, *tasks, "env.train_size=36", "env.eval_size=9", "trainer.max_steps=3", "trainer.eval_every=3",
              "trainer.checkpoint_every=3", "trainer.eval_prompts=9", f"hydra.run.dir={tmp_path / 'run'}",
              check=True, timeout=900)  # fmt: skip
    assert not servers_running(str(tmp_path))  # stopped at the end
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for r in rows:  # an errored reward is counted, never a number
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float)), r
    steps = [r for r in rows if "rewards/openenv/mean" in r]
    assert len(steps) == 3 and all("env/guess/reward_mean" in r and "env/guess/latency_mean_s" in r for r in steps)
    assert sum(r.get(f"env/{t}/errors", 0) for r in steps for t in ("slow", "noreward", "bad")) > 0
    assert sum(r["rewards/openenv/non_finite"] for r in steps) == sum(
        r.get(f"env/{t}/errors", 0) for r in steps for t in ("slow", "noreward", "bad")
    )
    after = rows[-1]
    assert {k for k in after if k.endswith("/pass_at_1") and k.count("/") == 2} == {
        f"eval/{t}/pass_at_1" for t in ("guess", "slow", "noreward", "bad")
    }
    assert after["eval/slow/pass_at_1"] == after["eval/noreward/pass_at_1"] == after["eval/bad/pass_at_1"] == 0.0
    assert after["eval/rewards/openenv/non_finite"] >= 3
    # every scored guessing episode is the server's: its turns are the log's, its reward the log's last step's
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    checked = 0
    for s in samples:
        task, name = s["id"].split("/")
        if task in ("slow", "bad"):  # every step of theirs is a fault
            assert s["reward"] is None and ("longer than env.timeout_s" in s["errors"]["openenv"]) == (task == "slow")
            continue
        if task == "noreward":  # a fault where the server ends the episode (NaN), nothing before
            assert s["reward"] == 0.0 or "done without a reward" in s["errors"]["openenv"], s
            continue
        turns = s["conversation"]
        said = [
            (a["content"], o["content"]) for a, o in zip(turns, turns[1:], strict=False) if o["role"] == "environment"
        ]
        for guess, text in said:
            assert any(x["task"] == name and x["guess"] == guess and x["text"] == text for x in logged), (s, guess)
        ends = [x for x in logged if x["task"] == name and x["done"] and said and x["guess"] == said[-1][0]]
        assert s["reward"] == (ends[0]["reward"] if ends else 0.0), s
        checked += 1
    assert checked >= 8


@pytest.mark.slow
def test_a_server_dying_mid_run_stops_it_in_one_line_with_a_checkpoint(tmp_path: Path) -> None:
    die, run = tmp_path / "die", tmp_path / "run"
    # the evals of the test above (9 prompts: its compiled programs)
    proc = start_rlexp(*RUN, f"env.command={command('--die-when', str(die))}", "env.train_size=24", "env.eval_size=9",
                       "trainer.max_steps=4", "trainer.eval_every=1", "trainer.checkpoint_every=1",
                       "trainer.eval_prompts=9", f"hydra.run.dir={run}", stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while not (run / "metrics.jsonl").is_file() or '"step": 1' not in (run / "metrics.jsonl").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.5)
        die.touch()  # the server exits (code 3) at its next step
        _, err = proc.communicate(timeout=600)
    finally:
        proc.kill() if proc.poll() is None else None
    errors = [line for line in err.splitlines() if line.startswith("rlexp: error:")]
    assert proc.returncode == 1 and len(errors) == 1 and err.strip().endswith(errors[0]), err[-3000:]
    assert errors[0].startswith(f"rlexp: error: env.command={command('--die-when', str(die)).strip(chr(34))!r}: ")
    assert "the OpenEnv server exited with code 3" in errors[0] and "resume from the last checkpoint" in errors[0]
    saved = [p.name for p in (run / "checkpoints" / "actor").iterdir() if p.name.isdigit()]
    assert saved and json.loads((run / "summary.json").read_text())["status"] == "failed"
    assert not servers_running(str(tmp_path))
