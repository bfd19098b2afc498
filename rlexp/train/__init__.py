"""Training: Tunix GRPO-family learners driven by rlexp config, with evals and run-dir files."""

# The signal that stopped training in this process (SIGTERM, Ctrl-C), set by train.graceful_stop.GracefulStop: a sweep of
# the basic launcher stops after that job instead of training the next one (rlexp.launch.callbacks).
stop_signal: list[str] = []
