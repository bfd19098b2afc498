"""Value checks every key gets before the cross-group rules of `validate.py`: finite numbers, known words,
ranges of keys no other rule reads early (optimizer betas, data fractions, preflight sizes, the objective).

Each raises `ConfigError` naming the key the user set (`slice.num_slices=0`, not the `slice.devices` it
derives). Pure Python: no JAX.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

from rlexp.compat.chat_jinja import compiled_chat_template
from rlexp.config.hardware import tpu_slice
from rlexp.config.schema import RlexpConfig
from rlexp.errors import ConfigError
from rlexp.perf import PATCHES as PERF_PATCHES

# The words a key accepts, where the schema types it as a plain string.
CHOICES: dict[str, tuple[str, ...]] = {
    "logger.mode": ("auto", "online", "offline", "disabled"),
    "sweep.direction": ("maximize", "minimize"),
    "dataset.format": ("auto", "jsonl", "json", "parquet"),
    "slice.kind": ("cpu", "gpu", "tpu"),
    "dataset.shuffle": ("rlexp", "maxtext"),
}
# summary.json keys with a number (rlexp.train.session writes them); `objective=` must name one.
EVAL_METRICS = ("pass_at_1", "greedy_accuracy", "accuracy", "partial_accuracy", "format_accuracy", "mean_reward")
# and the sampled eval's pass@k and maj@k, one pair for each k of trainer.eval_k (eval_ks)
SAMPLED_METRIC = re.compile(r"^(pass|maj)_at_([1-9][0-9]*)$")
EVAL_K_FIX = "give null (each power of two up to trainer.eval_samples), an integer k or a list of them, e.g. [1,4]"
SUMMARY_NUMBERS = (
    *(f"eval.{when}.{m}" for when in ("before", "after") for m in EVAL_METRICS),
    *(f"eval.gain.{m}" for m in EVAL_METRICS),
    "eval.before.step",
    "eval.after.step",
    "train.steps",
    "train.max_steps",
    "train.wall_seconds",
    "train.processes",
    "data.train_rows",
    "data.eval_rows",
)


def _walk(node: Any, prefix: str) -> Any:
    """(dotted key, value) of every leaf of a dataclass tree, list items as key[i]."""
    if dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            yield from _walk(getattr(node, f.name), f"{prefix}{f.name}.")
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, f"{prefix}{k}.")
    elif isinstance(node, list | tuple):
        for i, v in enumerate(node):
            yield from _walk(v, f"{prefix[:-1]}[{i}].")
    else:
        yield prefix[:-1], node


MODEL_SIZES = (
    "num_layers",
    "vocab_size",
    "embed_dim",
    "hidden_dim",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "max_context",
)


def check_finite(cfg: Any) -> None:
    """NaN or infinity in any number of the config (dict fields such as model.extra included)."""
    for key, value in _walk(cfg, ""):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(key, value, "use a finite number")


def _between(key: str, value: float, lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> None:
    below = value <= lo if lo_open else value < lo
    above = value >= hi if hi_open else value > hi
    if below or above:
        span = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise ConfigError(key, value, f"use a value in {span}")


def _at_least(key: str, value: int | None, lo: int, what: str = "") -> None:
    if value is not None and value < lo:
        raise ConfigError(key, value, what or f"use an integer >= {lo}")


def eval_ks(eval_k: Any, eval_samples: int) -> list[int]:
    """The k of pass@k and maj@k an eval reports, sorted, 1 always among them: for `trainer.eval_k` null (the
    default) each power of two up to `eval_samples` (4 samples: 1, 2, 4; 6 samples: 1, 2, 4); for an integer k,
    1 and k (`eval_k=4` means "report pass@4"); for a list, 1 and its items. Their range is validate.py's."""
    if eval_k is None:
        chosen = [2**i for i in range(max(eval_samples, 1).bit_length())]
    elif isinstance(eval_k, int):
        chosen = [eval_k]
    else:
        chosen = list(eval_k)
    return sorted({1, *chosen})


def eval_k_refusal(value: Any) -> str | None:
    """Why `trainer.eval_k` cannot hold `value` (None: it can): null, an integer or a non-empty list of integers.
    The schema types it `Any` (OmegaConf has no int-or-list type), so the command line's pre-check
    (rlexp.config.overrides) and check_values both ask this."""
    if value is None:
        return None
    items = list(value) if isinstance(value, Sequence) and not isinstance(value, str) else [value]
    if not items:
        return f"an empty list reports no k; {EVAL_K_FIX}"
    for k in items:
        if isinstance(k, bool) or not isinstance(k, int):
            return f"{str(k).lower() if isinstance(k, bool) else repr(k)} is not an integer; {EVAL_K_FIX}"
    return None


def eval_metric_names(metrics: Mapping[str, Any]) -> list[str]:
    """The eval numbers of `metrics` in the order a summary shows them: EVAL_METRICS, then each k's pass@k and
    maj@k by k."""
    sampled = [(int(m.group(2)), m.group(1) != "pass", k) for k in metrics if (m := SAMPLED_METRIC.match(k))]
    return [*EVAL_METRICS, *(k for _, _, k in sorted(sampled) if k not in EVAL_METRICS)]


def check_objective(objective: str, ks: Sequence[int] | None = None) -> None:
    """`objective=` must name a number summary.json will hold; checked before training, not after it. `ks`: the
    k the evals report (eval_ks), for `eval.after.pass_at_<k>` and its kin; None accepts any k."""
    where, _, metric = objective.partition(".")[2].partition(".")
    sampled = SAMPLED_METRIC.match(metric) if objective.startswith("eval.") else None
    if sampled and where in ("before", "after", "gain"):
        k = int(sampled.group(2))
        if ks is None or k in ks:
            return
        listing = ", ".join(map(str, ks))
        raise ConfigError(
            "objective",
            objective,
            f"the evals report k = {listing}; add {k} to trainer.eval_k (k <= trainer.eval_samples), or name one of "
            "those",
        )
    if objective not in SUMMARY_NUMBERS:
        near = difflib.get_close_matches(objective, SUMMARY_NUMBERS, n=1, cutoff=0.6)
        hint = f"did you mean {near[0]}? " if near else ""
        listing = ", ".join(SUMMARY_NUMBERS)
        raise ConfigError(
            "objective",
            objective,
            f"not a number summary.json holds; {hint}use one of {listing}, or eval.after.pass_at_<k> (maj_at_<k>) "
            "for a k of trainer.eval_k",
        )


def check_values(cfg: RlexpConfig) -> None:
    """Raise ConfigError on the first value outside what its key accepts."""
    check_finite(cfg)
    for key, allowed in CHOICES.items():
        group, name = key.split(".")
        value = getattr(getattr(cfg, group), name)
        if value not in allowed:
            raise ConfigError(key, value, f"use one of {', '.join(allowed)}")
    t, d, s, v = cfg.trainer, cfg.dataset, cfg.slice, cfg.validate
    for key, seed in (("seed", cfg.seed), ("dataset.seed", d.seed)):
        if not 0 <= seed < 2**32:  # numpy's and JAX's seeds: a traceback deep inside either
            raise ConfigError(key, seed, "use an integer in [0, 4294967295]")
    for name in MODEL_SIZES:  # a zero context or layer count would surface as another key's error (or a traceback)
        _at_least(
            f"model.{name}", getattr(cfg.model, name), 1, "use an integer >= 1: the checkpoint's config.json value"
        )
    _between("trainer.final_lr_ratio", t.final_lr_ratio, 0, 1)  # above 1 the cosine decay would rise
    _between("trainer.adam_b1", t.adam_b1, 0, 1, hi_open=True)
    _between("trainer.adam_b2", t.adam_b2, 0, 1, hi_open=True)
    if t.lora.rank > 0 and t.lora.alpha <= 0:
        raise ConfigError("trainer.lora.alpha", t.lora.alpha, "use a scale > 0 for the LoRA adapters")
    _between("dataset.eval_fraction", d.eval_fraction, 0, 1, lo_open=True, hi_open=True)
    if d.train_size == 0 or d.train_size < -1:
        raise ConfigError("dataset.train_size", d.train_size, "use a row count > 0, or -1 for all rows")
    _at_least("dataset.eval_size", d.eval_size, -1, "use a row count >= 0, or -1 for all rows")  # gsm8k, omi2: -1
    _at_least("slice.num_slices", s.num_slices, 1)  # before slice.devices, which is derived from it
    _at_least("slice.nodes", s.nodes, 1)
    _at_least("slice.gpus_per_node", s.gpus_per_node, 0)
    _at_least("slice.mesh.tp", s.mesh.tp, 1)
    check_tpu_table(s)
    if s.mesh.fsdp != -1 and s.mesh.fsdp < 1:
        raise ConfigError("slice.mesh.fsdp", s.mesh.fsdp, "use -1 (every device not used by tp) or an integer >= 1")
    if s.hbm_gib_per_device < 0:
        raise ConfigError("slice.hbm_gib_per_device", s.hbm_gib_per_device, "use 0 (unknown) or the GiB of one device")
    _at_least("validate.rows", v.rows, 1)
    _at_least("validate.generations", v.generations, 1)
    _at_least("validate.max_new_tokens", v.max_new_tokens, 1, "use null (trainer.max_completion_tokens) or >= 1")
    for i, f in enumerate(cfg.reward.functions):
        if len(f.range) != 2 or f.range[0] > f.range[1]:
            raise ConfigError(f"reward.functions[{i}].range", list(f.range), "use [low, high] with low <= high")
    price = cfg.cost.price_per_chip_hour  # here, not only in the cost estimate: a run must not start with it
    if price is not None and not price >= 0:
        raise ConfigError("cost.price_per_chip_hour", price, "use USD >= 0, or null for the list price")
    reason = eval_k_refusal(t.eval_k)
    if reason is not None:
        raise ConfigError("trainer.eval_k", t.eval_k, reason)
    check_objective(cfg.objective, eval_ks(t.eval_k, t.eval_samples))
    check_perf_patches(list(cfg.perf.patches))
    check_templates(cfg.data_template, cfg.chat_template)


def check_templates(data: Any, chat: Any) -> None:
    """The data template names only {question} and {system_prompt}, and the question (without it every row
    trains on the same prompt); a chat template is Jinja that compiles (its error line named)."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(data.template) if f is not None]
    except ValueError as err:
        raise ConfigError(
            "data_template.template", data.template, f"not a format string ({err}); write {{{{ }}}} for a brace"
        ) from None
    unknown = [f for f in fields if f not in ("question", "system_prompt")]
    if unknown:
        raise ConfigError(
            "data_template.template",
            data.template,
            f"may use only {{question}} and {{system_prompt}}, not {{{unknown[0]}}}",
        )
    if "question" not in fields:
        raise ConfigError(
            "data_template.template", data.template, "must hold {question}, where each row's question goes"
        )
    if chat.chat in (None, "tokenizer"):
        return
    from jinja2.exceptions import TemplateSyntaxError

    try:
        compiled_chat_template(chat.chat)
    except TemplateSyntaxError as err:
        raise ConfigError(
            "chat_template.chat",
            f"<{chat.name}>",
            f"Jinja syntax error on line {err.lineno} of the template: {err.message}; fix that line",
        ) from None


def check_tpu_table(s: Any) -> None:
    """A TPU slice's chips, chips per VM and VMs are its table's (conf/slice/v*.yaml derives them): an override
    of one would make the cost estimate and the JobSet disagree with the hardware."""
    if s.kind != "tpu" or not s.topology:
        return
    table = tpu_slice(s.name, s.topology)
    for name in ("chips", "chips_per_vm", "vms"):
        if getattr(s, name) != getattr(table, name):
            raise ConfigError(
                f"slice.{name}",
                getattr(s, name),
                f"{s.name} ({s.topology}) has {getattr(table, name)}; drop the override, or pick another "
                "slice= (or slice.topology=)",
            )


def check_perf_patches(names: list[str]) -> None:
    """perf.patches: names of rlexp.perf's patches, each once."""
    for name in names:
        if name not in PERF_PATCHES:
            near = difflib.get_close_matches(name, PERF_PATCHES, n=1, cutoff=0.6)
            hint = f"did you mean {near[0]}? " if near else ""
            raise ConfigError(
                "perf.patches", name, f"no such patch; {hint}use a list of {', '.join(PERF_PATCHES)}, or [] for none"
            )
    if len(set(names)) != len(names):
        raise ConfigError("perf.patches", names, "names a patch twice; list each once")
