"""`hydra/launcher=gke`: each job of a run or sweep becomes one JobSet on the current kube context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from rlexp.config.load import register_configs

register_configs()  # rlexp's schemas, including `hydra/launcher=gke` (GkeLauncherConf)


class GkeLauncher(Launcher):
    def __init__(self, **params: Any) -> None:
        self.params = params
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None
        self.composer: Any = None  # rlexp's sweeper sets its SweepComposer: jobs its batch validation composed

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from rlexp.launch.gke import launch_sweep  # heavy imports only when launching

        # a user error (RlexpError) propagates: on the command line rlexp's error layer prints it as one line
        return launch_sweep(self, job_overrides, initial_job_idx)
