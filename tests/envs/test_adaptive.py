"""env.adaptive: task weights move toward the tasks whose groups still differ, deterministically, and a resumed run
draws what the uninterrupted one drew. Off by default: the batches are the shuffled ones, untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlexp import envs
from rlexp.config.load import compose, to_config
from rlexp.config.schema import AdaptiveConfig
from rlexp.envs.adaptive import AdaptiveWeights, learnable_shares
from rlexp.errors import ConfigError
from rlexp.train.batches import batches, train_batches

ON = AdaptiveConfig(enabled=True, rate=0.2, floor=0.05)
ROWS = [{"task": t, "prompt": f"{t}{i}", "answer": str(i)} for t in ("solved", "never", "mixed") for i in range(30)]
GROUP = 4
REWARDS = {"solved": [1.0] * GROUP, "never": [0.0] * GROUP, "mixed": [0.0, 1.0, 1.0, 0.0]}


def play(weights: AdaptiveWeights, steps: int, seed_rows: list[dict] = ROWS) -> list[dict[str, float]]:
    """`steps` steps of a synchronous run: draw a batch, score each prompt's group, observe; the weights after each."""
    draws = weights.batches(seed_rows, 8, 1000)
    out = []
    for step in range(1, steps + 1):
        batch = next(draws)
        tasks = [r["task"] for r in batch for _ in range(GROUP)]
        rewards = [v for r in batch for v in REWARDS[r["task"]]]
        weights.observe(step, tasks, rewards, GROUP)
        out.append(weights.weights())
    return out


def test_learnable_share_counts_groups_whose_rewards_differ() -> None:
    tasks = ["a"] * 8 + ["b"] * 4
    rewards = [1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, float("nan")]
    assert learnable_shares(tasks, rewards, 4) == {"a": 0.5, "b": 0.0}


def test_weights_start_as_configured_and_move_to_the_task_still_learnable() -> None:
    w = AdaptiveWeights(ON, {"solved": 1.0, "never": 1.0, "mixed": 2.0}, seed=0)
    first = w.weights()
    assert first == pytest.approx({"solved": 0.2625, "never": 0.2625, "mixed": 0.475})  # 0.05 + 0.85 x b
    history = play(w, 30)
    last = history[-1]
    assert last["mixed"] > 0.85 and last["solved"] < 0.1 and last["never"] < 0.1
    assert min(last.values()) >= 0.05 and sum(last.values()) == pytest.approx(1.0)
    assert all(a["mixed"] <= b["mixed"] + 1e-12 for a, b in zip(history, history[1:], strict=False))


def test_every_task_at_zero_falls_back_to_the_configured_weights() -> None:
    w = AdaptiveWeights(ON, {"a": 1.0, "b": 3.0}, seed=0)
    w.restore({"step": 5, "shares": {"a": 0.0, "b": 0.0}})
    assert w.weights() == pytest.approx({"a": 0.05 + 0.9 * 0.25, "b": 0.05 + 0.9 * 0.75})


def test_batches_are_a_function_of_the_seed_and_follow_the_weights() -> None:
    def tasks(seed: int) -> list[list[str]]:
        w = AdaptiveWeights(ON, {"solved": 1.0, "never": 1.0, "mixed": 1.0}, seed=seed)
        play(w, 20)
        return [[r["prompt"] for r in w_batch] for w_batch in _replay(w, seed)]

    assert tasks(0) == tasks(0) and tasks(0) != tasks(1)
    w = AdaptiveWeights(ON, {"solved": 1.0, "never": 1.0, "mixed": 1.0}, seed=0)
    play(w, 40)
    drawn = [r["task"] for batch in _replay(w, 0, 50) for r in batch]
    assert drawn.count("mixed") / len(drawn) > 0.7  # the weights now favour it


def _replay(w: AdaptiveWeights, seed: int, n: int = 5) -> list[list[dict]]:
    """n further batches at the current weights."""
    draws = w.batches(ROWS, 8, n)
    return list(draws)


def test_restored_state_draws_the_batches_the_uninterrupted_run_drew() -> None:
    full = AdaptiveWeights(ON, {"solved": 1.0, "never": 1.0, "mixed": 1.0}, seed=3)
    play(full, 12)
    carried = json.loads(json.dumps(full.state(7)))  # as the checkpoint's metadata stores it
    resumed = AdaptiveWeights(ON, {"solved": 1.0, "never": 1.0, "mixed": 1.0}, seed=3)
    resumed.restore(carried)
    again = AdaptiveWeights(ON, {"solved": 1.0, "never": 1.0, "mixed": 1.0}, seed=3)
    play(again, 7)
    assert resumed.shares == again.shares  # bit for bit
    assert full.state(12) is not None and full.state(99) is None


def test_off_the_batches_are_the_seeded_shuffle() -> None:
    c = to_config(compose(["experiment=rg_demo"]))
    rows = [{"prompt": f"p{i}", "task": "t", "answer": "1"} for i in range(40)]
    a = [b["prompts"].tolist() for b in train_batches(c, rows)]
    b = [b["prompts"].tolist() for b in batches(rows, c.trainer.batch_size, c.trainer.epochs, c.seed)]
    assert a == b and envs.adaptive_weights(c) is None


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["env.adaptive.rate=0"], "env.adaptive.rate=0.0: use a share in (0, 1]"),
        (["env.adaptive.floor=0.4"], "env.adaptive.floor=0.4: use a weight >= 0 with floor x 3 tasks < 1"),
        (["trainer.num_generations=1"], "needs trainer.num_generations >= 2"),
        (["~env.tasks.products", "~env.tasks.letter_counting"], "needs two or more env.tasks"),
        (["env=class", "env.target=tests/envs/calc_env.py:CalcEnv"], "env=class has no tasks to weigh"),
    ],
)
def test_bad_adaptive_keys_are_refused_in_one_line(overrides: list[str], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        envs.check_env(to_config(compose(["experiment=rg_demo", "env.adaptive.enabled=true", *overrides])))
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_the_command_moves_weight_off_a_task_never_solved(tmp_path: Path) -> None:
    """rg_demo with chain_sum made impossible for tiny_rg (three 3-digit terms): its groups are all wrong, its
    share of the batches falls from a third to under a fifth. Logged per step in metrics.jsonl."""
    from tests.helpers import run_rlexp

    run_rlexp(
        "experiment=rg_demo",
        "logger=none",
        "trainer.max_steps=10",
        "trainer.eval_every=10",
        "trainer.checkpoint_every=10",
        "trainer.eval_prompts=12",
        "env.adaptive.enabled=true",
        "env.tasks.chain_sum.config={min_terms: 3, max_terms: 3, min_digits: 3, max_digits: 3}",
        f"hydra.run.dir={tmp_path}",
        check=True,
        timeout=600,
    )
    rows = {r["step"]: r for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())}
    weight = lambda step, task: rows[step][f"env/{task}/weight"]  # noqa: E731
    assert [weight(1, t) for t in ("chain_sum", "products", "letter_counting")] == pytest.approx([1 / 3] * 3)
    assert weight(10, "chain_sum") < 0.2 and weight(10, "products") + weight(10, "letter_counting") > 0.8
    assert all(rows[s].get("env/chain_sum/learnable", 0.0) == 0.0 for s in range(1, 11))
