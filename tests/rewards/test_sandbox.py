"""The sandbox under real bubblewrap: hostile snippets are contained, reported as errored, and the caller goes on."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlexp.config.schema import RewardConfig, RewardFnConfig
from rlexp.errors import ConfigError
from rlexp.rewards.code import extract_code, parse_tests
from rlexp.rewards.compose import build_rewards
from rlexp.rewards.registry import make_reward_fn
from rlexp.rewards.sandbox import bwrap_problem
from tests.helpers import REPO, run_rlexp


@pytest.fixture(autouse=True, scope="module")
def bubblewrap() -> None:
    """These tests run real bubblewrap, which scripts/install_system_deps.sh installs: without it they fail."""
    assert bwrap_problem() is None, f"bubblewrap does not work here: {bwrap_problem()}"


PROBLEMS = [json.loads(line) for line in (REPO / "tests/fixtures/code/problems.jsonl").read_text().splitlines()]
ARITH = 'def evaluate(example, response):\n    return float(response["text"].strip() == example["answer"])\n'


def _code(snippet: str, **kw: object):  # noqa: ANN202
    return make_reward_fn("code", {"snippet": snippet, **kw})


def test_a_snippet_scores_a_batch_in_one_fast_call() -> None:
    fn = _code(ARITH)
    start = time.perf_counter()
    assert fn(["1+1="] * 4, ["2", " 2 ", "3", "x"], answer=["2"] * 4) == [1.0, 1.0, 0.0, 0.0]
    assert time.perf_counter() - start < 5 and fn.counters["calls"] == 1
    seen = _code("def evaluate(example, response):\n    return len(example) + 0.5 * ('text' in response)\n")
    assert seen(["p"], ["c"], answer=["a"], id=["i"]) == [3.5]  # prompt, answer, id


HOSTILE = {  # the body of `if response['text'] == 'attack':`
    "network": "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=3)\nreturn 1.0",
    "write_outside_tmp": f"open({str(REPO / 'sandbox_escape.txt')!r}, 'w').write('x')\nreturn 1.0",
    "hf_token": "import os\nreturn 1.0 if os.environ['HF_TOKEN'] else 0.0",
    "run_dir": "import os\nreturn float(len(os.listdir({run!r})))",
    "infinite_loop": "while True:\n    pass",
    "memory_bomb": "x = bytearray(4 << 30)\nreturn 1.0",
    "fork_bomb": "import os\nwhile True:\n    os.fork()",
}


@pytest.mark.slow
@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_hostile_snippets_are_contained_and_the_caller_goes_on(attack: str, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("{}\n")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.chdir(tmp_path)  # the working directory (and so the run dir under it) is hidden
    body = HOSTILE[attack].replace("{run!r}", repr(str(run)))
    body = "".join(f"        {line}\n" for line in body.splitlines())
    snippet = f"def evaluate(example, response):\n    if response['text'] == 'attack':\n{body}    return 0.5\n"
    rs = build_rewards(
        RewardConfig(name="t", functions=[RewardFnConfig(fn="code", kwargs={"snippet": snippet, "item_timeout_s": 3})])
    )
    start = time.perf_counter()
    out = rs.fns[0](["p", "p"], ["attack", "fine"], answer=["1", "1"])
    assert time.perf_counter() - start < 30
    # the attack is an errored value, which leaves its group (here the batch): it takes the valid items' mean
    assert out == [0.5, 0.5]
    m = rs.step_metrics()
    assert m["rewards/code/non_finite"] == 1.0, rs.stats.last_error
    assert not (REPO / "sandbox_escape.txt").exists()
    assert rs.fns[0](["p"], ["fine"]) == [0.5]  # and the next call works


@pytest.mark.slow
def test_a_hung_module_level_snippet_hits_the_wall_timeout_and_is_retried_once() -> None:
    fn = _code("while True:\n    pass\ndef evaluate(example, response):\n    return 1.0\n", timeout_s=1.5, cpu_s=60)
    start = time.perf_counter()
    out = fn(["p", "p"], ["a", "b"])
    assert all(math.isnan(v) for v in out) and 2.5 < time.perf_counter() - start < 15
    assert "2 attempt(s): timed out after 1.5s" in fn.last_error and fn.counters["failed_calls"] == 1


def test_the_cpu_limit_ends_a_busy_snippet() -> None:
    fn = _code("while True:\n    pass\ndef evaluate(example, response):\n    return 1.0\n", cpu_s=1, timeout_s=30)
    start = time.perf_counter()
    assert math.isnan(fn(["p"], ["a"])[0]) and time.perf_counter() - start < 15
    assert "CPU limit" in fn.last_error


def test_bad_snippets_are_refused_in_one_line_before_training() -> None:
    with pytest.raises(ConfigError, match="does not parse"):
        _code("def evaluate(:\n")
    with pytest.raises(ConfigError, match="defines no evaluate"):
        _code("def score(example, response):\n    return 1.0\n")
    with pytest.raises(ConfigError, match="exactly one of snippet"):
        make_reward_fn("code", {})


def test_code_blocks_and_tests_are_extracted() -> None:
    assert extract_code("text\n```python\na = 1\n```\nmore\n```python\nb = 2\n```\n") == "b = 2\n"
    assert extract_code("def f(): pass") == "def f(): pass"
    assert extract_code("```py\nx = 3\n") == "x = 3\n"  # cut before the closing fence
    assert parse_tests("['assert 1', 'assert 2']") == ["assert 1", "assert 2"]  # str(list), as dataset=jsonl gives
    assert parse_tests('["assert 1"]') == ["assert 1"] and parse_tests("assert 1\nassert 2\n") == [
        "assert 1",
        "assert 2",
    ]


def test_the_unit_test_grader_scores_the_share_of_tests_passed() -> None:
    fn = make_reward_fn("code_tests", {"item_timeout_s": 2})
    fact = next(p for p in PROBLEMS if p["id"] == "fact")
    completions = [
        f"Here it is:\n```python\n{fact['solution']}```",  # correct
        "```python\ndef fact(n):\n    return 1 if n < 2 else n * 2\n```",  # right for 0 and 1 only
        "```python\ndef fact(n):\n    return 0\n```",  # wrong
        "```python\nimport os\nos.system('rm -rf /tmp/*')\nwhile True:\n    pass\n```",  # hostile, hangs
        "I do not know.",  # no code: the prose fails to run
        "```python\ntry:\n    open('/etc/passwd', 'a').write('x')\nexcept OSError:\n    pass\ndef fact(n):\n    return 1\n```",
    ]
    out = fn(["p"] * len(completions), completions, answer=[str(fact["tests"])] * len(completions))
    assert out == [1.0, 0.5, 0.0, 0.0, 0.0, 0.5]
    assert Path("/usr/bin/python3").exists() or Path("/usr/bin").exists()
    every = fn(
        ["p"] * len(PROBLEMS),
        [f"```python\n{p['solution']}```" for p in PROBLEMS],
        tests=[p["tests"] for p in PROBLEMS],
    )
    assert every == [1.0] * len(PROBLEMS)


def test_python_rewards_run_in_a_child_process_by_default_with_in_process_an_opt_in() -> None:
    g = "tests.fixtures.recipes.graders"
    pid = make_reward_fn("python", {"function": "os:getpid", "call": "item"})  # os.getpid(**{}) fails: item error
    assert math.isnan(pid(["p"], ["c"])[0])
    boxed = make_reward_fn("python", {"function": f"{g}:length_penalty", "timeout_s": 20})
    assert boxed(["p"], ["x" * 10]) == [-0.1]
    inproc = make_reward_fn("python", {"function": f"{g}:length_penalty", "isolation": "in_process"})
    assert inproc(["p"], ["x" * 10]) == [-0.1]
    hang = make_reward_fn("python", {"function": f"{g}:hang_on_marker", "call": "item", "timeout_s": 1})
    assert math.isnan(hang(["p"], ["hang"], gold=["x"], predicted=["hang"])[0])


def test_python_in_the_sandbox_needs_a_file(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "r.py"
    path.write_text(
        "import os\ndef score(prompts, completions, **_):\n    return [float('HF_TOKEN' in os.environ) for _ in completions]\n"
    )
    os.environ["HF_TOKEN"] = "x"
    try:
        assert make_reward_fn("python", {"function": f"{path}:score", "isolation": "sandbox"})(["p"], ["c"]) == [0.0]
    finally:
        del os.environ["HF_TOKEN"]
    with pytest.raises(ConfigError, match="needs path/to/file.py:function"):
        make_reward_fn("python", {"function": "os:getpid", "isolation": "sandbox"})


def _no_bwrap_path(tmp_path: Path) -> str:
    """PATH with the interpreter's folder and coreutils, but no bwrap."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("uname", "ldconfig", "cat"):
        src = Path("/usr/bin", tool) if Path("/usr/bin", tool).exists() else Path("/bin", tool)
        if src.exists():
            (bin_dir / tool).symlink_to(src)
    return f"{Path(sys.executable).parent}:{bin_dir}"


def test_without_bwrap_the_command_is_refused_in_one_line_unless_opted_out(tmp_path) -> None:  # noqa: ANN001
    env = {**os.environ, "PATH": _no_bwrap_path(tmp_path)}
    snippet = f"reward.functions.0.kwargs.snippet='{ARITH}'"
    args = ["reward=code", snippet, "logger=none", "trainer.max_steps=1"]
    proc = run_rlexp(*args, f"hydra.run.dir={tmp_path / 'a'}", env=env, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith(
        "rlexp: error: reward.functions[].kwargs.sandbox='bwrap': bubblewrap (bwrap) is not on PATH"
    )
    assert "reward.functions[].kwargs.sandbox=none" in lines[0]
    code = "from rlexp.rewards.registry import make_reward_fn as m; f = m('code', {'snippet': open(0).read(), 'sandbox': 'none'}); print(f(['p'], ['2'], answer=['2']))"
    out = subprocess.run(
        [sys.executable, "-c", code], input=ARITH, cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and out.stdout.strip() == "[1.0]", out.stderr[-2000:]


def test_the_code_fixture_loads_through_dataset_jsonl_and_its_solutions_pass() -> None:
    from rlexp.data.registry import load_splits
    from tests.helpers import compose_conf

    over = ["reward=code_tests", "dataset=jsonl", f"dataset.source={REPO / 'tests/fixtures/code/problems.jsonl'}"]
    conf = compose_conf([*over, "dataset.answer_field=tests", "dataset.id_field=id"])
    splits = load_splits(conf.dataset)
    rows = [*splits.train, *splits.eval]
    assert len(rows) == 12
    solution = {p["id"]: p["solution"] for p in PROBLEMS}
    fn = make_reward_fn("code_tests", conf.reward.functions[0].kwargs)
    completions = [f"```python\n{solution[r['id']]}```" for r in rows]
    assert fn(["p"] * 12, completions, answer=[r["answer"] for r in rows]) == [1.0] * 12
