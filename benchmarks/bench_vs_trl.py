"""TRL's GRPOTrainer vs. rlexp on the same GRPO workload, side by side, in fresh processes.

    .venv/bin/pip install -e '.[bench]'          # trl (torch comes from the test extra, CPU build)
    .venv/bin/python benchmarks/bench_vs_trl.py [--workload default|compute|both] [--rounds 2] [--torch-threads N]
        [--precision float32|bfloat16]

Each round runs TRL and rlexp once per workload, each in a fresh process, alternating which goes
first (load from other processes on a shared machine then hits both sides alike). Per run it
records the median steady step time (the first steps, which compile or warm caches, excluded),
the training wall (first step start to last step end, compile included), the process wall, the
process's CPU seconds (user + system, all threads) and its peak RSS; it prints every run, the
per-workload medians and the ratio TRL/rlexp (> 1 means rlexp is faster or leaner).

Threads: both sides use their libraries' defaults (torch and XLA: one thread per core) unless
`--torch-threads N` pins torch's intra-op threads. On a machine that other work oversubscribes,
torch's OpenMP threads spin at every parallel region waiting for a descheduled peer: on this
2-core box at load ~7, TRL's default-workload step took 0.5-1.2 s with 2 threads and
0.09-0.28 s with 1. `--torch-threads 1` is TRL's best setting there; use it when `uptime` shows
a load above the core count, and say so with the numbers.

Workloads:
- `default`: what `python -m rlexp` trains. rlexp's builtin tiny Qwen3 (rlexp/models/builtin/tiny:
  2 layers, width 64, 124k parameters, 17-token character vocabulary) on arith ("a+b=", operands
  0..29), 8 prompts x 8 generations per step, at most 8 completion tokens.
- `compute`: the same task and settings with a ~20 M-parameter random-weight Qwen3 (6 layers, width
  512, MLP 1664, 8 query / 4 KV heads of 64, the same vocabulary), 64 completion tokens and
  4 prompts x 8 generations per step. A random policy rarely emits EOS early, so both sides decode
  (nearly) all 64 tokens every step.
  The checkpoint is written once per benchmark run into a temp dir in Hugging Face layout
  (transformers' Qwen3ForCausalLM, fixed torch seed) and both sides load that same folder.

What is matched (TRL side = `trl_worker` below):
- Weights and architecture: both load the same Hugging Face folder; TRL through
  transformers' Qwen3ForCausalLM (float32), rlexp through its safetensors loader (`model.path=`).
- Prompts: the arith train split from rlexp's own loader; TRL gets "<s>" + question, i.e. the
  token ids [BOS] + question that Tunix's sampler feeds rlexp's policy (it prepends BOS).
- Rewards: rlexp's `arith_correct` (weight 1.0) and `arith_format` (weight 0.1), summed.
- Batch: prompts x 8 generations per optimizer step, one update per rollout (TRL:
  per_device_train_batch_size=prompts*8, num_generations=8, steps_per_generation=1).
- Sampling: temperature 1.0, top-p 1.0, no top-k; stop at EOS; max completion tokens as above.
- Loss: beta 0.04 (a frozen reference model on both sides), epsilon 0.2, num_iterations 1,
  per-sequence token-mean aggregation (TRL loss_type="grpo" = Tunix "sequence-mean-token-mean"),
  group-std-normalised advantages. The KL estimator differs: Tunix's GRPO uses logp - ref_logp,
  TRL the k3 estimator; the cost of both is the same reference forward pass.
- Optimizer: AdamW lr 1e-3, betas (0.9, 0.99), weight decay 0, global-norm clip 1.0, linear
  warmup over 10 % of the steps then cosine to 0.
- Precision and device: CPU, no gradient checkpointing, thread pools as above; float32 by default.
  `--precision bfloat16` computes in bf16 on both sides with float32 weights and optimizer state: TRL's
  own default (`bf16=True`: torch autocast) against rlexp's `model.dtype=bfloat16 model.param_dtype=float32`.

Not matched, by design: rlexp runs a short eval before and after training (8 prompts, 1 sample)
and writes one checkpoint at the end; TRL saves nothing. Both count in the process wall, not in
the step times: a step is its rollout, reference pass and update on both sides (rlexp's
`perf/step_time_sec` sets checkpoint saves aside, rlexp.train.stepclock). rlexp uses its persistent compilation cache (warm after the first run), as a
user's second run would.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402  (benchmarks/machine.py: the CPU and the load the figures hold for)

REPO = Path(__file__).resolve().parent.parent
BUILTIN_TINY = REPO / "rlexp" / "models" / "builtin" / "tiny"


@dataclass(frozen=True)
class Workload:
    """One GRPO workload; model dimensions are those of the checkpoint both sides load."""

    name: str
    steps: int
    warmup: int  # leading steps left out of the steady median (compilation, allocator warm-up)
    completion_tokens: int
    num_layers: int = 2
    embed_dim: int = 64
    hidden_dim: int = 256
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    max_context: int = 64
    vocab_size: int = 17
    batch_size: int = 8
    num_generations: int = 8
    max_prompt_tokens: int = 16
    learning_rate: float = 1e-3
    beta: float = 0.04
    epsilon: float = 0.2
    temperature: float = 1.0
    top_p: float = 1.0
    warmup_ratio: float = 0.1
    seed: int = 0
    precision: str = "float32"  # or "bfloat16": bf16 compute, float32 weights and optimizer state, both sides


WORKLOADS = {
    "default": Workload("default", steps=150, warmup=5, completion_tokens=8),
    # 4 prompts (not 8) keep a 2-core run of both sides within a few minutes; still matmul-bound
    "compute": Workload(
        "compute",
        steps=6,
        warmup=2,
        completion_tokens=64,
        batch_size=4,
        num_layers=6,
        embed_dim=512,
        hidden_dim=1664,
        num_heads=8,
        num_kv_heads=4,
        head_dim=64,
        max_context=128,
    ),
}


# --- children ---------------------------------------------------------------------------------
@dataclass
class RunResult:
    side: str
    step_times: list[float]  # every step, compile included
    warmup: int
    process_wall: float
    cpu: float  # process user + system seconds, all threads
    peak_rss: int  # bytes

    @property
    def steady(self) -> float:
        return statistics.median(self.step_times[self.warmup :])

    @property
    def train_wall(self) -> float:
        return sum(self.step_times)


def run_child(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> tuple[int, float, float, int]:
    """Run cmd in a fresh process; (exit code, wall seconds, CPU seconds, peak RSS bytes of that process).

    os.wait4 gives the child's own rusage; RUSAGE_CHILDREN would be a running max over all children.
    """
    t0 = time.perf_counter()
    with log.open("w") as out:
        # rlexp imported by the TRL side comes from this checkout, like `python -m rlexp` run here
        path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        full_env = {**os.environ, "PYTHONPATH": path, **(env or {})}
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=full_env)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.perf_counter() - t0, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def rlexp_overrides(w: Workload, model_dir: Path | None) -> list[str]:
    args = [
        f"trainer.max_steps={w.steps}",
        f"trainer.batch_size={w.batch_size}",
        f"trainer.num_generations={w.num_generations}",
        f"trainer.max_completion_tokens={w.completion_tokens}",
        f"trainer.max_prompt_tokens={w.max_prompt_tokens}",
        f"trainer.learning_rate={w.learning_rate}",
        f"trainer.beta={w.beta}",
        f"trainer.epsilon={w.epsilon}",
        f"trainer.temperature={w.temperature}",
        f"trainer.top_p={w.top_p}",
        f"trainer.warmup_ratio={w.warmup_ratio}",
        f"seed={w.seed}",
        # one eval before and after on 8 prompts, one checkpoint at the end, no samples file
        f"trainer.eval_every={w.steps}",
        f"trainer.checkpoint_every={w.steps}",
        "trainer.eval_prompts=8",
        "trainer.eval_samples=1",
        "trainer.samples_every=1000000",
        "logger=none",
        f"model.dtype={w.precision}",
        "model.param_dtype=float32",
    ]
    if model_dir is not None:
        args += [
            f"model.path={model_dir}",
            f"model.num_layers={w.num_layers}",
            f"model.embed_dim={w.embed_dim}",
            f"model.hidden_dim={w.hidden_dim}",
            f"model.num_heads={w.num_heads}",
            f"model.num_kv_heads={w.num_kv_heads}",
            f"model.head_dim={w.head_dim}",
            f"model.max_context={w.max_context}",
        ]
    return args


def run_rlexp(w: Workload, model_dir: Path | None, work: Path, torch_threads: int) -> RunResult:
    run_dir = Path(tempfile.mkdtemp(dir=work, prefix="rlexp-"))
    log = run_dir / "log.txt"
    cmd = [sys.executable, "-m", "rlexp", *rlexp_overrides(w, model_dir), f"hydra.run.dir={run_dir}/run"]
    code, wall, cpu, rss = run_child(cmd, log)
    metrics = run_dir / "run" / "metrics.jsonl"
    if code or not metrics.exists():
        raise SystemExit(f"rlexp run failed ({code}):\n{log.read_text()[-3000:]}")
    rows = [json.loads(ln) for ln in metrics.read_text().splitlines()]
    times = [r["perf/step_time_sec"] for r in rows if "perf/step_time_sec" in r]
    return RunResult("rlexp", times, w.warmup, wall, cpu, rss)


def run_trl(w: Workload, model_dir: Path | None, work: Path, torch_threads: int) -> RunResult:
    out = Path(tempfile.mkdtemp(dir=work, prefix="trl-"))
    spec = {**asdict(w), "model_dir": str(model_dir or BUILTIN_TINY), "out": str(out)}
    env = {"OMP_NUM_THREADS": str(torch_threads)} if torch_threads else None
    code, wall, cpu, rss = run_child([sys.executable, __file__, "_trl", json.dumps(spec)], out / "log.txt", env)
    stamps = out / "step_times.json"
    if code or not stamps.exists():
        raise SystemExit(f"TRL run failed ({code}):\n{(out / 'log.txt').read_text()[-3000:]}")
    return RunResult("trl", json.loads(stamps.read_text()), w.warmup, wall, cpu, rss)


# --- the TRL side (runs in its own process) ----------------------------------------------------
def trl_worker(spec: dict) -> None:
    """Train with TRL's GRPOTrainer on the settings in `spec`; write every step's duration."""
    # first: without the bench extra this fails at once, not after torch and transformers took seconds to import
    from trl import GRPOConfig, GRPOTrainer

    # isort: split
    import torch
    from datasets import Dataset
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer, Qwen3ForCausalLM, TrainerCallback

    from rlexp.config.schema import DatasetConfig
    from rlexp.data.registry import load_splits
    from rlexp.rewards.registry import make_reward_fn

    w = Workload(**{k: v for k, v in spec.items() if k in Workload.__dataclass_fields__})
    out = Path(spec["out"])
    torch.manual_seed(w.seed)

    # The arith train split and reward functions exactly as rlexp's default config builds them.
    ds_yaml = OmegaConf.load(REPO / "conf" / "dataset" / "arith.yaml")
    ds_yaml.pop("defaults", None)
    rows = load_splits(OmegaConf.merge(OmegaConf.structured(DatasetConfig), ds_yaml)).train
    reward_yaml = OmegaConf.load(REPO / "conf" / "reward" / "arith.yaml")
    fns = [make_reward_fn(f.fn, dict(f.get("kwargs") or {})) for f in reward_yaml.functions]
    weights = [float(f.weight) for f in reward_yaml.functions]

    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    # Tunix's sampler prepends BOS to every prompt; the character tokenizer adds none itself.
    data = Dataset.from_list([{"prompt": tokenizer.bos_token + r["question"], "answer": r["answer"]} for r in rows])
    assert Qwen3ForCausalLM.from_pretrained(spec["model_dir"]).__class__ is Qwen3ForCausalLM

    warmup_steps = int(w.warmup_ratio * w.steps)
    args = GRPOConfig(
        output_dir=str(out / "trl"),
        max_steps=w.steps,
        per_device_train_batch_size=w.batch_size * w.num_generations,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=w.num_generations,
        max_completion_length=w.completion_tokens,
        temperature=w.temperature,
        top_p=w.top_p,
        top_k=0,
        beta=w.beta,
        epsilon=w.epsilon,
        num_iterations=1,
        loss_type="grpo",
        scale_rewards="group",
        reward_weights=weights,
        learning_rate=w.learning_rate,
        adam_beta1=0.9,
        adam_beta2=0.99,
        weight_decay=0.0,
        max_grad_norm=1.0,
        lr_scheduler_type="cosine",
        warmup_steps=warmup_steps,
        model_init_kwargs={"dtype": torch.float32},
        # TRL's default on CPU is bf16=True: torch autocast (bf16 matmuls), float32 weights and optimizer state
        bf16=w.precision == "bfloat16",
        gradient_checkpointing=False,
        use_cpu=spec.get("use_cpu", True),  # scripts/gpu_check.py runs this worker on a GPU
        seed=w.seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        log_completions=False,
        dataloader_num_workers=0,
    )
    stamps: list[float] = []

    class Stamp(TrainerCallback):
        """Step k's time = start of step k+1 - start of step k (the last: to train end), as rlexp measures."""

        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            stamps.append(time.perf_counter())

        def on_train_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            stamps.append(time.perf_counter())

    trainer = GRPOTrainer(
        model=spec["model_dir"],
        reward_funcs=fns,
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[Stamp()],
    )
    trainer.train()
    (out / "step_times.json").write_text(json.dumps([b - a for a, b in zip(stamps, stamps[1:], strict=False)]))


def make_model(w: Workload, out: Path) -> None:
    """A random-weight Qwen3 of the workload's dimensions in Hugging Face layout, with the tiny tokenizer."""
    import shutil

    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(w.seed)
    config = Qwen3Config(
        vocab_size=w.vocab_size,
        hidden_size=w.embed_dim,
        intermediate_size=w.hidden_dim,
        num_hidden_layers=w.num_layers,
        num_attention_heads=w.num_heads,
        num_key_value_heads=w.num_kv_heads,
        head_dim=w.head_dim,
        max_position_embeddings=w.max_context,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = Qwen3ForCausalLM(config).to(torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    shutil.copy(BUILTIN_TINY / "tokenizer.json", out / "tokenizer.json")
    tok_cfg = json.loads((BUILTIN_TINY / "tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").write_text(json.dumps({**tok_cfg, "model_max_length": w.max_context}, indent=2))
    n = sum(p.numel() for p in model.parameters())
    print(f"{out}: random Qwen3, {n / 1e6:.1f} M parameters")


# --- the driver -------------------------------------------------------------------------------
def median(values: list[float]) -> float:
    return statistics.median(values)


def bench(w: Workload, rounds: int, work: Path, torch_threads: int) -> dict[str, list[RunResult]]:
    model_dir = None
    if w.name != "default":
        model_dir = work / f"model-{w.name}"
        code, _, _, _ = run_child(
            [sys.executable, __file__, "_make_model", w.name, str(model_dir)], work / "make_model.txt"
        )
        print((work / "make_model.txt").read_text().strip().splitlines()[-1])
        if code:
            raise SystemExit(f"building the {w.name} model failed:\n{(work / 'make_model.txt').read_text()[-3000:]}")
    results: dict[str, list[RunResult]] = {"trl": [], "rlexp": []}
    sides = [("trl", run_trl), ("rlexp", run_rlexp)]
    for r in range(rounds):
        for side, fn in sides if r % 2 == 0 else sides[::-1]:
            res = fn(w, model_dir, work, torch_threads)
            results[side].append(res)
            print(
                f"[{w.name}] round {r + 1} {side:<5}: steady step {res.steady * 1000:8.1f} ms | "
                f"train wall {res.train_wall:6.1f} s | process wall {res.process_wall:6.1f} s | CPU {res.cpu:6.1f} s | "
                f"peak RSS {res.peak_rss / 2**30:.2f} GiB",
                flush=True,
            )
    return results


def report(w: Workload, results: dict[str, list[RunResult]]) -> None:
    def med(side: str, attr: str) -> float:
        return median([getattr(r, attr) for r in results[side]])

    print(f"\n[{w.name}] {w.steps} steps, medians over {len(results['trl'])} runs per side")
    print(f"{'measure':<22}{'TRL':>12}{'rlexp':>12}{'TRL/rlexp':>12}")
    for label, attr, scale, unit in (
        ("steady step", "steady", 1000, "ms"),
        ("train wall", "train_wall", 1, "s"),
        ("process wall", "process_wall", 1, "s"),
        ("process CPU", "cpu", 1, "s"),
        ("peak RSS", "peak_rss", 1 / 2**30, "GiB"),
    ):
        a, b = med("trl", attr), med("rlexp", attr)
        print(f"{label + ' (' + unit + ')':<22}{a * scale:>12.2f}{b * scale:>12.2f}{a / b:>12.3f}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_trl":
        trl_worker(json.loads(sys.argv[2]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_make_model":
        make_model(WORKLOADS[sys.argv[2]], Path(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=("default", "compute", "both"), default="both")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=None, help="override the workload's step count")
    ap.add_argument(
        "--precision",
        choices=("float32", "bfloat16"),
        default="float32",
        help="compute dtype on both sides (weights and optimizer state stay float32)",
    )
    ap.add_argument(
        "--torch-threads", type=int, default=0, help="OMP_NUM_THREADS for the TRL side (0: torch's default)"
    )
    args = ap.parse_args()
    load = os.getloadavg()[0]
    watch = machine.LoadWatch(load)
    threads = args.torch_threads or "default"
    print(machine.header())
    print(f"torch threads: {threads}; precision: {args.precision}")
    if load > (os.cpu_count() or 1) and not args.torch_threads:
        print("note: the machine is oversubscribed; torch's spinning OpenMP threads slow TRL down: see --torch-threads")
    names = ("default", "compute") if args.workload == "both" else (args.workload,)
    with tempfile.TemporaryDirectory(prefix="bench_vs_trl-") as tmp:
        all_results = {}
        for name in names:
            w = WORKLOADS[name]
            w = Workload(**{**asdict(w), "precision": args.precision, **({"steps": args.steps} if args.steps else {})})
            all_results[name] = (w, bench(w, args.rounds, Path(tmp), args.torch_threads))
        for w, results in all_results.values():
            report(w, results)
    print(watch.report())


if __name__ == "__main__":
    main()
