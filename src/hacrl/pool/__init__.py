"""The pool of answers every learner trains on.

``trajectory.TrajectoryPool``: one lock-step step's answers, grouped by prompt. ``shared.SharedPool``: the
asynchronous mode's pool, answers kept across rounds with the version of the agent that wrote them, and each
learner's take under the staleness bound (docs/async.md).
"""

from hacrl.pool.shared import PooledAnswer, PoolTake, SharedPool
from hacrl.pool.trajectory import TrajectoryPool

__all__ = ["PoolTake", "PooledAnswer", "SharedPool", "TrajectoryPool"]
