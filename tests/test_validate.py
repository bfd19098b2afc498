"""The preflight (`python -m rlexp.validate`) and the two seed presets."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from rlexp.checks import check_config
from rlexp.checks.data_preflight import preflight, print_summary
from rlexp.data.templates import doubled_markers, render_prompt
from tests.helpers import REPO, compose_conf, run_rlexp

FIX = REPO / "tests" / "fixtures" / "recipes"
OMI2 = [
    "experiment=gemma4_e4b_omi2",
    "reward=math_format",  # these tests score rlexp's math + format pair; the preset's default is maxtext_math
    f"dataset.source={FIX / 'omi2_train_1M.jsonl'}",
    "trainer.batch_size=2",  # the fixture has 10 usable rows; the preset's 500 x 128 would not fit
    "trainer.micro_batch_size=1",
    "trainer.rollout_micro_batch_size=2",
    "trainer.max_steps=4",
]
COMPLETIONS = f"validate.completions={FIX / 'omi2_completions.jsonl'}"
G = "tests.fixtures.recipes.graders"


@pytest.mark.parametrize(
    ("preset", "model", "dataset", "slice_", "chat", "values"),
    [
        ("gemma4_e4b_omi2", "gemma4_e4b", "openmathinstruct2", "v6e-32", "gemma",
         {"batch_size": 128, "num_generations": 8, "beta": 0.05, "learning_rate": 1e-6, "grad_clip": 1.0,
          "max_prompt_tokens": 512, "max_completion_tokens": 3584, "temperature": 0.8, "top_k": 50, "top_p": 0.95}),
        ("gpt_oss_20b_gsm8k", "gpt_oss_20b", "gsm8k", "v5p-64", "harmony",
         {"batch_size": 16, "num_generations": 2, "beta": 0.08, "learning_rate": 3e-6, "grad_clip": 0.1,
          "max_prompt_tokens": 256, "max_completion_tokens": 768, "eval_every": 10, "checkpoint_every": 50}),
    ],
)  # fmt: skip
def test_presets_compose_validate_and_render_clean_prompts(
    preset: str, model: str, dataset: str, slice_: str, chat: str, values: dict
) -> None:
    conf = compose_conf([f"experiment={preset}"])
    check_config(conf)
    assert (conf.model.name, conf.dataset.name, conf.slice.name, conf.chat_template.name) == (
        model,
        dataset,
        slice_,
        chat,
    )
    for key, value in values.items():
        assert getattr(conf.trainer, key) == value, key
    assert conf.reward.name == "maxtext_math" and conf.dataset.seed == 42
    row = {"id": "x", "question": "What is 1+1?", "answer": "2"}
    prompt = render_prompt(row, conf.data_template, conf.chat_template)
    assert "<reasoning>" in prompt and doubled_markers(row, conf.data_template, conf.chat_template, prompt) == []
    # The seeds' data-exhaustion bug is fixed: the steps fit the data.
    rows = 64000 if preset.startswith("gemma") else 7473
    assert rows * conf.trainer.epochs // conf.trainer.batch_size >= conf.trainer.max_steps


def test_preflight_scores_given_completions(tmp_path) -> None:  # noqa: ANN001
    result = preflight(compose_conf([*OMI2, COMPLETIONS]), str(tmp_path))
    on_disk = json.loads((tmp_path / "validation.json").read_text())
    assert on_disk == json.loads(json.dumps(result))
    assert result["ok"], result["checks"]
    math_r, fmt = result["rewards"]["math"], result["rewards"]["format"]
    assert fmt["mean"] == pytest.approx(8 / 12) and fmt["weight"] == 0.1
    assert (math_r["n"], math_r["errors"], math_r["non_finite"], math_r["out_of_range"]) == (12, 0, 0, 0)
    by_row = [(r["id"].rsplit("-", 1)[1], r["rewards"]["math"], r["rewards"]["format"]) for r in result["rows"]]
    assert by_row == [
        ("0", 1.0, 1.0), ("0", 1.0, 1.0),  # \frac{5}{6} and 5/6
        ("1", 1.0, 1.0), ("1", 0.0, 0.0),  # -2; a wrong boxed 2
        ("2", 1.0, 1.0), ("2", 0.0, 0.0),  # $18.00; no extractable answer
        ("3", 1.0, 1.0), ("3", 0.0, 1.0),  # 5\sqrt{2} via math-verify; 7.07
        ("4", 1.0, 1.0), ("4", 1.0, 1.0),
        ("5", 1.0, 0.0), ("10", 1.0, 0.0),  # \boxed{0.5} = \frac{1}{2}; "#### 1,500"
    ]  # fmt: skip
    assert math_r["mean"] == pytest.approx(9 / 12)
    assert result["zero_variance_share"] == pytest.approx(2 / 5)  # groups 0 and 4 of the five pairs
    assert result["rows"][0]["total"] == pytest.approx(1.1)
    assert result["example_prompt"]["prompt"].startswith("<bos><start_of_turn>user\nYou are given a problem.")
    assert result["memory"]["model"] == "gemma4_e4b" and result["dataset"]["skipped"] == {"missing_answer": 1}


def test_preflight_fails_on_non_finite_out_of_range_and_raising_rewards(tmp_path) -> None:  # noqa: ANN001
    over = [
        *OMI2,
        COMPLETIONS,
        "reward=python",
        "reward.functions=["
        f"{{fn: python, name: custom, kwargs: {{function: '{G}:too_big'}}}},"
        f"{{fn: python, name: nan, kwargs: {{function: '{G}:nan_reward'}}}},"
        f"{{fn: python, name: boom, kwargs: {{function: '{G}:per_item', call: batch}}}}]",
    ]
    result = preflight(compose_conf(over), str(tmp_path))
    assert not result["ok"]
    r = result["rewards"]
    assert r["custom"]["out_of_range"] == 12 and r["custom"]["max"] == 5.0
    assert r["nan"]["non_finite"] == 12 and r["nan"]["mean"] is None
    assert r["boom"]["errors"] == 12 and "TypeError" in r["boom"]["last_error"]
    failed = {c["name"] for c in result["checks"] if c["status"] == "failed"}
    assert failed == {"reward:custom", "reward:nan", "reward:boom"}
    assert result["rows"][0]["rewards"]["nan"] is None  # JSON null, not NaN


def test_preflight_refuses_doubled_turn_markers(tmp_path) -> None:  # noqa: ANN001
    seed_template = "<start_of_turn>user\\n{system_prompt}\\n\\n{question}<end_of_turn>\\n<start_of_turn>model"
    result = preflight(compose_conf([*OMI2, COMPLETIONS, f"data_template.template='{seed_template}'"]), str(tmp_path))
    check = next(c for c in result["checks"] if c["name"] == "turn_markers")
    assert check["status"] == "failed" and "<start_of_turn>" in check["detail"] and not result["ok"]


def test_unknown_completion_ids_and_steps_beyond_the_data_fail(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"id": "nope", "completion": "\\boxed{1}"}) + "\n")
    over = [
        "experiment=gemma4_e4b_omi2",
        f"dataset.source={FIX / 'omi2_train_1M.jsonl'}",
        f"validate.completions={path}",
    ]
    result = preflight(compose_conf(over), str(tmp_path / "out"))
    status = {c["name"]: c["status"] for c in result["checks"]}
    assert status["completion_ids"] == "failed" and status["rows"] == "failed"
    assert status["steps_fit_data"] == "failed"  # 500 steps x 128 prompts from 10 rows


def test_completions_with_answers_need_no_dataset(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "c.jsonl"
    lines = [{"id": "a", "prompt": "q", "answer": "3", "completion": c} for c in ("\\boxed{3}", "\\boxed{4}")]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    over = ["reward=math", "dataset=gsm8k", "dataset.source=nobody/unreachable", f"validate.completions={path}"]
    result = preflight(compose_conf(over), str(tmp_path / "out"), allow_downloads=False)
    assert result["ok"] and [r["rewards"]["math"] for r in result["rows"]] == [1.0, 0.0]
    assert "dataset" not in {c["name"] for c in result["checks"]}


def _cli(args: list[str], run_dir: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return run_rlexp(*args, f"hydra.run.dir={run_dir}", module="rlexp.validate", env=env, timeout=300)


@pytest.mark.slow  # math-verify's grader pool starts for 12 completions
def test_cli_with_given_completions(tmp_path) -> None:  # noqa: ANN001
    """Also the no-flag case of tests/test_logging_flags.py's validate test (which runs -q and -v): nothing on
    stderr, and no validate.log when nothing was logged."""
    proc = _cli([*OMI2, COMPLETIONS], str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "rlexp: preflight passed" in proc.stdout and "example prompt" in proc.stdout
    assert f"rlexp: wrote {tmp_path}/validation.json" in proc.stdout
    assert proc.stderr == "" and not (tmp_path / "validate.log").exists()  # nothing logged: no log file
    assert json.loads((tmp_path / "validation.json").read_text())["rewards"]["math"]["n"] == 12


@pytest.mark.slow
def test_cli_samples_with_the_tiny_model(tmp_path) -> None:  # noqa: ANN001
    tiny = ["model=tiny", "slice=cpu", "slice.mesh.tp=1", "trainer.rollout.engine=vanilla", "trainer.rollout.async_rollout=false", "data_template=plain", "chat_template=plain",
            "trainer.max_prompt_tokens=48", "trainer.max_completion_tokens=8", "validate.rows=6",
            "trainer.max_steps=1"]  # 48-token prompts: few fixture rows fit, and the steps check counts only those  # fmt: skip
    proc = _cli([*OMI2, *tiny], str(tmp_path))
    assert (tmp_path / "validation.json").exists(), proc.stderr[-2000:]
    result = json.loads((tmp_path / "validation.json").read_text())
    assert proc.returncode == 0, (proc.stdout[-2000:], result["checks"])
    assert result["mode"] == "sampled" and result["rows"]
    ids = [r["id"] for r in result["rows"]]
    assert len(ids) == 2 * len(set(ids))  # validate.generations=2 per prompt
    assert result["rewards"]["math"]["n"] == len(ids) and result["zero_variance_share"] is not None


def test_skip_is_explicit_and_recorded(tmp_path) -> None:  # noqa: ANN001
    result = preflight(compose_conf(["experiment=gemma4_e4b_omi2", "validate.skip=true"]), str(tmp_path))
    assert result["ok"] and result["skipped"] == ["preflight: validate.skip=true"] and "rewards" not in result
    assert json.loads((tmp_path / "validation.json").read_text())["checks"][0]["status"] == "skipped"


def test_offline_preflight_skips_an_uncached_hub_dataset(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache: nothing downloaded here
    result = preflight(compose_conf(["dataset=gsm8k", "reward=math_format"]), str(tmp_path), allow_downloads=False)
    check = next(c for c in result["checks"] if c["name"] == "dataset")
    assert check["status"] == "skipped" and "openai/gsm8k" in check["detail"], check
    assert any(s.startswith("dataset: openai/gsm8k") for s in result["skipped"])


@pytest.mark.parametrize(
    ("preset", "line"),
    [
        ("gemma4_e4b_omi2", "memory per chip for gemma4_e4b on v6e-32 (16 trainer chips"),
        ("gpt_oss_20b_gsm8k", "memory per chip for gpt_oss_20b on v5p-64 (16 trainer chips"),
    ],
)
def test_preflight_prints_the_memory_estimate(preset, line, tmp_path, capsys, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    result = preflight(compose_conf([f"experiment={preset}"]), str(tmp_path), allow_downloads=False)
    print_summary(result)  # what `python -m rlexp.validate` prints (launchers print the estimate themselves)
    assert line in capsys.readouterr().out
    assert result["memory"]["total"] < result["memory"]["capacity"]
