"""The driver: the step as named phases, rewards, pool, evaluation, checkpoints, run directories, metrics."""
