"""Each validation rule: a config that breaks it (one-line error naming key and fix) and one that passes.

The rules run through `rlexp.checks.check_config`, the one call every entry point makes.
"""

from __future__ import annotations

import pytest

from rlexp.checks import check_config
from rlexp.config.derived import resolve_mesh
from rlexp.config.validate import steps_available
from rlexp.errors import ConfigError
from tests.helpers import compose_conf

# (overrides that break a rule, key the error must name, words of the fix, overrides that pass)
CASES = [
    (
        ["slice=cpu-4", "trainer.batch_size=3", "trainer.num_generations=2"],
        "trainer.batch_size",
        "divisible by the data-parallel size 4",
        ["slice=cpu-4", "trainer.batch_size=2", "trainer.num_generations=2"],
    ),
    (
        ["trainer.eval_every=10", "trainer.checkpoint_every=15"],
        "trainer.checkpoint_every",
        "multiple of trainer.eval_every",
        ["trainer.eval_every=10", "trainer.checkpoint_every=30"],
    ),
    (
        ["trainer.max_prompt_tokens=40", "trainer.max_completion_tokens=30"],
        "trainer.max_completion_tokens",
        "exceeds model tiny's context of 64",
        ["trainer.max_prompt_tokens=40", "trainer.max_completion_tokens=24"],
    ),
    (
        ["trainer.max_steps=600"],
        "trainer.max_steps",
        "gives only 512 steps",
        ["trainer.max_steps=600", "trainer.epochs=2"],
    ),
    (
        ["trainer.micro_batch_size=3"],
        "trainer.micro_batch_size",
        "must divide trainer.batch_size=8",
        ["trainer.micro_batch_size=4"],
    ),
    (
        ["slice=cpu-4", "trainer.micro_batch_size=1", "trainer.num_generations=2"],
        "trainer.micro_batch_size",
        "must be divisible by the data-parallel size 4",
        ["slice=cpu-4", "trainer.micro_batch_size=2", "trainer.num_generations=2"],
    ),
    (
        ["trainer.rollout_micro_batch_size=5"],
        "trainer.rollout_micro_batch_size",
        "must divide",
        ["trainer.rollout_micro_batch_size=2"],
    ),
    (["dataset=jsonl"], "dataset.source", "set the jsonl file", ["dataset=jsonl", "dataset.source=rows.jsonl"]),
    (
        ["model=qwen3_8b", "slice=h200", "trainer.max_prompt_tokens=512", "trainer.max_completion_tokens=512"],
        "slice",
        "does not fit; largest is",
        ["model=qwen3_0_6b", "slice=h200", "trainer.max_prompt_tokens=512", "trainer.max_completion_tokens=512"],
    ),
    (["trainer.num_generations=1"], "trainer.num_generations", ">= 2", ["trainer.num_generations=2"]),
    (["trainer.learning_rate=0"], "trainer.learning_rate", "> 0", ["trainer.learning_rate=1e-6"]),
    (["trainer.warmup_ratio=1.0"], "trainer.warmup_ratio", "[0, 1)", ["trainer.warmup_ratio=0.0"]),
    (["trainer.top_p=0"], "trainer.top_p", "(0, 1]", ["trainer.top_p=0.95"]),
    (["trainer.top_k=0"], "trainer.top_k", "null", ["trainer.top_k=50"]),
    (["trainer.epsilon=1.5"], "trainer.epsilon", "(0, 1)", ["trainer.epsilon=0.3"]),
    (["trainer.beta=-0.1"], "trainer.beta", ">= 0", ["trainer.beta=0"]),
    (["trainer=dapo", "trainer.beta=0.04"], "trainer.beta", "no KL term", ["trainer=dapo"]),
    (["trainer.beta=null"], "trainer.beta", "needs a KL coefficient", ["trainer.beta=0"]),
    (
        ["trainer=dapo", "trainer.dapo.dynamic_sampling.max_rounds=-1"],
        "trainer.dapo.dynamic_sampling.max_rounds",
        "use 0",
        ["trainer=dapo", "trainer.dapo.dynamic_sampling.max_rounds=0"],
    ),
    (
        ["trainer=dapo", "trainer.dapo.overlong.penalty=-1"],
        "trainer.dapo.overlong.penalty",
        ">= 0",
        ["trainer=dapo", "trainer.dapo.overlong.penalty=0.5"],
    ),
    (
        ["trainer.dapo.epsilon_high=0.28"],
        "trainer.dapo.epsilon_high",
        "set trainer=dapo",
        ["trainer=dapo", "trainer.dapo.epsilon_high=0.28"],
    ),
    (
        ["trainer=dapo", "trainer.dapo.epsilon_high=0.1"],
        "trainer.dapo.epsilon_high",
        ">= trainer.epsilon",
        ["trainer=dapo"],
    ),
    (["trainer.ppo.gamma=0.9"], "trainer.ppo.gamma", "ppo's key", ["trainer=ppo", "trainer.ppo.gamma=0.9"]),
    (["trainer.resume=sometimes"], "trainer.resume", "auto, never", ["trainer.resume=never"]),
    (["trainer.algorithm=reinforce"], "trainer.algorithm", "grpo, dapo, drgrpo, gspo, ppo", ["trainer.algorithm=gspo"]),
    (["trainer.eval_prompts=500"], "trainer.eval_prompts", "eval split has 128 rows", ["trainer.eval_prompts=128"]),
    (["slice.mesh.fsdp=2"], "slice.mesh.fsdp", "fsdp x tp must equal the 1 trainer devices", ["slice.mesh.fsdp=-1"]),
    (
        ["slice=cpu-4", "slice.mesh.tp=3"],
        "slice.mesh.tp",
        "must divide the 4 trainer devices",
        ["slice=cpu-4", "slice.mesh.tp=2", "slice.mesh.fsdp=-1"],
    ),
    (["model.dtype=float8"], "model.dtype", "float32, bfloat16", ["model.dtype=bfloat16"]),
    (["reward.max_error_ratio=1.5"], "reward.max_error_ratio", "[0, 1]", ["reward.max_error_ratio=0.5"]),
    (["reward.combine=product"], "reward.combine", "weighted_mean_clipped", ["reward.combine=weighted_mean_clipped"]),
    (
        ["reward.functions.0.fn=nope"],
        "reward.functions[0].fn",
        "arith_correct",
        ["reward.functions.0.fn=arith_correct"],
    ),
    (["dataset.loader=nope"], "dataset.loader", "arith", ["dataset.loader=arith"]),
    (["trainer.eval_k=8"], "trainer.eval_k", "[1, trainer.eval_samples=4]", ["trainer.eval_k=4"]),
    (["trainer.eval_k=[2,8]"], "trainer.eval_k", "or null for each power", ["trainer.eval_k=[2,4]"]),
    (
        ["trainer.eval_k={a: 1}"],  # a YAML value the command line's pre-check does not see
        "trainer.eval_k",
        "is not an integer; give null",
        ["trainer.eval_k=null"],
    ),
    (
        ["objective=eval.after.pass_at_8"],
        "objective",
        "the evals report k = 1, 2, 4; add 8 to trainer.eval_k",
        ["objective=eval.after.pass_at_8", "trainer.eval_samples=8"],
    ),
    (["objective=eval.after.maj_at_2", "trainer.eval_k=4"], "objective", "k = 1, 4", ["objective=eval.gain.maj_at_4"]),
    (["objective=eval.after.pass_at_x"], "objective", "eval.after.pass_at_<k>", ["objective=eval.before.maj_at_1"]),
]


@pytest.mark.parametrize(("bad", "key", "fix", "good"), CASES, ids=[c[1] + ":" + c[0][-1] for c in CASES])
def test_rule_fails_then_passes(bad: list[str], key: str, fix: str, good: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        check_config(compose_conf(bad))
    message = str(err.value)
    assert err.value.key == key
    assert message.startswith(f"{key}=") and fix in message and "\n" not in message
    check_config(compose_conf(good))


def test_steps_available_counts_epochs() -> None:
    conf = compose_conf(["trainer.batch_size=8", "trainer.epochs=3"])
    assert steps_available(conf, 100) == 36  # 12 full batches of 8 per epoch; the partial batch is dropped


def test_mesh_derives_fsdp_from_devices() -> None:
    assert resolve_mesh(compose_conf(["slice=cpu-4", "slice.mesh.fsdp=-1", "slice.mesh.tp=2"]).slice) == (2, 2)
    assert resolve_mesh(compose_conf(["slice=cpu-4"]).slice) == (4, 1)


def test_eval_k_reports_powers_of_two_by_default_one_k_for_an_int() -> None:
    """trainer.eval_k: null is each power of two up to eval_samples, an integer k is 1 and k, a list is 1 and
    its items (1 always: pass@1 is the sampled eval's headline)."""
    from rlexp.config.values import eval_ks

    assert compose_conf([]).trainer.eval_k is None
    assert [eval_ks(None, n) for n in (1, 2, 4, 6, 8)] == [[1], [1, 2], [1, 2, 4], [1, 2, 4], [1, 2, 4, 8]]
    assert eval_ks(4, 8) == [1, 4] and eval_ks(1, 4) == [1]
    assert eval_ks([4, 2], 4) == [1, 2, 4] and eval_ks([1, 3], 4) == [1, 3]
