"""rlexp: declarative RL post-training experiments for LLMs on JAX/Tunix, driven by Hydra."""

__version__ = "0.1.0"
