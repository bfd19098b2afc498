"""RL algorithms as registered specs: one module an algorithm (`grpo`, `dapo`, `drgrpo`, `gspo`, `ppo`, `opd`), each
`register(AlgorithmSpec(...))`-ing its config node, learner, models, estimate terms and rules (`spec`,
`registry`). Generic code asks `algorithm_of(trainer)`; nothing outside these modules branches on a name."""
