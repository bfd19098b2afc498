"""Reward functions: a registry of factories and the built-in scorers."""
