"""Training: Tunix GRPO-family learners driven by rlexp config, with evals and run-dir files."""
