"""The one table of Tunix 0.1.7's private names that rlexp reaches or overrides, each with the fingerprint of the
source it was written against, and the one check of them at a run's start.

A private is reached through the Tunix function that defines or reads it: `_pbar` lives in `PeftTrainer.train`,
`_compiled_prefill_fn` in `Sampler.__init__`, an overridden method is its own target. Each row's `Target` is that
function, fingerprinted as `rlexp.compat.patching` fingerprints a patched one (one mechanism, not two). `check`
checks the rows of what a run uses (its model family, algorithm, agent, perf patches) and fails in one line
naming the private and what to do. docs/tunix.md says, per row, what an upgrade to Tunix's main branch changes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlexp.compat import patching
from rlexp.config.schema import RlexpConfig
from rlexp.tunix.sampler import LEAN_SAMPLER, uses_lean_sampler

ALWAYS: Callable[[RlexpConfig], bool] = lambda conf: True  # noqa: E731


@dataclass(frozen=True)
class Private:
    """Private names of Tunix reached through one Tunix function (`owner`: "module:Class" or "module")."""

    names: tuple[str, ...]
    owner: str
    attr: str
    fingerprint: str
    seam: str  # the rlexp.tunix module that reaches them
    used: Callable[[RlexpConfig], bool] = ALWAYS
    off: str = patching.REINSTALL  # how a run goes without them
    patch: str = ""  # the perf patch that uses them (its `perf.patches` hint replaces `off`)

    def target(self) -> patching.Target:
        module, _, cls = self.owner.partition(":")
        owner: Any = importlib.import_module(module)
        for part in filter(None, cls.split(".")):
            owner = getattr(owner, part)
        return patching.Target(owner, self.attr, self.fingerprint)


def _family(name: str) -> Callable[[RlexpConfig], bool]:
    return lambda conf: conf.model.family == name


def _dapo(conf: RlexpConfig) -> bool:
    d = conf.trainer.dapo  # set only under trainer=dapo (rlexp.algorithms refuses them elsewhere)
    return d.dynamic_sampling.enabled or d.overlong.enabled


def _opd(conf: RlexpConfig) -> bool:
    return bool(conf.trainer.opd.teacher)  # set only under trainer=opd


def _correction(conf: RlexpConfig) -> bool:
    return conf.trainer.correction.mode != "none"


def _ahead(conf: RlexpConfig) -> bool:
    return conf.trainer.off_policy.max_staleness > 0  # bounded staleness (rlexp.tunix.ahead)


PEFT = "tunix.sft.peft_trainer:PeftTrainer"
CLUSTER = "tunix.rl.rl_cluster:RLCluster"
SAMPLER = "tunix.generate.sampler:Sampler"
GRPO = "tunix.rl.grpo.grpo_learner:GRPOLearner"
DAPO_OFF = "set trainer.dapo.dynamic_sampling.enabled=false trainer.dapo.overlong.enabled=false"

PRIVATES: tuple[Private, ...] = (
    # checkpoint key mappings of Hugging Face safetensors (rlexp.tunix.checkpoints)
    Private(("_get_key_and_transform_mapping",), "tunix.models.qwen3.params", "_get_key_and_transform_mapping",
            "b9b62c0b8bc8fbae", "checkpoints", _family("qwen3")),
    Private(("_stack_experts",), "tunix.models.qwen3.params", "_stack_experts", "d6ba00f52b357b67", "checkpoints",
            _family("qwen3")),
    Private(("_get_key_and_transform_mapping",), "tunix.models.llama3.params", "_get_key_and_transform_mapping",
            "23ab180f7e61052b", "checkpoints", _family("llama3")),
    Private(("_get_key_and_transform_mapping",), "tunix.models.gemma4.params_safetensors",
            "_get_key_and_transform_mapping", "8daaf6a11844c5a2", "checkpoints", _family("gemma4")),
    Private(("_make_preprocess_fn",), "tunix.models.gemma4.params_safetensors", "_make_preprocess_fn",
            "95d97c19a4e7d873", "checkpoints", _family("gemma4")),
    # the actor trainer (rlexp.tunix.trainer)
    Private(("_pbar",), PEFT, "train", "e6d950bfebbf8af5", "trainer"),
    Private(("_write_train_metrics",), PEFT, "_write_train_metrics", "e9fff3177e34c714", "trainer"),
    Private(("_restored_custom_metadata", "_lora_enabled", "_prof", "_iter_steps"), PEFT, "__init__",
            "3de055664407e5f9", "trainer"),
    Private(("_is_active",), "tunix.sft.profiler:Profiler", "maybe_activate", "889d62ba514f34d6", "trainer"),
    Private(("_is_active",), "tunix.sft.profiler:Profiler", "maybe_deactivate", "327487ccac238db0", "trainer"),
    # the cluster's metric buffers (rlexp.tunix.trainer)
    Private(("_buffered_train_metrics",), CLUSTER, "buffer_metrics", "078a93443d0e5488", "trainer"),
    Private(("_log_metrics",), CLUSTER, "_log_metrics", "f1d97b47111ecc6d", "trainer"),
    # the lean sampler, perf.patches=lean_sampler (rlexp.tunix.sampler)
    Private(("_compiled_prefill_fn", "_compiled_decode_fn", "_flattened_transformer_state"), SAMPLER, "__init__",
            "2ed5a18557dc9c9c", "sampler", uses_lean_sampler, patch=LEAN_SAMPLER),
    Private(("__call__",), SAMPLER, "__call__", "8e2f24e15975edd2", "sampler", uses_lean_sampler, patch=LEAN_SAMPLER),
    Private(("init_sample_state",), SAMPLER, "init_sample_state", "a338ceec64ad3839", "sampler", uses_lean_sampler,
            patch=LEAN_SAMPLER),
    # the lean rollout sets its sampler where Tunix's rollout keeps it; summary.json's perf.classes reads it
    Private(("_sampler",), "tunix.rl.rollout.vanilla_rollout:VanillaRollout", "__init__", "4609dba1af382c5f",
            "sampler"),
    # DAPO's overrides (rlexp.tunix.learners, rlexp.algorithms.dapo), agent=tools' episodes (rlexp.train.episodes)
    # on-policy distillation's advantages (rlexp.algorithms.opd) and the mismatch correction's weights
    # (rlexp.algorithms.correction)
    # the data fast-forward of a resumed run, counted in rollouts when trainer.num_iterations > 1
    Private(("_last_iter_step",), "tunix.rl.rl_learner:RLLearner", "__init__", "a1b9a65345a977b1", "learners",
            lambda c: c.trainer.num_iterations > 1, "run trainer.num_iterations=1, or " + patching.REINSTALL),
    Private(("_last_iter_step", "_iter_steps"), "tunix.rl.rl_learner:RLLearner", "_prepare_data", "0ad2bc95d080c2f0",
            "learners", lambda c: c.trainer.num_iterations > 1, "run trainer.num_iterations=1, or " + patching.REINSTALL),
    Private(("_compute_rewards",), "tunix.rl.rl_learner:RLLearner", "_compute_rewards", "d7ed414ff1072cf1",
            "learners", lambda c: _dapo(c) or _ahead(c),
            "run trainer.off_policy.max_staleness=0 and " + DAPO_OFF + ", or " + patching.REINSTALL),
    Private(("_generate_and_compute_advantage",), GRPO, "_generate_and_compute_advantage", "755b193e95aeeedb",
            "learners", lambda c: _dapo(c) or _opd(c) or _correction(c) or _ahead(c) or c.agent.kind == "tools",
            "run agent=single_turn, trainer.correction.mode=none, trainer.off_policy.max_staleness=0 and " + DAPO_OFF
            + " (trainer=opd needs it), or " + patching.REINSTALL),
    # bounded staleness: a step's batch sampled ahead gets the trajectory ids Tunix's data pass would give it
    # (rlexp.tunix.ahead)
    Private(("_compute_trajectory_ids",), GRPO, "_compute_trajectory_ids", "02329e1b4c06888f", "ahead", _ahead,
            "run trainer.off_policy.max_staleness=0, or " + patching.REINSTALL),
)  # fmt: skip


def names() -> set[str]:
    """Every private name of Tunix the seam reaches or overrides, and the private functions whose source is
    fingerprinted because they read what the seam sets (RLLearner._prepare_data reads `_last_iter_step`)."""
    return {n for p in PRIVATES for n in p.names} | {p.attr for p in PRIVATES if p.attr.startswith("_")}


def check(conf: RlexpConfig) -> None:
    """Raise PatchGuardError unless every private this run uses is the source rlexp was written against."""
    from rlexp.perf import off_hint

    for p in PRIVATES:
        if not p.used(conf):
            continue
        if p.patch:
            patching.check(p.patch, [p.target()], off_hint(p.patch, conf.perf.patches), key=patching.PERF_KEY)
        else:
            patching.check(",".join(p.names), [p.target()], p.off, key="tunix private")
