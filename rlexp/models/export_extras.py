"""What makes an exported folder answer outside rlexp exactly as inside it: tokenizer, chat template, generation
settings, and the model card (README.md).

rlexp's sampler (Tunix's) prompts the model with `[BOS] + tokenizer.encode(prompt)`, one BOS where the encoding
already starts with it, whenever the tokenizer has a BOS token; most base tokenizers (and the builtin `tiny`) do
not add it themselves, so plain `transformers` on a folder with the base's tokenizer files asked another question
(it agreed with rlexp's greedy answers on 1 of 20 of the default run's eval prompts). The export therefore writes:
- a tokenizer whose `tokenizer(text)` adds that BOS (a post-processor in tokenizer.json, `add_bos_token` in
  tokenizer_config.json), checked through the tokenizer loader the way `AutoTokenizer` loads it;
- the run's chat template as the folder's (tokenizer_config.json `chat_template` and chat_template.jinja), led by
  `{{ bos_token }}` where the sampler's BOS is not already rendered, so `apply_chat_template(messages,
  add_generation_prompt=True)` gives the tokens rlexp sampled from (its text: the run's prompt, after the BOS);
- generation_config.json with the eval's sampling (`trainer.eval_strategy`: greedy is `do_sample: false`),
  `max_new_tokens = trainer.max_completion_tokens`, and the BOS, EOS and pad ids rlexp used;
- README.md: base model, data, algorithm, steps, the evals before and after (summary.json), versions, the command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlexp import storage
from rlexp.config.schema import RlexpConfig
from rlexp.errors import RunError

BOS_TEMPLATE = "{{ bos_token }}"
# eval metrics the card shows before -> after, in this order, when summary.json holds them
CARD_METRICS = ("greedy_accuracy", "accuracy", "partial_accuracy", "format_accuracy", "mean_reward", "pass_at_1")


def sampler_bos(tokenizer: Any) -> int | None:
    """The BOS id rlexp's sampler prepends to every prompt: the tokenizer's, unless missing or 0 (Tunix's rule)."""
    bos = getattr(tokenizer, "bos_token_id", None)
    return bos if bos else None


def sampler_ids(tokenizer: Any, prompt: str) -> list[int]:
    """The token ids rlexp's sampler feeds for `prompt` (Tunix's `Sampler.tokenize`: BOS, then the encoding,
    a doubled leading BOS kept once)."""
    ids = list(tokenizer.encode(prompt))
    bos = sampler_bos(tokenizer)
    if bos is None:
        return ids
    ids = [bos, *ids]
    while len(ids) > 1 and ids[0] == ids[1] == bos:
        ids.pop(0)
    return ids


def add_bos(dest: Path, tokenizer: Any) -> bool:
    """Make the folder's tokenizer.json add the sampler's BOS to every encoding (when it does not already);
    whether it changed anything."""
    bos = sampler_bos(tokenizer)
    if bos is None or list(tokenizer.encode(""))[:1] == [bos]:
        return False
    from tokenizers import Tokenizer, processors

    path = dest / "tokenizer.json"
    if not path.is_file():
        raise RunError(f"{dest}: the base model has no tokenizer.json, so the export cannot make it add BOS")
    tok = Tokenizer.from_file(str(path))
    name = tok.id_to_token(bos)
    template = processors.TemplateProcessing(single=f"{name} $A", pair=f"{name} $A $B:1", special_tokens=[(name, bos)])
    # after the base's own post-processing (byte-level offsets, an EOS), so that stays as it was
    tok.post_processor = template if tok.post_processor is None else processors.Sequence([tok.post_processor, template])
    tok.save(str(path))
    config_path = dest / "tokenizer_config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    config["add_bos_token"] = True  # tokenizer classes that build their post-processor from this key (Llama's)
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return True


def chat_template(cfg: RlexpConfig, tokenizer: Any) -> str | None:
    """The chat template the export ships: the run's (`chat_template.chat`, or the tokenizer's own for `tokenizer`),
    led by `{{ bos_token }}` when rlexp's sampler prepends a BOS the template does not render; None for runs
    without one (plain prompts), which keep the base's files as they are."""
    template = cfg.chat_template.chat
    if template == "tokenizer":
        template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str):
        return None
    bos = sampler_bos(tokenizer)
    if bos is not None:
        probe = [{"role": "user", "content": "1"}]
        rendered = tokenizer.apply_chat_template(
            probe, chat_template=template, tokenize=False, add_generation_prompt=True
        )
        if not rendered.startswith(tokenizer.bos_token):
            template = BOS_TEMPLATE + template
    return template


def write_chat_template(dest: Path, template: str) -> None:
    """`template` as the folder's one chat template (transformers 5 reads chat_template.jinja first, older
    readers tokenizer_config.json's key)."""
    config_path = dest / "tokenizer_config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    config["chat_template"] = template
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    (dest / "chat_template.jinja").write_text(template)
    (dest / "chat_template.json").unlink(missing_ok=True)  # a base's named templates would shadow the run's


def check_tokenizer(dest: Path, tokenizer: Any, cfg: RlexpConfig) -> None:
    """The exported tokenizer, loaded as `AutoTokenizer` loads it, gives the ids rlexp's sampler fed: for
    `tokenizer(text)`, and for `apply_chat_template(..., tokenize=True)` where the run used a chat template."""
    from rlexp.models.tokenizer import load_tokenizer_dir

    exported = load_tokenizer_dir(dest)
    prompt = "1+2="
    theirs = list(exported.encode(prompt))
    template = cfg.chat_template.chat
    template = getattr(tokenizer, "chat_template", None) if template == "tokenizer" else template
    if isinstance(template, str):
        messages = [{"role": "user", "content": prompt}]
        prompt = tokenizer.apply_chat_template(
            messages, chat_template=template, tokenize=False, add_generation_prompt=True
        )
        text = exported.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        theirs = list(exported.encode(text, add_special_tokens=False))  # what apply_chat_template(tokenize=True) gives
    ours = sampler_ids(tokenizer, prompt)
    if theirs != ours:
        raise RunError(
            f"{dest}: the exported tokenizer encodes {prompt!r} as {theirs} where rlexp's sampler fed {ours}; "
            "report this with the base model's tokenizer_config.json"
        )


def generation_config(cfg: RlexpConfig, tokenizer: Any, sampling: dict[str, Any], base: dict[str, Any]) -> dict:
    """generation_config.json: the base's, with the eval's sampling, completion budget and special ids."""
    out = {k: v for k, v in base.items() if k not in ("temperature", "top_p", "top_k", "do_sample")}
    greedy = sampling.get("top_k") == 1 or not sampling.get("temperature")
    out["do_sample"] = not greedy
    if not greedy:
        out.update({k: sampling[k] for k in ("temperature", "top_p", "top_k") if sampling.get(k) is not None})
    out["max_new_tokens"] = cfg.trainer.max_completion_tokens
    out.pop("max_length", None)  # max_new_tokens is the budget; a base's max_length would cut it short
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos  # Tunix pads with EOS then
    out.update({"bos_token_id": sampler_bos(tokenizer), "eos_token_id": eos, "pad_token_id": pad})
    out.setdefault("transformers_version", _version("transformers"))
    return out


def finish_folder(
    dest: Path,
    cfg: RlexpConfig,
    tokenizer: Any,
    sampling: dict[str, Any],
) -> None:
    """Tokenizer (BOS), chat template and generation_config.json of an exported folder, then its tokenizer checked."""
    add_bos(dest, tokenizer)
    template = chat_template(cfg, tokenizer)
    if template is not None:
        write_chat_template(dest, template)
    base = storage.read_json(str(dest / "generation_config.json")) or {}
    storage.write_json(str(dest / "generation_config.json"), generation_config(cfg, tokenizer, sampling, base))
    check_tokenizer(dest, tokenizer, cfg)


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


def model_card(
    cfg: RlexpConfig, run_dir: Path, step: int, command: str, *, adapter: bool, sampling: dict[str, Any]
) -> str:
    """README.md of an exported folder: what was trained from what, how, how far, with what result, by what."""
    import rlexp

    m, d, t = cfg.model, cfg.dataset, cfg.trainer
    summary = storage.read_json(str(run_dir / "summary.json")) or {}
    evals = summary.get("eval") or {}
    before, after = evals.get("before") or {}, evals.get("after") or {}
    base = m.hf_id or m.path or m.name
    front = ["---", f"library_name: {'peft' if adapter else 'transformers'}"]
    if m.hf_id:
        front.append(f"base_model: {m.hf_id}")
    front += ["tags:", "- rlexp", f"- {t.algorithm}", "---", ""]
    lora = f", LoRA rank {t.lora.rank} alpha {t.lora.alpha:g}" if t.lora.rank > 0 else ""
    what = "LoRA adapters (PEFT) of" if adapter else "A fine-tune of"
    lines = [
        f"# {cfg.run_name} (step {step})",
        "",
        f"{what} `{base}` (rlexp model `{m.name}`, family {m.family}), trained with rlexp.",
        "",
        f"- **Base model**: `{base}`",
        f"- **Data**: dataset `{d.name}` ({d.loader}{', ' + d.source if d.source else ''}), "
        f"data template `{cfg.data_template.name}`, chat template `{cfg.chat_template.name}`",
        f"- **Algorithm**: {t.algorithm}{lora}; reward `{cfg.reward.name}`",
        f"- **Steps**: checkpoint of step {step} (the run was set to {t.max_steps} steps)",
        f"- **Run**: `{run_dir}`",
        "",
        "## Evaluation (rlexp's eval split, from summary.json)",
        "",
    ]
    shown = [
        k for k in CARD_METRICS if isinstance(before.get(k), int | float) and isinstance(after.get(k), int | float)
    ]
    if shown:
        total = after.get("total")
        lines += [f"{int(total)} prompts, `{t.eval_strategy}` sampling {sampling}." if total else "", ""]
        lines += ["| metric | before | after |", "|---|---|---|"]
        lines += [f"| {k} | {before[k]:.4f} | {after[k]:.4f} (step {after.get('step', '?')}) |" for k in shown]
    else:
        lines.append("summary.json holds no evals before and after (the run did not finish, or evaluated none).")
    prompt = "the question as the data template lays it out, through `tokenizer(prompt)`"
    if cfg.chat_template.chat is not None:
        prompt = "one user message (the data template's text) through `tokenizer.apply_chat_template(messages, add_generation_prompt=True)`"
    lines += [
        "",
        "## Use",
        "",
        f"Prompt with {prompt}; the tokenizer adds the BOS rlexp's sampler added, and generation_config.json holds the "
        f"eval's sampling and `max_new_tokens={t.max_completion_tokens}`, so `model.generate` answers as rlexp's eval.",
        f"The data template: `{cfg.data_template.template}`"
        + (f" with system prompt `{cfg.data_template.system_prompt}`." if cfg.data_template.system_prompt else "."),
    ]
    if adapter:
        lines += [
            "",
            "```python",
            "from peft import PeftModel",
            "from transformers import AutoModelForCausalLM",
            f'model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("{base}"), "<this folder>")',
            "```",
        ]
    versions = summary.get("versions") or {}
    lines += [
        "",
        "## Provenance",
        "",
        f"- rlexp {rlexp.__version__}"
        + (f" (run trained with rlexp {versions['rlexp']}" if versions.get("rlexp") else "")
        + (
            f", commit {versions['git_commit']})"
            if versions.get("git_commit")
            else (")" if versions.get("rlexp") else "")
        ),
        f"- Written by: `{command}`",
        "",
    ]
    return "\n".join(front + lines)
