"""The ``trust`` method's rollout budget (``algorithm.trust_budget``, ``hacrl.core.trust.rollout_budget``): how many
answers per prompt each agent writes in a step, moved toward the learner that can use least of its partners' answers.

Each update of a trust learner reports, per partner, ``trust_usable/<partner id>``: τ × the share of that partner's
answers its ratio floor kept (``hacrl.learner.trust``). The trainer keeps the latest value per learner and
partner (1 before the first update: the first step is the pooled methods' G each) and, before each step's rollout,
splits the pooled methods' N·G answers a prompt by ``rollout_budget``. The values live in the trainer's checkpoint
state (``budget``), so a resumed run splits its next step as the uninterrupted run would. Each step logs
``agent/<id>/rollouts``: the answers per prompt that agent wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hacrl.config import Config
from hacrl.core.trust import rollout_budget


class RolloutBudget:
    """The latest ``trust_usable`` of every learner in every partner and the split it gives."""

    def __init__(self, agent_ids: Sequence[str], group_size: int, min_share: float) -> None:
        self.ids = list(agent_ids)
        self.group_size = group_size
        self.min_share = min_share
        self.usable = [[1.0] * len(self.ids) for _ in self.ids]

    @classmethod
    def for_run(cls, cfg: Config, group_size: int) -> RolloutBudget | None:
        """The run's budget (None unless ``algorithm.trust_budget``)."""
        if not cfg.algorithm.trust_budget:
            return None
        return cls([a.id for a in cfg.agents], group_size, cfg.algorithm.trust_budget_min)

    def counts(self) -> list[int]:
        """Answers per prompt per agent for the next step."""
        return rollout_budget(self.usable, self.group_size, self.min_share)

    def observe(self, update_results: Sequence[dict[str, Any]]) -> None:
        """Take each learner's ``trust_usable/<partner id>`` from its update's result (a partner it saw no
        answer of keeps its last value)."""
        for k, result in enumerate(update_results):
            for j, partner in enumerate(self.ids):
                value = result.get(f"trust_usable/{partner}")
                if j != k and value is not None:
                    self.usable[k][j] = float(value)

    def metrics(self, counts: Sequence[int]) -> dict[str, float]:
        return {f"agent/{a}/rollouts": float(c) for a, c in zip(self.ids, counts, strict=True)}

    def state_dict(self) -> dict[str, Any]:
        return {"usable": [list(row) for row in self.usable]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        usable = [[float(v) for v in row] for row in state["usable"]]
        if len(usable) != len(self.ids) or any(len(row) != len(self.ids) for row in usable):
            raise ValueError(f"the checkpoint's rollout budget is for {len(usable)} agents, this run has "
                             f"{len(self.ids)}")
        self.usable = usable
