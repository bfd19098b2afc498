"""Evaluation on the eval split: MaxText's eval (a sampling strategy, its passes and metrics) and pass@k / maj@k.

Two draws per eval (docs/eval.md):
- `trainer.eval_passes` completions per prompt with `trainer.eval_strategy`'s sampling (MaxText 0.2.5's
  `greedy` 0.01 / top-k 1 / top-p 1, `standard`, `liberal`; `trainer.eval_temperature/top_p/top_k` override),
  scored as MaxText does under `trainer.eval_mode`: accuracy, partial and format accuracy, mean reward,
  correct/total. `greedy_accuracy` is the first pass's accuracy.
- `trainer.eval_samples` completions per prompt at temperature 1 (top-p 1, no top-k): pass@k (unbiased) and
  maj@k for each k of `trainer.eval_k` (rlexp.config.values.eval_ks: by default each power of two up to
  eval_samples); `pass_at_1` is their mean correctness.
Seeds are fixed, so evals before and after training draw the same noise; the rollout config carries them to
every engine (Tunix's vanilla sampler and vLLM). Correct means the first reward function scores >=
`reward.correct_threshold` (unweighted); the mean reward combines all of them as training does. Rewards are
scored through training's accounting (`rlexp.rewards.compose.scored`): a raise, a non-finite value or one outside
the declared range is an errored value (NaN, never right), a warning names the share, and more than
`reward.max_error_ratio` of them stops the run in one line as a training step would, before any accuracy is
reported. The eval's reward accounting is its own: its values' statistics and a remote reward's calls, tokens and
latency (the judge's `drain_metrics()`) come back under the eval's keys (`rewards/<name>/...` in the result,
`eval/rewards/<name>/...` in metrics.jsonl), never in the next training step's.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from typing import Any

import numpy as np

from rlexp.config.schema import RlexpConfig
from rlexp.config.values import eval_ks
from rlexp.envs import task_pass_at_1
from rlexp.rewards import maxtext
from rlexp.rewards.compose import (
    WEIGHTED_MEAN,
    RewardSet,
    RewardStats,
    build_rewards,
    check_budget,
    declared_range,
    scored,
)
from rlexp.rewards.extract import as_number, extract_answer
from rlexp.train.eval_metrics import Scored, answer_of, sampled_metrics, strategy_metrics, within_ten_percent

log = logging.getLogger("rlexp.eval")
EVAL_SEED_OFFSET = 7919  # keeps eval noise independent of training rollouts
_MAXTEXT_FNS = ("check_numbers", "match_format_exactly", "match_format_approximately")


def eval_sampling(cfg: RlexpConfig) -> dict[str, Any]:
    """temperature, top_p, top_k of the strategy eval: the strategy's values, each overridden when set."""
    t = cfg.trainer
    s = getattr(t.eval_strategies, t.eval_strategy)
    top_k = t.eval_top_k if t.eval_top_k is not None else s.top_k
    return {
        "temperature": t.eval_temperature if t.eval_temperature is not None else s.temperature,
        "top_p": t.eval_top_p if t.eval_top_p is not None else s.top_p,
        # a top-k beyond the vocabulary keeps every token (liberal's 2000 on a small vocabulary)
        "top_k": min(top_k, cfg.model.vocab_size) if top_k else None,
    }


def strategy_rollout_config(cfg: RlexpConfig, base_rollout_config: Any, pass_index: int) -> Any:
    """The rollout config of one strategy pass: the eval sampling and a seed of its own."""
    seed = cfg.seed * 1_000_003 + EVAL_SEED_OFFSET + pass_index
    return dataclasses.replace(base_rollout_config, **eval_sampling(cfg), seed=seed)


class Scorer:
    """Scores completions with the run's rewards (their raw functions: no training statistics touched)."""

    def __init__(self, cfg: RlexpConfig, rewards: RewardSet) -> None:
        self.rewards, self.threshold = rewards, cfg.reward.correct_threshold
        self.stats, self.max_error_ratio = RewardStats(), cfg.reward.max_error_ratio
        self.fns = [
            scored(r.name, r.raw, self.stats, bounds=declared_range(cfg.reward, i))
            for i, r in enumerate(rewards.rewards)
        ]
        seed_fns = [f for f in cfg.reward.functions if f.fn in _MAXTEXT_FNS]
        kw = {k: v for f in seed_fns for k, v in f.kwargs.items()}
        self.seed_style = bool(seed_fns)
        self.tokens = {k: v for k, v in kw.items() if k in inspect.signature(maxtext.format_regex).parameters}
        self.format = maxtext.format_regex(**self.tokens) if self.seed_style else None

    def _answer(self, completion: str) -> str | None:
        if self.seed_style:
            keys = ("solution_start_token", "solution_end_token")
            return maxtext.extract_answer(completion, **{k: v for k, v in self.tokens.items() if k in keys})
        return answer_of(completion)

    def _formatted(self, completion: str) -> bool:
        if self.format is not None:
            return self.format.search(completion) is not None
        # no format reward: formatted = an answer the extractor finds, or a bare number
        return extract_answer(completion) is not None or as_number(completion.strip()) is not None

    def check_errors(self) -> dict[str, float]:
        """After an eval: over `reward.max_error_ratio` errored values stop the run in one line; fewer are said.
        Returns the eval's reward metrics (module docstring), drained from the stats and the rewards' own meters."""
        ratio = check_budget(self.stats, self.max_error_ratio, "eval's reward values")
        if ratio:
            last = "; ".join(f"{k}: {v}" for k, v in sorted(self.stats.last_error.items())) or "none"
            log.warning(
                "eval: %.0f%% of the reward values errored and count as wrong (last error: %s)", ratio * 100, last
            )
        out = self.stats.drain()
        out["rewards/error_ratio"] = ratio
        for r in self.rewards.rewards:  # the judge's eval calls: here, not in the next step's metrics
            own = getattr(r.raw, "drain_metrics", None)
            if callable(own):
                out.update({f"rewards/{r.name}/{k}": v for k, v in own().items()})
        return out

    def score(self, rows: list[dict[str, Any]], completions: list[str]) -> tuple[list[Scored], list[float]]:
        """Per completion: its flags, and its combined reward (NaN when a reward errored)."""
        prompts = [r["prompt"] for r in rows]
        fields = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}
        cols = [fn(prompts, completions, **fields) for fn in self.fns]  # errored: NaN, counted in self.stats
        first = cols[0]
        weights = [r.weight for r in self.rewards.rewards]
        totals = [sum(w * v for w, v in zip(weights, vals, strict=True)) for vals in zip(*cols, strict=True)]
        if self.rewards.combine in WEIGHTED_MEAN:
            totals = [max(-1.0, min(1.0, v / sum(weights))) for v in totals]
        scored = []
        for row, completion, value in zip(rows, completions, first, strict=True):
            answer = self._answer(completion)
            correct = bool(value >= self.threshold)  # NaN compares False
            partial = correct or within_ten_percent(answer, str(row.get("answer", "")))
            scored.append(Scored(correct, partial, self._formatted(completion), answer))
        return scored, totals


def evaluate(
    cluster: Any,
    rows: list[dict[str, Any]],
    cfg: RlexpConfig,
    base_rollout_config: Any,
    scorer: Scorer | None = None,
    kept: dict[str, Any] | None = None,
    episodes: Any = None,
) -> dict[str, float]:
    """The eval's metrics on `rows` (module docstring), the mean completion length (characters) and the share of
    first-pass completions cut by `trainer.max_completion_tokens`. `scorer`: the run's (built here when None);
    `kept` receives the first pass's completions under "completions". `episodes` (agent=tools: the run's
    rlexp.train.episodes runner): each completion is an episode, scored on its last model turn; cut = truncated."""
    t = cfg.trainer
    own = scorer is None
    if scorer is None:
        scorer = Scorer(cfg, build_rewards(cfg.reward, 1))
    try:
        prompts = [r["prompt"] for r in rows]
        passes, first_cut = [], None
        for p in range(t.eval_passes):
            texts, cut = generate_texts(
                cluster, prompts, strategy_rollout_config(cfg, base_rollout_config, p), episodes, rows
            )
            if first_cut is None:
                first_cut = cut
                if kept is not None:
                    kept["completions"] = list(texts)
            passes.append(scorer.score(rows, list(texts)))
        per_prompt = [[passes[p][0][i] for p in range(t.eval_passes)] for i in range(len(rows))]
        rewards = [v for _, totals in passes for v in totals if np.isfinite(v)]
        result = strategy_metrics(per_prompt, t.eval_mode, float(np.mean(rewards)) if rewards else 0.0)
        result["greedy_accuracy"] = float(np.mean([s.correct for s in passes[0][0]]))
        sampled_cfg = dataclasses.replace(base_rollout_config, temperature=1.0, top_p=1.0, top_k=None)
        rep_rows = [r for r in rows for _ in range(t.eval_samples)]
        rollout_rows = t.rollout_prompts() * t.num_generations
        parts: list[Any] = []  # agent=tools: the sampled chunks' episodes
        sampled = sample_in_chunks(
            cluster, [r["prompt"] for r in rep_rows], sampled_cfg, rollout_rows, cfg.seed, episodes, parts, rep_rows
        )
        flags, _ = scorer.score(rep_rows, sampled)
        n = t.eval_samples
        groups = [flags[i * n : (i + 1) * n] for i in range(len(rows))]
        result.update(sampled_metrics(groups, eval_ks(t.eval_k, n)))
        result.update(task_pass_at_1(rep_rows, [s.correct for s in flags]))  # env=...: <task>/pass_at_1
        result["mean_length"] = float(np.mean([len(c) for c in sampled]))
        # first-pass completions that used all of max_completion_tokens without ending: the budget cuts answers
        result["truncated"] = float(np.mean(first_cut))
        if episodes is not None:  # the sampled episodes' turns and tool use (agent/* of training, at eval)
            from rlexp.train.episodes import merged_stats

            down = episodes.tools.service_error("an eval")  # no eval made of a dead service's errors
            if down is not None:
                raise down

            result.update({k.replace("agent/", "agent_"): v for k, v in merged_stats(parts).items()})
        result.update(scorer.check_errors())
        return result
    finally:
        if own:
            scorer.rewards.close()


def generate_texts(
    cluster: Any, prompts: list[str], config: Any, episodes: Any = None, rows: list[Any] | None = None
) -> tuple[list[str], list[bool]]:
    """Completions of `prompts` (with `episodes`: each episode's last model turn; `rows`: each prompt's row, None
    for a top-up), and whether each used all of `trainer.max_completion_tokens` without ending (an episode:
    truncated by its budget or max_turns)."""
    if episodes is not None:
        ep = episodes.run(list(prompts), cluster.rollout.generate, config, rows)
        return ep.final, ep.truncated
    out = cluster.rollout.generate(prompts, config)
    return list(out.text), [len(tokens) >= config.max_tokens_to_generate for tokens in out.tokens]


def sample_in_chunks(
    cluster: Any,
    prompts: list[str],
    rollout_config: Any,
    rows: int,
    seed: int,
    episodes: Any = None,
    parts: list[Any] | None = None,
    fields: list[dict[str, Any]] | None = None,
) -> list[str]:
    """Completions of `prompts` sampled in calls of `rows` prompts, the training rollout's batch: with training's
    sampling settings (temperature 1, top-p 1 by default) these calls reuse its compiled prefill and decode
    programs instead of compiling a pair for the eval's size (2.4 s of a first run). The last call is topped up
    with repeats of its first prompt, whose completions are dropped; each call gets a seed of its own (the same
    in every eval of a run). Fewer prompts than `rows` go in one call of their own size. `fields`: the prompts'
    rows, which episodes reset to (env=openenv); a top-up's is None."""
    rows = max(1, min(rows, len(prompts)))
    out: list[str] = []
    for i, start in enumerate(range(0, len(prompts), rows)):
        chunk = prompts[start : start + rows]
        config = dataclasses.replace(rollout_config, seed=seed + EVAL_SEED_OFFSET + 1_000_003 * i)
        top_up = rows - len(chunk)
        given = None if fields is None else [*fields[start : start + len(chunk)], *[None] * top_up]
        texts, _ = generate_texts(cluster, chunk + [chunk[0]] * top_up, config, episodes, given)
        out.extend(texts[: len(chunk)])
        if episodes is not None and parts is not None:  # the call's episodes, less the top-up rows
            parts.append(episodes.last.head(len(chunk)))
    return out
