"""The Hydra app of `python -m rlexp`: compose, check, then train here (or hand the job to a remote launcher).

Returns the sweep objective (a summary.json key, `objective=`) so Hydra sweepers can optimise it.
JAX and Tunix are imported only once a run actually trains, so `--cfg job` stays fast. The task
function lives in this importable module (not `__main__`) because Slurm jobs unpickle it by name.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from rlexp import cli
from rlexp.config.load import CONF_DIR, register_configs, to_config

register_configs()


def run(cfg: DictConfig) -> float:
    """Check and train one job; returns the objective value."""
    from rlexp.sweep.resume import skip_if_completed

    done = skip_if_completed(cfg)  # sweep.resume=true: a job that completed earlier is not run again
    if done is not None:
        return done
    from hydra.core.hydra_config import HydraConfig

    from rlexp.launch.remote import launch_remotely

    handed_off, result = launch_remotely(cfg)  # TPU slice / remote launcher: submit, never train here
    if handed_off:
        return result
    from rlexp.checks import check_config

    conf = to_config(cfg)
    check_config(conf)
    from rlexp.train.distributed import prepare_in_job

    prepare_in_job()  # in a pod or Slurm job: Pathways / jax.distributed
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    from rlexp.train.run import train  # heavy: JAX, Tunix

    return train(conf, cfg, run_dir)


@hydra.main(version_base=None, config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> float:
    with cli.user_errors():
        return run(cfg)
    raise AssertionError("unreachable: user_errors exits on an error")
