"""DAPO as the paper has it: dynamic sampling (drop groups of equal rewards, refill, a cap on rounds) and overlong
shaping in tokens, through `python -m rlexp trainer=dapo` and on the learner's parts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlexp.algorithms import dapo
from rlexp.train.metrics import rlexp_metric_key
from tests.helpers import compose_conf, run_rlexp


def test_overlong_penalty_is_the_papers_formula() -> None:
    # L_max = 20, L_cache = 4: free up to 16 tokens, then -1/4 per token, -1 at the budget's end
    got = dapo.overlong_penalty([0, 16, 17, 18, 20], max_tokens=20, buffer_tokens=4, penalty=1.0)
    np.testing.assert_array_equal(got, [0.0, 0.0, -0.25, -0.5, -1.0])
    assert dapo.overlong_penalty([21], 20, 4, 0.5).tolist() == [-0.5]  # beyond L_max: -penalty


class _Cluster:
    """What the learner's parts use of Tunix's RLCluster: the last rollout's token counts and a metrics buffer."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths, self.metrics = lengths, []

    def completion_lengths(self) -> list[int]:
        return self.lengths

    def buffer_metrics(self, metrics: dict, mode: object) -> None:
        self.metrics.append(metrics)


class _Base:
    """A GRPO-family learner reduced to what the mixin overrides: rewards from a script, one row per completion."""

    def __init__(self, cluster: _Cluster, scripted: list[np.ndarray], g: int) -> None:
        self.rl_cluster, self.scripted = cluster, list(scripted)
        self.algo_config = type("Algo", (), {"num_generations": g})()
        self.calls: list[list[str]] = []

    def _compute_rewards(self, prompts: list, completions: list, mode: object, **kwargs: object) -> np.ndarray:
        return self.scripted.pop(0)

    def _generate_and_compute_advantage(self, training_input: dict, mode: object = None) -> object:
        from tunix.rl.common import TrainExample

        prompts = list(training_input["prompts"])
        self.calls.append(prompts)
        rewards = self._compute_rewards(prompts, prompts, mode)
        ids = np.array([[len(self.calls), i] for i in range(len(prompts))], np.int32)
        return TrainExample(ids, ids > -1, ids, ids > -1, None, np.asarray(rewards, np.float32), None)


def _learner(scripted: list, trainer_overrides: list[str], lengths: list[int], g: int = 2) -> object:
    t = compose_conf(["trainer=dapo", *trainer_overrides]).trainer
    refills = iter([{"prompts": np.array([f"r{i}a", f"r{i}b"]), "answer": np.array(["1", "2"])} for i in range(9)])
    cls = dapo.learner_class(_Base)
    return cls(_Cluster(lengths), scripted, g, trainer=t, refill=lambda: next(refills), metric_key=rlexp_metric_key)


def test_one_token_over_the_budget_is_penalised_by_the_formula_whatever_its_characters() -> None:
    # max_completion_tokens=10, buffer 4: free up to 6 tokens; 7 tokens are one over the budget: -1/4 x penalty
    over = ["x" * 500, "y"]  # 7 tokens of 500 characters, 6 tokens of one (a multi-character token)
    learner = _learner([np.array([1.0, 1.0])], ["trainer.max_completion_tokens=10", "trainer.dapo.overlong.buffer_tokens=4",
                                                "trainer.dapo.overlong.penalty=0.5"], lengths=[7, 6])  # fmt: skip
    rewards = learner._compute_rewards(["p", "p"], over, "train")
    assert rewards.tolist() == [1.0 - 0.5 / 4, 1.0]


@pytest.mark.slow  # imports Tunix: ~3-6 s
def test_dynamic_sampling_drops_equal_groups_refills_and_counts() -> None:
    from tunix.rl.rl_cluster import Mode

    # round 0: groups (1,1) and (0,1): one dropped; round 1 (refill): (0,0) dropped, (1,0) kept
    scripted = [np.array([1.0, 1.0, 0.0, 1.0]), np.array([0.0, 0.0, 1.0, 0.0])]
    learner = _learner(scripted, ["trainer.dapo.overlong.enabled=false"], lengths=[1] * 4)
    batch = {"prompts": np.array(["a", "a", "b", "b"]), "trajectory_ids": ["0_0", "0_1", "1_0", "1_1"]}
    out = learner._generate_and_compute_advantage(batch, Mode.TRAIN)
    assert learner.calls == [["a", "a", "b", "b"], ["r0a", "r0a", "r0b", "r0b"]]  # a same-shape batch refilled
    # kept: group 1 of round 0 (rows 2, 3), then group 1 of round 1; rows in order
    assert np.asarray(out.prompt_ids).tolist() == [[1, 2], [1, 3], [2, 2], [2, 3]]
    metrics = {k.split("/", 1)[1]: v[0] for m in learner.rl_cluster.metrics for k, v in m.items()}
    assert metrics["dynamic_sampling__dropped_groups"] == 2.0
    assert metrics["dynamic_sampling__resampled_groups"] == 2.0
    assert (metrics["dynamic_sampling__rounds"], metrics["dynamic_sampling__short_groups"]) == (1.0, 0.0)


@pytest.mark.slow  # imports Tunix: ~3-6 s
def test_dynamic_sampling_stops_at_its_cap_and_keeps_the_shape() -> None:
    from tunix.rl.rl_cluster import Mode

    scripted = [np.array([1.0, 1.0, 0.0, 1.0]), np.array([0.0, 0.0, 1.0, 1.0])]  # the refill is all equal too
    learner = _learner(
        scripted, ["trainer.dapo.overlong.enabled=false", "trainer.dapo.dynamic_sampling.max_rounds=1"], [1] * 4
    )
    out = learner._generate_and_compute_advantage({"prompts": np.array(["a", "a", "b", "b"])}, Mode.TRAIN)
    assert len(learner.calls) == 2  # one refill round, the cap
    # the varied group first, then the first round's dropped group fills the free place (zero advantage)
    assert np.asarray(out.prompt_ids).tolist() == [[1, 2], [1, 3], [1, 0], [1, 1]]
    metrics = {k.split("/", 1)[1]: v[0] for m in learner.rl_cluster.metrics for k, v in m.items()}
    assert metrics["dynamic_sampling__short_groups"] == 1.0 and metrics["dynamic_sampling__dropped_groups"] == 3.0


@pytest.mark.slow  # two commands: ~3 s
def test_cfg_job_shows_every_dapo_knob_and_no_kl_coefficient() -> None:
    proc = run_rlexp("trainer=dapo", "--cfg", "job", check=True)
    trainer = yaml.safe_load(proc.stdout)["trainer"]
    assert trainer["beta"] is None  # DAPO has no KL term: null, and any value is refused
    assert trainer["dapo"]["dynamic_sampling"] == {"enabled": True, "max_rounds": 3}
    assert trainer["dapo"]["overlong"] == {"enabled": True, "buffer_tokens": None, "penalty": 1.0}
    assert (trainer["dapo"]["epsilon_high"], trainer["loss_agg_mode"]) == (0.28, "token-mean")
    refused = run_rlexp("trainer=dapo", "trainer.beta=0.04", "--cfg", "job")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == ["rlexp: error: trainer.beta=0.04: dapo has no KL term; drop the key "
                                                   "(or pick trainer=grpo for a KL)"]  # fmt: skip


@pytest.mark.slow
def test_dapo_run_logs_dropped_and_resampled_groups(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    steps = ["trainer.max_steps=3", "trainer.eval_every=3", "trainer.checkpoint_every=3", "trainer.eval_prompts=16"]
    run_rlexp("trainer=dapo", *steps, "trainer.eval_samples=2", "logger=none", f"hydra.run.dir={run_dir}", check=True)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["step"] > 0]
    assert len(train) == 3
    for r in train:
        assert r["dynamic_sampling/dropped_groups"] >= 0 and r["dynamic_sampling/rounds"] <= 3
        assert r["rewards/overlong/mean"] <= 0
        assert r["kl"] == 0.0  # no KL term, no reference model
    # seed 0 drops one group at step 1 and refills it with one more batch of 8 prompts
    assert (train[0]["dynamic_sampling/dropped_groups"], train[0]["dynamic_sampling/resampled_groups"]) == (1.0, 8.0)
    assert sum(r["dynamic_sampling/dropped_groups"] for r in train) > 0
