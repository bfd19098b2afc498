"""rlexp vs. a plain Tunix script on the same tiny GRPO configuration, side by side.

    .venv/bin/python benchmarks/bench_overhead.py [--steps 120] [--rounds 2] [--default-run]

Each round runs the plain script and rlexp in fresh processes, alternating which goes first,
and takes each run's median steady-state step time (steps with an eval excluded; the first
steps, which compile, excluded). Prints the ratio rlexp/plain (goal <= 1.03). With
--default-run it also runs `python -m rlexp` unchanged and prints its wall time and gain.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402  (benchmarks/machine.py: the CPU and the load the figures hold for)

REPO = Path(__file__).resolve().parent.parent
WARMUP_STEPS = 5

# The plain script: what a Tunix user writes by hand for the same run. It shares only the model
# loader, the data generator and the reward functions with rlexp; the training loop is Tunix's.
PLAIN = r"""
import json, sys, time
import numpy as np, optax, jax
from jax.sharding import AxisType
import orbax.checkpoint as ocp
from tunix.rl import rl_cluster as rl
from tunix.rl.grpo.grpo_learner import GRPOConfig, GRPOLearner
from tunix.rl.rollout.base_rollout import RolloutConfig
from tunix.sft.hooks import TrainingHooks
from tunix.sft.metrics_logger import MetricsLoggerOptions
from transformers import AutoTokenizer
from rlexp.families.load import load_model
from rlexp.models.loader import resolve_model_dir
from rlexp.data.registry import load_splits
from rlexp.rewards.registry import make_reward_fn
from tests.helpers import compose_conf

steps, out = int(sys.argv[1]), sys.argv[2]
conf = compose_conf()
t = conf.trainer
mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"), axis_types=(AxisType.Auto,) * 2)
folder = str(resolve_model_dir(conf.model))
tok = AutoTokenizer.from_pretrained(folder)
actor = load_model(conf.model, mesh)  # the same network (rlexp's loader honours the checkpoint's RoPE)
ref = load_model(conf.model, mesh)
sched = optax.join_schedules([optax.linear_schedule(0.0, t.learning_rate, int(0.1 * steps)),
                              optax.cosine_decay_schedule(t.learning_rate, steps - int(0.1 * steps))], [int(0.1 * steps)])
opt = optax.chain(optax.clip_by_global_norm(t.grad_clip), optax.adamw(sched, b1=t.adam_b1, b2=t.adam_b2, weight_decay=0.0))

class Quiet:
    def log_scalar(self, *a, **k): pass
    def close(self): pass

training = rl.RLTrainingConfig(actor_optimizer=opt, eval_every_n_steps=10**6, max_steps=steps,
    checkpoint_root_directory=out + "/ckpt", checkpointing_options=ocp.CheckpointManagerOptions(save_interval_steps=10**6),
    metrics_logging_options=MetricsLoggerOptions(log_dir=out, backend_kwargs={"custom_backend": [Quiet]}))
rollout = RolloutConfig(max_tokens_to_generate=t.max_completion_tokens, max_prompt_length=t.max_prompt_tokens,
    kv_cache_size=t.max_prompt_tokens + t.max_completion_tokens + 8, temperature=t.temperature, top_p=t.top_p,
    eos_tokens=[tok.eos_token_id])
cluster = rl.RLCluster(actor=actor, reference=ref, tokenizer=tok, cluster_config=rl.ClusterConfig(
    role_to_mesh={rl.Role.ACTOR: mesh, rl.Role.REFERENCE: mesh, rl.Role.ROLLOUT: mesh}, rollout_engine="vanilla",
    offload_to_cpu=False, training_config=training, rollout_config=rollout))
fns = []
for f in conf.reward.functions:
    fn = make_reward_fn(f.fn, f.kwargs)
    fns.append((lambda fn, w: (lambda prompts, completions, **kw: [w * v for v in fn(prompts, completions, **kw)]))(fn, f.weight))
learner = GRPOLearner(cluster, GRPOConfig(num_generations=t.num_generations, beta=t.beta, epsilon=t.epsilon), fns)
stamps = []

class Stamp(TrainingHooks):
    def on_train_start(self, c): pass
    def on_train_end(self, c): pass
    def on_train_step_end(self, c, s, l): pass
    def on_eval_step_start(self, c): pass
    def on_eval_step_end(self, c, l): pass
    def on_train_step_start(self, c): stamps.append(time.perf_counter())

cluster.actor_trainer.with_training_hooks(Stamp())
rows = load_splits(conf.dataset).train
rng = np.random.default_rng(conf.seed)
def batches():
    order = rng.permutation(len(rows))
    for i in range(0, len(order) - t.batch_size + 1, t.batch_size):
        chunk = [rows[j] for j in order[i:i + t.batch_size]]
        yield {"prompts": np.array([r["question"] for r in chunk]), "answer": np.array([r["answer"] for r in chunk])}
learner.train(batches())
print("STEP_TIMES=" + json.dumps([b - a for a, b in zip(stamps, stamps[1:])]))
"""


def plain_step_times(steps: int) -> list[float]:
    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.run([sys.executable, "-c", PLAIN, str(steps), out], capture_output=True, text=True, cwd=REPO)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("STEP_TIMES=")), None)
    if line is None:
        raise SystemExit(f"plain Tunix run failed:\n{proc.stderr[-3000:]}")
    return json.loads(line.split("=", 1)[1])[WARMUP_STEPS:]


def rlexp_step_times(steps: int) -> list[float]:
    with tempfile.TemporaryDirectory() as out:
        args = [
            f"trainer.max_steps={steps}",
            f"trainer.eval_every={steps}",
            f"trainer.checkpoint_every={steps}",
            "trainer.eval_prompts=8",
            "trainer.eval_samples=1",
            "trainer.samples_every=1000000",
            "logger=none",
            f"hydra.run.dir={out}/run",
        ]
        proc = subprocess.run([sys.executable, "-m", "rlexp", *args], capture_output=True, text=True, cwd=REPO)
        metrics = Path(out, "run", "metrics.jsonl")
        if proc.returncode or not metrics.exists():
            raise SystemExit(f"rlexp run failed:\n{proc.stderr[-3000:]}")
        rows = [json.loads(ln) for ln in metrics.read_text().splitlines()]
    times = [r["perf/step_time_sec"] for r in rows if "perf/step_time_sec" in r and "eval/pass_at_1" not in r]
    return times[WARMUP_STEPS:]


def default_run() -> None:
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "rlexp", f"hydra.run.dir={out}/run"], capture_output=True, text=True, cwd=REPO
        )
        wall = time.perf_counter() - t0
        if proc.returncode:
            raise SystemExit(proc.stderr[-3000:])
        s = json.loads(Path(out, "run", "summary.json").read_text())
    gain = s["eval"]["after"]["pass_at_1"] - s["eval"]["before"]["pass_at_1"]
    print(
        f"default run: wall {wall:.1f} s (process), pass@1 {s['eval']['before']['pass_at_1']:.3f} -> "
        f"{s['eval']['after']['pass_at_1']:.3f} (gain {gain:+.3f}), greedy "
        f"{s['eval']['before']['greedy_accuracy']:.3f} -> {s['eval']['after']['greedy_accuracy']:.3f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--default-run", action="store_true")
    args = ap.parse_args()
    print(machine.header())
    watch = machine.LoadWatch()
    plain, ours = [], []
    for r in range(args.rounds):
        order = [("plain", plain_step_times), ("rlexp", rlexp_step_times)]
        for name, fn in order if r % 2 == 0 else order[::-1]:
            med = statistics.median(fn(args.steps))
            (plain if name == "plain" else ours).append(med)
            print(f"round {r + 1}: {name:<5} median step {med * 1000:.1f} ms")
    ratio = statistics.median(ours) / statistics.median(plain)
    print(f"step-time ratio rlexp/plain = {ratio:.3f} (goal <= 1.03)")
    print(watch.report())
    if args.default_run:
        default_run()


if __name__ == "__main__":
    main()
