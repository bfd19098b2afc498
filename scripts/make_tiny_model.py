"""Rebuild the builtin `tiny` model (rlexp/models/builtin/tiny/) deterministically.

    .venv/bin/python scripts/make_tiny_model.py [--steps 400] [--label-smoothing 0.2] [--out DIR] [overrides]

A tiny Qwen3 (conf/model/tiny.yaml dimensions) with a character tokenizer, randomly initialised
from a fixed seed, then warmed up with a short supervised run on the arith train split so GRPO
starts from a policy that sometimes answers right (GRPO from a random init barely learns:
sampled accuracy 0.016 -> 0.09). The warm-up uses label smoothing, so the policy's greedy answer
is right more often than a sample at temperature 1 — the sharpening GRPO is there to do.
Written in Hugging Face layout: config.json, model.safetensors, tokenizer.json,
tokenizer_config.json — and loaded by rlexp through the same path as any checkpoint.

`--model tiny_tools` builds the tool demo's model (experiment=tools_demo) the same way: ChatML prompts of the
sums dataset, a share `--tool-share` of them answered through a calculator call (the call, then the answer after
the tool's response, which is not trained on), the rest answered directly — so GRPO has a tool to learn to use.

`--model tiny_rg` builds the environments demo's model (experiment=rg_demo) the same way as `tiny`: the train rows of
its reasoning-gym tasks (rlexp.envs, from env.seed; the eval rows come from env.seed + 1), answered
`<answer>N</answer>` as reasoning-gym's scorers read answers, with label smoothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
# each builtin model and the experiment whose config (model dimensions, rows) it is built from
EXPERIMENTS = {"tiny": [], "tiny_tools": ["experiment=tools_demo"], "tiny_rg": ["experiment=rg_demo"]}
# under `rlexp`: its status lines show as every rlexp command's do (rlexp.log_setup), -q and -v included
log = logging.getLogger("rlexp.scripts.make_tiny_model")


def compose_default(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from rlexp.config.load import CONF_DIR, to_config

    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return to_config(compose("config", overrides=overrides))


def sft_batches(rows, tokenizer, seq_len: int, batch: int, steps: int, seed: int, answer: str = "{answer}"):
    """(tokens, loss_mask) batches: [BOS] question answer [EOS], loss on answer and EOS; `answer` formats it."""
    rng = np.random.default_rng(seed)
    examples = []
    for r in rows:
        q = tokenizer.encode(r["question"])
        a = tokenizer.encode(answer.format(answer=r["answer"])) + [tokenizer.eos_token_id]
        ids = [tokenizer.bos_token_id, *q, *a]
        mask = [0] * (1 + len(q)) + [1] * len(a)
        pad = seq_len - len(ids)
        examples.append((ids + [tokenizer.pad_token_id] * pad, mask + [0] * pad))
    toks = np.array([e[0] for e in examples], np.int32)
    masks = np.array([e[1] for e in examples], np.float32)
    for _ in range(steps):
        idx = rng.integers(0, len(examples), batch)
        yield toks[idx], masks[idx]


def tool_batches(rows, tokenizer, seq_len: int, batch: int, steps: int, seed: int, tool_share: float):
    """(tokens, loss_mask) batches of tool_demo episodes: [BOS] prompt, then a calculator call, the tool's response
    (not trained on) and the answer, or the answer alone; each model turn ends with <|im_end|>."""
    from rlexp.tools.formats import FORMATS

    rng = np.random.default_rng(seed)
    qwen, end = FORMATS["qwen"], tokenizer.eos_token_id
    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    toks = np.full((len(rows), seq_len), tokenizer.pad_token_id, np.int32)
    masks = np.zeros((len(rows), seq_len), np.float32)
    for k, r in enumerate(rows):
        parts = [([tokenizer.bos_token_id, *enc(r["prompt"])], 0)]
        if rng.random() < tool_share:
            expr = r["question"].rstrip("=")
            call = '<tool_call>{"name":"calculator","arguments":{"expression":"' + expr + '"}}</tool_call>'
            parts += [([*enc(call), end], 1), (enc(qwen.continuation([("calculator", r["answer"])])), 0)]
        parts.append(([*enc(r["answer"]), end], 1))
        ids = [t for p, _ in parts for t in p]
        toks[k, : len(ids)] = ids
        masks[k, : len(ids)] = [m for p, m in parts for _ in p]
    for _ in range(steps):
        idx = rng.integers(0, len(rows), batch)
        yield toks[idx], masks[idx]


def warm_up(model, batches, lr: float, label_smoothing: float):
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    opt = nnx.Optimizer(model, optax.adamw(lr, b2=0.99, weight_decay=0.0), wrt=nnx.Param)

    @nnx.jit
    def step(model, opt, tokens, mask):
        def loss_fn(model):
            inputs = tokens[:, :-1]
            length = inputs.shape[1]
            positions = jnp.broadcast_to(jnp.arange(length), inputs.shape)
            causal = jnp.tril(jnp.ones((length, length), bool))[None]
            logits, _ = model(inputs, positions, None, causal)
            # Label smoothing keeps the warmed-up policy's distribution wide (its greedy answer is
            # often right, a sample less often): the headroom GRPO is meant to turn into accuracy.
            targets = optax.smooth_labels(jax.nn.one_hot(tokens[:, 1:], logits.shape[-1]), label_smoothing)
            ce = optax.softmax_cross_entropy(logits, targets)
            m = mask[:, 1:]
            return (ce * m).sum() / m.sum()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return loss

    loss = None
    for i, (t, m) in enumerate(batches):
        loss = float(step(model, opt, jnp.asarray(t), jnp.asarray(m)))
        if i % 50 == 0:
            log.info("sft step %d: loss %.4f", i, loss)
    return loss


def hf_config(m) -> dict:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": m.vocab_size,
        "hidden_size": m.embed_dim,
        "intermediate_size": m.hidden_dim,
        "num_hidden_layers": m.num_layers,
        "num_attention_heads": m.num_heads,
        "num_key_value_heads": m.num_kv_heads,
        "head_dim": m.head_dim,
        "max_position_embeddings": m.max_context,
        "rope_theta": float(m.extra["rope_theta"]),
        "rms_norm_eps": float(m.extra["norm_eps"]),
        "tie_word_embeddings": bool(m.extra["tie_word_embeddings"]),
        "hidden_act": "silu",
        "attention_bias": False,
        "torch_dtype": "float32",
        "bos_token_id": 1,
        "eos_token_id": 2,  # </s>, or <|im_end|> for tiny_tools
        "pad_token_id": 0,
    }


def main() -> int:
    from rlexp import cli
    from rlexp.errors import ArgumentParser, in_range

    ap = ArgumentParser(prog="scripts/make_tiny_model.py", description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=tuple(EXPERIMENTS), default="tiny")
    ap.add_argument("--out", type=Path, default=None, help="default: rlexp/models/builtin/<model>")
    ap.add_argument("--tool-share", type=in_range(float, 0, 1), default=0.4)
    ap.add_argument("--steps", type=in_range(int, 1), default=None, help="default: 400, 1200, 600 (tiny_rg)")
    ap.add_argument("--batch", type=in_range(int, 1), default=32)
    ap.add_argument("--lr", type=in_range(float, 0), default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--label-smoothing", type=in_range(float, 0, 1, hi_open=True), default=None, help="default: 0.2 (tiny), 0"
    )
    ap.add_argument("overrides", nargs="*", help="config overrides, e.g. dataset.params.max_operand=29")
    args = ap.parse_args()
    args.out = args.out or REPO / "rlexp/models/builtin" / args.model
    tools = args.model == "tiny_tools"
    args.steps = args.steps or {"tiny": 400, "tiny_tools": 1200, "tiny_rg": 600}[args.model]
    args.label_smoothing = (0.0 if tools else 0.2) if args.label_smoothing is None else args.label_smoothing
    if args.out.exists() and not args.out.is_dir():
        ap.error(f"--out={args.out}: a file is there; give a folder")
    return cli.command(lambda: build(args))


def build(args: argparse.Namespace) -> int:
    tools = args.model == "tiny_tools"
    # a bad override fails here, before JAX is imported
    cfg = compose_default(EXPERIMENTS[args.model] + args.overrides)
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")
    from flax import nnx
    from safetensors.numpy import save_file

    from rlexp.data.registry import load_splits
    from rlexp.families.export import hf_tensors
    from rlexp.models import tunix_text
    from rlexp.models.export import flat_params
    from rlexp.models.tokenizer import RG_VOCAB, TOOL_VOCAB, build_char_tokenizer, load_tokenizer_dir

    args.out.mkdir(parents=True, exist_ok=True)
    if tools:
        build_char_tokenizer(args.out, TOOL_VOCAB, eos="<|im_end|>")
    elif args.model == "tiny_rg":
        build_char_tokenizer(args.out, RG_VOCAB)
    else:
        build_char_tokenizer(args.out)
    tokenizer = load_tokenizer_dir(args.out)
    # the same model class the loader builds, so warm-up and training see the same network (RoPE included)
    model = tunix_text.Qwen3(tunix_text.qwen3_config(cfg.model), rngs=nnx.Rngs(params=args.seed))
    # eval rows are never seen in warm-up
    splits = None if args.model == "tiny_rg" else load_splits(cfg.dataset)
    if args.model == "tiny_rg":
        from rlexp.envs import load_rows, resolve

        train = load_rows(resolve(cfg)).train  # the env's train rows (env.seed); eval rows are other draws
        seq_len = max(len(tokenizer.encode(r["question"])) for r in train) + 8  # BOS <answer> NN </answer> EOS
        tagged = "<answer>{answer}</answer>"
        batches = sft_batches(train, tokenizer, seq_len, args.batch, args.steps, args.seed, tagged)
    elif tools:
        from rlexp.data.templates import render_splits

        rows = render_splits(splits, cfg.data_template, cfg.chat_template, tokenizer, cfg.trainer.max_prompt_tokens)
        seq_len = cfg.trainer.max_prompt_tokens + cfg.trainer.max_completion_tokens
        batches = tool_batches(rows.train, tokenizer, seq_len, args.batch, args.steps, args.seed, args.tool_share)
    else:
        seq_len = 1 + max(len(r["question"]) + len(r["answer"]) for r in splits.train) + 1
        batches = sft_batches(splits.train, tokenizer, seq_len, args.batch, args.steps, args.seed)
    loss = warm_up(model, batches, args.lr, args.label_smoothing)
    tensors = hf_tensors(cfg.model, flat_params(model))  # the same nnx -> Hugging Face mapping as export
    save_file(
        {k: v.astype(np.float32) for k, v in tensors.items()},
        str(args.out / "model.safetensors"),
        metadata={"format": "pt"},
    )
    (args.out / "config.json").write_text(json.dumps(hf_config(cfg.model), indent=2) + "\n")
    (args.out / "WARMUP.json").write_text(
        json.dumps(
            {
                "steps": args.steps,
                "batch": args.batch,
                "lr": args.lr,
                "seed": args.seed,
                "label_smoothing": args.label_smoothing,
                **({"tool_share": args.tool_share} if tools else {}),
                "final_loss": loss,
            },
            indent=2,
        )
        + "\n"
    )
    log.info("wrote %s (final warm-up loss %.4f)", args.out, loss)
    return 0


if __name__ == "__main__":
    sys.exit(main())
