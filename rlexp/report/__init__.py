"""Sweep and run reports: `python -m rlexp.report <sweep dir | run dirs…> [--out report.html] [--wandb]`.

The HTML report reads only run dirs (metrics.jsonl, summary.json, .hydra/); the wandb Report is a
second renderer of the same sweep for teams that sync their runs.
"""
