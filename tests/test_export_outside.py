"""An exported folder answers outside rlexp as inside it: plain `transformers`, `peft` and lm-evaluation-harness on
`python -m rlexp.export`'s folders reproduce rlexp's own greedy eval (`python -m rlexp.eval`), as the user types both.

rlexp is never its own reference here: the answers come from `transformers.generate` (and `lm_eval`), the adapters
are applied by `peft`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import run_rlexp
from tests.test_export import make_run

RUN = [
    "trainer.max_steps=2",
    "trainer.eval_every=2",
    "trainer.checkpoint_every=2",
    "trainer.eval_prompts=16",
    "trainer.eval_samples=2",
    "logger=none",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default run, trained 2 steps, and its export (the folder: `<run>/../hf`)."""
    run = tmp_path_factory.mktemp("outside") / "run"
    run_rlexp(*RUN, f"hydra.run.dir={run}", check=True)
    hf = run.parent / "hf"
    hf.mkdir()  # an empty folder is rlexp's to write into
    run_rlexp(str(run), "--out", str(hf), module="rlexp.export", check=True)
    return run


@pytest.fixture(scope="module")
def ours(trained: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """rlexp's own greedy eval of the trained run (`python -m rlexp.eval`), once for the tests that compare with it."""
    return rlexp_eval(trained, tmp_path_factory.mktemp("eval") / "e.json")


def export(*args: str) -> int:
    """`rlexp export` in this process (its command as typed is run by `trained` and the adapter test)."""
    from rlexp.export import main

    return main(list(args))


def rlexp_eval(run: Path, out: Path, *overrides: str) -> dict:
    """`python -m rlexp.eval RUN`: rlexp's own greedy answers for the run's checkpoint."""
    run_rlexp(str(run), *overrides, "--out", str(out), module="rlexp.eval", check=True)
    return json.loads(out.read_text())


def questions(run: Path) -> dict[str, dict]:
    """The run's eval rows by id (the data the answers are about; the test renders them itself)."""
    from rlexp.models.export import run_config
    from rlexp.models.loader import load_tokenizer
    from rlexp.train.offline_eval import eval_rows

    conf = run_config(run)
    return {r["id"]: r for r in eval_rows(conf, load_tokenizer(conf.model))}


def transformers_answers(hf: Path, prompts: list[str], *, chat: bool) -> list[str]:
    """Greedy answers of plain transformers on the folder, with the folder's generation_config.json (no options)."""
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(hf)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    out = []
    for p in prompts:
        if chat:
            messages = [{"role": "user", "content": p}]
            ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        else:
            ids = tok(p, return_tensors="pt")
        with torch.no_grad():
            tokens = model.generate(**ids)
        out.append(tok.decode(tokens[0, ids["input_ids"].shape[1] :], skip_special_tokens=True))
    return out


@pytest.mark.slow
def test_transformers_reproduces_rlexps_greedy_eval(trained: Path, ours: dict) -> None:
    hf = trained.parent / "hf"
    rows = questions(trained)
    theirs = transformers_answers(hf, [rows[r["id"]]["question"] for r in ours["rows"]], chat=False)
    assert len(theirs) == 16
    assert theirs == [r["completion"] for r in ours["rows"]]  # all 16 (1 of 20 before BOS was added)
    gen = json.loads((hf / "generation_config.json").read_text())
    assert gen["do_sample"] is False and gen["max_new_tokens"] == 4  # greedy, trainer.max_completion_tokens
    assert (gen["bos_token_id"], gen["eos_token_id"], gen["pad_token_id"]) == (1, 2, 0)
    # the model card: base, data, algorithm, steps, evals before -> after as summary.json has them, the command
    card = (hf / "README.md").read_text()
    after = json.loads((trained / "summary.json").read_text())["eval"]["after"]
    for text in ("builtin:tiny", "dataset `arith`", "grpo", "step 2", "rlexp 0.1.0", f"rlexp export {trained} --out"):
        assert text in card, text
    assert f"| greedy_accuracy | 0.4375 | {after['greedy_accuracy']:.4f} (step 2) |" in card
    # a folder rlexp exported into before is rlexp's to overwrite
    from safetensors.numpy import load_file

    before = load_file(hf / "model.safetensors")
    (hf / "model.safetensors").unlink()
    assert export(str(trained), "--out", str(hf)) == 0
    again = load_file(hf / "model.safetensors")
    assert sorted(again) == sorted(before) and all(np.array_equal(again[k], before[k]) for k in before)


@pytest.mark.slow
def test_chat_template_run_answers_through_apply_chat_template(tmp_path: Path) -> None:
    """A ChatML run on `tiny_tools` (BOS `<s>`, EOS `<|im_end|>`): `apply_chat_template` gives rlexp's prompt (after
    the BOS rlexp's sampler prepends) and transformers its greedy answers."""
    import transformers

    overrides = ["model=tiny_tools", "chat_template=chatml", "trainer.max_prompt_tokens=32", "trainer.eval_prompts=8"]
    make_run(tmp_path / "run", None, overrides, step=3)
    hf = tmp_path / "hf"
    assert export(str(tmp_path / "run"), "--out", str(hf)) == 0
    ours = rlexp_eval(tmp_path / "run", tmp_path / "e.json")
    rows = questions(tmp_path / "run")
    tok = transformers.AutoTokenizer.from_pretrained(hf)
    for r in ours["rows"]:
        messages = [{"role": "user", "content": rows[r["id"]]["question"]}]
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert text == "<s>" + rows[r["id"]]["prompt"]
    theirs = transformers_answers(hf, [rows[r["id"]]["question"] for r in ours["rows"]], chat=True)
    assert len(theirs) == 8 and theirs == [r["completion"] for r in ours["rows"]]
    gen = json.loads((hf / "generation_config.json").read_text())
    assert gen["eos_token_id"] == tok.convert_tokens_to_ids("<|im_end|>")


@pytest.mark.slow
def test_lora_adapters_load_in_peft_with_the_merged_exports_logits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch
    import transformers
    from peft import PeftModel

    from rlexp.models.loader import BUILTIN_DIR

    make_run(tmp_path / "run", None, ["model=tiny", "trainer.lora.rank=4"], step=2, lora=True)
    assert export(str(tmp_path / "run"), "--out", str(tmp_path / "merged")) == 0
    proc = run_rlexp(str(tmp_path / "run"), "--out", str(tmp_path / "peft"), "--adapter", module="rlexp.export")
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = json.loads((tmp_path / "peft" / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 16.0 and len(config["target_modules"]) == 14  # 2 layers x 7
    base = transformers.AutoModelForCausalLM.from_pretrained(BUILTIN_DIR / "tiny", dtype=torch.float32)
    with_adapters = PeftModel.from_pretrained(base, tmp_path / "peft").eval()
    merged = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float32).eval()
    tokens = torch.as_tensor(np.random.default_rng(5).integers(3, 17, size=(3, 9)))
    with torch.no_grad():
        theirs, ours = with_adapters(tokens).logits, merged(tokens).logits
    assert torch.allclose(theirs, ours, atol=1e-5, rtol=1e-4), (theirs - ours).abs().max()
    with torch.no_grad(), with_adapters.disable_adapter():
        plain = with_adapters(tokens).logits
    assert not torch.allclose(plain, ours, atol=1e-3)  # the adapters change the answer: the check has teeth
    assert "library_name: peft" in (tmp_path / "peft" / "README.md").read_text()
    # a full fine-tune has no adapters: one line, exit 2
    make_run(tmp_path / "full", None, ["model=tiny"], step=1)
    capsys.readouterr()
    assert export(str(tmp_path / "full"), "--out", str(tmp_path / "none"), "--adapter") == 2
    err = capsys.readouterr().err
    assert "trained no LoRA adapters" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "none").exists()


LM_EVAL_TASK = """task: rlexp_eval_rows
dataset_path: json
dataset_kwargs:
  data_files:
    test: {rows}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
target_delimiter: ""
generation_kwargs:
  until: []
  do_sample: false
  max_gen_toks: {max_tokens}
filter_list:
  - name: leading_int  # arith_correct's reading: the completion's leading integer
    filter:
      - function: regex
        regex_pattern: "^\\\\s*(-?\\\\d+)"
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


@pytest.mark.slow
def test_lm_eval_harness_gets_rlexps_greedy_accuracy(trained: Path, ours: dict, tmp_path: Path) -> None:
    """lm-evaluation-harness (`lm_eval --model hf`), offline, on the export with a local task of the run's own eval
    rows: the accuracy rlexp's eval reports for that checkpoint."""
    rows = questions(trained)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    with (tasks / "rows.jsonl").open("w") as f:
        for r in ours["rows"]:
            f.write(json.dumps({"question": rows[r["id"]]["question"], "answer": str(r["answer"])}) + "\n")
    (tasks / "rlexp_eval_rows.yaml").write_text(LM_EVAL_TASK.format(rows=tasks / "rows.jsonl", max_tokens=4))
    env = {
        **os.environ,
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(tmp_path / "datasets"),
    }
    args = ["--model", "hf", "--model_args", f"pretrained={trained.parent / 'hf'},dtype=float32", "--device", "cpu"]
    args += ["--tasks", "rlexp_eval_rows", "--include_path", str(tasks), "--output_path", str(tmp_path / "out")]
    run_rlexp(*args, module="lm_eval", cwd=tmp_path, env=env, check=True)
    (results,) = (tmp_path / "out").rglob("results_*.json")
    got = json.loads(results.read_text())["results"]["rlexp_eval_rows"]["exact_match,leading_int"]
    assert ours["metrics"]["greedy_accuracy"] == pytest.approx(got)
    assert 0 < got < 1  # neither all right nor all wrong: a prompt off by its BOS would show
