"""`python -m rlexp.models.tiny_random {gpt_oss,gemma4,qwen3_moe,gemma4_moe} --out DIR`: a tiny random checkpoint in Hugging Face layout.

Dimensions are those of conf/model/<name>_tiny.yaml, and `TINY` holds how each such option becomes a
`transformers` config (one entry a tiny option, not a branch a family); the weights come from `transformers`
(PyTorch CPU, the `test` extra) with a fixed seed, and the tokenizer is the builtin tiny's
character tokenizer, so `python -m rlexp model=<family>_tiny model.path=DIR` trains it on arith.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlexp.errors import ArgumentParser, RlexpError, RunError, print_error

BUILTIN_TOKENIZER = Path(__file__).resolve().parent / "builtin" / "tiny"
SPECIAL = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


def _common(opt: Any) -> dict[str, Any]:
    return dict(
        vocab_size=opt.vocab_size,
        hidden_size=opt.embed_dim,
        intermediate_size=opt.hidden_dim,
        num_hidden_layers=opt.num_layers,
        num_attention_heads=opt.num_heads,
        num_key_value_heads=opt.num_kv_heads,
        head_dim=opt.head_dim,
        max_position_embeddings=opt.max_context,
        tie_word_embeddings=bool(opt.extra.tie_word_embeddings),
        **SPECIAL,
    )


def _qwen3_moe(opt: Any) -> Any:
    import transformers

    x = opt.extra
    return transformers.Qwen3MoeConfig(
        **{**_common(opt), "intermediate_size": 4 * opt.embed_dim},  # unused: every layer routes to experts
        moe_intermediate_size=opt.hidden_dim,
        num_experts=x.num_experts,
        num_experts_per_tok=x.experts_per_token,
        norm_topk_prob=True,
        rope_theta=float(x.rope_theta),
        rms_norm_eps=x.norm_eps,
    )


def _gpt_oss(opt: Any) -> Any:
    import transformers
    from omegaconf import OmegaConf

    x = opt.extra
    rope = {**OmegaConf.to_container(x.rope_scaling), "rope_theta": float(x.rope_theta)}
    return transformers.GptOssConfig(
        **_common(opt),
        num_local_experts=x.num_experts,
        num_experts_per_tok=x.experts_per_token,
        sliding_window=x.sliding_window,
        rope_parameters=rope,
        rms_norm_eps=x.norm_eps,
    )


def _gemma4(opt: Any, moe: dict[str, Any] | None = None) -> Any:
    import transformers

    x = opt.extra
    period = int(x.sliding_window_pattern)
    types = ["full_attention" if (i + 1) % period == 0 else "sliding_attention" for i in range(opt.num_layers)]
    return transformers.Gemma4TextConfig(
        **_common(opt),
        vocab_size_per_layer_input=opt.vocab_size,
        global_head_dim=x.global_head_dim,
        hidden_size_per_layer_input=x.per_layer_input_dim,
        num_kv_shared_layers=x.num_kv_shared_layers,
        use_double_wide_mlp=bool(x.use_double_wide_mlp),
        sliding_window=x.sliding_window,
        layer_types=types,
        final_logit_softcapping=x.final_logit_softcap,
        rms_norm_eps=x.norm_eps,
        **(moe or {}),
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": float(x.local_rope_theta)},
            "full_attention": {
                "rope_type": "proportional",
                "partial_rotary_factor": float(x.global_rope_proportion),
                "rope_theta": float(x.global_rope_theta),
            },
        },
    )


def _gemma4_moe(opt: Any) -> Any:
    x = opt.extra
    moe = dict(
        enable_moe_block=True,
        num_experts=x.num_experts,
        top_k_experts=x.experts_per_token,
        moe_intermediate_size=x.expert_dim,
        attention_k_eq_v=bool(x.attention_k_eq_v),
        num_global_key_value_heads=x.num_global_kv_heads,
    )
    return _gemma4(opt, moe)


# conf/model/<name>_tiny.yaml -> its transformers config
TINY: dict[str, Callable[[Any], Any]] = {
    "gpt_oss": _gpt_oss,
    "gemma4": _gemma4,
    "qwen3_moe": _qwen3_moe,
    "gemma4_moe": _gemma4_moe,
}


def hf_config(name: str):  # noqa: ANN201 - a transformers config
    from omegaconf import OmegaConf

    from rlexp.config.load import CONF_DIR

    return TINY[name](OmegaConf.load(Path(CONF_DIR) / "model" / f"{name}_tiny.yaml"))


def write(name: str, out: Path, seed: int = 0) -> Path:
    try:
        import torch
        import transformers
    except ImportError as err:
        raise RlexpError("tiny_random needs torch and transformers: pip install 'rlexp[test]'") from err
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(hf_config(name), dtype=torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(BUILTIN_TOKENIZER / name, out / name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m rlexp.models.tiny_random", description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=tuple(TINY))
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        Path(args.out).mkdir(parents=True, exist_ok=True)  # before torch loads: a bad --out fails at once
        print(write(args.family, Path(args.out), args.seed))
    except RlexpError as err:
        print_error(err)
        return err.exit_code
    except OSError as err:  # --out under a file, a read-only folder
        print_error(RunError(f"--out={args.out}: {err.strerror}; choose a folder you can write"))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
