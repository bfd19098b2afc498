"""`hydra/launcher=slurm`: one Slurm job per job of a sweep, through submitit (hydra-submitit's job runner).

The jobs run exactly as with Hydra's submitit launcher; rlexp adds the checks before anything is submitted
(rlexp.launch.slurm_cluster), `launcher.json` records, and a wait through squeue (rlexp.launch.slurm_submit,
rlexp.launch.slurm_wait).
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from hydra_plugins.rlexp_launchers._state import LauncherState
from omegaconf import DictConfig


class SlurmLauncher(LauncherState, Launcher):
    # self.params: hydra.launcher.* (hydra-submitit's SlurmQueueConf)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from omegaconf import OmegaConf

        from rlexp.launch.slurm_cluster import check_cluster_once

        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        plain = {
            k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v for k, v in self.params.items()
        }
        check_cluster_once(plain)  # the sweep callback checked already, unless it is not configured

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from rlexp.launch.slurm_submit import launch_sweep  # submitit and the checks load only when launching

        return launch_sweep(self, job_overrides, initial_job_idx)
