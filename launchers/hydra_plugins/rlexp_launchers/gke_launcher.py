"""`hydra/launcher=gke`: each job of a run or sweep becomes one JobSet on the current kube context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from rlexp.launch.settings import GkeLauncherConf

ConfigStore.instance().store(group="hydra/launcher", name="gke", node=GkeLauncherConf, provider="rlexp")


class GkeLauncher(Launcher):
    def __init__(self, **params: Any) -> None:
        self.params = params
        # on the command line a user error ends the run with one line (exit 2); code driving the launcher
        # directly (tests, notebooks) sets this False to get the exception instead
        self.one_line_errors = True
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from rlexp.errors import RlexpError
        from rlexp.launch.gke import launch_sweep  # heavy imports only when launching

        try:
            return launch_sweep(self, job_overrides, initial_job_idx)
        except RlexpError as err:  # a user error: one line, exit 2 (HYDRA_FULL_ERROR=1 keeps the traceback)
            if not self.one_line_errors:
                raise
            from rlexp.main import fail

            fail(err)
            raise
