"""Multi-turn episodes (agent=tools): model turns, tool calls and tool results, and the loss mask over them.

An episode starts from the rendered prompt. Each turn the policy samples at most `agent.max_turn_tokens`; the
turn's calls are parsed in the run's tool-call format (rlexp.tools.formats) and run (rlexp.tools.ToolBox), and
their results, with the next assistant header, are appended as environment text. The episode ends on a turn
without calls (the answer), a turn matching `agent.answer_pattern`, `agent.max_turns` turns, or the token
budget `trainer.max_completion_tokens` (both counted as truncated). With env=openenv a turn without calls is
the environment's action instead (`tools.act`): its observation follows as a user turn, environment text too,
and the episode ends when the environment says so (`done`, or a call's `tools.ended`). The budget binds before the next turn is
sampled, so prompt + episode never outgrow the KV cache or the model's context. A turn of the batch is opened
for every live episode (its model turn appended, what it needs of the environment noted), the environment
answers them (`_exchange`: all at once where the toolbox declares `concurrent`, env=openenv's sessions; else one
episode after another), then each is closed in episode order, so the episodes are the same either way.

Training sees the whole episode as one completion: the model's tokens with mask 1, the environment's (tool
results, turn headers) with mask 0. The mask replaces Tunix's pad-only completion mask, so the policy loss and
the KL to the reference model both leave tool outputs out; the reward scores the episode's last model turn.
Every row of the batch is sampled in every turn (finished ones from their prompt, the output dropped), so
turns keep one batch shape and prompt widths fall in buckets of 16 tokens: few compiled programs.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from rlexp.config.agent_rules import tool_format
from rlexp.config.schema import RlexpConfig
from rlexp.tools.formats import FORMATS, Format
from rlexp.tools.toolbox import ToolBox

BUCKET = 16  # prompt widths of later turns round up to this many tokens

Generate = Callable[[list[str], Any], Any]  # (prompt strings, RolloutConfig) -> RolloutOutput
Need = str | list[tuple[str, Any]]  # what a turn asks of the environment: the action (the turn), or its calls


@dataclasses.dataclass
class Pending:
    """A model turn appended to its episode, waiting for the environment's replies to `need`."""

    record: dict[str, Any]
    parsed: Any
    ended_on_stop: bool
    need: Need


@dataclasses.dataclass
class Episodes:
    final: list[str]  # each episode's last model turn: what the rewards score
    tokens: list[np.ndarray]  # everything after the prompt
    mask: list[np.ndarray]  # 1: written by the model, 0: by the environment
    prompt_tokens: np.ndarray  # left-padded prompts of the first turn
    turns: list[int]
    tool_calls: list[int]
    tool_errors: list[int]
    truncated: list[bool]  # ended by max_turns or the token budget
    conversations: list[list[dict[str, Any]]]
    tool_retries: list[int] = dataclasses.field(default_factory=list)  # a remote tool's retries (faults ridden out)

    def stats(self) -> dict[str, float]:
        return {
            "agent/turns_mean": float(np.mean(self.turns)),
            "agent/tool_calls_mean": float(np.mean(self.tool_calls)),
            "agent/tool_errors": float(np.sum(self.tool_errors)),
            "agent/tool_retries": float(np.sum(self.tool_retries)),
            "agent/episodes_truncated": float(np.mean(self.truncated)),
        }

    def head(self, n: int) -> Episodes:
        """The first n episodes (the prompt tokens left out)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "prompt_tokens"}
        return Episodes(**{k: v[:n] for k, v in fields.items()}, prompt_tokens=None)

    def padded_mask(self, width: int) -> np.ndarray:
        out = np.zeros((len(self.mask), width), dtype=bool)
        for row, m in zip(out, self.mask, strict=True):
            row[: len(m)] = m
        return out


def merged_stats(parts: list[Episodes]) -> dict[str, float]:
    """`Episodes.stats` over several batches of episodes, as one."""
    lists = (
        "final",
        "tokens",
        "mask",
        "turns",
        "tool_calls",
        "tool_errors",
        "tool_retries",
        "truncated",
        "conversations",
    )
    return Episodes(**{k: [x for p in parts for x in getattr(p, k)] for k in lists}, prompt_tokens=None).stats()


class EpisodeRunner:
    """Runs a batch of episodes through a `generate` function (the cluster's rollout)."""

    def __init__(self, cfg: RlexpConfig, tokenizer: Any, tools: ToolBox | None = None) -> None:
        a = cfg.agent
        self.cfg, self.tokenizer = cfg, tokenizer
        self.format: Format = FORMATS[tool_format(cfg)]
        self.tools = tools or ToolBox(a.tools, a.tool_timeout_s)
        self.budget = cfg.trainer.max_completion_tokens
        self.turn_tokens = a.max_turn_tokens or self.budget
        self.answer = re.compile(a.answer_pattern) if a.answer_pattern else None
        # a model turn ends on the format's turn-end token where the tokenizer has it as one token, else on EOS
        self.stop_id = self._single(self.format.turn_end, tokenizer.eos_token_id)
        self.call_stop = self._single(self.format.call_end, self.stop_id)  # harmony: <|call|> ends a turn with calls
        self.stop_ids = sorted({self.stop_id, self.call_stop, self._single("<|return|>", self.stop_id)})
        self.last: Episodes | None = None
        self.failure: Exception | None = None  # a tool over agent.tool_error_budget (`check_tools`)

    def check_tools(self) -> None:
        """After a training step's episodes: a tool's service that did not answer, a tool over
        `agent.tool_error_budget` or env=openenv's server gone
        sets `failure`, which the session's metric_fn hands to the step hook (the run stops there, before
        training on the step, with the last finished step's checkpoint)."""
        self.failure = self.failure or self.explain("a training step")

    def explain(self, what: str) -> Exception | None:
        """Why the last episodes failed, where their tools can say (a tool over budget, a server gone), else None."""
        return self.tools.over_budget(self.cfg.agent.tool_error_budget, what)

    def _single(self, marker: str, default: int) -> int:
        ids = self.encode(marker)
        return ids[0] if len(ids) == 1 else default

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _cut(self, text: str) -> str:
        ids = self.encode(text)
        limit = self.cfg.agent.max_tool_tokens
        return text if len(ids) <= limit else self.tokenizer.decode(ids[:limit])

    def run(self, prompts: list[str], generate: Generate, config: Any, rows: list[Any] | None = None) -> Episodes:
        """Episodes of `prompts`; `rows`: each prompt's row (its fields) where the caller has them, None for a
        top-up prompt whose completion is dropped (env=openenv resets each episode to its row's task)."""
        n = len(prompts)
        texts, tokens, masks = [""] * n, [[] for _ in range(n)], [[] for _ in range(n)]
        final, turns, calls, errors, retries = [""] * n, [0] * n, [0] * n, [0] * n, [0] * n
        truncated, active = [False] * n, [True] * n
        convs: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        prompt_tokens = None
        width = config.max_prompt_length
        self.tools.begin(prompts, rows)  # env=class, env=openenv: one instance or session an episode
        for turn in range(self.cfg.agent.max_turns):
            live = [i for i in range(n) if active[i]]
            if not live:
                break
            used = max(len(tokens[i]) for i in live)
            turn_cfg = dataclasses.replace(
                config,
                max_prompt_length=width + -(-used // BUCKET) * BUCKET,
                max_tokens_to_generate=self.turn_tokens,
                eos_tokens=self.stop_ids,
                seed=None if config.seed is None else int(config.seed) + 7 * turn,
            )
            out = generate([prompts[i] + texts[i] if active[i] else prompts[i] for i in range(n)], turn_cfg)
            if prompt_tokens is None:
                prompt_tokens = np.asarray(out.left_padded_prompt_tokens)
            opened = {
                i: self._open(i, out.text[i], list(out.tokens[i]), texts, tokens, masks, final, convs) for i in live
            }
            waiting = {i: t for i, t in opened.items() if isinstance(t, Pending)}
            replies = self._exchange({i: t.need for i, t in waiting.items()})
            for i in live:  # in index order, as one episode after another would
                t = opened[i]
                if isinstance(t, Pending):
                    said, retries[i] = replies[i][0], retries[i] + replies[i][1]
                    t = self._close(i, t, said, texts, tokens, masks, convs)
                turns[i] += 1
                calls[i] += len(t.get("tool_calls", []))
                errors[i] += t.pop("errors", 0)
                if t.pop("end", None) is not None:
                    active[i] = False
                    truncated[i] = bool(t.pop("truncated", False))
            for i in live:
                if active[i] and turn == self.cfg.agent.max_turns - 1:  # called tools in its last allowed turn
                    active[i], truncated[i] = False, True
        for i in range(n):  # tool results after the last turn the episode has are not part of it
            while masks[i] and not masks[i][-1]:
                masks[i].pop(), tokens[i].pop()
        self.tools.finish(final)
        self.last = Episodes(
            final=final,
            tokens=[np.asarray(t, dtype=np.int32) for t in tokens],
            mask=[np.asarray(m, dtype=bool) for m in masks],
            prompt_tokens=prompt_tokens,
            turns=turns,
            tool_calls=calls,
            tool_errors=errors,
            tool_retries=retries,
            truncated=truncated,
            conversations=convs,
        )
        return self.last

    def _exchange(self, needs: dict[int, Need]) -> dict[int, tuple[list[Any], int]]:
        """The environment's replies to the turn's episodes (`Need`): per episode, its replies (an action's: [the
        observation and whether the episode ended, or None]; calls': [(text, failed)] each) and its retries. A
        toolbox that declares `concurrent` answers all episodes at once (`exchange`: env=openenv's sessions, on one
        event loop); the others one episode after another (env=class's one child, registry tools' shared pool)."""
        if getattr(self.tools, "concurrent", False):
            return self.tools.exchange(needs)
        out = {}
        for i, need in needs.items():
            before = self.tools.retries  # the episode's calls run one after another, here
            if isinstance(need, str):
                said = [self.tools.act(need, i)]
            else:
                said = [self.tools.call(name, arguments, episode=i) for name, arguments in need]
            out[i] = (said, self.tools.retries - before)
        return out

    def _open(self, i, text, ids, texts, tokens, masks, final, convs) -> dict[str, Any] | Pending:  # noqa: ANN001
        """One model turn of episode i, appended: the turn's record where the episode ends here (with `end`,
        `truncated`, `errors` for the caller to take out), else what the turn needs of the environment."""
        room = self.budget - len(tokens[i])
        ended_on_stop = len(ids) < self.turn_tokens
        if len(ids) >= room:  # the budget ends the episode inside (or right at the end of) this turn
            ids, ended_on_stop = ids[:room], False
            text = self.tokenizer.decode(ids)
        final[i] = text
        record: dict[str, Any] = {"role": "assistant", "content": text}
        convs[i].append(record)
        parsed = self.format.parse(text + (self.format.call_end if ended_on_stop else ""))
        tokens[i] += ids
        masks[i] += [1] * len(ids)
        texts[i] += text
        if len(ids) == room:
            record.update(end="budget", truncated=bool(parsed.calls or parsed.errors), errors=len(parsed.errors))
            return record
        if self.answer is not None and self.answer.search(text):
            record.update(end="answer")
            return record
        # env=openenv: a turn without calls is the environment's action
        need = [(c.name, c.arguments) for c in parsed.calls] if parsed.calls or parsed.errors else text
        return Pending(record, parsed, ended_on_stop, need)

    def _close(self, i, t: Pending, said: list[Any], texts, tokens, masks, convs) -> dict[str, Any]:  # noqa: ANN001
        """Episode i's turn `t`, given the environment's replies: its results appended unless the episode ends."""
        record, parsed = t.record, t.parsed
        if isinstance(t.need, str):
            reply = said[0]
            if reply is None:  # the answer
                record.update(end="answer")
                return record
            convs[i].append({"role": "environment", "content": self._cut(reply[0])})
            if reply[1]:  # the environment ended the episode
                record.update(end="env")
                return record
            after = self.format.observation(convs[i][-1]["content"])
        else:
            after = self._results(i, parsed, said, record, convs)
            if self.tools.ended(i):  # env=openenv: a tool call ended the episode
                record.update(end="env")
                return record
        if t.ended_on_stop:  # the turn's end token, written by the model (the sampler drops it from the output)
            stop = self.call_stop if parsed.calls else self.stop_id
            tokens[i].append(stop), masks[i].append(1)
            texts[i] += self.tokenizer.decode([stop])
        env = self.encode(after)
        if len(tokens[i]) + len(env) >= self.budget:  # no room for another turn after the results
            record.update(end="budget", truncated=True)
            return record
        tokens[i] += env
        masks[i] += [0] * len(env)
        texts[i] += self.tokenizer.decode(env)
        return record

    def _results(self, i, parsed, said, record, convs) -> str:  # noqa: ANN001
        """A turn's calls' results (a malformed call is answered, so the model can retry): the text after it."""
        results = []
        for call, (out, failed) in zip(parsed.calls, said, strict=True):
            results.append((call.name, self._cut(out)))
            record.setdefault("tool_calls", []).append({"name": call.name, "arguments": call.arguments})
            convs[i].append({"role": "tool", "name": call.name, "content": results[-1][1], "error": failed})
            record["errors"] = record.get("errors", 0) + failed
        for message in parsed.errors:
            results.append(("error", message))
            record["errors"] = record.get("errors", 0) + 1
            convs[i].append({"role": "tool", "name": "error", "content": message, "error": True})
        return self.format.continuation(results)


def install(learner: Any, runner: EpisodeRunner) -> None:
    """Make Tunix's GRPO-family learner roll out episodes and train on them under the episode mask, through the
    seam (rlexp.tunix.learners.route_rollouts); the episodes' stats are logged with the step's metrics."""
    from rlexp.train.metrics import rlexp_metric_key
    from rlexp.tunix.learners import route_rollouts

    def run(prompts: list[str], turn: Any, config: Any, rows: list[Any] | None = None) -> Any:
        runner.tools.drain()  # the eval's calls are not this step's
        ep = runner.run(prompts, turn, config, rows)
        runner.check_tools()  # agent.tool_error_budget: a tool failing on the step's calls stops the run
        return ep

    def mask(completion_mask: np.ndarray, step: Any) -> np.ndarray:
        ep = runner.last
        step.buffer({rlexp_metric_key(k): (v, np.mean) for k, v in ep.stats().items()})
        return ep.padded_mask(completion_mask.shape[1]) & completion_mask

    route_rollouts(learner, run, mask)
