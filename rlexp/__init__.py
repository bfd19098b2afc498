"""rlexp: declarative RL post-training experiments for LLMs on JAX/Tunix, driven by Hydra."""

__version__ = "0.1.0"

from rlexp import log_setup
from rlexp.compat.tensorboardx import import_without_torch
from rlexp.tunix.imports import defer_package_init

# before anything imports tunix: its __init__ loads every trainer it has (~1 s); rlexp uses a few submodules
defer_package_init()
# and through Tunix, tensorboardX: its import of torch (installed with the test extra) is ~1.1 s of every run
import_without_torch()
log_setup.install()  # rlexp's status lines and warnings on stderr, in every process that imports it
