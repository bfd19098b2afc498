"""`rlexp eval` / `python -m rlexp.eval` on the default run's dir and on its `rlexp.export` folder, as typed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlexp.train.checkpoints import _ITEMS as ITEMS
from tests.helpers import compose_cfg, compose_conf, run_rlexp

RUN = [
    "trainer.max_steps=2",
    "trainer.eval_every=2",
    "trainer.checkpoint_every=2",
    "trainer.eval_prompts=16",  # tests.helpers.SHORT's evals: programs the suite compiles anyway
    "trainer.eval_samples=2",  # trainer.eval_k left null: pass@k and maj@k for k = 1, 2
    "logger=none",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("eval") / "run"
    run_rlexp(*RUN, f"hydra.run.dir={out}", check=True)
    return out


@pytest.fixture(scope="module")
def seeded(run_dir: Path) -> tuple[str, dict]:
    """The console script's command on the run: a chosen step, another seed, Tunix's own sampler (perf.patches=[])
    and 4 samples a prompt (the run's: 2); (its stdout, the eval's JSON)."""
    args = ["eval", str(run_dir), "2", "seed=5", "perf.patches=[]", "trainer.eval_samples=4"]
    proc = run_rlexp(*args, module="rlexp.console", check=True)
    return proc.stdout, json.loads((run_dir / "eval" / "arith-step2.json").read_text())


@pytest.mark.slow
def test_eval_of_the_run_and_its_export_reproduce_the_runs_eval(
    run_dir: Path, seeded: tuple[str, dict], tmp_path: Path
) -> None:
    after = json.loads((run_dir / "evals.json").read_text())["after"]
    stdout, seeded = seeded
    assert f"wrote {run_dir / 'eval' / 'arith-step2.json'}" in stdout
    assert seeded["step"] == 2 and seeded["sampling"] == {"temperature": 0.01, "top_p": 1.0, "top_k": 1}
    assert seeded["classes"] == {
        "rollout": "tunix.rl.rollout.vanilla_rollout.VanillaRollout",
        "sampler": "tunix.generate.sampler.Sampler",
    }
    hf = tmp_path / "hf"
    from rlexp.export import main as export  # the export command is tested as typed in tests/test_export.py

    assert export([str(run_dir), "--out", str(hf)]) == 0
    run_rlexp(str(hf), *RUN[3:5], "--out", str(tmp_path / "e.json"), module="rlexp.eval", check=True)
    exported = json.loads((tmp_path / "e.json").read_text())
    # seed 0 and the run's eval settings: the run's own eval after training, to the number
    for key in ("accuracy", "greedy_accuracy", "partial_accuracy", "format_accuracy", "mean_reward", "pass_at_2"):
        assert exported["metrics"][key] == pytest.approx(after[key]), key
    assert exported["metrics"]["total"] == 16
    assert exported["classes"]["sampler"].startswith("rlexp.tunix.sampler.lean_rollout_engine.LeanSampler(")
    # greedy is greedy: the same answers with another seed and Tunix's own sampler; the temperature-1 samples are
    # another draw
    assert [r["completion"] for r in seeded["rows"]] == [r["completion"] for r in exported["rows"]]
    assert seeded["metrics"]["greedy_accuracy"] == after["greedy_accuracy"]


@pytest.mark.slow
def test_eval_reports_every_power_of_two_and_each_rows_rendered_prompt(run_dir: Path, seeded: tuple[str, dict]) -> None:
    """The run's summary and `rlexp eval` report pass@k and maj@k for k = 1, 2, 4, ... up to eval_samples by
    default, and each row of the eval's JSON holds the prompt exactly as sampled from (the default task's plain
    templates leave the dataset's question as is), so another tool can ask the same question."""
    from rlexp.data.registry import load_splits

    summary = json.loads((run_dir / "summary.json").read_text())
    for when in ("before", "after", "gain"):  # eval_samples=2, eval_k null
        assert {"pass_at_1", "maj_at_1", "pass_at_2", "maj_at_2"} <= set(summary["eval"][when]), when
    record = seeded[1]  # `rlexp eval RUN ... trainer.eval_samples=4`
    assert record["eval_k"] == [1, 2, 4]
    sampled = sorted(k for k in record["metrics"] if k.startswith(("pass_at_", "maj_at_")))
    assert sampled == ["maj_at_1", "maj_at_2", "maj_at_4", "pass_at_1", "pass_at_2", "pass_at_4"]
    m = record["metrics"]
    assert m["pass_at_1"] <= m["pass_at_2"] <= m["pass_at_4"]  # the unbiased estimator grows with k
    questions = {r["id"]: r["question"] for r in load_splits(compose_conf(RUN).dataset).eval}
    assert len(record["rows"]) == 16
    for row in record["rows"]:
        assert row["prompt"] == questions[row["id"]]  # data_template=plain, chat_template=plain: the question


@pytest.mark.slow
def test_bad_targets_end_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from omegaconf import OmegaConf

    from rlexp.eval import main

    run_dir = tmp_path / "run"  # as a run leaves it: its config and a checkpoint step (not read by these cases)
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(compose_cfg(RUN)))
    for item in ITEMS:  # a step whose folders are there: these cases fail on what they name, before any weights
        (run_dir / "checkpoints" / "actor" / "2" / item).mkdir(parents=True)
    (tmp_path / "one.jsonl").write_text('{"question": "1+1=", "answer": "2"}\n{"question": "2+1=", "answer": "3"}\n')
    cases = [
        ([str(run_dir), "3"], 2, "no such step; saved steps: 2"),
        (
            [str(tmp_path / "run" / "checkpoints")],
            2,
            "neither a run dir (.hydra/config.yaml) nor a Hugging Face folder",
        ),
        ([str(run_dir), "dataset=jsonl", f"dataset.source={tmp_path / 'one.jsonl'}"], 2, "has no eval rows"),
        ([str(run_dir), "experiment=quick"], 2, "choose a group of"),
    ]
    for args, code, message in cases:
        status, err = main(args), capsys.readouterr().err
        assert status == code and message in err, (args, err[-800:])
        assert len(err.strip().splitlines()) == 1 and err.startswith("rlexp: error: "), err


def test_a_list_item_key_overrides_the_runs_config(tmp_path: Path) -> None:
    """`rlexp eval RUN reward.functions.1.weight=0.5`: a key inside a list item is set as Hydra sets it (the run's
    recorded config merged with OmegaConf's dotlist refused it: "Cannot merge DictConfig with ListConfig")."""
    from omegaconf import OmegaConf

    from rlexp.train.offline_eval import eval_config

    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(compose_cfg(RUN)))
    conf = eval_config(tmp_path, None, ["reward.functions.1.weight=0.5", "seed=3"])
    assert [f.weight for f in conf.reward.functions] == [1.0, 0.5] and conf.seed == 3


def test_eval_rows_carry_the_prompt_with_the_chat_template_applied() -> None:
    """The rows `rlexp eval` samples from (and records) are rendered: the tools demo's ChatML around the question."""
    from rlexp.models.loader import load_tokenizer
    from rlexp.train.offline_eval import eval_rows

    conf = compose_conf(["experiment=tools_demo"])
    rows = eval_rows(conf, load_tokenizer(conf.model))
    assert rows and all(
        r["prompt"] == f"<|im_start|>user\n{r['question']}<|im_end|>\n<|im_start|>assistant\n" for r in rows
    )


def test_an_out_folder_rlexp_did_not_write_is_refused_and_left_as_it_was(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """`rlexp eval RUN --out DIR` writes into DIR only if it is new, empty or rlexp's (storage.claim_output_dir)."""
    from rlexp.eval import main

    theirs = tmp_path / "downloads"
    theirs.mkdir()
    (theirs / "model.safetensors").write_bytes(b"weights")
    status, err = main([str(tmp_path / "no-run"), "--out", str(theirs)]), capsys.readouterr().err
    assert status == 2 and "a folder holding other files that rlexp did not write" in err, err
    assert len(err.strip().splitlines()) == 1 and [p.name for p in theirs.iterdir()] == ["model.safetensors"]
