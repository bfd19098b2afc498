"""Chat and data templates: each format's layout, the tokenizer path, doubled markers, length filtering."""

from __future__ import annotations

import copy

import pytest

from rlexp.config.schema import ChatTemplateConfig, DataTemplateConfig
from rlexp.data.registry import Splits
from rlexp.data.templates import doubled_markers, render_prompt, render_rows, render_splits
from rlexp.errors import ConfigError
from tests.helpers import compose_conf

ROW = {"id": "r1", "question": "What is 2+3?", "answer": "5", "data_source": "t"}
# MaxText's gsm8k_rl.json TEMPLATE: Gemma markers baked into the data template.
SEED_GSM8K_TEMPLATE = "<start_of_turn>user\n{system_prompt}\n\n{question}<end_of_turn>\n<start_of_turn>model"


def _templates(option: str, data: str = "openmathinstruct2_rl") -> tuple[DataTemplateConfig, ChatTemplateConfig]:
    conf = compose_conf([f"chat_template={option}", f"data_template={data}"])
    return conf.data_template, conf.chat_template


def test_gemma_matches_the_seed_prompt() -> None:
    d, c = _templates("gemma")
    expected = f"<bos><start_of_turn>user\n{d.system_prompt}\n\nWhat is 2+3?<end_of_turn>\n<start_of_turn>model\n"
    assert render_prompt(ROW, d, c) == expected
    assert doubled_markers(ROW, d, c, expected) == []


@pytest.mark.parametrize(
    ("option", "start", "end"),
    [
        ("harmony", "<|start|>system<|message|>You are ChatGPT", "<|start|>user<|message|>What is 2+3?<|end|><|start|>assistant"),
        ("chatml", "<|im_start|>user\n", "What is 2+3?<|im_end|>\n<|im_start|>assistant\n"),
        ("llama3", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n", "What is 2+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
        ("plain", "What is 2+3?", "What is 2+3?"),
    ],
)  # fmt: skip
def test_each_chat_format(option: str, start: str, end: str) -> None:
    d, c = _templates(option, "plain")
    prompt = render_prompt(ROW, d, c)
    assert prompt.startswith(start) and prompt.endswith(end)
    assert doubled_markers(ROW, d, c, prompt) == []


def test_harmony_has_no_date_so_prompts_are_reproducible() -> None:
    assert "Current date" not in render_prompt(ROW, *_templates("harmony"))


@pytest.mark.slow
def test_tokenizer_machinery_renders_the_same_text() -> None:
    from transformers import AutoTokenizer

    from rlexp.models.loader import BUILTIN_DIR

    tok = AutoTokenizer.from_pretrained(str(BUILTIN_DIR / "tiny"), local_files_only=True)
    for option in ("gemma", "chatml", "llama3", "harmony"):
        d, c = _templates(option)
        c.bos_token = tok.bos_token
        assert render_prompt(ROW, d, c, tok) == render_prompt(ROW, d, c), option
    d, c = _templates("gemma")
    c.chat = "tokenizer"
    with pytest.raises(ConfigError, match="ships no chat template"):
        render_prompt(ROW, d, c, tok)


def test_doubled_markers_of_the_seeds_are_refused() -> None:
    seed, gemma = _templates("gemma")
    seed.template = SEED_GSM8K_TEMPLATE
    prompt = render_prompt(ROW, seed, gemma)
    assert "<start_of_turn>user\n<start_of_turn>user" in prompt
    problems = doubled_markers(ROW, seed, gemma, prompt)
    assert any("already contains turn markers" in p for p in problems)
    assert any("appears twice in a row" in p for p in problems)
    # The gpt-oss seed: Gemma markers inside a harmony prompt.
    harmony = _templates("harmony")[1]
    assert doubled_markers(ROW, seed, harmony, render_prompt(ROW, seed, harmony))
    # Without a chat template the seed's own markers are the only ones: accepted.
    plain = _templates("plain")[1]
    assert doubled_markers(ROW, seed, plain, render_prompt(ROW, seed, plain)) == []


class CharTokenizer:
    def encode(self, text: str) -> list[int]:
        return [ord(ch) for ch in text]


def test_long_prompts_are_filtered_and_counted() -> None:
    rows = [dict(ROW, id=str(i), question="x" * n) for i, n in enumerate((5, 50, 10, 80))]
    skipped: dict[str, int] = {}
    d, c = _templates("plain", "plain")
    kept = render_rows(rows, d, c, CharTokenizer(), max_prompt_tokens=20, skipped=skipped)
    assert [r["id"] for r in kept] == ["0", "2"] and skipped == {"prompt_too_long": 2}
    assert len(render_rows(rows, d, c)) == 4  # the trainer's positional form: no filter
    s = render_splits(Splits(train=rows, eval=copy.deepcopy(rows), skipped={"missing_answer": 1}),
                      d, c, CharTokenizer(), 20)  # fmt: skip
    assert s.skipped == {"missing_answer": 1, "prompt_too_long": 4} and len(s.train) == len(s.eval) == 2


def test_bad_data_template_is_a_config_error() -> None:
    d, c = _templates("plain")
    d.template = "{question} {answer}"
    with pytest.raises(ConfigError, match="data_template.template"):
        render_prompt(ROW, d, c)
