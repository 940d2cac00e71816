"""A run directory on disk, below the trainer, the report and the CLI that all use it.

``files`` (every write whole or not at all; a full disk as one line), ``rundir`` (what a run directory holds,
``--overwrite``, the one-writer lock), ``sinks`` (metrics sinks and reading the logs back), ``trackers``
(``run.loggers``: wandb, trackio), ``checkpoint`` (atomic checkpoints; recognising a damaged one).
"""
