"""What both rlexp launchers keep from Hydra's setup (a mixin, not a Launcher: Hydra's plugin scan registers
every Launcher subclass it finds)."""

from __future__ import annotations

from typing import Any

from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class LauncherState:
    def __init__(self, **params: Any) -> None:
        self.params = params  # hydra.launcher.*
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None
        self.composer: Any = None  # rlexp's sweeper sets its SweepComposer: jobs its batch validation composed

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function
