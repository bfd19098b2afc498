"""A checkpoint's config.json against the model option: reading it, checking it (one error naming every
mismatch, RoPE included), and the model option that describes one (tests, `rlexp.export` metadata).

Pure Python (the preflight and `--cfg` paths check without JAX); which `model_type`s a family reads, which keys it
compares and which option fields a config.json sets are the family's spec (`rlexp.families.<family>`).
"""

from __future__ import annotations

import json
import math
from typing import Any

from rlexp.config.schema import ModelConfig
from rlexp.errors import RlexpError, RunError
from rlexp.families.registry import family_of, family_of_model_type


def text_config(hf: dict[str, Any]) -> dict[str, Any]:
    """The language-model part of a config.json (multimodal configs nest it under text_config)."""
    return hf.get("text_config") or hf


def _option_value(m: ModelConfig, key: str) -> Any:
    if key.startswith("extra."):
        return (m.extra or {}).get(key[len("extra.") :])
    return getattr(m, key)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) == bool(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    return a == b


def check_hf_config(m: ModelConfig, hf: dict[str, Any], source: str) -> None:
    """Compare a checkpoint's config.json with the model option; one error naming every mismatch."""
    fam = family_of(m)
    tc = text_config(hf)
    model_type = tc.get("model_type") or hf.get("model_type")
    if model_type and model_type not in fam.hf_model_types:
        raise RlexpError(
            f"{source}/config.json: model_type={model_type!r} is not a {fam.name} checkpoint "
            f"(expects {', '.join(fam.hf_model_types)}); pick the matching model= option"
        )
    moe = bool((m.extra or {}).get("num_experts"))
    if moe and "num_experts" in tc and "num_local_experts" not in tc:
        tc = {**tc, "num_local_experts": tc["num_experts"]}  # the hub's config.json; transformers 5 renames it
    rows = [
        f"{key}={tc[key]} (rlexp's {fam.name} MoE needs {want})"
        for key, want in (fam.moe_required if moe else {}).items()
        if key in tc and tc[key] != want
    ]
    for ours, theirs in {**fam.hf_fields, **(fam.moe_fields if moe else {})}.items():
        if theirs not in tc:
            continue
        want, got = _option_value(m, ours), tc[theirs]
        if want is None:
            continue
        if ours == "head_dim" and got is None:
            continue
        if not _same(want, got):
            rows.append(f"model.{ours}={want} vs {theirs}={got}")
    rows += _rope_mismatches(m, tc)
    if rows:
        raise RlexpError(
            f"{source}/config.json disagrees with model={m.name}: {'; '.join(rows)}; "
            "pick the model option matching the checkpoint or fix the option"
        )


def _rope_mismatches(m: ModelConfig, tc: dict[str, Any]) -> list[str]:
    """RoPE theta and scaling (llama3 / yarn) of the option against config.json, old or new key layout."""
    x = m.extra or {}
    params = tc.get("rope_parameters") if isinstance(tc.get("rope_parameters"), dict) else {}
    rows = []
    theirs_theta = tc.get("rope_theta", params.get("rope_theta"))
    if (
        "rope_theta" in x
        and "rope_theta" not in tc
        and theirs_theta is not None
        and not _same(x["rope_theta"], theirs_theta)
    ):
        rows.append(f"model.extra.rope_theta={x['rope_theta']} vs rope_parameters.rope_theta={theirs_theta}")
    scaling = tc.get("rope_scaling") if isinstance(tc.get("rope_scaling"), dict) else params
    for key, want in (x.get("rope_scaling") or {}).items():
        if key in scaling and not _same(want, scaling[key]):
            rows.append(f"model.extra.rope_scaling.{key}={want} vs rope_scaling.{key}={scaling[key]}")
    return rows


def read_hf_config(ckpt_dir: str) -> dict[str, Any]:
    import fsspec

    path = ckpt_dir.rstrip("/") + "/config.json"
    try:
        with fsspec.open(path, "r", encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError as err:
        raise RlexpError(f"{path} not found: a checkpoint folder needs config.json next to its safetensors") from err
    except (ValueError, OSError) as err:  # truncated or binary: JSONDecodeError, UnicodeDecodeError
        raise RunError(f"{path}: not a readable config.json ({str(err)[:120]}); download the model again") from None
    if not isinstance(data, dict):
        raise RunError(f"{path}: config.json holds no JSON object; download the model again")
    return data


def model_config_from_hf(hf: dict[str, Any], *, name: str, path: str | None = None) -> ModelConfig:
    """A model option describing a Hugging Face config.json (tests, and `rlexp.export` metadata)."""
    tc = text_config(hf)
    spec = family_of_model_type(tc["model_type"])
    head_dim = tc.get("head_dim") or tc["hidden_size"] // tc["num_attention_heads"]
    m = ModelConfig(
        name=name,
        family=spec.name,
        path=path,
        num_layers=tc["num_hidden_layers"],
        vocab_size=tc["vocab_size"],
        embed_dim=tc["hidden_size"],
        hidden_dim=tc["intermediate_size"],
        num_heads=tc["num_attention_heads"],
        num_kv_heads=tc["num_key_value_heads"],
        head_dim=head_dim,
        max_context=tc.get("max_position_embeddings", 4096),
    )
    spec.from_hf(m, tc, hf)
    return m


def tied_embeddings(hf: dict[str, Any]) -> bool:
    """config.json's tie_word_embeddings (multimodal configs keep it at the top or in text_config)."""
    return bool(hf.get("tie_word_embeddings", text_config(hf).get("tie_word_embeddings", False)))


def rope_extra(m: ModelConfig, tc: dict[str, Any], hf: dict[str, Any]) -> None:
    """model.extra's RoPE theta (and scaling), norm epsilon and embedding tying, old or new key layout."""
    rope = tc.get("rope_parameters") or {}
    theta = tc.get("rope_theta") or rope.get("rope_theta", 10000.0)
    m.extra = {
        "rope_theta": theta,
        "norm_eps": tc.get("rms_norm_eps", 1e-6),
        "tie_word_embeddings": tied_embeddings(hf),
    }
    scaling = tc.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
    if scaling and scaling.get("rope_type", scaling.get("type")) not in (None, "default"):
        m.extra["rope_scaling"] = {k: v for k, v in scaling.items() if k != "rope_theta"}
