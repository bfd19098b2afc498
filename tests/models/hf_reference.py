"""Tiny random Hugging Face reference models for parity tests (PyTorch CPU, fp32, no downloads).

torch and transformers are imported where used: collecting the suite imports this module in every pytest worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

VOCAB = 96


def save_reference(model: Any, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    return out


def make_model(config: Any, seed: int = 0, std: float = 0.08) -> Any:
    """A random model whose weights are large enough for distinct, non-flat logits."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "layer_scalar" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("sinks"):
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(std * torch.randn_like(p))
    return model.eval()


def hf_logits(model: Any, tokens: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.as_tensor(tokens, dtype=torch.long)).logits.float().numpy()


def hf_greedy(model: Any, tokens: np.ndarray, steps: int) -> np.ndarray:
    import torch

    with torch.no_grad():
        out = model.generate(
            torch.as_tensor(tokens, dtype=torch.long),
            attention_mask=torch.ones(tokens.shape, dtype=torch.long),
            max_new_tokens=steps,
            min_new_tokens=steps,
            do_sample=False,
            pad_token_id=0,
        )
    return out[:, tokens.shape[1] :].numpy()


def prompt_tokens(batch: int = 2, length: int = 7, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(3, VOCAB, size=(batch, length))
