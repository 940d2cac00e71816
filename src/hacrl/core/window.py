"""The adaptive cross window: each learner's lower clip bound per source agent, set from the cross ratios it sees.

HACPO's cross term clip(s, ℓ_m, 1) · sg(·)^α · ω · A gives no gradient to a cross answer whose ratio s lies
outside [ℓ_m, 1], whatever its advantage. With the paper's fixed ℓ_0 = 1 − δ, how many cross answers count
depends on how far apart the two agents' distributions are — model, learning rate, training state — so δ
has to be swept per pair (docs/results/tiny-pairs.md and smollm2.md: 6–28% inside at δ = 0.2 on the tiny pairs, 0% on SmolLM2's).

The adaptive window widens ℓ_0 for each (learner, source) pair just enough that a target share of that
source's cross answers lies inside [ℓ_0, 1], never narrower than the configured δ and never below a floor:

    ℓ̂ = clamp(the k-th largest ratio ≤ 1, floor, 1 − δ),  k = ⌈target · n⌉ over the source's n cross ratios

(the floor if fewer than k ratios are ≤ 1). The bound a step uses comes from the ratios of earlier steps,
smoothed geometrically: the first observation is taken as it is, later ones as log ℓ ← (1 − β) log ℓ + β log ℓ̂.
The stepwise tightening within a step (ℓ_m = min(1, ℓ_0 + m · δ_step)) and the upper bound 1 are the paper's.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def coverage_lower_bound(ratios: Tensor, *, target: float, floor: float, ceiling: float) -> float:
    """The highest ℓ ≤ ``ceiling`` with at least ``target`` of ``ratios`` in [ℓ, 1], clamped to ≥ ``floor``.

    >>> def bound(*ratios):
    ...     return coverage_lower_bound(torch.tensor(ratios, dtype=torch.float64), target=0.4, floor=0.1, ceiling=0.8)
    >>> bound(0.3, 0.5, 0.7, 0.9, 1.2)  # k = 2 of 5: the 2nd largest ratio <= 1
    0.7
    >>> bound(0.95, 0.99)  # the configured window already holds them: 1 - δ
    0.8
    >>> bound(0.05, 1.5, 2.0)  # out of reach: the floor
    0.1
    """
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target must lie in (0, 1], got {target}")
    if not 0.0 < floor <= ceiling <= 1.0:
        raise ValueError(f"need 0 < floor <= ceiling <= 1, got floor={floor}, ceiling={ceiling}")
    r = ratios.detach().flatten().double()
    r = r[torch.isfinite(r)]
    if r.numel() == 0:
        return ceiling
    k = math.ceil(target * r.numel() - 1e-9)
    below_one = torch.sort(r[r <= 1.0], descending=True).values
    bound = float(below_one[k - 1]) if below_one.numel() >= k else floor
    return min(ceiling, max(floor, bound))


class CrossWindow:
    """Smoothed adaptive lower bounds ℓ_0[learner, source] of ``num_agents`` agents.

    Args:
        num_agents: N.
        delta: the configured δ: ℓ_0 is never above 1 − δ (the window never narrower than the paper's).
        target: share of a source's cross answers the window should hold, in (0, 1].
        floor: lowest ℓ_0 allowed (a ratio below it is too far off-policy to weigh in).
        smoothing: β of the geometric smoothing across steps, in (0, 1]; 1 uses only the last step.
    """

    def __init__(self, num_agents: int, *, delta: float, target: float, floor: float, smoothing: float) -> None:
        if num_agents < 1:
            raise ValueError(f"num_agents must be >= 1, got {num_agents}")
        if not 0.0 < smoothing <= 1.0:
            raise ValueError(f"smoothing must lie in (0, 1], got {smoothing}")
        if not 0.0 < floor <= 1.0 - delta:
            raise ValueError(f"need 0 < floor <= 1 - delta, got floor={floor}, delta={delta}")
        self.num_agents, self.target, self.floor, self.smoothing = num_agents, target, floor, smoothing
        self.ceiling = 1.0 - delta
        self.lower_NN = torch.full((num_agents, num_agents), self.ceiling, dtype=torch.float64)
        self.seen_NN = torch.zeros((num_agents, num_agents), dtype=torch.bool)

    def bounds(self, learner: int) -> list[float]:
        """ℓ_0 of ``learner`` for each source agent (the learner's own entry is unused)."""
        return [float(x) for x in self.lower_NN[learner]]

    def observe(self, learner: int, source: int, ratios: Tensor) -> float:
        """Record the cross ratios ``learner`` computed for ``source``'s answers this step; returns the new ℓ_0.
        An empty ``ratios`` leaves the bound as it is."""
        if learner == source:
            raise ValueError("own answers have no cross window")
        if ratios.numel() == 0:
            return float(self.lower_NN[learner, source])
        estimate = coverage_lower_bound(ratios, target=self.target, floor=self.floor, ceiling=self.ceiling)
        if self.seen_NN[learner, source]:
            old = math.log(float(self.lower_NN[learner, source]))
            estimate = math.exp((1.0 - self.smoothing) * old + self.smoothing * math.log(estimate))
        self.lower_NN[learner, source] = estimate
        self.seen_NN[learner, source] = True
        return estimate

    def state_dict(self) -> dict:
        return {"lower_NN": self.lower_NN.clone(), "seen_NN": self.seen_NN.clone()}

    def load_state_dict(self, state: dict) -> None:
        lower, seen = state["lower_NN"], state["seen_NN"]
        if tuple(lower.shape) != (self.num_agents, self.num_agents) or tuple(seen.shape) != tuple(lower.shape):
            raise ValueError(f"cross-window state is for {lower.shape[0]} agents, this run has {self.num_agents}")
        self.lower_NN = lower.to(torch.float64).clone()
        self.seen_NN = seen.to(torch.bool).clone()
