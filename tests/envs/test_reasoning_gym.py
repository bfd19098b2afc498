"""env=reasoning_gym with reasoning-gym itself: its generators make the rows, its scorers score them (right and
wrong answers), bad task names and config keys end in one line before anything heavy loads."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from rlexp import envs
from rlexp.config.load import compose, to_config
from rlexp.errors import ConfigError
from rlexp.rewards.reasoning_gym import reasoning_gym_reward

TASKS = ["env=reasoning_gym", "env.system_prompt="]


def conf(*overrides: str):  # noqa: ANN201
    return envs.resolve(to_config(compose([*TASKS, *overrides])))


def test_rows_come_from_reasoning_gym_and_mix_the_tasks_by_weight() -> None:
    import reasoning_gym

    c = conf("env.train_size=40", "env.eval_size=9", "env.tasks.letter_counting.weight=2.0")
    rows = envs.load_rows(c)
    counts = {t: sum(r["task"] == t for r in rows.train) for t in ("chain_sum", "products", "letter_counting")}
    assert counts == {"chain_sum": 10, "products": 10, "letter_counting": 20}
    assert [r["task"] for r in rows.eval[:3]] == ["chain_sum", "products", "letter_counting"]  # interleaved
    first = json.loads(rows.train[0]["entry"])
    item = reasoning_gym.create_dataset(
        first["task"], **c.reward.functions[0].kwargs["tasks"][first["task"]], seed=first["seed"], size=first["size"]
    )[first["index"]]
    assert rows.train[0]["question"] == item["question"] and rows.train[0]["answer"] == item["answer"]
    train_ids = {(json.loads(r["entry"])["seed"]) for r in rows.train}
    assert train_ids == {c.env.seed} and {json.loads(r["entry"])["seed"] for r in rows.eval} == {c.env.seed + 1}
    assert c.dataset.train_size == 40 and c.reward.functions[0].fn == "reasoning_gym"


def test_each_task_scored_by_its_own_score_answer_on_right_and_wrong_answers() -> None:
    c = conf("env.train_size=30")
    rows = envs.load_rows(c).train[:6]
    score = reasoning_gym_reward(**c.reward.functions[0].kwargs)
    right = [f"<answer>{r['answer']}</answer>" for r in rows]
    wrong = [f"<answer>{r['answer']}9</answer>" for r in rows]
    untagged = [r["answer"] for r in rows]  # reasoning-gym's extract_answer needs the tags
    entries = [r["entry"] for r in rows]
    assert score([""] * 6, right, entry=entries) == [1.0] * 6
    assert all(v < 1.0 for v in score([""] * 6, wrong, entry=entries))
    assert score([""] * 6, untagged, entry=entries) == [0.0] * 6
    assert {r["task"] for r in rows} == {"chain_sum", "products", "letter_counting"}
    per_task = score.drain_tasks()
    assert set(per_task) == {"chain_sum", "products", "letter_counting"} and per_task["products"]["calls"] == 6


def test_a_broken_entry_is_an_errored_value_not_a_crash() -> None:
    score = reasoning_gym_reward(tasks={})
    [v] = score([""], ["<answer>1</answer>"], entry=['{"task": "no_such", "seed": 1, "size": 1, "index": 0}'])
    assert math.isnan(v) and "no_such" in score.last_error


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("+env.tasks.chain_sums={}", "env.tasks='chain_sums': no such reasoning-gym dataset; did you mean chain_sum?"),
        ("+env.tasks.products.config.max_digit=3", "did you mean max_digits?"),
        ("+env.tasks.products.config.seed=3", "rlexp sets it"),
        ("env.tasks.products.weight=0", "must be a number > 0"),
    ],
)
def test_unknown_task_or_config_key_is_refused_in_one_line(override: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        envs.check_env(to_config(compose([*TASKS, override])))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_the_command_refuses_an_unknown_task_before_jax_loads(tmp_path) -> None:  # noqa: ANN001
    code = (
        "import sys; from rlexp.cli import run; from rlexp.main import main; sys.argv=['rlexp', *sys.argv[1:]]; "
        "import atexit; atexit.register(lambda: print('JAX' if 'jax' in sys.modules else 'NOJAX', file=sys.stderr)); "
        "run(main)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "env=reasoning_gym", "+env.tasks.chain_summ={}", f"hydra.run.dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "did you mean chain_sum?" in lines[0] and lines[-1] == "NOJAX", proc.stderr


def test_task_metrics_and_pass_at_1_per_task() -> None:
    out = envs.task_metrics(["a", "a", "b", "b"], [1.0, 0.0, 1.0, float("nan")], [False, False, False, True], None)
    assert out == {"env/a/reward_mean": 0.5, "env/a/errors": 0.0, "env/b/reward_mean": 1.0, "env/b/errors": 1.0}
    rows = [{"task": "a"}, {"task": "a"}, {"task": "b"}]
    assert envs.task_pass_at_1(rows, [True, False, True]) == {"a/pass_at_1": 0.5, "b/pass_at_1": 1.0}


def test_a_task_whose_prompts_do_not_fit_is_refused_in_one_line(tmp_path) -> None:  # noqa: ANN001
    from tests.helpers import run_rlexp

    proc = run_rlexp(
        "experiment=rg_demo", "trainer.max_prompt_tokens=70", "logger=none", f"hydra.run.dir={tmp_path}", timeout=300
    )
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.startswith("rlexp: error")]
    assert lines == [
        "rlexp: error: trainer.max_prompt_tokens=70: every train prompt of task products is longer; raise it "
        "(model.max_context >= max_prompt_tokens + trainer.max_completion_tokens) or make "
        "env.tasks.products.config's questions shorter"
    ], proc.stderr[-2000:]
