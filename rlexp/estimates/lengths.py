"""The token lengths a run's memory and cost estimates take: its prompts, its completions and its turns.

By default they are the config's caps: `trainer.max_prompt_tokens`, `trainer.max_completion_tokens`, and with
agent=tools `agent.max_turns` turns of `agent.max_turn_tokens`. An environment knows better (rlexp.envs.lengths):
reasoning-gym's generated prompts are measured (the width the session pads them to, well under the cap for short
tasks), and an environment's turns are its own. The checks (rlexp.checks.run_lengths) pass them in; a call
without them gets the caps.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rlexp.config.schema import RlexpConfig

CAPS = "the config's caps"


@dataclasses.dataclass(frozen=True)
class Lengths:
    """Tokens of a run's sequences, as the estimates size them."""

    prompt: int  # every prompt is padded to this many tokens
    completion: int  # tokens a completion (an episode's turns and observations together) may take
    turns: int = 1  # model turns an episode may take; each turn samples every row of the batch
    turn: int = 0  # tokens one turn may generate (0: the whole completion)
    source: str = CAPS  # where the numbers come from

    def per_turn(self) -> int:
        return self.turn or self.completion

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def config_lengths(cfg: RlexpConfig) -> Lengths:
    """The config's caps (a run without an environment, or one whose environment says nothing)."""
    t, a = cfg.trainer, cfg.agent
    if a.kind != "tools":
        return Lengths(t.max_prompt_tokens, t.max_completion_tokens)
    return Lengths(t.max_prompt_tokens, t.max_completion_tokens, a.max_turns, a.max_turn_tokens or 0)


def of(cfg: RlexpConfig, lengths: Lengths | None) -> Lengths:
    return lengths if lengths is not None else config_lengths(cfg)
