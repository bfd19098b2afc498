"""`trainer=opd`: on-policy distillation (Agarwal et al. 2024, "On-policy distillation of language models"; the
Qwen3 technical report; Thinking Machines' "On-policy distillation").

The student samples completions as in GRPO; a frozen teacher scores the sampled tokens, and each token's advantage
is A_t = log pi_teacher(y_t | ctx) - log pi_student(y_t | ctx), the negated per-token reverse KL of the sample. No
reward enters the loss (the reward functions still run: their metrics show what the student learns), no group
normalisation, no KL to a reference: the loss is Tunix's GRPO policy-gradient loss (importance ratio, clip
trainer.epsilon), which takes per-token [B, T] advantages as they are. metrics.jsonl's `opd/reverse_kl` is the
step's mean over completion tokens of log pi_student - log pi_teacher (an estimate of KL(student || teacher)).

How it sits on Tunix 0.1.7: the teacher is loaded in Tunix's REFERENCE role, so `RLCluster.get_ref_per_token_logps`
scores the rollout with it; the student's own log-probabilities come from `RLCluster.get_old_per_token_logps` (the
ones Tunix computed when trainer.num_iterations > 1). Both are public `RLCluster` methods; the one private name is
the learner's `_generate_and_compute_advantage`, wrapped per instance by the Tunix seam (rlexp.tunix.learners).

All of it is this module and conf/trainer/opd.yaml: its spec (`SPEC`) names its node (`trainer.opd`), its rules
(`check`: one-line ConfigErrors), the teacher as its model in the reference role (`teacher_model`, `load_teacher`;
the estimates count its weights and its forward pass), the student's own scoring pass, and `build_learner`.
Pure Python at import: JAX and Tunix are imported where a learner or teacher is built.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from rlexp.algorithms.grpo import check_groups, common_args
from rlexp.algorithms.registry import AlgorithmSpec, LearnerInputs, register
from rlexp.config.schema import ModelConfig, RlexpConfig, TrainerConfig
from rlexp.errors import ConfigError, RlexpError

KEY = "trainer.opd.teacher"
WHAT = "a run dir of `python -m rlexp`, <run dir>/checkpoints/actor/<step>, or a Hugging Face folder"
REVERSE_KL = "opd/reverse_kl"  # metrics.jsonl: mean of log pi_student - log pi_teacher over the step's tokens


# -- the teacher -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Teacher:
    """Where the teacher's weights come from: a Hugging Face folder, or a run's actor checkpoint over its model."""

    model: ModelConfig  # its architecture and base weights (a run's own model option)
    root: Path | None = None  # <run dir>/checkpoints/actor; None: the folder's weights as they are
    step: int | None = None
    lora: Any = None  # the run's trainer.lora: its checkpoint holds adapters over the base


def teacher_model(conf: RlexpConfig) -> Teacher:
    """The teacher trainer.opd.teacher names; a path that is neither a run nor a folder is refused in one line."""
    from rlexp.families.hf_config import model_config_from_hf, read_hf_config
    from rlexp.models.export import find_checkpoint, run_config

    path = conf.trainer.opd.teacher
    if not path:
        raise ConfigError(KEY, path, f"trainer=opd distils from a teacher: set it to {WHAT} (same tokenizer)")
    folder = Path(path).expanduser()
    if not folder.exists() and folder.parent.name != "actor":  # a missing step: find_checkpoint names those saved
        raise ConfigError(KEY, path, f"no such folder: give {WHAT}")
    try:
        if (folder / "config.json").is_file() and not (folder / ".hydra").is_dir():  # as `rlexp eval` tells them
            m = model_config_from_hf(read_hf_config(str(folder)), name=f"teacher:{folder.name}", path=str(folder))
            return Teacher(replace(m, dtype=conf.model.dtype, param_dtype=conf.model.param_dtype))
        run_dir, root, step = find_checkpoint(folder)
        run = run_config(run_dir)
    except RlexpError as err:  # the reason, after the path the message starts with
        hint = "" if folder.parent.name == "actor" else " (or give a Hugging Face folder)"
        raise ConfigError(KEY, path, str(err).split(": ", 1)[-1] + hint) from None
    return Teacher(run.model, root, step, run.trainer.lora)


def tokenizer_fingerprint(folder: Path) -> str | None:
    """What the token ids mean in a model folder: a hash of tokenizer.json's model (vocabulary, merges) and added
    tokens, or of tokenizer.model; None when the folder has neither."""
    tj, sp = folder / "tokenizer.json", folder / "tokenizer.model"
    if tj.is_file():
        data = json.loads(tj.read_bytes())
        text = json.dumps([data.get("model"), data.get("added_tokens")], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()
    return hashlib.sha256(sp.read_bytes()).hexdigest() if sp.is_file() else None


def check(conf: RlexpConfig) -> Teacher:
    """trainer=opd's rules, each a one-line ConfigError naming the key: a teacher that exists and shares the
    student's tokenizer and vocabulary, no KL term (another algorithm's keys are refused by the registry's shared
    rules). Reads the teacher's folder (no weights); returns the teacher."""
    from rlexp.models.loader import resolve_model_dir

    t = conf.trainer
    if t.beta:
        raise ConfigError("trainer.beta", t.beta, "OPD has no KL to a reference (the teacher takes its place): use 0")
    teacher = teacher_model(conf)
    if teacher.model.vocab_size != conf.model.vocab_size:
        raise ConfigError(
            KEY,
            t.opd.teacher,
            f"the teacher's vocabulary has {teacher.model.vocab_size} tokens, model.vocab_size={conf.model.vocab_size}:"
            " a teacher must share the student's tokenizer",
        )
    ours, theirs = resolve_model_dir(conf.model), resolve_model_dir(teacher.model)
    if ours.resolve() != theirs.resolve() and tokenizer_fingerprint(ours) != tokenizer_fingerprint(theirs):
        raise ConfigError(
            KEY,
            t.opd.teacher,
            f"its tokenizer ({theirs}) is not the student's ({ours}): the teacher scores the student's token ids, so "
            "it must share the student's tokenizer",
        )
    return teacher


def load_teacher(conf: RlexpConfig, mesh: Any) -> Any:
    """The teacher's nnx module on `mesh` (Tunix's REFERENCE role): its folder's weights, a run's actor checkpoint
    restored over them."""
    from rlexp.families.load import load_model

    teacher = teacher_model(conf)
    model = load_model(teacher.model, mesh)
    if teacher.root is None:
        return model
    from rlexp.models.export import restore_actor

    lora = teacher.lora.rank > 0
    if lora:
        from rlexp.models.lora import apply_lora

        model = apply_lora(model, teacher.lora, mesh, seed=0)  # the adapters' values come from the checkpoint
    restore_actor(model, teacher.root, teacher.step or 0, lora_only=lora)
    return model


# -- terms the estimates count ----------------------------------------------------------------------------------
def reference_model(conf: RlexpConfig) -> ModelConfig | None:
    """The teacher's option (its weights and forward pass are counted); None until trainer.opd.teacher is set."""
    return teacher_model(conf).model if conf.trainer.opd.teacher else None


def extra_forward_passes(t: TrainerConfig) -> float:
    """The student's own forward scoring its samples, counted whatever trainer.num_iterations (the GRPO count has
    no such pass); the teacher's forward is counted from its own size (`reference_model`)."""
    return 1.0


# -- the learner ---------------------------------------------------------------------------------------------------
def reverse_kl_advantages(teacher_logps: Any, student_logps: Any, mask: Any) -> Any:
    """Per-token advantages [B, T]: log pi_teacher - log pi_student on completion tokens, 0 on padding."""
    return (teacher_logps - student_logps) * mask


def reverse_kl(teacher_logps: Any, student_logps: Any, mask: Any) -> float:
    """The mean over completion tokens of log pi_student - log pi_teacher: the sampled KL(student || teacher)."""
    m = np.asarray(mask, dtype=np.float64)
    diff = np.asarray(student_logps, dtype=np.float64) - np.asarray(teacher_logps, dtype=np.float64)
    return float((diff * m).sum() / max(m.sum(), 1.0))


def algorithm_config(t: TrainerConfig) -> Any:
    """Tunix's GRPOConfig for OPD: beta 0 (no reference KL: Tunix then skips its own reference pass, which
    the teacher's scoring replaces), the clipped ratio over per-token advantages."""
    from tunix.rl.grpo.grpo_learner import GRPOConfig

    return GRPOConfig(**common_args(t), beta=0.0, loss_agg_mode=t.loss_agg_mode)


def build_learner(inputs: LearnerInputs) -> Any:
    """Tunix's GRPOLearner whose advantages are the teacher's per-token reverse KL (the cluster's reference model
    is the teacher)."""
    from tunix.rl.grpo.grpo_learner import GRPOLearner

    t = inputs.conf.trainer
    learner = GRPOLearner(inputs.cluster, algorithm_config(t), list(inputs.reward_fns), metric_fns=inputs.metric_fns)
    _distil(learner, t.micro_batch_size * t.num_generations if t.micro_batch_size else None, inputs.metric_key)
    return learner


def _distil(learner: Any, micro_batch: int | None, metric_key: Callable[[str], str]) -> None:
    """Each rollout's example keeps Tunix's rollout, masks and old log-probs, and gets the teacher's per-token
    advantages (through the Tunix seam's `rewrite_examples`, fingerprinted in rlexp.tunix.privates)."""
    from rlexp.tunix.learners import Step, rewrite_examples

    cluster = learner.rl_cluster

    def distil(example: Any, step: Step) -> Any:
        prompts, completions = example.prompt_ids, example.completion_ids
        teacher = cluster.get_ref_per_token_logps(
            prompt_tokens=prompts,
            completion_tokens=completions,
            pad_id=cluster.rollout.pad_id(),
            eos_id=cluster.rollout.eos_id(),
            micro_batch_size=micro_batch,
        )
        student = example.old_per_token_logps  # Tunix's, when trainer.num_iterations > 1
        if student is None:
            student = cluster.get_old_per_token_logps(prompts, completions, micro_batch_size=micro_batch)
        mask = example.completion_mask.astype(teacher.dtype)
        step.buffer({metric_key(REVERSE_KL): (reverse_kl(teacher, student, mask), np.mean)})
        return example.replace(advantages=reverse_kl_advantages(teacher, student, mask))

    rewrite_examples(learner, distil)


SPEC = register(
    AlgorithmSpec(
        name="opd",
        build_learner=build_learner,
        node="opd",
        reference_model=reference_model,
        load_reference=load_teacher,
        extra_forward_passes=extra_forward_passes,
        check_keys=check_groups,
        check=check,
    )
)
