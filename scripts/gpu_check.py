"""The GPU check's driver: `scripts/gpu_check.sh OUTDIR` runs it (docs/gpu_check.md).

Parts, each in fresh processes under its own time limit; a part that fails or runs out of time records its error
and the next one runs:
  a. versions: the Python packages in use, JAX's backend and devices;
  b. the default task through the user's command, `python -m rlexp slice=h200`: pass@1 before and after, the
     wall, the median step;
  c. GRPO steps of a random-weight Qwen3 with qwen3_0_6b's dimensions (bf16 compute, float32 weights): rollout
     and update tokens/s, `perf/mfu` against the slice's peak (rlexp/config/hardware.py), rlexp's FLOP count;
  d. TRL's GRPOTrainer on the same checkpoint and settings (benchmarks/bench_vs_trl.py's worker): TRL/rlexp per
     step.
OUTDIR receives gpu_check.json (every figure), gpu_check.log (every child's output) and the metrics of b and c;
run dirs and the checkpoint live in GPU_CHECK_WORK (default /tmp/gpu_check). GPU_CHECK_DRY=1 runs the same
parts at tiny sizes on any platform (the test suite's CPU run).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

import bench_vs_trl as bench  # noqa: E402

DRY = os.environ.get("GPU_CHECK_DRY") == "1"
# seconds per part: inside ~8 minutes together, the checkpoint's writing included in c
BUDGET = {"a": 40, "b": 130, "c": 180, "d": 110}
QWEN3_0_6B = dict(num_layers=28, embed_dim=1024, hidden_dim=3072, num_heads=16, num_kv_heads=8, head_dim=128)
WORKLOAD = bench.Workload(
    "qwen3_0_6b", steps=5, warmup=2, completion_tokens=128, max_context=256, vocab_size=151936,
    precision="bfloat16", **QWEN3_0_6B,
)  # fmt: skip
if DRY:
    WORKLOAD = replace(WORKLOAD, steps=2, warmup=1, completion_tokens=8, batch_size=4, max_context=32, vocab_size=64)
    WORKLOAD = replace(WORKLOAD, num_layers=2, embed_dim=64, hidden_dim=128, num_heads=4, num_kv_heads=2, head_dim=16)
DEFAULT_TASK = ["trainer.max_steps=2", "trainer.eval_every=2", "trainer.checkpoint_every=2", "trainer.eval_prompts=8"]
DEFAULT_TASK = DEFAULT_TASK if DRY else []


class Part:
    """Runs commands for one part against its deadline, logging their output to one file."""

    def __init__(self, name: str, log: Path) -> None:
        self.deadline = time.monotonic() + BUDGET[name]
        self.name, self.log = name, log
        self.partial: dict[str, Any] = {}  # figures measured before a failure, kept with its error

    def run(self, cmd: list[str], env: dict[str, str] | None = None) -> float:
        """Run `cmd` (output to the log) within what is left of the part's time; its wall seconds."""
        left = self.deadline - time.monotonic()
        what = " ".join(Path(c).name if c.startswith("/") else c for c in cmd[:3])[:80]
        if left < 5:
            raise TimeoutError(f"part {self.name}: no time left for {what}")
        path = os.pathsep.join(filter(None, [str(REPO), str(REPO / "launchers"), os.environ.get("PYTHONPATH")]))
        full = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **(env or {})}
        with self.log.open("a") as out:
            out.write(f"\n=== part {self.name}: {' '.join(cmd)}\n")
            out.flush()
            t0 = time.perf_counter()
            # its own process group: a child stopped at the limit takes its children (and their GPU memory) along
            proc = subprocess.Popen(
                cmd, cwd=REPO, env=full, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                code = proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise TimeoutError(
                    f"{what} ran past part {self.name}'s {BUDGET[self.name]} s: {tail(self.log)}"
                ) from None
            finally:
                with contextlib.suppress(ProcessLookupError):  # what the child left running, once it has ended
                    os.killpg(proc.pid, signal.SIGKILL)
            wall = time.perf_counter() - t0
        if code:
            raise RuntimeError(f"{what} exited {code}: {tail(self.log)}")
        return wall


def tail(log: Path, lines: int = 3) -> str:
    text = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return " | ".join(text[-lines:])[-600:]


def rows(metrics: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in metrics.read_text().splitlines()] if metrics.exists() else []


def steady(values: list[float], skip: int) -> float | None:
    """The median after the first `skip` (compiling) values; of all of them when no more are left."""
    return statistics.median(values[skip:] or values) if values else None


def part_a(p: Part, work: Path) -> dict[str, Any]:
    code = (
        "import json, importlib.metadata as m, jax\n"
        "names = ['jax', 'jaxlib', 'jax-cuda13-plugin', 'flax', 'optax', 'orbax-checkpoint', 'google-tunix', "
        "'hydra-core', 'omegaconf', 'transformers', 'torch', 'trl', 'datasets', 'math-verify']\n"
        "v = {}\n"
        "for n in names:\n"
        "    try: v[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: v[n] = None\n"
        "d = jax.devices()\n"
        "import rlexp.train.run, tunix.rl.grpo.grpo_learner\n"  # what a run imports: refuses this JAX early
        f"open({str(work / 'a.json')!r}, 'w').write(json.dumps({{'python': __import__('sys').version.split()[0], "
        "'versions': v, 'backend': jax.default_backend(), 'devices': [x.device_kind for x in d]}))\n"
    )
    p.run([sys.executable, "-c", code])
    out = json.loads((work / "a.json").read_text())
    print(f"[a] python {out['python']}, {out['backend']} {out['devices']}")
    print("[a] " + ", ".join(f"{k} {v}" for k, v in out["versions"].items()))
    return out


def part_b(p: Part, work: Path, outdir: Path) -> dict[str, Any]:
    run_dir = work / "b_run"
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "rlexp", "slice=h200", "logger=none", *DEFAULT_TASK, f"hydra.run.dir={run_dir}"]
    try:
        wall = p.run(cmd)
    finally:  # a run stopped by its time limit still tells its step time
        if (run_dir / "metrics.jsonl").exists():
            shutil.copy(run_dir / "metrics.jsonl", outdir / "b_metrics.jsonl")
        times = [r["perf/step_time_sec"] for r in rows(run_dir / "metrics.jsonl") if "perf/step_time_sec" in r]
        p.partial.update(steps_done=len(times), step_time_s=steady(times, 1))
    summary = json.loads((run_dir / "summary.json").read_text())
    ev = summary["eval"]
    out = {
        "steps": summary["train"]["steps"],
        "pass_at_1_before": ev["before"]["pass_at_1"],
        "pass_at_1_after": ev["after"]["pass_at_1"],
        "pass_at_1_gain": ev["gain"]["pass_at_1"],
        "learned": ev["gain"]["pass_at_1"] > 0,
        "train_wall_s": summary["train"]["wall_seconds"],
        "process_wall_s": wall,
        "step_time_s": steady(times, 1),
        "first_step_s": times[0] if times else None,
    }
    print(f"[b] pass@1 {out['pass_at_1_before']:.3f} -> {out['pass_at_1_after']:.3f} ({out['pass_at_1_gain']:+.3f}); "
          f"{out['steps']} steps in {out['train_wall_s']:.1f} s, median step {out['step_time_s'] * 1e3:.1f} ms")  # fmt: skip
    return out


def write_model(w: bench.Workload, out: Path) -> None:
    """The workload's random Qwen3 (bench_vs_trl.make_model) with a word-level tokenizer of its full vocabulary:
    the builtin tiny's 17 tokens, then one placeholder per id above them, so every sampled id decodes."""
    bench.make_model(w, out)
    tok = json.loads((bench.BUILTIN_TINY / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    vocab.update({f"<t{i}>": i for i in range(len(vocab), w.vocab_size)})
    (out / "tokenizer.json").write_text(json.dumps(tok))


def part_c(p: Part, work: Path, outdir: Path) -> dict[str, Any]:
    model_dir = work / "model"
    shutil.rmtree(model_dir, ignore_errors=True)
    spec = json.dumps(asdict(WORKLOAD))
    make = p.run([sys.executable, __file__, "_model", spec, str(model_dir)])
    run_dir = work / "c_run"
    shutil.rmtree(run_dir, ignore_errors=True)
    overrides = [*bench.rlexp_overrides(WORKLOAD, model_dir), f"model.vocab_size={WORKLOAD.vocab_size}"]
    p.partial["checkpoint_write_s"] = make
    try:
        wall = p.run([sys.executable, "-m", "rlexp", "slice=h200", *overrides, f"hydra.run.dir={run_dir}"])
    finally:  # a run stopped by its time limit still tells how far it got
        if (run_dir / "metrics.jsonl").exists():
            shutil.copy(run_dir / "metrics.jsonl", outdir / "c_metrics.jsonl")
        p.partial["step_times_s"] = [
            r["perf/step_time_sec"] for r in rows(run_dir / "metrics.jsonl") if "perf/step_time_sec" in r
        ]
    steps = [r for r in rows(run_dir / "metrics.jsonl") if "perf/step_time_sec" in r][WORKLOAD.warmup :]
    if not steps:
        raise RuntimeError("rlexp recorded no step after the warm-up ones")
    w, seqs = WORKLOAD, WORKLOAD.batch_size * WORKLOAD.num_generations

    def med(f: Any) -> float:
        return statistics.median(f(r) for r in steps)

    from rlexp.config.hardware import PEAK_FLOPS_PER_CHIP
    from rlexp.config.schema import ModelConfig
    from rlexp.estimates.flops import forward_flops_per_token

    dims = {k: getattr(w, k) for k in ("num_layers", "vocab_size", "embed_dim", "hidden_dim", "num_heads")}
    model = ModelConfig(name=w.name, num_kv_heads=w.num_kv_heads, head_dim=w.head_dim, max_context=w.max_context,
                        extra={"tie_word_embeddings": True}, **dims)  # fmt: skip
    mean_len = med(lambda r: r["completions/mean_length"])
    out = {
        "workload": asdict(w),
        "checkpoint_write_s": make,
        "process_wall_s": wall,
        "step_time_s": med(lambda r: r["perf/step_time_sec"]),
        "rollout_time_s": med(lambda r: r["perf/rollout_time_sec"]),
        "completion_tokens_mean": mean_len,
        "rollout_tokens_per_s": med(lambda r: seqs * r["completions/mean_length"] / r["perf/rollout_time_sec"]),
        "update_tokens_per_s": med(
            lambda r: (
                seqs
                * (w.max_prompt_tokens + r["completions/mean_length"])
                / max(r["perf/step_time_sec"] - r["perf/rollout_time_sec"], 1e-9)
            )
        ),
        "tokens_per_s": med(lambda r: r["perf/tokens_per_sec"]),
        "mfu": med(lambda r: r["perf/mfu"]),
        "model_tflops_per_step": med(lambda r: r["perf/model_tflops_per_step"]),
        "forward_flops_per_token": forward_flops_per_token(model, w.max_prompt_tokens + mean_len),
        "peak_flops": PEAK_FLOPS_PER_CHIP["h200"],  # slice=h200: one GPU
    }
    print(f"[c] {w.num_layers} layers, width {w.embed_dim}, vocab {w.vocab_size}: step {out['step_time_s']:.3f} s, "
          f"rollout {out['rollout_tokens_per_s']:.0f} tok/s, update {out['update_tokens_per_s']:.0f} tok/s, "
          f"MFU {out['mfu'] * 100:.3g}% of {out['peak_flops'] / 1e12:.0f} TFLOP/s "
          f"({out['model_tflops_per_step']:.2f} TFLOP a step; {out['forward_flops_per_token'] / 1e9:.3f} GFLOP "
          "a token's forward pass)")  # fmt: skip
    return out


def part_d(p: Part, work: Path, c: dict[str, Any] | None) -> dict[str, Any]:
    model_dir = work / "model"
    if not (model_dir / "config.json").exists():
        raise RuntimeError("part c wrote no checkpoint to train")
    trl_out = work / "d_trl"
    shutil.rmtree(trl_out, ignore_errors=True)
    trl_out.mkdir(parents=True)
    spec = {**asdict(WORKLOAD), "model_dir": str(model_dir), "out": str(trl_out), "use_cpu": DRY}
    wall = p.run([sys.executable, str(REPO / "benchmarks" / "bench_vs_trl.py"), "_trl", json.dumps(spec)])
    times = json.loads((trl_out / "step_times.json").read_text())
    out = {"process_wall_s": wall, "step_times_s": times, "step_time_s": steady(times, WORKLOAD.warmup)}
    if c and c.get("step_time_s"):
        out["trl_over_rlexp"] = out["step_time_s"] / c["step_time_s"]
        print(f"[d] TRL step {out['step_time_s']:.3f} s, rlexp {c['step_time_s']:.3f} s: "
              f"TRL/rlexp {out['trl_over_rlexp']:.2f}")  # fmt: skip
    return out


def main(outdir: Path) -> int:
    outdir.mkdir(parents=True, exist_ok=True)
    work = Path(os.environ.get("GPU_CHECK_WORK", "/tmp/gpu_check"))
    work.mkdir(parents=True, exist_ok=True)
    log = outdir / "gpu_check.log"
    log.write_text("")
    result: dict[str, Any] = {"dry": DRY, "budget_s": BUDGET, "parts": {}}
    t0 = time.perf_counter()
    parts = (
        ("a", lambda p: part_a(p, work)),
        ("b", lambda p: part_b(p, work, outdir)),
        ("c", lambda p: part_c(p, work, outdir)),
        ("d", lambda p: part_d(p, work, result["parts"].get("c"))),
    )
    chosen = os.environ.get("GPU_CHECK_PARTS", "abcd")  # a rerun of some parts: e.g. GPU_CHECK_PARTS=cd
    for name, fn in (x for x in parts if x[0] in chosen):
        start, part = time.perf_counter(), Part(name, log)
        try:
            result["parts"][name] = fn(part)
            result["parts"][name]["ok"] = True
        except Exception as err:  # noqa: BLE001 - a part's failure is a figure of the check, the rest still run
            msg = f"{type(err).__name__}: {err}"
            print(f"[{name}] FAILED: {msg}")
            with log.open("a") as out:
                out.write(traceback.format_exc())
            result["parts"][name] = {**part.partial, "ok": False, "error": msg}
        result["parts"][name]["part_wall_s"] = time.perf_counter() - start
        result["wall_s"] = time.perf_counter() - t0
        (outdir / "gpu_check.json").write_text(json.dumps(result, indent=2))  # after each part: a kill keeps it
    print(f"gpu_check: {sum(p['ok'] for p in result['parts'].values())}/{len(result['parts'])} parts ok in {result['wall_s']:.0f} s; "
          f"{outdir / 'gpu_check.json'}")  # fmt: skip
    return 0 if all(p["ok"] for p in result["parts"].values()) else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["_model"]:
        write_model(bench.Workload(**json.loads(sys.argv[2])), Path(sys.argv[3]))
        sys.exit(0)
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/gpu_check.sh OUTDIR")
    sys.exit(main(Path(sys.argv[1])))
