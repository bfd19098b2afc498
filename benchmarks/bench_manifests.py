"""Render and validate a 1,000-job GKE sweep in dry-run mode through the Hydra launcher; prints jobs/s.

    python benchmarks/bench_manifests.py [--jobs 1000] [--slice v6e-32] [--model gemma4_e4b]

Drives `GkeLauncher.launch` the way Hydra's sweeper does (one override list per job) and times it: composing
each job, the config checks, rendering the JobSet, the CRD-schema + structural validation and writing
jobset.yaml / launcher.json per job. Goal: 1,000 jobs in <= 20 s on 2 cores, cost linear in jobs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402  (benchmarks/machine.py: the CPU and the load the figures hold for)

ROOT = Path(__file__).resolve().parent.parent


def sweep_overrides(n: int, model: str, slice_name: str) -> list[list[str]]:
    return [
        [f"model={model}", f"slice={slice_name}", f"seed={i % 10}", f"trainer.learning_rate={(i // 10 + 1) * 1e-7:.1e}"]
        for i in range(n)
    ]


def make_launcher(sweep_dir: str, model: str, slice_name: str) -> object:
    from hydra._internal.callbacks import Callbacks
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.plugins import Plugins
    from hydra.core.utils import setup_globals
    from hydra.types import HydraContext, RunMode

    from rlexp.config.load import register_configs

    register_configs()
    setup_globals()
    loader = GlobalHydra.instance().config_loader()
    overrides = [f"model={model}", f"slice={slice_name}", "hydra.launcher.dry_run=true", f"hydra.sweep.dir={sweep_dir}"]
    config = loader.load_configuration("config", overrides, run_mode=RunMode.MULTIRUN)
    ctx = HydraContext(config_loader=loader, callbacks=Callbacks(config))
    return Plugins.instance().instantiate_launcher(hydra_context=ctx, task_function=lambda c: None, config=config)


def run(n: int, model: str, slice_name: str) -> tuple[float, int]:
    from hydra import initialize_config_dir

    with tempfile.TemporaryDirectory() as d, initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        launcher = make_launcher(d, model, slice_name)
        jobs = sweep_overrides(n, model, slice_name)
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            rets = launcher.launch(jobs, initial_job_idx=0)  # type: ignore[attr-defined]
        dt = time.perf_counter() - t0
        assert all(r.status.name == "COMPLETED" for r in rets)
        written = len(list(Path(d).glob("*/jobset.yaml")))
    return dt, written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--model", default="gemma4_e4b")
    ap.add_argument("--slice", default="v6e-32")
    a = ap.parse_args()
    print(machine.header())
    watch = machine.LoadWatch()
    small = max(1, a.jobs // 10)  # cost per job at a tenth of the size: linear if about the same
    dt_small, n_small = run(small, a.model, a.slice)
    dt, written = run(a.jobs, a.model, a.slice)
    print(f"{n_small} jobs: {dt_small:.2f}s ({dt_small / n_small * 1e3:.1f} ms/job)")
    print(
        f"{written} JobSets rendered and validated in {dt:.2f}s: {written / dt:.0f} jobs/s ({dt / written * 1e3:.1f} ms/job)"
    )
    print(watch.report())
    return 0 if written == a.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
