"""Llama 3 (Tunix's llama3 model, with the checkpoint's RoPE theta and llama3 scaling): the family's registered spec.

Plain decoder layers (no q/k norms), so every size term is the generic one.
"""

from __future__ import annotations

from typing import Any

from rlexp.config.schema import ModelConfig
from rlexp.families import text_decoder
from rlexp.families.hf_config import rope_extra
from rlexp.families.registry import register
from rlexp.families.spec import FamilySpec


def _build(m: ModelConfig, ckpt_dir: str, mesh: Any) -> Any:
    from rlexp.models import tunix_text

    return tunix_text.create_llama3(m, ckpt_dir, mesh)


def _tunix_config(m: ModelConfig) -> Any:
    from rlexp.models import tunix_text

    return tunix_text.llama3_config(m)


SPEC = register(
    FamilySpec(
        name="llama3",
        hf_model_types=("llama",),
        build=_build,
        tunix_config=_tunix_config,
        from_hf=rope_extra,
        required_extra=text_decoder.ROPE_EXTRA,
        hf_fields=text_decoder.ROPE_FIELDS,
        hf_names=text_decoder.hf_names,
        hub_prefixes=("llama-3",),
        hub_plain_tuned=False,  # base releases carry no suffix; tuned ones end in -Instruct
    )
)
