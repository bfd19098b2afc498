"""env=openenv steps a turn's episodes all at once (`OpenEnvToolBox.exchange`): against the guessing game with a
latency on every step (tests/envs/guess_server.py `--step-latency-s`), a batch of 8 episodes takes a fraction of
the time the same toolbox takes stepping them one after another, and the episodes (tokens, masks, conversations,
counters, their metrics) and the server's rewards, faults included, are the same. The policy is scripted: no JAX.
A server dying mid-turn fails all the turn's steps at once, before its process is reaped: it is still named by its
exit code."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from rlexp.models.loader import load_tokenizer
from tests.envs.guess import free_port, running
from tests.envs.test_openenv import BASE, conf_of, play, prepare
from tests.helpers import compose_conf

LATENCY_S = 0.3
CALL = '<tool_call>{{"name": "{}", "arguments": {{"n": {}}}}}</tool_call>'
MCP = ["model.max_context=2048", "trainer.max_prompt_tokens=1024", "trainer.max_completion_tokens=256",
       "agent.max_turn_tokens=64"]  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer():  # noqa: ANN201
    return load_tokenizer(compose_conf(BASE).model)


def timed(conf, tokenizer, turns: list[str], concurrent: bool):  # noqa: ANN001, ANN201
    """8 episodes under scripted turns, the toolbox stepping them at once or one after another: (seconds, what
    the episodes and the reward said, the toolbox's per-tool counters)."""
    rows, box = prepare(conf, tokenizer, n=8)
    box.concurrent = concurrent
    start = time.monotonic()
    ep, values, stats = play(conf, tokenizer, rows, box, turns)
    seconds = time.monotonic() - start
    said = {
        "tokens": [t.tolist() for t in ep.tokens], "mask": [m.tolist() for m in ep.mask], "final": ep.final,
        "conversations": ep.conversations, "turns": ep.turns, "tool_calls": ep.tool_calls,
        "tool_errors": ep.tool_errors, "tool_retries": ep.tool_retries, "truncated": ep.truncated,
        "stats": ep.stats(), "values": [repr(v) for v in values], "non_finite": dict(stats.non_finite),
        "last_error": dict(stats.last_error),
    }  # fmt: skip
    return seconds, said, (box.counts, box.last_error)


@pytest.mark.slow  # a real OpenEnv server: seconds to start
@pytest.mark.parametrize(
    ("flags", "overrides", "turns"),
    [
        ([], ["+env.tasks.ok={url: '{url}', weight: 3}", "+env.tasks.bad={url: '{url}', split: nanreward}"],
         ["5", "7", "3"]),
        # two calls a turn, in the episode's order (train-7's 5 ends it: its 6 is refused), an unknown tool
        (["--mcp"], ["env.url={url}", *MCP],
         [CALL.format("guess", 5) + CALL.format("guess", 6), CALL.format("nope", 1) + CALL.format("guess", 3), "x"]),
    ],
    ids=["actions_and_a_faulty_task", "mcp_tool_calls"],
)  # fmt: skip
def test_a_turn_steps_its_episodes_at_once_with_the_same_episodes(tokenizer, flags, overrides, turns) -> None:  # noqa: ANN001
    with running("--step-latency-s", str(LATENCY_S), *flags) as url:
        conf = conf_of(*[o.replace("{url}", url) for o in overrides])
        one_by_one, sequential, seq_counts = timed(conf, tokenizer, turns, concurrent=False)
        at_once, concurrent, con_counts = timed(conf, tokenizer, turns, concurrent=True)
    assert concurrent == sequential and con_counts == seq_counts
    assert sum(sequential["turns"]) >= 14  # 8 episodes, most of them two turns or three
    # the faults: the faulty task's errored rewards; the unknown tool's calls and train-7's refused one
    assert ("nan" in sequential["values"]) if not flags else sum(sequential["tool_errors"]) == 7
    assert at_once <= 0.5 * one_by_one, (at_once, one_by_one)  # 8 episodes a turn: about one latency, not eight


def test_a_child_server_that_just_crashed_is_named_by_its_exit_code_not_the_refused_connection() -> None:
    from rlexp.envs.openenv_server import Server

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5); raise SystemExit(3)"])
    try:  # its port refuses at once, while the process has not exited yet
        server = Server("env.command", "python dies.py", f"http://127.0.0.1:{free_port()}", proc)
        assert server.gone() == "the OpenEnv server exited with code 3"
    finally:
        proc.kill()
        proc.wait()
