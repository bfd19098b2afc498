"""The Hydra entry point: compose, validate, then train (or hand the job to a remote launcher).

Returns the sweep objective (a summary.json key, `objective=`) so Hydra sweepers can optimise it.
JAX and Tunix are imported only once a run actually trains, so `--cfg job` stays fast.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from rlexp.config.schema import RlexpConfig, register_configs
from rlexp.config.validate import validate
from rlexp.errors import ConfigError, RlexpError, user_errors_from_resolvers

CONF_DIR = os.environ.get("RLEXP_CONF_DIR", str(Path(__file__).resolve().parent.parent / "conf"))
register_configs()


def to_config(cfg: DictConfig) -> RlexpConfig:
    """The typed dataclass tree of a composed DictConfig (interpolations resolved)."""
    return OmegaConf.to_object(cfg)  # type: ignore[return-value]


def fail(err: BaseException) -> None:
    """Report a user error as one line and exit 2; HYDRA_FULL_ERROR=1 keeps the traceback."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise err
    print(f"rlexp: error: {err}", file=sys.stderr)
    sys.exit(2)


def run(cfg: DictConfig) -> float:
    """Validate and train one job; returns the objective value."""
    from rlexp.sweep.resume import skip_if_completed

    done = skip_if_completed(cfg)  # sweep.resume=true: a job that completed earlier is not run again
    if done is not None:
        return done
    from hydra.core.hydra_config import HydraConfig

    from rlexp.launch.hooks import launch_remotely, prepare_in_job

    handed_off, result = launch_remotely(cfg)  # TPU slice / remote launcher: submit, never train here
    if handed_off:
        return result
    try:
        with user_errors_from_resolvers():
            conf = to_config(cfg)
    except MissingMandatoryValue as err:
        raise ConfigError(err.full_key, "???", "this option needs a value; set it on the command line") from None
    validate(conf)
    prepare_in_job(cfg)  # in a pod or Slurm job: Pathways / jax.distributed, SIGTERM -> checkpoint
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    from rlexp.train.run import train  # heavy: JAX, Tunix

    return train(conf, cfg, run_dir)


@hydra.main(version_base=None, config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> float | None:
    try:
        return run(cfg)
    except RlexpError as err:
        fail(err)
    return None
