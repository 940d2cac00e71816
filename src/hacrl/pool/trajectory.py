"""The shared trajectory pool of one step: every agent's answers to every prompt, grouped by prompt."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from hacrl.types import Problem, Trajectory


class TrajectoryPool:
    """All trajectories of one step. Unscorable answers (reward None) are kept for logging but never
    enter training views: ``scored()`` drops them."""

    def __init__(self, problems: Sequence[Problem], trajectories: Iterable[Trajectory]) -> None:
        self.problems = list(problems)
        self.trajectories = list(trajectories)
        for t in self.trajectories:
            if not 0 <= t.prompt_index < len(self.problems):
                raise ValueError(f"trajectory prompt_index {t.prompt_index} outside the batch of "
                                 f"{len(self.problems)} prompts")

    def __len__(self) -> int:
        return len(self.trajectories)

    def scored(self, sources: Iterable[int] | None = None) -> list[Trajectory]:
        """Scored trajectories, optionally only those written by ``sources``, ordered by (prompt, source)."""
        keep = None if sources is None else set(sources)
        out = [t for t in self.trajectories if t.reward is not None and (keep is None or t.source in keep)]
        return sorted(out, key=lambda t: (t.prompt_index, t.source))

    def by_group(self) -> dict[int, list[Trajectory]]:
        """prompt index → its answers (the advantage groups)."""
        groups: dict[int, list[Trajectory]] = {}
        for t in self.trajectories:
            groups.setdefault(t.prompt_index, []).append(t)
        return groups

    def rewards_and_sources(self) -> tuple[torch.Tensor, torch.Tensor]:
        """float[M] rewards and long[M] sources of the scored trajectories (for the capability tracker)."""
        scored = self.scored()
        rewards = torch.tensor([t.reward for t in scored], dtype=torch.float32)
        sources = torch.tensor([t.source for t in scored], dtype=torch.long)
        return rewards, sources
