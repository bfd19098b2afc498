"""JsonTokenizer against AutoTokenizer on the same folders, and which folders take which path."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlexp.models.loader import BUILTIN_DIR
from rlexp.models.tokenizer import JsonTokenizer, build_char_tokenizer, load_tokenizer_dir, plain_tokenizer_config
from tests.helpers import REPO, SHORT, conf_options, run_rlexp

TEXTS = ["12+7=19", "3 - 4 = -1", "", " ", "9=", "abc", "<s>1+1</s>", "<pad><pad>2"]


def auto(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def test_builtin_tiny_is_plain_and_loads_without_transformers() -> None:
    assert isinstance(load_tokenizer_dir(BUILTIN_DIR / "tiny"), JsonTokenizer)
    code = (
        "import sys; from rlexp.models.tokenizer import load_tokenizer_dir; from rlexp.models.loader import BUILTIN_DIR;"
        "t = load_tokenizer_dir(BUILTIN_DIR / 'tiny'); print(t.encode('1+2=3'), 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[4,", "13,", "5,", "15,", "6]", "False"]


@pytest.mark.slow
def test_the_default_command_trains_without_importing_transformers(tmp_path: Path) -> None:
    """`python -m rlexp` as typed (short): every module it imports is listed by -X importtime.

    Neither transformers (the builtin tokenizer loads through `tokenizers`) nor the Tunix trainers a GRPO run
    does not use (Tunix's package `__init__` is deferred: rlexp.tunix.imports) are imported.
    """
    # the suite's compile cache: SHORT's programs are compiled once for all (a cache of its own cost ~10 CPU-s), and
    # what a run imports is rlexp's code path, the same whether XLA compiles or reads its programs
    out = run_rlexp(
        *SHORT, f"output_dir={tmp_path}", f"hydra.run.dir={tmp_path / 'hydra'}", python=["-X", "importtime"]
    )
    assert out.returncode == 0, out.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert {"jax", "tunix", "tokenizers"} <= imported  # the listing is whole: training did import its stack
    assert not {m for m in imported if m.split(".")[0] == "transformers"}
    assert not {m for m in imported if m.startswith(("tunix.rl.agentic", "tunix.distillation", "pandas"))}
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "completed"


def test_same_ids_text_and_special_tokens_as_autotokenizer() -> None:
    fast, ref = load_tokenizer_dir(BUILTIN_DIR / "tiny"), auto(BUILTIN_DIR / "tiny")
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        assert (getattr(fast, name), getattr(fast, name + "_id")) == (getattr(ref, name), getattr(ref, name + "_id"))
    assert fast.vocab_size == ref.vocab_size
    for text in TEXTS:
        for special in (True, False):
            assert fast.encode(text, add_special_tokens=special) == ref.encode(text, add_special_tokens=special), text
        ids = ref.encode(text)
        for skip in (True, False):
            assert fast.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip), text
        assert fast.decode(ids) == ref.decode(ids)
    assert fast(TEXTS)["input_ids"] == ref(TEXTS)["input_ids"]
    assert fast("1+1=2")["input_ids"] == ref("1+1=2")["input_ids"]
    assert fast.decode(5) == ref.decode(5) == "2"
    import numpy as np

    assert fast.decode(np.array([4, 13, 5])) == ref.decode([4, 13, 5]) == "1+2"


@pytest.mark.parametrize("option", [o for o in conf_options("chat_template") if o != "plain"])
def test_chat_templates_render_as_transformers_does(option: str) -> None:
    import yaml

    template = yaml.safe_load((REPO / "conf" / "chat_template" / f"{option}.yaml").read_text())["chat"]
    fast, ref = load_tokenizer_dir(BUILTIN_DIR / "tiny"), auto(BUILTIN_DIR / "tiny")
    messages = [{"role": "user", "content": "What is 2+3?"}]
    for gen in (True, False):
        kw = {"chat_template": template, "add_generation_prompt": gen}
        assert fast.apply_chat_template(messages, **kw) == ref.apply_chat_template(messages, tokenize=False, **kw)
    with pytest.raises(ValueError, match="no chat template"):
        fast.apply_chat_template(messages)


def test_tunix_adapter_and_sampler_tokenize_alike() -> None:
    from tunix.generate.tokenizer_adapter import TokenizerAdapter

    fast, ref = TokenizerAdapter(load_tokenizer_dir(BUILTIN_DIR / "tiny")), TokenizerAdapter(auto(BUILTIN_DIR / "tiny"))
    assert (fast.bos_id(), fast.eos_id(), fast.pad_id()) == (ref.bos_id(), ref.eos_id(), ref.pad_id()) == (1, 2, 0)
    assert fast.encode("4+4=8") == ref.encode("4+4=8")
    assert fast.decode([7, 13, 7, 15]) == ref.decode([7, 13, 7, 15]) == "4+4="


def _folder(tmp_path: Path, **config_changes: object) -> Path:
    folder = tmp_path / "tok"
    build_char_tokenizer(folder)
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config.update(config_changes)
    path.write_text(json.dumps({k: v for k, v in config.items() if v is not ...}))
    return folder


@pytest.mark.parametrize(
    "changes",
    [
        {"chat_template": "{{ messages[0]['content'] }}"},
        {"tokenizer_class": "LlamaTokenizerFast"},
        {"add_bos_token": True},
        {"clean_up_tokenization_spaces": True},
        {"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False, "rstrip": False, "special": True}},
        {"added_tokens_decoder": {}},
    ],
)
def test_other_folders_go_through_autotokenizer(tmp_path: Path, changes: dict) -> None:
    folder = _folder(tmp_path, **changes)
    assert plain_tokenizer_config(folder) is None
    assert not isinstance(load_tokenizer_dir(folder), JsonTokenizer)


def test_extra_files_and_missing_config_go_through_autotokenizer(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    assert plain_tokenizer_config(folder) is not None
    (folder / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    assert plain_tokenizer_config(folder) is None
    (folder / "chat_template.jinja").unlink()
    (folder / "tokenizer_config.json").unlink()
    assert plain_tokenizer_config(folder) is None


def test_unreadable_tokenizer_json_is_one_line_error(tmp_path: Path) -> None:
    from rlexp.errors import RunError

    folder = _folder(tmp_path)
    (folder / "tokenizer.json").write_text("{not json")
    with pytest.raises(RunError, match="cannot load its tokenizer"):
        load_tokenizer_dir(folder)
    shutil.rmtree(folder)
