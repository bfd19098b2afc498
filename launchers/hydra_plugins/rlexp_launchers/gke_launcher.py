"""`hydra/launcher=gke`: each job of a run or sweep becomes one JobSet on the current kube context."""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra_plugins.rlexp_launchers._state import LauncherState

from rlexp.config.load import register_configs

register_configs()  # rlexp's schemas, including `hydra/launcher=gke` (GkeLauncherConf)


class GkeLauncher(LauncherState, Launcher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from rlexp.launch.gke import launch_sweep  # heavy imports only when launching

        # a user error (RlexpError) propagates: on the command line rlexp's error layer prints it as one line
        return launch_sweep(self, job_overrides, initial_job_idx)
