"""The message a learner's update is: what the driver hands one agent's worker for one update.

One frozen record in place of positional arguments, the same for both backends (the ``local`` backend calls
``AgentWorker.update(request)`` in the trainer's process, the ``ray`` backend pickles the request to the agent's
actor). It holds only tokenizer-neutral data: the pool's texts and scalars, ω, and in the asynchronous mode
the keys of the worker's own answers (docs/async.md); everything derived from the config and the algorithm
reaches the worker once, at construction (``hacrl.config.derive``).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from hacrl.pool import TrajectoryPool


@dataclass(frozen=True)
class UpdateRequest:
    """One update of one learner.

    Attributes:
        pool: the step's pool (or the asynchronous take as one, ``PoolTake.trajectory_pool``), without token
            ids: the worker fills in its own answers' tokens.
        omega_NN: float[N, N], the driver's ω^(k,j) (``CapabilityTracker.omega_matrix``, its clamps applied):
            the learner's row weighs its baseline (eq. 7), the column its cross answers' loss (eq. 50).
        own_keys: the asynchronous mode: the worker's ``(round tag, position)`` key of each own answer in ``pool``,
            in its order (each own answer carries its ``version_gap``, ``Trajectory.version_gap``); None:
            lock-step (the pool holds exactly the step's own answers).
        forget: the asynchronous mode: keys of own answers that expired unused.
        validation: the ``trust`` method's validation check before this step, per agent (in config order) per
            problem of the slice: whether its greedy answer was right; None: no check this step.
    """

    pool: TrajectoryPool
    omega_NN: Tensor
    own_keys: tuple[tuple[int, int], ...] | None = None
    forget: tuple[tuple[int, int], ...] = ()
    validation: tuple[tuple[bool, ...], ...] | None = None
