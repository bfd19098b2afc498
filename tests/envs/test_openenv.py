"""env=openenv against a real OpenEnv server (tests/envs/guess_server.py: OpenEnv's own server package on loopback,
a guessing game with a TaskProvider): rows from its tasks, the model's turns as actions and the observations as
environment turns masked out of the loss, the episode's reward the server's, MCP tools offered and called, and the
faults (a server slower than env.timeout_s, a NaN reward, a malformed observation, a server gone) as errored
rewards or one line. The policy is scripted: no JAX."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from rlexp import envs
from rlexp.data.templates import render_splits
from rlexp.envs import openenv_server
from rlexp.errors import ConfigError, RunError
from rlexp.models.loader import load_tokenizer
from rlexp.rewards.compose import RewardStats, scored
from rlexp.train.episodes import EpisodeRunner
from tests.envs.guess import SERVER, running, target
from tests.helpers import compose_conf, run_rlexp

# a command that exits at once, saying why
EXITS = f'env.command=\'{sys.executable} -c "import sys; print(\\"cannot bind\\"); sys.exit(4)" {{port}}\''
BASE = ["env=openenv", "model=tiny_tools", "chat_template=chatml", "env.train_size=8", "env.eval_size=4",
        "trainer.max_prompt_tokens=48", "trainer.max_completion_tokens=96", "agent.max_turn_tokens=8",
        "trainer.max_steps=1", "trainer.eval_prompts=4"]  # fmt: skip


@pytest.fixture(scope="module")
def game(tmp_path_factory):  # noqa: ANN001, ANN201
    log = tmp_path_factory.mktemp("guess") / "steps.jsonl"
    with running("--log", str(log), "--slow-s", "4") as url:
        yield SimpleNamespace(url=url, log=log)


@pytest.fixture(scope="module")
def mcp_game():  # noqa: ANN201
    with running("--mcp") as url:
        yield url


@pytest.fixture(scope="module")
def tokenizer():  # noqa: ANN201
    return load_tokenizer(compose_conf(BASE).model)


@dataclasses.dataclass
class RolloutConfig:  # the fields of Tunix's rollout config that the episode runner sets and reads
    max_prompt_length: int = 64
    max_tokens_to_generate: int = 96
    eos_tokens: list[int] = dataclasses.field(default_factory=lambda: [2])
    seed: int = 3


def conf_of(*overrides: str):  # noqa: ANN201
    return envs.resolve(compose_conf([*BASE, *overrides]))


def scripted(tokenizer, turns: list[str]):  # noqa: ANN001, ANN201
    """A generate() answering every row with the next scripted turn."""
    calls = []

    def generate(prompts, config):  # noqa: ANN001, ANN202
        calls.append(1)
        text = turns[min(len(calls) - 1, len(turns) - 1)]
        ids = tokenizer.encode(text, add_special_tokens=False)
        return SimpleNamespace(
            text=[text] * len(prompts), tokens=[np.array(ids)] * len(prompts),
            left_padded_prompt_tokens=np.zeros((len(prompts), 8), np.int32),
        )  # fmt: skip

    return generate


def prepare(conf, tokenizer, n: int = 4):  # noqa: ANN001, ANN201
    """The first n train rows, rendered, and the run's toolbox."""
    raw = envs.load_rows(conf)
    rendered = render_splits(raw, conf.data_template, conf.chat_template, tokenizer, 2048, envs.tools_prompt(conf))
    return rendered.train[:n], envs.toolbox(conf, rendered.train + rendered.eval)


def play(conf, tokenizer, rows, box, turns: list[str]):  # noqa: ANN001, ANN201
    """The rows' episodes under scripted turns, scored by the reward `openenv` as training scores them: (Episodes,
    the values, the reward statistics)."""
    from rlexp.envs.openenv_episodes import openenv_reward

    try:
        prompts = [r["prompt"] for r in rows]
        ep = EpisodeRunner(conf, tokenizer, box).run(
            prompts, scripted(tokenizer, turns), RolloutConfig(), [{"env_row": r["env_row"]} for r in rows]
        )
        stats = RewardStats()
        score = scored("openenv", openenv_reward(**conf.reward.functions[0].kwargs), stats)
        return ep, score(prompts, ep.final, env_row=[r["env_row"] for r in rows]), stats
    finally:
        box.close()


def episodes(conf, tokenizer, turns: list[str]):  # noqa: ANN001, ANN201
    rows, box = prepare(conf, tokenizer)
    return (rows, *play(conf, tokenizer, rows, box, turns), box)


@pytest.mark.slow  # a real OpenEnv server (the module's `game`): seconds to start
def test_rows_are_the_task_providers_tasks_each_question_its_reset_observation(game) -> None:  # noqa: ANN001
    conf = conf_of(f"env.url={game.url}")
    assert conf.agent.kind == "tools" and conf.agent.max_turns == 3 and conf.reward.functions[0].fn == "openenv"
    rows = envs.load_rows(conf)
    assert [r["id"] for r in rows.train] == [f"openenv/train-{i}" for i in range(8)]
    assert [r["id"] for r in rows.eval] == [f"openenv/test-{i}" for i in range(4)]  # eval split: the server's test
    assert {r["question"] for r in rows.train + rows.eval} == {"guess my number from 1 to 9"}
    assert json.loads(rows.eval[2]["env_row"]) == {"task": "openenv", "split": "test", "index": 2}
    # several environments (here one server under two names and splits), mixed by weight and interleaved
    two = conf_of(
        f"+env.tasks.a={{url: '{game.url}', weight: 3}}", f"+env.tasks.b={{url: '{game.url}', eval_split: train}}"
    )
    rows = envs.load_rows(two)
    assert [r["task"] for r in rows.train] == ["a", "b", "a", "b", "a", "a", "a", "a"]
    assert [r["id"] for r in rows.eval if r["task"] == "b"] == ["b/train-47"]  # its train split's last task


@pytest.mark.slow  # a real OpenEnv server (the module's `game`): seconds to start
def test_turns_are_actions_observations_masked_environment_turns_rewards_the_servers(game, tokenizer) -> None:  # noqa: ANN001
    conf = conf_of(f"env.url={game.url}")
    rows, ep, values, stats, _ = episodes(conf, tokenizer, ["5", "7", "3"])
    enc = lambda t: tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
    first = [target("train", i) for i in range(4)]
    for i, want in enumerate(first):
        says = ["higher" if g < want else "lower" for g in (5, 7)]
        convs = ep.conversations[i]
        assert [m["content"] for m in convs if m["role"] == "environment"][:1] == [says[0] if want != 5 else "right"]
        if want not in (5, 7):  # three turns: two observations in the episode, each a user turn under mask 0
            obs = [enc(f"<|im_end|>\n<|im_start|>user\n{s}<|im_end|>\n<|im_start|>assistant\n")[1:] for s in says]
            assert ep.tokens[i].tolist() == [*enc("5"), 2, *obs[0], *enc("7"), 2, *obs[1], *enc("3")]
            assert ep.mask[i].tolist() == [1, 1] + [0] * len(obs[0]) + [1, 1] + [0] * len(obs[1]) + [1]
    # each reward is the server's: its log's last step of that task ends with it
    log = [json.loads(line) for line in game.log.read_text().splitlines()]
    for i, value in enumerate(values):
        last = [s for s in log if s["task"] == f"train-{i}" and s["done"]][-1]
        assert value == last["reward"] and stats.non_finite["openenv"] == 0
    assert values == [1.0 - 0.25 * [5, 7, 3].index(w) if w in (5, 7, 3) else 0.0 for w in first]


@pytest.mark.slow  # a real OpenEnv server (the module's `game`): seconds to start
@pytest.mark.parametrize(
    ("split", "needle"),
    [
        ("slow", "took longer than env.timeout_s=1 s"),
        ("nanreward", "done without a reward (OpenEnv's server sends a NaN reward as null)"),
        ("malformed", "malformed observation: the observation's text is dict"),
    ],
)
def test_a_faulty_episode_is_an_errored_reward_counted_per_task(game, tokenizer, split: str, needle: str) -> None:  # noqa: ANN001
    ok, bad = f"+env.tasks.ok={{url: '{game.url}'}}", f"+env.tasks.bad={{url: '{game.url}', split: {split}}}"
    conf = conf_of(ok, bad, "env.timeout_s=1")
    rows, ep, values, stats, box = episodes(conf, tokenizer, ["1", "2", "3", "4", "5", "6", "7", "8", "9"])
    bad = [r["task"] == "bad" for r in rows]
    assert [math.isnan(v) for v in values] == bad and stats.non_finite["openenv"] == sum(bad)
    assert needle in stats.last_error["openenv"]
    metrics = envs.task_metrics([r["task"] for r in rows], values, None, None)
    assert metrics["env/bad/errors"] == sum(bad) and "env/bad/reward_mean" not in metrics
    assert math.isfinite(metrics["env/ok/reward_mean"]) and metrics["env/ok/errors"] == 0
    assert box.over_budget(1.0) is None  # the server still answers: the reward budget decides, not this


def test_a_read_observation_refuses_what_is_no_number_or_no_text() -> None:
    from rlexp.envs.openenv_client import Malformed, read

    ok = read(SimpleNamespace(observation={"text": "hi", "metadata": {}}, reward=0.5, done=True), "text")
    assert (ok.text, ok.reward, ok.done) == ("hi", 0.5, True)
    for result, needle in [
        (SimpleNamespace(observation={"text": "hi"}, reward="1", done=False), "a reward of str"),
        (SimpleNamespace(observation={"text": 3}, reward=None, done=False), "text is int"),
        (SimpleNamespace(observation=["hi"], reward=None, done=False), "a JSON object"),
        (SimpleNamespace(observation={"txt": "hi"}, reward=None, done=False), "no field 'text'"),
    ]:
        with pytest.raises(Malformed, match=needle):
            read(result, "text")
    assert read(SimpleNamespace(observation={"text": "x"}, reward=math.nan, done=True), "text").reward != 0.0


@pytest.mark.slow  # a real OpenEnv server (the module's `game`): seconds to start
def test_mcp_tools_are_offered_and_called_in_the_episodes_own_session(mcp_game, tokenizer) -> None:  # noqa: ANN001
    conf = conf_of(f"env.url={mcp_game}", "model.max_context=2048", "trainer.max_prompt_tokens=1024",
                   "trainer.max_completion_tokens=256", "agent.max_turn_tokens=64")  # fmt: skip
    prompt = envs.tools_prompt(conf)
    spec = [json.loads(line) for line in prompt.splitlines() if line.startswith('{"type": "function"')]
    assert spec[0]["function"]["name"] == "guess" and "<tool_call>" in prompt  # Qwen's (ChatML's) tool format
    assert spec[0]["function"]["parameters"]["properties"]["n"]["type"] == "integer"
    call = '<tool_call>{{"name": "guess", "arguments": {{"n": {}}}}}</tool_call>'
    rows, ep, values, stats, _ = episodes(conf, tokenizer, [call.format(5), call.format(6), "done"])
    for i, value in enumerate(values):  # train-0's number is 6: the second call ends that episode, reward 0.75
        want = target("train", i)
        results = [m["content"] for m in ep.conversations[i] if m["role"] == "tool"]
        assert results[0] == ("right" if want == 5 else "higher" if want > 5 else "lower")
        assert value == (1.0 if want == 5 else 0.75 if want == 6 else 0.0)
        assert ep.turns[i] == (1 if want == 5 else 2 if want == 6 else 3)


@pytest.mark.slow  # a real OpenEnv server (the module's `game`): seconds to start
def test_a_server_rlexp_started_that_dies_stops_the_step_in_one_line(game, tokenizer) -> None:  # noqa: ANN001
    command = f'"{sys.executable} {SERVER} --port {{port}}"'
    conf = conf_of(f"env.command={command}", "env.train_size=4")
    try:
        rows, box = prepare(conf, tokenizer)
        server = envs.kind_module(conf).lives(conf)["openenv"].server
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=30)
        _, values, stats = play(conf, tokenizer, rows, box, ["5"])
        assert all(math.isnan(v) for v in values) and "Connect" in stats.last_error["openenv"]
        err = box.over_budget(1.0)
        assert isinstance(err, RunError) and "\n" not in str(err)
        assert str(err).startswith(f"env.command={command.strip(chr(34))!r}: the OpenEnv server exited with code -9")
    finally:
        openenv_server.stop_all()


@pytest.mark.slow  # a real OpenEnv server (the module's `game`): seconds to start
def test_bad_servers_end_in_one_line(game, tmp_path: Path) -> None:  # noqa: ANN001
    with pytest.raises(RunError, match=r"^env.url='http://127.0.0.1:9/'.*no OpenEnv server answered .* within 1 s"):
        envs.load_rows(conf_of("env.url=http://127.0.0.1:9/", "env.start_timeout_s=1"))
    with pytest.raises(RunError, match="the server exited with code 4 before it answered .its last line: cannot bind"):
        envs.load_rows(conf_of(EXITS))
    with pytest.raises(ConfigError, match=r"^env.split='tarin': no such split of the OpenEnv environment guess; did"):
        envs.load_rows(conf_of(f"env.url={game.url}", "env.split=tarin"))
    with pytest.raises(ConfigError, match=r"^env.url=None: set env.url \(a running server\), env.command or env.image"):
        conf_of()


@pytest.mark.slow  # a real OpenEnv server (the module's `game`): seconds to start
@pytest.mark.parametrize(
    ("bad", "code", "needle"),
    [
        (["env.url=http://127.0.0.1:9", "env.start_timeout_s=1"], 1,
         "env.url='http://127.0.0.1:9': no OpenEnv server answered http://127.0.0.1:9/health within 1 s"),
        ([EXITS], 1, "the server exited with code 4 before it answered (its last line: cannot bind)"),
        (["env.split=tarin"], 2, "env.split='tarin': no such split of the OpenEnv environment guess; did you mean train?"),
    ],
    ids=["unreachable_url", "command_exits", "unknown_split"],
)  # fmt: skip
def test_the_command_refuses_in_one_line_before_any_weights(game, tmp_path: Path, bad, code, needle) -> None:  # noqa: ANN001
    url = [] if bad[0].startswith(("env.url", "env.command")) else [f"env.url={game.url}"]
    proc = run_rlexp(*BASE, *url, *bad, "logger=none", f"hydra.run.dir={tmp_path}", timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == code and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("rlexp: error: ") and needle in lines[0]
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "config.yaml").exists()  # before the weights


def test_an_image_without_docker_is_refused_by_validate_in_one_line(tmp_path: Path) -> None:
    bare = {**os.environ, "PATH": os.path.dirname(sys.executable)}
    proc = run_rlexp(*BASE, "env.image=guess:latest", f"hydra.run.dir={tmp_path}", module="rlexp.validate", env=bare,
                     timeout=300)  # fmt: skip
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("rlexp: error: env.image='guess:latest': docker is not on this machine's PATH")


@pytest.mark.slow  # a real OpenEnv server (the module's `game`): seconds to start
def test_validate_dry_runs_a_reset_and_a_scripted_step_and_scores_with_the_server(game, tmp_path: Path) -> None:  # noqa: ANN001
    given = tmp_path / "completions.jsonl"
    right = target("train", 0)
    given.write_text("".join(json.dumps({"id": f"guess/train-{i}", "completion": c}) + "\n" for i, c in
                             [(0, str(right)), (1, "no idea")]))  # fmt: skip
    proc = run_rlexp(*BASE, "env.name=guess", f"env.url={game.url}", f"validate.completions={given}",
                     f"hydra.run.dir={tmp_path}", module="rlexp.validate", timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "validation.json").read_text())
    check = next(c for c in result["checks"] if c["name"] == "env:guess")
    assert check["status"] == "ok", check
    assert "split train (48 tasks), eval split test (12 tasks)" in check["detail"]
    assert "reset -> 'guess my number from 1 to 9'; step 'rlexp validate' -> 'say a number'" in check["detail"]
    # the completions are scored by the server: a reset to their row's task, the completion its action
    assert {r["id"]: r["rewards"]["openenv"] for r in result["rows"]} == {"guess/train-0": 1.0, "guess/train-1": 0.0}
