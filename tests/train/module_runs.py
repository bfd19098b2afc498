"""In-process runs built once for a test module (module-scoped fixtures).

tests/conftest.py puts cwd, os.environ, Hydra's global state and JAX's config back around each test, but a
module-scoped fixture is set up before that snapshot is taken: what its in-process run leaves (the JAX compilation
cache switched on, Hydra's config) would stay for the rest of the worker's tests. `process_state_kept` puts them
back around the run itself.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def process_state_kept() -> Iterator[None]:
    """cwd, os.environ, Hydra's global state and JAX's config flags as they were before the block."""
    jax = sys.modules.get("jax")
    cwd, environ = os.getcwd(), dict(os.environ)
    jax_before = dict(jax.config.values) if jax is not None else None
    try:
        yield
    finally:
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.hydra_config import HydraConfig

        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = None
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environ)
        jax = sys.modules.get("jax")
        if jax is not None:
            for name, value in dict(jax.config.values).items():
                if jax_before is not None and name in jax_before and jax_before[name] != value:
                    jax.config.update(name, jax_before[name])
