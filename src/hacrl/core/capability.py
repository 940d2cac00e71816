"""Smoothed per-agent capability P̂ and the capability ratio ω (paper eqs. 8-9).

P̂_j is agent j's mean reward over the last ``window`` steps, the current step included, floored at
``floor``; with no history yet it is 1 (so ω = 1). The step value is the mean over *all* of agent
j's answers in the step's batch (the authors' code), not a per-prompt quantity. A step in which an
agent wrote no answer leaves its window untouched.
"""

from __future__ import annotations

import torch
from torch import Tensor

from hacrl.core.advantages import CAPABILITY_FLOOR, OMEGA_MAX, OMEGA_MIN, omega_matrix


class CapabilityTracker:
    """Sliding-window success rate of each of ``num_agents`` agents and their ratios ω.

    Args:
        num_agents: N.
        window: K, the number of steps averaged (the current one included).
        floor: lower bound on P̂ (avoids division by zero for an agent that never succeeds).
        ratio_min, ratio_max: clamp of ω^(k,j) = P̂_k / P̂_j (learner k, source j).
    """

    def __init__(
        self,
        num_agents: int,
        *,
        window: int = 5,
        floor: float = CAPABILITY_FLOOR,
        ratio_min: float = OMEGA_MIN,
        ratio_max: float = OMEGA_MAX,
    ) -> None:
        if num_agents < 1:
            raise ValueError(f"num_agents must be >= 1, got {num_agents}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if not 0 < ratio_min <= 1 <= ratio_max:
            raise ValueError(f"need 0 < ratio_min <= 1 <= ratio_max, got {ratio_min}, {ratio_max}")
        self.num_agents = num_agents
        self.window = window
        self.floor = floor
        self.ratio_min = ratio_min
        self.ratio_max = ratio_max
        # history_SN: one row per recorded step, NaN where the agent wrote no answer that step.
        self.history_SN = torch.empty(0, num_agents, dtype=torch.float64)
        self.steps = 0

    def update(self, rewards: Tensor, source_ids: Tensor) -> Tensor:
        """Record one step: the mean reward of each agent's answers. Returns this step's row, float[N]."""
        if rewards.shape != source_ids.shape or rewards.dim() != 1:
            raise ValueError(f"rewards and source_ids must be 1-D of one shape, got "
                             f"{tuple(rewards.shape)} and {tuple(source_ids.shape)}")
        r_B = rewards.detach().to("cpu", torch.float64)
        src_B = source_ids.detach().to("cpu", torch.long)
        if src_B.numel() and (src_B.min() < 0 or src_B.max() >= self.num_agents):
            raise ValueError(f"source_ids must lie in [0, {self.num_agents})")
        sums_N = torch.zeros(self.num_agents, dtype=torch.float64).index_add_(0, src_B, r_B)
        counts_N = torch.zeros(self.num_agents, dtype=torch.float64).index_add_(0, src_B, torch.ones_like(r_B))
        row_N = torch.where(counts_N > 0, sums_N / counts_N.clamp_min(1), torch.full_like(sums_N, float("nan")))
        self.history_SN = torch.cat([self.history_SN, row_N[None]])
        self.steps += 1
        return row_N.float()

    @property
    def capability(self) -> Tensor:
        """P̂, float[N]: per agent the mean of its last ``window`` recorded values, floored; 1 if none."""
        out = []
        for j in range(self.num_agents):
            col = self.history_SN[:, j]
            col = col[~torch.isnan(col)][-self.window:]
            out.append(col.mean().clamp_min(self.floor) if col.numel() else torch.tensor(1.0, dtype=torch.float64))
        return torch.stack(out).float()

    def omega_matrix(self) -> Tensor:
        """float[N, N] with [k, j] = ω^(k,j) = clamp(P̂_k / P̂_j) (``hacrl.core.omega_matrix`` of ``capability``)."""
        return omega_matrix(self.capability, ratio_min=self.ratio_min, ratio_max=self.ratio_max, floor=self.floor)

    def state_dict(self) -> dict:
        return {
            "history": self.history_SN.clone(),
            "steps": self.steps,
            "config": {"num_agents": self.num_agents, "window": self.window, "floor": self.floor,
                       "ratio_min": self.ratio_min, "ratio_max": self.ratio_max},
        }

    def load_state_dict(self, state: dict) -> None:
        mine = self.state_dict()["config"]
        theirs = dict(state["config"])
        if theirs.get("warmup_steps", 0) == 0:  # checkpoints before warm-up was removed say warmup_steps: 0
            theirs.pop("warmup_steps", None)
        if theirs != mine:
            raise ValueError(f"capability tracker config mismatch: checkpoint {theirs} vs current {mine}")
        history = torch.as_tensor(state["history"], dtype=torch.float64)
        if history.dim() != 2 or history.shape[1] != self.num_agents:
            raise ValueError(f"capability history has shape {tuple(history.shape)}, expected [*, {self.num_agents}]")
        self.history_SN = history.clone()
        self.steps = int(state["steps"])
