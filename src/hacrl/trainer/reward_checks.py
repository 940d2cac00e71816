"""One-time warnings about what a run learns from, each one logged line naming what to check:

- ``RewardWarnings``: every reward of a step is 0 for an agent (once per agent: a reward that never pays teaches
  nothing, and a reward that cannot read the answers as written looks just like that); rewards outside [0, 1]
  (once per run: the metrics called accuracy count answers with reward >= 1, and the held-out "greedy accuracy"
  is the mean reward, so they read as rewards then; ``hacrl train``'s last lines then say "mean greedy reward",
  as does ``hacrl compare``'s report: ``outside_unit``);
- ``warn_if_batch_exceeds_data``: more prompts per step than the training set holds (each step repeats problems).

Both loops (lock-step and asynchronous) see the scored answers in ``hacrl.trainer.phases.Phases.score``, which
calls ``RewardWarnings.check``. Tests: tests/trainer/test_reward_checks.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from hacrl.types import Trajectory

logger = logging.getLogger(__name__)


def outside_unit(rewards: Iterable[float | None]) -> bool:
    """Whether a reward (None: unscorable, left out) falls outside [0, 1]: a mean of them is then no accuracy.

    >>> outside_unit([0.0, 1.0, None]), outside_unit([0.5, 2.0]), outside_unit([-0.5])
    (False, True, True)
    """
    return any(r is not None and not 0.0 <= r <= 1.0 for r in rewards)


class RewardWarnings:
    """Says each thing once per run (per agent for all-zero rewards)."""

    def __init__(self) -> None:
        self._said: set[str] = set()

    @property
    def saw_outside_unit(self) -> bool:
        """Whether a scored reward of this run fell outside [0, 1] (warned about once)."""
        return "range" in self._said

    def check(self, trajectories: Sequence[Trajectory], agent_ids: Sequence[str], step: int) -> None:
        """Warn about the scored rewards of step ``step`` (1-based); unscorable answers (None) are left out."""
        scored = [t.reward for t in trajectories if t.reward is not None]
        if outside_unit(scored) and self._first("range"):
            logger.warning("step %d: rewards outside [0, 1] (from %.4g to %.4g): 'accuracy' (agent/<id>/accuracy, "
                           "answers with reward >= 1) and the held-out greedy accuracy (the mean reward) then read "
                           "as rewards, not accuracies", step, min(scored), max(scored))
        for index, agent_id in enumerate(agent_ids):
            own = [t.reward for t in trajectories if t.source == index and t.reward is not None]
            if own and all(r == 0.0 for r in own) and self._first(f"zero/{agent_id}"):
                logger.warning("step %d: every reward of agent %s is 0 (%d answers), so it learns nothing from "
                               "them; if this goes on, check that task.reward reads the answers as written "
                               "(compare them in samples/step-*.jsonl)", step, agent_id, len(own))

    def _first(self, key: str) -> bool:
        """True the first time ``key`` is asked about."""
        if key in self._said:
            return False
        self._said.add(key)
        return True


def warn_if_batch_exceeds_data(batch_size: int, num_train: int | None, task_name: str) -> bool:
    """Warn when a step takes more prompts (``trainer.batch_size``) than the training set holds; whether it did.

    >>> warn_if_batch_exceeds_data(8, 100, "t"), warn_if_batch_exceeds_data(8, None, "t")
    (False, False)
    """
    if num_train is None or batch_size <= num_train:
        return False
    logger.warning("trainer.batch_size=%d prompts per step, but task %s has %d training problems: every step "
                   "repeats problems; lower trainer.batch_size to at most %d, or give more data", batch_size,
                   task_name, num_train, num_train)
    return True
