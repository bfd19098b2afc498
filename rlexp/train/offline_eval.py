"""Evaluate a checkpoint after its run (`python -m rlexp.eval`): a run's newest or chosen step, or an exported
Hugging Face folder, on any dataset option's eval split with the run's templates and rewards.

The config is the run's own (`.hydra/config.yaml`) with the command's overrides on top: `group=option` takes that
group from conf/ (`dataset=gsm8k`), `a.b=value` sets one key. A Hugging Face folder has no run: conf/'s default
config with the overrides, and `model.path` the folder. The eval is the run's (rlexp.train.evaluate) on one
device; the result goes to `<run dir>/eval/<name>.json` (a folder: `<folder>/eval/`), or `--out`. Its `metrics`
hold pass@k and maj@k for each k of `eval_k` (docs/eval.md); each of its `rows` holds the rendered prompt, so
another tool can ask the model the same question.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlexp import storage
from rlexp.checks import check_rules
from rlexp.config.load import compose, to_config
from rlexp.config.schema import GROUP_SCHEMAS, RlexpConfig
from rlexp.config.values import eval_ks
from rlexp.errors import ConfigError, RlexpError

log = logging.getLogger(__name__)
_ROOT_KEYS = {f.name for f in fields(RlexpConfig)} - set(GROUP_SCHEMAS)  # seed, run_name, ...


def find_target(target: str, step: int | None) -> tuple[Path | None, Path | None, int | None, Path | None]:
    """(run dir, actor checkpoint root, step, Hugging Face folder) of the command's target."""
    from rlexp.models.export import find_checkpoint

    path = Path(target).expanduser()
    if (path / "config.json").is_file() and not (path / ".hydra").is_dir():
        if step is not None:
            raise RlexpError(f"{target}: a Hugging Face folder has no steps; drop the step {step}")
        return None, None, None, path
    if path.is_dir() and not (path / ".hydra" / "config.yaml").is_file() and path.parent.name != "actor":
        raise RlexpError(f"{target}: neither a run dir (.hydra/config.yaml) nor a Hugging Face folder (config.json)")
    if step is not None:
        path = path / "checkpoints" / "actor" / str(step)
    run_dir, root, found = find_checkpoint(path)
    return run_dir, root, found, None


def split_overrides(overrides: list[str]) -> tuple[list[str], list[str]]:
    """(group choices, dotted keys); anything else is refused in one line."""
    groups, keys = [], []
    for o in overrides:
        key, eq, _ = o.partition("=")
        if not eq or not key:
            raise ConfigError(o, None, "give overrides as group=option or a.b=value")
        if key in GROUP_SCHEMAS:
            groups.append(o)
        elif "." in key or key in _ROOT_KEYS:
            keys.append(o)
        else:
            raise ConfigError(key, o, f"choose a group of {', '.join(sorted(GROUP_SCHEMAS))} or set a dotted key")
    return groups, keys


def eval_config(run_dir: Path | None, hf_dir: Path | None, overrides: list[str]) -> RlexpConfig:
    groups, keys = split_overrides(overrides)
    if run_dir is None:
        cfg: DictConfig = compose([*groups, *keys, f"model.path={hf_dir}"])
    else:
        from rlexp.models.export import recorded_config

        cfg = recorded_config(run_dir)  # a damaged .hydra/config.yaml: one line naming it
        fresh = compose(groups) if groups else None
        for g in groups:
            name = g.partition("=")[0]
            cfg[name] = fresh[name]  # type: ignore[index]
        cfg = OmegaConf.merge(OmegaConf.structured(RlexpConfig), cfg)  # type: ignore[assignment]
        # keys as Hydra sets them (list items by index: reward.functions.0.kwargs.model=...), not from_dotlist's
        # merge, which refused an index into a list with "Cannot merge DictConfig with ListConfig"
        from hydra.core.override_parser.overrides_parser import OverridesParser

        from rlexp.compat.hydra import apply_value_overrides

        apply_value_overrides(OverridesParser.create().parse_overrides(keys), cfg)
    from rlexp.envs import resolve

    conf = resolve(to_config(cfg))
    check_rules(conf)
    return conf


def eval_rows(conf: RlexpConfig, tokenizer: Any) -> list[dict[str, Any]]:
    from rlexp.data.templates import render_splits
    from rlexp.envs import (
        load_rows,
        tools_prompt,  # env=class: the class's tools
    )

    splits = render_splits(
        load_rows(conf),  # the dataset's rows, or the env's
        conf.data_template,
        conf.chat_template,
        tokenizer,
        conf.trainer.max_prompt_tokens,
        tools_prompt(conf),
    )
    if not splits.eval:
        raise ConfigError(
            "dataset",
            conf.dataset.name,
            "has no eval rows: set dataset.eval_split, dataset.eval_source or dataset.eval_fraction > 0",
        )
    return splits.eval[: conf.trainer.eval_prompts]


def load_policy(conf: RlexpConfig, root: Path | None, step: int | None) -> Any:
    """The model to evaluate: the base (or exported) weights, the actor checkpoint restored over them."""
    from rlexp.families.load import load_model

    model = load_model(conf.model, None)
    if root is None:
        return model
    from rlexp.models.export import restore_actor

    lora = conf.trainer.lora
    if lora.rank > 0:
        from rlexp.models.lora import apply_lora

        model = apply_lora(model, lora, None, seed=conf.seed)
    restore_actor(model, root, step or 0, lora_only=lora.rank > 0, other_step=_other_step(root))
    return model


def _other_step(root: Path) -> str:
    """The fix when a step cannot be restored: evaluate another one (`{steps}`: the steps saved besides it)."""
    return f"evaluate another step: rlexp eval {root.parent.parent} <step> (saved: {{steps}})"


def check_restorable(root: Path, step: int) -> None:
    """A damaged checkpoint step named before any weights load; the fix names the other saved steps."""
    from rlexp.train.checkpoints import check_restorable as check

    check(root, step, _other_step(root))


def output_path(out: str | None, run_dir: Path | None, hf_dir: Path | None, name: str) -> str:
    if out and out.endswith(".json"):
        return out
    base = out or str((run_dir or hf_dir) / "eval")  # type: ignore[operator]
    return storage.join(base, f"{name}.json")


def _episodes(conf: RlexpConfig, tokenizer: Any, rows: list[dict[str, Any]]) -> Any:
    """The run's episode runner where its rollouts are episodes of turns (agent=tools; env=class and env=openenv,
    whose tools are their own): the eval samples and scores them as the run's own evals did, else None."""
    if conf.agent.kind != "tools":
        return None
    from rlexp.envs import toolbox
    from rlexp.train.episodes import EpisodeRunner

    return EpisodeRunner(conf, tokenizer, toolbox(conf, rows))


def run_offline_eval(
    target: str, step: int | None, overrides: list[str], out: str | None = None, name: str | None = None
) -> tuple[str, dict[str, Any]]:
    """Evaluate; returns (the json written, its record)."""
    from rlexp.data.templates import prompt_width
    from rlexp.models.loader import load_tokenizer
    from rlexp.rewards.compose import build_rewards
    from rlexp.train.cluster import rollout_config
    from rlexp.train.evaluate import Scorer, eval_sampling, evaluate
    from rlexp.tunix.sampler import eval_rollout_engine, rollout_classes

    folder = out if out and not out.endswith(".json") and "://" not in out else None
    if folder is not None:  # a folder the user names: rlexp's own (empty, or its marker), checked before anything
        storage.check_output_dir(folder)
    run_dir, root, step, hf_dir = find_target(target, step)
    if root is not None:
        check_restorable(root, step or 0)
    conf = eval_config(run_dir, hf_dir, overrides)
    name = name or f"{conf.dataset.name}-" + (f"step{step}" if hf_dir is None else hf_dir.name)
    path = output_path(out, run_dir, hf_dir, name)
    tokenizer = load_tokenizer(conf.model)
    rows = eval_rows(conf, tokenizer)
    started = time.perf_counter()
    model = load_policy(conf, root, step)
    width = prompt_width([r["prompt"] for r in rows], tokenizer, conf.trainer.max_prompt_tokens)
    rc = rollout_config(conf, tokenizer, width)
    engine = eval_rollout_engine(conf)(model, tokenizer, None, rc)
    scorer = Scorer(conf, build_rewards(conf.reward, 1))
    episodes = _episodes(conf, tokenizer, rows)  # agent=tools, env=class/openenv: each completion an episode
    kept: dict[str, Any] = {}
    try:
        metrics = evaluate(SimpleNamespace(rollout=engine), rows, conf, rc, scorer, kept, episodes=episodes)
    finally:
        scorer.rewards.close()
        if episodes is not None:
            episodes.tools.close()
    record = {
        "name": name,
        "target": str(hf_dir or run_dir),
        "step": step,
        "model": conf.model.name,
        "dataset": conf.dataset.name,
        "eval_strategy": conf.trainer.eval_strategy,
        "sampling": eval_sampling(conf),
        "eval_mode": conf.trainer.eval_mode,
        "eval_passes": conf.trainer.eval_passes,
        "eval_samples": conf.trainer.eval_samples,
        "eval_k": eval_ks(conf.trainer.eval_k, conf.trainer.eval_samples),  # the k of pass_at_<k>, maj_at_<k>
        "overrides": list(overrides),
        "seconds": round(time.perf_counter() - started, 2),
        "metrics": metrics,
        # each row's prompt as rendered (data and chat template applied): the exact string sampled from, which the
        # sampler tokenizes with the model's BOS in front; the completion is the first strategy pass's
        "rows": [
            {"id": r["id"], "prompt": r["prompt"], "answer": r.get("answer"), "completion": c}
            for r, c in zip(rows, kept["completions"], strict=True)
        ],
        "dataset_config": asdict(conf.dataset),
        "classes": rollout_classes(engine),  # Tunix's own sampler, or perf.patches' lean_sampler
    }
    if folder is not None:
        storage.claim_output_dir(folder, note="written by: rlexp eval\n")
    storage.write_json(path, record)
    return path, record
