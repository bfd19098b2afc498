"""Where a patch applies: rlexp's speed work targets XLA:CPU, and other platforms keep Tunix's code."""

from __future__ import annotations


def on_cpu() -> bool:
    """Whether JAX's default devices are CPUs."""
    import jax

    return jax.devices()[0].platform == "cpu"
