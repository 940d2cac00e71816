"""Group advantages: plain (GRPO/GSPO) and HACPO's capability-aware form (paper eqs. 5-7).

All functions take flat per-answer tensors plus integer group ids (which prompt) and return one scalar
advantage per answer. Groups may be of any size and appear in any order; nothing here syncs with the
device (no ``.item()``), so the functions are safe on GPU tensors inside a step.

Departures from the paper, all taken from the authors' code (see docs/architecture.md):
- a group whose rewards are all equal, or that holds a single answer, gets advantage 0;
- the std is torch's unbiased std over the group's raw (unweighted) rewards, plus ``eps``;
- if the capability-weighted baseline exceeds the group's largest reward (possible with ω up to 10),
  it falls back to the learner's own mean reward in the group (the plain mean if the learner has no
  answer there).
"""

from __future__ import annotations

import torch
from torch import Tensor

OMEGA_MIN = 0.1
OMEGA_MAX = 10.0
CAPABILITY_FLOOR = 1e-8


def _check_flat(**tensors: Tensor) -> int:
    sizes = {name: t.shape for name, t in tensors.items()}
    lengths = {t.shape[0] if t.dim() == 1 else -1 for t in tensors.values()}
    if len(lengths) != 1 or -1 in lengths:
        raise ValueError(f"expected 1-D tensors of one length, got shapes {sizes}")
    return lengths.pop()


def _segments(group_ids_B: Tensor) -> tuple[Tensor, int]:
    """Map arbitrary group ids to 0..G-1 (``inv_B``) and return the number of groups G."""
    _, inv_B = torch.unique(group_ids_B, return_inverse=True)
    num_groups = int(inv_B.max()) + 1 if inv_B.numel() else 0
    return inv_B, num_groups


def _segment_sum(x_B: Tensor, inv_B: Tensor, num_groups: int) -> Tensor:
    return torch.zeros(num_groups, dtype=x_B.dtype, device=x_B.device).index_add_(0, inv_B, x_B)


def _segment_extreme(x_B: Tensor, inv_B: Tensor, num_groups: int, reduce: str) -> Tensor:
    init = float("-inf") if reduce == "amax" else float("inf")
    out = torch.full((num_groups,), init, dtype=x_B.dtype, device=x_B.device)
    return out.scatter_reduce(0, inv_B, x_B, reduce=reduce, include_self=True)


def _group_stats(r_B: Tensor, inv_B: Tensor, num_groups: int) -> tuple[Tensor, Tensor, Tensor]:
    """Per group: count, unbiased std, and whether the group is degenerate (size 1 or all equal)."""
    n_G = _segment_sum(torch.ones_like(r_B), inv_B, num_groups)
    mean_G = _segment_sum(r_B, inv_B, num_groups) / n_G
    sq_B = (r_B - mean_G[inv_B]) ** 2
    var_G = _segment_sum(sq_B, inv_B, num_groups) / (n_G - 1).clamp_min(1)
    max_G = _segment_extreme(r_B, inv_B, num_groups, "amax")
    min_G = _segment_extreme(r_B, inv_B, num_groups, "amin")
    degenerate_G = (n_G < 2) | (max_G == min_G)
    return n_G, var_G.sqrt(), degenerate_G


def group_advantages(
    rewards: Tensor, group_ids: Tensor, *, eps: float = 1e-6, normalize_std: bool = True
) -> Tensor:
    """Plain group-relative advantages, as in GRPO and GSPO (paper eq. 5).

    Args:
        rewards: float[B], one reward per answer.
        group_ids: long[B], which prompt each answer belongs to.
        eps: added to the std.
        normalize_std: divide by (std + eps); if False, the advantage is just R − mean.

    Returns:
        float32[B]: (R_i − mean_g) / (std_g + eps); 0 for size-1 and all-equal groups.

    Two groups of rewards {1, 0}: mean ½, unbiased std 1/√2, so each advantage is ±½·√2 ≈ ±0.7071.

    >>> group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.tensor([0, 0, 1, 1])).round(decimals=4)
    tensor([ 0.7071, -0.7071, -0.7071,  0.7071])
    """
    _check_flat(rewards=rewards, group_ids=group_ids)
    r_B = rewards.float()
    inv_B, num_groups = _segments(group_ids)
    n_G, std_G, degenerate_G = _group_stats(r_B, inv_B, num_groups)
    mean_G = _segment_sum(r_B, inv_B, num_groups) / n_G
    denom_B = (std_G[inv_B] + eps) if normalize_std else torch.ones_like(r_B)
    adv_B = (r_B - mean_G[inv_B]) / denom_B
    return torch.where(degenerate_G[inv_B], torch.zeros_like(adv_B), adv_B)


def weighted_group_advantages(rewards: Tensor, group_ids: Tensor, weights: Tensor, *, eps: float = 1e-6) -> Tensor:
    """Group advantages with a weight per answer in the group's mean and std (the ``trust`` method: a partner's
    answers count in the baseline as much as the learner trusts that partner; ``hacrl.core.trust``).

    Per group g, with W = Σ w_i: mean μ = Σ w_i R_i / W and the frequency-weighted unbiased variance
    Σ w_i (R_i − μ)² / (W − 1); each answer gets (R_i − μ) / (std + eps). Weights of 1 give
    ``group_advantages`` exactly; weights of 0 leave an answer out of its group's statistics (it still gets an
    advantage against them). A group is degenerate (advantage 0) when W < 2 or its weighted answers' rewards
    are all equal.

    Args:
        rewards: float[B]; group_ids: long[B]; weights: float[B], ≥ 0.

    Own answers {1, 0} (weight 1) and a partner's {1, 1} at weight 0: the own group's ±0.7071; at weight 1 the
    joint group's mean ¾, std ½: +0.5 and −1.5.

    >>> g = torch.tensor([0, 0, 0, 0])
    >>> r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    >>> weighted_group_advantages(r, g, torch.tensor([1.0, 1.0, 0.0, 0.0])).round(decimals=4)
    tensor([ 0.7071, -0.7071,  0.7071,  0.7071])
    >>> weighted_group_advantages(r, g, torch.ones(4)).round(decimals=4)
    tensor([ 0.5000, -1.5000,  0.5000,  0.5000])
    """
    _check_flat(rewards=rewards, group_ids=group_ids, weights=weights)
    if bool((weights < 0).any()):
        raise ValueError("weights must be >= 0")
    r_B, w_B = rewards.float(), weights.float()
    inv_B, num_groups = _segments(group_ids)
    w_G = _segment_sum(w_B, inv_B, num_groups)
    mean_G = _segment_sum(w_B * r_B, inv_B, num_groups) / w_G.clamp_min(1e-12)
    # w_i (R_i − μ)²: the frequency-weighted sum of squares
    var_G = _segment_sum(w_B * (r_B - mean_G[inv_B]) ** 2, inv_B, num_groups) / (w_G - 1).clamp_min(1e-12)
    counted_B = w_B > 0
    max_G = _segment_extreme(torch.where(counted_B, r_B, float("-inf")), inv_B, num_groups, "amax")
    min_G = _segment_extreme(torch.where(counted_B, r_B, float("inf")), inv_B, num_groups, "amin")
    degenerate_G = (w_G < 2) | (max_G <= min_G)
    adv_B = (r_B - mean_G[inv_B]) / (var_G.sqrt()[inv_B] + eps)
    return torch.where(degenerate_G[inv_B], torch.zeros_like(adv_B), adv_B)


def omega_matrix(capability: Tensor, *, ratio_min: float = OMEGA_MIN, ratio_max: float = OMEGA_MAX,
                 floor: float = CAPABILITY_FLOOR) -> Tensor:
    """ω^(k,j) = clamp(P̂_k / P̂_j, ratio_min, ratio_max) for every learner k (row) and source j (col).

    The one convention for ω everywhere in hacrl: the first index is the learner k, the second the source
    j, the value the learner's capability over the source's. It is entry ``[k, j]`` here, the metric
    ``agent/<k>/omega/<j>`` and ω(k→j) in ``hacrl compare``'s report. Learner k's baseline weighs j's
    rewards by ω^(k,j) (eq. 7); its update weighs j's answers by the transposed entry ω^(j,k) = P̂_j / P̂_k
    (eq. 50), above 1 when the source is the stronger agent.

    Args:
        capability: float[N], the smoothed success rate P̂ of each agent (floored at ``floor`` here).

    Returns:
        float32[N, N]; the diagonal is 1.

    >>> omega_matrix(torch.tensor([0.2, 0.8])).tolist()
    [[1.0, 0.25], [4.0, 1.0]]
    """
    cap_N = capability.float().clamp_min(floor)
    # eq. 8: ω^(k,j) = P̂^(k) / P̂^(j), clamped as in the authors' code
    return (cap_N[:, None] / cap_N[None, :]).clamp(ratio_min, ratio_max)


def hacpo_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    source_ids: Tensor,
    *,
    learner: int,
    capability: Tensor | None = None,
    omega: Tensor | None = None,
    capability_aware: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """HACPO's agent-capability-aware advantage for one learner (paper eqs. 6-7).

    Every answer in a group (all N·G answers to one prompt, whoever wrote them) gets the learner's
    advantage A_i = (R_i − μ̂_k) / (std(R_group) + eps), with the capability-adjusted baseline
    ``μ̂_k = (1/|group|) Σ_i ω^(k, src(i)) R_i``.

    Args:
        rewards: float[B], one reward per answer.
        group_ids: long[B], which prompt each answer belongs to.
        source_ids: long[B], which agent (0..N−1) wrote each answer.
        learner: the agent k whose update these advantages are for.
        capability: float[N], the smoothed P̂ of each agent (see ``CapabilityTracker``): ω^(k,·) is then
            ``omega_matrix(capability)[learner]``, with the module's default clamps and floor.
        omega: float[N], ω^(k,j) of this learner k for each source j as the caller computed it (the trainer:
            a row of ``CapabilityTracker.omega_matrix()``, the run's clamps applied). Give exactly one of
            ``capability`` and ``omega``.
        capability_aware: False gives the plain joint mean baseline (the paper's "−Adv" ablation).
        eps: added to the std.

    Returns:
        float32[B].
    """
    _check_flat(rewards=rewards, group_ids=group_ids, source_ids=source_ids)
    if (capability is None) == (omega is None):
        raise ValueError("give exactly one of capability (ω from P̂, default clamps) and omega (ω^(k,·))")
    name, per_agent_N = ("capability", capability) if capability is not None else ("omega", omega)
    assert per_agent_N is not None
    if per_agent_N.dim() != 1 or not 0 <= learner < per_agent_N.shape[0]:
        raise ValueError(f"learner={learner} is not an index into {name} of shape {tuple(per_agent_N.shape)}")
    if source_ids.numel() and (source_ids.min() < 0 or source_ids.max() >= per_agent_N.shape[0]):
        raise ValueError(f"source_ids must lie in [0, {per_agent_N.shape[0]}) (one {name} per agent)")
    r_B = rewards.float()
    inv_B, num_groups = _segments(group_ids)
    n_G, std_G, degenerate_G = _group_stats(r_B, inv_B, num_groups)

    if capability_aware:
        # ω^(k,j) of the learner k: the caller's, or eq. 8 from P̂ with this module's clamps
        omega_N = per_agent_N if omega is not None else omega_matrix(per_agent_N.to(r_B.device))[learner]
        w_B = omega_N.to(r_B.device, r_B.dtype)[source_ids]
    else:
        w_B = torch.ones_like(r_B)
    # eq. 7: μ̂^(k) = 1/(nG) Σ_j Σ_i ω^(k,j) R(y^(j)_i)   (divides by the group size, not Σω)
    mu_G = _segment_sum(w_B * r_B, inv_B, num_groups) / n_G

    # Fallback (authors' code): a baseline above every reward in the group would make all advantages
    # negative; use the learner's own mean there (the plain mean if it has no answer in the group).
    own_B = (source_ids == learner).to(r_B.dtype)
    own_n_G = _segment_sum(own_B, inv_B, num_groups)
    own_mean_G = _segment_sum(own_B * r_B, inv_B, num_groups) / own_n_G.clamp_min(1)
    plain_mean_G = _segment_sum(r_B, inv_B, num_groups) / n_G
    fallback_G = torch.where(own_n_G > 0, own_mean_G, plain_mean_G)
    max_G = _segment_extreme(r_B, inv_B, num_groups, "amax")
    mu_G = torch.where(mu_G > max_G, fallback_G, mu_G)

    # eq. 6: A^(k)_i = (R_i − μ̂^(k)) / σ_joint
    adv_B = (r_B - mu_G[inv_B]) / (std_G[inv_B] + eps)
    return torch.where(degenerate_G[inv_B], torch.zeros_like(adv_B), adv_B)
