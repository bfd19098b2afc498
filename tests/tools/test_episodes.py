"""Episodes on a scripted policy: which tokens the mask keeps, how turns, tool calls, errors and the budgets
end an episode, and what the conversation records. No JAX: the policy is a list of turns."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from rlexp.models.loader import load_tokenizer
from rlexp.train.episodes import EpisodeRunner
from tests.helpers import compose_conf

CALL = '<tool_call>{"name":"calculator","arguments":{"expression":"12+34+56"}}</tool_call>'


@pytest.fixture(scope="module")
def tokenizer():  # noqa: ANN201
    return load_tokenizer(compose_conf(["experiment=tools_demo"]).model)


def scripted(tokenizer, turns: list[str], turn_tokens: int):  # noqa: ANN001, ANN201
    """A generate() that answers every row with the next scripted turn, ending on <|im_end|> unless cut."""
    calls = []

    def generate(prompts, config):  # noqa: ANN001, ANN202
        calls.append((list(prompts), config))
        text = turns[min(len(calls) - 1, len(turns) - 1)]
        ids = tokenizer.encode(text, add_special_tokens=False)[: config.max_tokens_to_generate]
        return SimpleNamespace(
            text=[tokenizer.decode(ids)] * len(prompts),
            tokens=[np.array(ids)] * len(prompts),
            left_padded_prompt_tokens=np.zeros((len(prompts), config.max_prompt_length), np.int32),
        )

    return generate, calls


def runner(tokenizer, *overrides: str) -> EpisodeRunner:  # noqa: ANN001
    return EpisodeRunner(compose_conf(["experiment=tools_demo", *overrides]), tokenizer)


def config(width: int = 32):  # noqa: ANN201
    return SimpleNamespace(max_prompt_length=width, max_tokens_to_generate=96, eos_tokens=[2], seed=3)


def _replace(obj, **kw):  # noqa: ANN001, ANN202
    return SimpleNamespace(**{**vars(obj), **kw})


@pytest.fixture(autouse=True)
def _plain_replace(monkeypatch) -> None:  # noqa: ANN001
    import rlexp.train.episodes as episodes

    monkeypatch.setattr(episodes.dataclasses, "replace", _replace)


def test_a_tool_call_then_an_answer_masks_exactly_the_environment_text(tokenizer) -> None:  # noqa: ANN001
    r = runner(tokenizer)
    generate, calls = scripted(tokenizer, [CALL, "102"], r.turn_tokens)
    ep = r.run(["<|im_start|>user\n12+34+56=<|im_end|>\n<|im_start|>assistant\n"], generate, config())
    enc = lambda t: tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
    env = enc("\n<|im_start|>user\n<tool_response>\n102\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    expected = [*enc(CALL), tokenizer.eos_token_id, *env, *enc("102")]
    assert ep.tokens[0].tolist() == expected
    assert ep.mask[0].tolist() == [1] * (len(enc(CALL)) + 1) + [0] * len(env) + [1] * 3
    assert (ep.final, ep.turns, ep.tool_calls, ep.tool_errors, ep.truncated) == (["102"], [2], [1], [0], [False])
    assert [m["role"] for m in ep.conversations[0]] == ["assistant", "tool", "assistant"]
    assert ep.conversations[0][1]["content"] == "102"
    # the second turn sees the episode so far, in a prompt width rounded up to 16 tokens
    assert calls[1][0][0].endswith("<|im_start|>assistant\n")
    first = len(expected) - 3  # the call, its end token and the results
    assert calls[1][1].max_prompt_length == 32 + -(-first // 16) * 16 and calls[1][1].eos_tokens == [2]
    assert ep.stats() == {"agent/turns_mean": 2.0, "agent/tool_calls_mean": 1.0, "agent/tool_errors": 0.0,
                          "agent/tool_retries": 0.0, "agent/episodes_truncated": 0.0}  # fmt: skip


def test_max_turns_truncates_and_drops_the_last_results(tokenizer) -> None:  # noqa: ANN001
    r = runner(tokenizer, "agent.max_turns=1")
    ep = r.run(["p"], scripted(tokenizer, [CALL], r.turn_tokens)[0], config())
    assert ep.truncated == [True] and ep.tool_calls == [1]
    assert ep.mask[0].all() and len(ep.tokens[0]) == len(tokenizer.encode(CALL, add_special_tokens=False)) + 1


def test_a_malformed_call_is_answered_and_counted(tokenizer) -> None:  # noqa: ANN001
    r = runner(tokenizer)
    bad = '<tool_call>{"name":"calculator","arguments":{"expression":"1+"}}</tool_call>'
    broken = "<tool_call>{name:calculator}</tool_call>"
    ep = r.run(["p", "p"], scripted(tokenizer, [bad, "7"], r.turn_tokens)[0], config())
    assert ep.tool_errors == [1, 1] and "error: calculator" in ep.conversations[0][1]["content"]
    ep = r.run(["p"], scripted(tokenizer, [broken, "7"], r.turn_tokens)[0], config())
    assert ep.tool_errors == [1] and ep.tool_calls == [0]
    assert "malformed tool call JSON" in ep.conversations[0][1]["content"]


def test_the_token_budget_ends_an_episode_before_the_context_overflows(tokenizer) -> None:  # noqa: ANN001
    r = runner(tokenizer, "trainer.max_completion_tokens=70", "agent.max_turn_tokens=64")
    ep = r.run(["p"], scripted(tokenizer, [CALL, "102"], r.turn_tokens)[0], config())
    assert ep.truncated == [True] and len(ep.tokens[0]) <= 70
    assert ep.turns == [1]  # no room for the tool's results and another turn


def test_stats_of_several_batches_are_those_of_their_episodes(tokenizer) -> None:  # noqa: ANN001
    from rlexp.train.episodes import merged_stats

    r = runner(tokenizer)
    one = r.run(["p", "p"], scripted(tokenizer, [CALL, "102"], r.turn_tokens)[0], config())
    two = r.run(["p"], scripted(tokenizer, ["7"], r.turn_tokens)[0], config())
    stats = merged_stats([one.head(1), two])
    assert stats["agent/turns_mean"] == 1.5 and stats["agent/tool_calls_mean"] == 0.5
