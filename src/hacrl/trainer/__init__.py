"""The training loop (named phases), algorithms registry, evaluation and checkpoints."""

from hacrl.trainer.algorithms import ALGORITHMS, Algorithm

__all__ = ["ALGORITHMS", "Algorithm"]
