"""`hydra/sweeper=rlexp` (rlexp's default): Hydra's basic sweeper, with a batch validation that composes each
distinct group choice once instead of every job in full.

Hydra's BasicSweeper composes every job before launching the batch, only to fail early on a job that does not
compose; that was 98 s of a 126 s profile of a 100-job dry run. This sweeper runs the same jobs in the same order
with the same settings (`params`, `max_batch_size`), and validates through rlexp.launch.compose: the same
Hydra composition per distinct structural combination, each job's leaf overrides type-checked on it. A bad job
still fails before anything launches, with Hydra's own exception. The composer is handed to a launcher that
takes one (`hydra/launcher=gke`), so the launcher reuses what the validation composed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from rlexp.compat.hydra import basic_sweeper_class
from rlexp.config.load import register_configs

register_configs()  # `hydra/sweeper=rlexp` (SweeperConf), selected in conf/config.yaml


class BasicSweeper(basic_sweeper_class()):  # type: ignore[misc]
    """Hydra's BasicSweeper with composition shared between batch validation and the launcher.

    Named as Hydra's class: it is a drop-in (sweep.json records the sweeper by class name, and the sweep
    callback plans the basic sweeper's job list for it)."""

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from rlexp.launch.compose import SweepComposer

        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.composer = SweepComposer(hydra_context.config_loader, config)
        self.next_job_idx = 0  # BasicSweeper.sweep launches each validated batch at the running job count
        if hasattr(self.launcher, "composer"):
            self.launcher.composer = self.composer

    def sweep(self, arguments: list[str]) -> Any:
        """Hydra's sweep, after every sweep expression was checked to yield jobs (a glob needs the loader)."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        from rlexp.launch.sweep_checks import check_expressions

        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        check_expressions(parser.parse_overrides([*self._parse_config(), *arguments]), grid=True)
        return super().sweep(arguments)

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Compose every job of the batch (raising what Hydra's composition raises for a bad one); a batch every
        job of which the config rules refuse is refused once (rlexp.launch.sweep_checks)."""
        from rlexp.launch.sweep_checks import record_refused, refuse_if_every_job_fails

        jobs = [
            (num, list(o), lambda o=o, num=num: self.composer.compose(list(o), num).task)  # composed when checked
            for num, o in enumerate(batch, self.next_job_idx)
        ]
        refuse_if_every_job_fails(self.config, jobs)  # first: a refused 1,000-job sweep composes 17 of them
        for num, overrides, _ in jobs:
            try:
                self.composer.compose(overrides, num)
            except Exception as err:  # the sweep stops before any job of the batch ran: sweep.json says why
                record_refused(self.config, num, overrides, err)
                raise
        self.next_job_idx += len(batch)
