"""Smoothed per-agent capability P̂ and the capability ratio ω (paper eqs. 8-9), two ways.

``CapabilityTracker`` (the lock-step trainer): P̂_j is agent j's mean reward over the last ``window`` steps,
the current step included, floored at ``floor``; with no history yet it is 1 (so ω = 1). The step value is the
mean over *all* of agent j's answers in the step's batch (the authors' code), not a per-prompt quantity. A step
in which an agent wrote no answer leaves its window untouched.

``RecentCapability`` (agents at different step counts, docs/async.md): P̂_j is the mean over agent j's last
``window`` scored prompts of its mean reward on each, whatever step each agent is at; with ``window`` = K·B
(K steps of B prompts) it equals the tracker's P̂ in lock-step.
"""

from __future__ import annotations

import torch
from torch import Tensor

from hacrl.core.advantages import CAPABILITY_FLOOR, OMEGA_MAX, OMEGA_MIN, omega_matrix


class _WindowedCapability:
    """What both estimators share: their settings (checked once), P̂ of one agent's window (its mean, floored;
    1 before any value, so ω = 1), ω from P̂, and the settings a checkpoint must match."""

    def __init__(self, num_agents: int, window: int, floor: float, ratio_min: float, ratio_max: float) -> None:
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

    @property
    def capability(self) -> Tensor:  # pragma: no cover - each estimator defines it
        raise NotImplementedError

    def _floored_mean(self, values_W: Tensor) -> Tensor:
        """P̂ of one agent from the values in its window: their mean floored at ``floor``; 1 if there are none."""
        return values_W.mean().clamp_min(self.floor) if values_W.numel() else torch.tensor(1.0, dtype=torch.float64)

    def omega_matrix(self) -> Tensor:
        """float[N, N] with [k, j] = ω^(k,j) = clamp(P̂_k / P̂_j) (``hacrl.core.omega_matrix`` of ``capability``)."""
        return omega_matrix(self.capability, ratio_min=self.ratio_min, ratio_max=self.ratio_max, floor=self.floor)

    def _config(self) -> dict:
        return {"num_agents": self.num_agents, "window": self.window, "floor": self.floor,
                "ratio_min": self.ratio_min, "ratio_max": self.ratio_max}


class CapabilityTracker(_WindowedCapability):
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
        super().__init__(num_agents, window, floor, ratio_min, ratio_max)
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
            out.append(self._floored_mean(col))
        return torch.stack(out).float()

    def state_dict(self) -> dict:
        return {
            "history": self.history_SN.clone(),
            "steps": self.steps,
            "config": self._config(),
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


class RecentCapability(_WindowedCapability):
    """P̂ and ω of agents that train at their own pace (the asynchronous mode): each agent's P̂ is the mean, over
    its last ``window`` scored prompts, of its mean reward on each, floored at ``floor``; 1 before its first (so
    ω = 1); ω^(k,j) = clamp(P̂_k / P̂_j) as ``CapabilityTracker``. Each agent's window moves when that agent is
    scored, so P̂ is defined whatever step each agent is at.

    The unit is the scored prompt (one agent's answers to one prompt), neither the step nor the answer:

    - steps do not compare between agents at different step counts; a scored prompt is an event for one agent;
    - the answers to one prompt share its difficulty, so their rewards are correlated: the prompt is the unit of
      evidence, and a window of prompts spans as many problems for every agent, whatever its answers per prompt.

    In lock-step (every agent scored on the same B prompts per step, G scored answers to each) a window of K·B
    prompts holds the last K steps, and the mean of its prompt means is the mean of the K step means: the
    tracker's P̂ (exactly where the sums are exact, as with 0/1 rewards and a power-of-two G). A prompt's mean is
    over its scored answers (a prompt with none is no event); the tracker's step mean weighs prompts by their
    scored answers instead, so the two differ when some answers are unscorable.

    Args:
        num_agents: N.
        window: the number of an agent's most recent scored prompts averaged (K·B for K steps of B prompts).
        floor, ratio_min, ratio_max: as ``CapabilityTracker``.
    """

    def __init__(
        self,
        num_agents: int,
        *,
        window: int,
        floor: float = CAPABILITY_FLOOR,
        ratio_min: float = OMEGA_MIN,
        ratio_max: float = OMEGA_MAX,
    ) -> None:
        super().__init__(num_agents, window, floor, ratio_min, ratio_max)
        # per agent its last ``window`` prompt means, oldest first, float64
        self._recent_W = [torch.empty(0, dtype=torch.float64) for _ in range(num_agents)]
        self._seen = [0] * num_agents  # scored prompts per agent since the start (the window's clock)

    def observe(self, agent: int, rewards_G: Tensor) -> Tensor:
        """Record one scored prompt of ``agent``: the rewards of its scored answers to it (float[G], G ≥ 1).
        Returns the prompt's mean reward (float64)."""
        if not 0 <= agent < self.num_agents:
            raise ValueError(f"agent must lie in [0, {self.num_agents}), got {agent}")
        if rewards_G.dim() != 1 or rewards_G.numel() == 0:
            raise ValueError(f"a scored prompt needs a 1-D tensor of at least one reward, "
                             f"got {tuple(rewards_G.shape)}")
        mean = rewards_G.detach().to("cpu", torch.float64).mean()
        self._recent_W[agent] = torch.cat([self._recent_W[agent], mean[None]])[-self.window:]
        self._seen[agent] += 1
        return mean

    def observe_answers(self, rewards_B: Tensor, prompts_B: Tensor, sources_B: Tensor) -> None:
        """Record scored answers of any agents to any prompts: one event per (source, prompt), each source's in
        ascending prompt order (a round's prompt ids follow the data stream)."""
        if not rewards_B.shape == prompts_B.shape == sources_B.shape or rewards_B.dim() != 1:
            raise ValueError(f"rewards, prompts and sources must be 1-D of one shape, got "
                             f"{tuple(rewards_B.shape)}, {tuple(prompts_B.shape)} and {tuple(sources_B.shape)}")
        groups: dict[tuple[int, int], list[int]] = {}
        for i, key in enumerate(zip(sources_B.tolist(), prompts_B.tolist(), strict=True)):
            groups.setdefault(key, []).append(i)
        for (source, _), rows in sorted(groups.items()):
            self.observe(source, rewards_B[rows])

    @property
    def prompts_seen(self) -> Tensor:
        """long[N]: the scored prompts each agent has been observed on so far."""
        return torch.tensor(self._seen, dtype=torch.long)

    @property
    def capability(self) -> Tensor:
        """P̂, float[N]: per agent the mean of its last ``window`` prompt means, floored; 1 if none."""
        out = [self._floored_mean(r_W) for r_W in self._recent_W]
        return torch.stack(out).float()

    def state_dict(self) -> dict:
        """Each agent's window (float64, oldest first, a copy) and its count of scored prompts."""
        return {
            "recent": [r_W.clone() for r_W in self._recent_W],
            "seen": list(self._seen),
            "config": self._config(),
        }

    def load_state_dict(self, state: dict) -> None:
        mine = self.state_dict()["config"]
        if dict(state["config"]) != mine:
            raise ValueError(f"recent-capability config mismatch: checkpoint {state['config']} vs current {mine}")
        recent, seen = state["recent"], state["seen"]
        if len(recent) != self.num_agents or len(seen) != self.num_agents:
            raise ValueError(f"recent-capability state holds {len(recent)} windows, expected {self.num_agents}")
        self._recent_W = [torch.as_tensor(r, dtype=torch.float64).clone()[-self.window:] for r in recent]
        self._seen = [int(n) for n in seen]
