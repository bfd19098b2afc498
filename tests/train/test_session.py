"""The training session as `python -m rlexp` runs it: evals reuse their compiled programs, the sampled eval the
training rollout's."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import pty
import re
import select
import struct
import termios
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlexp.train.evaluate import EVAL_SEED_OFFSET, sample_in_chunks
from tests.helpers import SHORT, run_rlexp, start_rlexp


@pytest.fixture(scope="module")
def default_logger_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """One `python -m rlexp` run of SHORT with the default (wandb) logger, 5 eval samples per prompt, JAX logging
    each trace (JAX_LOG_COMPILES: logged at tracing, a warm compile cache or not) and `-X importtime`: (run dir,
    stdout, stderr). The traces and the wandb tests each read what they need of it."""
    run_dir = tmp_path_factory.mktemp("session") / "run"
    overrides = [o for o in SHORT if not o.startswith("logger=")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    out = run_rlexp(
        *overrides,
        "trainer.eval_samples=5",
        f"output_dir={run_dir}",
        f"hydra.run.dir={run_dir.parent / 'hydra'}",  # Hydra's records beside the run, not in the clone
        env={**env, "JAX_LOG_COMPILES": "1"},
        python=["-X", "importtime"],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return run_dir, out.stdout, out.stderr


@pytest.mark.slow
def test_evals_before_during_and_after_training_trace_each_program_once(
    default_logger_run: tuple[Path, str, str],
) -> None:
    """jit keys its traces on the active mesh context: an eval before training outside the actor mesh (which the
    mid-run evals run under) traced and loaded every eval program a second time at the first mid-run eval. The
    sampled eval (16 prompts x 5 = 80 completions) runs as two calls of the training rollout's 64 rows, the second
    topped up, so it compiles nothing of its own."""
    run_dir, stdout, stderr = default_logger_run
    log = stdout + stderr  # JAX's log lines go through Hydra's console handler (stdout)
    decodes = re.findall(r"Compiling jit\(_decode_fn\) with global shapes and types \((.*?)\)\. Argument", log)
    assert decodes, log[-2000:]
    batch_rows = sorted({re.findall(r"int32\[(\d+),", d)[0] for d in decodes}, key=int)
    # greedy eval (16 prompts) and training rollouts (8 prompts x 8), shared by the sampled eval; evals before, at
    # step 4 and after all hit the same two programs
    assert batch_rows == ["16", "64"], batch_rows
    assert len(decodes) == 2, f"{len(decodes)} decode traces for 2 shapes"
    evals = json.loads((run_dir / "evals.json").read_text())
    assert sorted(evals) == ["4", "after", "before"] and all(0 <= e["pass_at_1"] <= 1 for e in evals.values())
    assert evals["before"]["truncated"] == 0.0 and "rlexp: warning" not in stderr  # 4 tokens fit a+b answers


@pytest.mark.slow
def test_a_completion_budget_that_cuts_the_answers_is_named_before_the_first_step(tmp_path: Path) -> None:
    """One token cannot hold an answer and its end: the eval before training sees every greedy completion cut and
    the run says which key to raise before it trains on cut answers."""
    cmd = [*SHORT, "trainer.max_steps=2", "trainer.eval_every=2"]
    cmd += ["trainer.checkpoint_every=2", "trainer.max_completion_tokens=1", f"output_dir={tmp_path}"]
    cmd += [f"hydra.run.dir={tmp_path / 'hydra'}"]
    cmd += ["trainer.eval_samples=4"]  # 16 x 4: the sampled eval runs the rollout's programs, no pair of its own
    out = run_rlexp(*cmd)
    assert out.returncode == 0, out.stderr[-2000:]
    [warning] = [line for line in out.stderr.splitlines() if line.startswith("rlexp: warning")]
    assert warning.startswith("rlexp: warning: trainer.max_completion_tokens=1: 100% of the greedy eval's")
    assert out.stderr.index(warning) < out.stderr.index("rlexp: step 1/2")
    assert json.loads((tmp_path / "evals.json").read_text())["before"]["truncated"] == 1.0


@pytest.mark.slow
def test_the_default_wandb_logger_gets_every_row_from_its_own_process(
    default_logger_run: tuple[Path, str, str],
) -> None:
    """`python -m rlexp` logs to wandb (offline without a key) from the tracker's child process (the trainer
    itself never imports wandb): the run starts while the eval before training runs, and still receives every
    step's and every eval's row, then the summary."""
    run_dir, _, stderr = default_logger_run
    imported = {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}
    assert "jax" in imported and "wandb" not in imported  # -X importtime covers this process, not its children
    record = json.loads((run_dir / "wandb_run.json").read_text())
    assert record["mode"] == "offline" and not record["resumed"]
    [run_file] = (run_dir / "wandb").glob(f"offline-run-*-{record['id']}/run-{record['id']}.wandb")

    def complete(data: bytes) -> bool:
        # each history row carries its keys: every one of the 8 steps and the 3 evals (before, at 4, after), and
        # the objective that finish() writes to the run summary
        steps, evals = data.count(b"perf/step_time_sec"), data.count(b"eval/pass_at_1")
        return evals >= 3 and steps == 8 * evals // 3 and b"eval.after.pass_at_1" in data

    deadline = time.monotonic() + 30  # wandb's service process may still be writing when rlexp has exited
    while not complete(data := run_file.read_bytes()) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert complete(data), (data.count(b"perf/step_time_sec"), data.count(b"eval/pass_at_1"))


@pytest.mark.slow
def test_a_config_the_data_refuses_leaves_no_wandb_run_and_no_record(tmp_path: Path) -> None:
    """The data's checks run in the session (a file's row count is known only once read), after the tracker's
    process started importing wandb: the command fails in one line and the run dir holds nothing."""
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(20)))
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    args = ["dataset=jsonl", f"dataset.source={data}", "dataset.eval_size=4", "trainer.eval_prompts=4"]
    out = run_rlexp(*args, f"output_dir={run_dir}", f"hydra.run.dir={tmp_path}/hydra", env=env)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == [
        "rlexp: error: trainer.max_steps=300: the train split (19 rows x 1 epochs / batch 8) gives only 2 steps; "
        "lower max_steps or raise trainer.epochs"
    ]
    assert list(run_dir.iterdir()) == []  # no wandb/, wandb_run.json or config.yaml


def on_a_terminal(*args: str, timeout: float = 600) -> tuple[int, str]:
    """Run `python -m rlexp <args>` with stdin, stdout and stderr on a pseudo-terminal of 160 columns, as a user's shell does; its
    exit status and everything it drew."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # a new pty is 0 columns wide
    proc = start_rlexp(*args, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every end of the terminal's slave side is closed
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=30), out.decode(errors="replace")


@pytest.mark.slow
def test_a_terminal_shows_one_progress_bar_rlexps(tmp_path: Path) -> None:
    """Tunix's trainer drew a tqdm bar of its own ("Actor Training", with loss and perplexity) on a terminal,
    overwriting rlexp's bar line by line; the console's progress is rlexp's alone."""
    code, screen = on_a_terminal(*SHORT, f"output_dir={tmp_path}", f"hydra.run.dir={tmp_path / 'hydra'}")
    assert code == 0, screen[-3000:]
    assert "Actor Training" not in screen and "perplexity" not in screen
    assert "train: 100%" in screen and "8/8" in screen and "rlexp run tiny-arith-grpo: completed" in screen


@dataclasses.dataclass
class _Config:  # the rollout config's fields that sample_in_chunks sets and reads
    seed: int | None = None
    max_tokens_to_generate: int = 4


class _Rollout:
    """Tunix's rollout interface: generate(prompts, config) -> .text and .tokens, here one text per prompt naming
    prompt and seed, and one token each."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []  # (rows, seed)

    def generate(self, prompts, config):  # noqa: ANN001, ANN201
        self.calls.append((len(prompts), config.seed))
        return SimpleNamespace(text=[f"{p}@{config.seed}" for p in prompts], tokens=[[0] for _ in prompts])


def test_sampled_eval_chunks_keep_order_drop_the_top_up_and_seed_each_call() -> None:
    cluster = SimpleNamespace(rollout=_Rollout())
    prompts = [f"p{i}" for i in range(10)]
    out = sample_in_chunks(cluster, prompts, _Config(), rows=4, seed=3)
    seeds = [s for _, s in cluster.rollout.calls]
    assert [rows for rows, _ in cluster.rollout.calls] == [4, 4, 4]  # 10 prompts: the third call topped up with 2
    assert [o.split("@")[0] for o in out] == prompts
    assert len(set(seeds)) == 3 and seeds[0] == 3 + EVAL_SEED_OFFSET  # the first call keeps the single-call seed
    assert sample_in_chunks(SimpleNamespace(rollout=_Rollout()), prompts[:3], _Config(), 64, 3) == [
        f"p{i}@{3 + EVAL_SEED_OFFSET}" for i in range(3)
    ]
