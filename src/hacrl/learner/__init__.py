"""One learner's update: the algorithms registry, the learner's view of the pool and its minibatch updates
(``update``), and FSDP2 sharding of an agent over its replicas. Used by the agent workers (``backends``)."""

from hacrl.learner.algorithms import ALGORITHMS, Algorithm

__all__ = ["ALGORITHMS", "Algorithm"]
