"""Policy losses: HACPO (paper Appendix E), GSPO and GRPO baselines, and the reference KL term.

Every loss takes the learner's current token log-probs in its own tokenization (``logp_BT``, with
``mask_BT`` marking answer tokens), computes in float32 whatever the input dtype, and returns
``(loss, metrics)``: a scalar to minimise and a dict of detached tensors (no ``.item()``). The loss is
the negative mean over the minibatch's sequences, so a minibatch split into micro-batches whose losses
are weighted by their share of sequences gives exactly the full minibatch's gradient.

Departures from the paper (as in the authors' code, see docs/architecture.md):
- the sequence log-ratio is clamped to ±``max_log_ratio`` before ``exp``;
- the cross-agent ratio compares the learner's mean token log-prob over its own tokens with the
  source's rollout-time mean over the source's tokens (the v2 form of eq. 11);
- sequences with no answer tokens contribute 0 to the objective (and are counted in ``metrics``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from hacrl.registry import Registry

AGGREGATIONS = ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum")

POLICY_LOSSES: Registry = Registry("policy loss")


def aggregate(x_BT: Tensor, mask_BT: Tensor, *, mode: str) -> Tensor:
    """Reduce per-token values to a scalar, naming the normalisation.

    - ``seq-mean-token-mean``: mean over each sequence's tokens, then over sequences (GSPO, HACPO);
      a sequence without tokens counts as 0.
    - ``token-mean``: mean over all tokens of the batch.
    - ``seq-mean-token-sum``: sum over each sequence's tokens, then mean over sequences.
    """
    m_BT = mask_BT.to(x_BT.dtype)
    x_BT = torch.where(mask_BT.bool(), x_BT, torch.zeros_like(x_BT))  # padding may hold -inf / NaN
    if mode == "seq-mean-token-mean":
        return (x_BT.sum(-1) / m_BT.sum(-1).clamp_min(1)).mean()
    if mode == "token-mean":
        return x_BT.sum() / m_BT.sum().clamp_min(1)
    if mode == "seq-mean-token-sum":
        return x_BT.sum(-1).mean()
    raise ValueError(f"unknown aggregation mode {mode!r}; valid: {', '.join(AGGREGATIONS)}")


def _check_shapes(logp_BT: Tensor, mask_BT: Tensor, **per_seq: Tensor | None) -> None:
    if logp_BT.dim() != 2 or mask_BT.shape != logp_BT.shape:
        raise ValueError(f"logp and mask must be [B, T] of one shape, got {tuple(logp_BT.shape)} "
                         f"and {tuple(mask_BT.shape)}")
    if logp_BT.shape[0] == 0:
        raise ValueError("empty minibatch: logp has no sequences")
    for name, t in per_seq.items():
        if t is not None and tuple(t.shape) != (logp_BT.shape[0],):
            raise ValueError(f"{name} must be [{logp_BT.shape[0]}], got {tuple(t.shape)}")


def sequence_log_ratio(
    logp_BT: Tensor, mask_BT: Tensor, old_logp_mean_B: Tensor, *, max_log_ratio: float = 10.0
) -> tuple[Tensor, Tensor]:
    """GSPO's length-normalised log-ratio, log s_i = mean_t log π_θ(y_t) − old mean (paper eq. 11).

    Returns:
        (log_ratio_B clamped to ±max_log_ratio, nonempty_B: bool, the sequence has answer tokens).
    """
    m_BT = mask_BT.bool()
    n_B = m_BT.sum(-1)
    # where(), not a product with the mask: padding positions may hold -inf or NaN
    mean_B = torch.where(m_BT, logp_BT.float(), 0.0).sum(-1) / n_B.clamp_min(1)
    log_ratio_B = (mean_B - old_logp_mean_B.float()).clamp(-max_log_ratio, max_log_ratio)
    return log_ratio_B, n_B > 0


def stepwise_lower_bound(minibatch_index: int, *, delta: float, delta_step: float) -> float:
    """Lower clip bound for cross-agent ratios at optimizer step m of a training step (eq. 14).

    ℓ_m = min(1, 1 − δ + m·δ_step).

    >>> stepwise_lower_bound(0, delta=0.2, delta_step=0.025), stepwise_lower_bound(3, delta=0.2, delta_step=0.025)
    (0.8, 0.875)
    """
    if minibatch_index < 0:
        raise ValueError(f"minibatch_index must be >= 0, got {minibatch_index}")
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta must lie in [0, 1], got {delta}")
    if delta_step < 0:
        raise ValueError(f"delta_step must be >= 0, got {delta_step}")
    return min(1.0, 1.0 - delta + minibatch_index * delta_step)


def kl_k3(logp_BT: Tensor, ref_logp_BT: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(π_θ ‖ π_ref): exp(d) − d − 1 with d = log π_ref − log π_θ (≥ 0)."""
    d_BT = (ref_logp_BT.float() - logp_BT.float()).clamp(-20.0, 20.0)
    return torch.exp(d_BT) - d_BT - 1.0


def _masked_mean(x_B: Tensor, sel_B: Tensor) -> Tensor:
    sel = sel_B.float()
    return (x_B.float() * sel).sum() / sel.sum().clamp_min(1)


def _kl_term(
    logp_BT: Tensor, mask_BT: Tensor, ref_logp_BT: Tensor | None, kl_coef: float, on_B: Tensor
) -> tuple[Tensor, Tensor]:
    """β · (sum over ``on_B`` sequences of their token-mean k3) / B, and the mean KL for logging."""
    zero = logp_BT.new_zeros((), dtype=torch.float32)
    if ref_logp_BT is None or kl_coef == 0.0:
        return zero, zero
    if ref_logp_BT.shape != logp_BT.shape:
        raise ValueError(f"ref_logp must match logp's shape {tuple(logp_BT.shape)}, got {tuple(ref_logp_BT.shape)}")
    m_BT = mask_BT.bool()
    kl_B = torch.where(m_BT, kl_k3(logp_BT, ref_logp_BT), 0.0).sum(-1) / m_BT.sum(-1).clamp_min(1)
    # Dividing by B (not by the number of own sequences) keeps micro-batch accumulation exact.
    penalty = kl_coef * (kl_B * on_B.float()).sum() / logp_BT.shape[0]
    return penalty, _masked_mean(kl_B.detach(), on_B)


def _own_objective(s_B: Tensor, adv_B: Tensor, clip_low: float, clip_high: float) -> tuple[Tensor, Tensor]:
    """GSPO's pessimistic clipped term min(s·A, clip(s, 1−ε_l, 1+ε_h)·A) and where clipping binds."""
    clipped_B = s_B.clamp(1.0 - clip_low, 1.0 + clip_high)
    obj_B = torch.minimum(s_B * adv_B, clipped_B * adv_B)
    was_clipped_B = (s_B * adv_B) > (clipped_B * adv_B)
    return obj_B, was_clipped_B


@POLICY_LOSSES.register("hacpo")
def hacpo_loss(
    logp: Tensor,
    mask: Tensor,
    old_logp_mean: Tensor,
    advantages: Tensor,
    is_own: Tensor,
    omega: Tensor,
    *,
    clip_low: float,
    clip_high: float,
    alpha: float,
    cross_lower: float,
    cross_upper: float = 1.0,
    cross_clip: bool = True,
    max_log_ratio: float = 10.0,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """HACPO loss for one learner over a minibatch of its own and other agents' answers (App. E).

    Args:
        logp: float[B, T], the learner's current token log-probs, in its own tokenization.
        mask: [B, T], 1 on answer tokens.
        old_logp_mean: float[B]; own answers: the learner's rollout-time mean token log-prob; other
            agents' answers: the source's rollout-time mean token log-prob over the source's tokens.
        advantages: float[B], the learner's advantages (``hacpo_advantages``).
        is_own: bool[B], the learner wrote the answer.
        omega: float[B], ω^(source, learner) = P̂_source / P̂_learner (clamped) for cross answers;
            ignored for own answers. Pass ones for the "−ω" ablation.
        clip_low, clip_high: GSPO's clip radii for own answers (paper: 3e-4, 4e-4).
        alpha: exponent of the detached exponential-IS weight; 0 switches it off.
        cross_lower: lower clip bound of cross ratios, ``stepwise_lower_bound(m, ...)``.
        cross_upper: upper clip bound of cross ratios (1 in the paper).
        cross_clip: False removes the cross clip altogether (the paper's "no Clip" ablation).
        max_log_ratio: clamp of the sequence log-ratio before ``exp``.
        ref_logp: float[B, T] reference-model log-probs for the KL term on own answers, or None.
        kl_coef: β of the k3 KL term.

    Returns:
        (loss, metrics). loss = −mean_i J_i (+ β·KL on own answers), with
        own:   J_i = min(s_i A_i, clip(s_i, 1−ε_l, 1+ε_h) A_i)
        cross: J_i = c_i · sg(c_i)^α · ω_i · A_i,  c_i = clip(s_i, cross_lower, cross_upper).
    """
    _check_shapes(logp, mask, old_logp_mean=old_logp_mean, advantages=advantages, is_own=is_own, omega=omega)
    if cross_clip and cross_lower > cross_upper:
        raise ValueError(f"cross_lower={cross_lower} exceeds cross_upper={cross_upper}")
    adv_B = advantages.float()
    own_B = is_own.bool()
    log_ratio_B, nonempty_B = sequence_log_ratio(logp, mask, old_logp_mean, max_log_ratio=max_log_ratio)
    s_B = torch.exp(log_ratio_B)

    # eqs. 47-49: own answers, GSPO's clipped surrogate
    own_obj_B, own_clipped_B = _own_objective(s_B, adv_B, clip_low, clip_high)

    # eqs. 50-52: other agents' answers, clip(s, ℓ_m, 1) · sg(clip(s, ℓ_m, 1))^α · ω^(j,k) · A
    c_B = s_B.clamp(cross_lower, cross_upper) if cross_clip else s_B
    cross_obj_B = c_B * c_B.detach().pow(alpha) * omega.float() * adv_B

    obj_B = torch.where(own_B, own_obj_B, cross_obj_B)
    obj_B = torch.where(nonempty_B, obj_B, torch.zeros_like(obj_B))
    pg_loss = -obj_B.mean()
    kl_penalty, kl_mean = _kl_term(logp, mask, ref_logp, kl_coef, own_B & nonempty_B)

    cross_B = ~own_B & nonempty_B
    s_det_B = s_B.detach()
    metrics = {
        "pg_loss": pg_loss.detach(),
        "kl": kl_mean,
        "self/ratio_mean": _masked_mean(s_det_B, own_B & nonempty_B),
        "self/clip_frac": _masked_mean(own_clipped_B, own_B & nonempty_B),
        "cross/ratio_mean": _masked_mean(s_det_B, cross_B),
        "cross/clip_low_frac": _masked_mean(s_det_B < cross_lower, cross_B),
        "cross/clip_high_frac": _masked_mean(s_det_B > cross_upper, cross_B),
        "cross/in_window_frac": _masked_mean((s_det_B >= cross_lower) & (s_det_B <= cross_upper), cross_B),
        "count/own": (own_B & nonempty_B).sum(),
        "count/cross": cross_B.sum(),
        "count/empty": (~nonempty_B).sum(),
    }
    return pg_loss + kl_penalty, metrics


@POLICY_LOSSES.register("gspo")
def gspo_loss(
    logp: Tensor,
    mask: Tensor,
    old_logp_mean: Tensor,
    advantages: Tensor,
    *,
    clip_low: float,
    clip_high: float,
    max_log_ratio: float = 10.0,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO: sequence-level ratio s_i = exp(mean log π_θ − old mean), symmetric clipped surrogate.

    Used for the gspo / gspo×2 baselines and, on the joint pool, for the ``naive`` collaborator.
    Arguments as in ``hacpo_loss``; every answer is treated as the learner's own.
    """
    _check_shapes(logp, mask, old_logp_mean=old_logp_mean, advantages=advantages)
    log_ratio_B, nonempty_B = sequence_log_ratio(logp, mask, old_logp_mean, max_log_ratio=max_log_ratio)
    s_B = torch.exp(log_ratio_B)
    obj_B, clipped_B = _own_objective(s_B, advantages.float(), clip_low, clip_high)
    obj_B = torch.where(nonempty_B, obj_B, torch.zeros_like(obj_B))
    pg_loss = -obj_B.mean()
    kl_penalty, kl_mean = _kl_term(logp, mask, ref_logp, kl_coef, nonempty_B)
    metrics = {
        "pg_loss": pg_loss.detach(),
        "kl": kl_mean,
        "self/ratio_mean": _masked_mean(s_B.detach(), nonempty_B),
        "self/clip_frac": _masked_mean(clipped_B, nonempty_B),
        "count/own": nonempty_B.sum(),
        "count/empty": (~nonempty_B).sum(),
    }
    return pg_loss + kl_penalty, metrics


@POLICY_LOSSES.register("grpo")
def grpo_loss(
    logp: Tensor,
    mask: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    max_log_ratio: float = 10.0,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GRPO with DAPO's clip-higher: token-level ratios r_t = π_θ(y_t)/π_old(y_t), clipped surrogate
    min(r_t A, clip(r_t, 1−ε_l, 1+ε_h) A), aggregated seq-mean-token-mean.

    Args:
        old_logp: float[B, T], rollout-time token log-probs of the same tokens.
    """
    _check_shapes(logp, mask, advantages=advantages)
    if old_logp.shape != logp.shape:
        raise ValueError(f"old_logp must match logp's shape {tuple(logp.shape)}, got {tuple(old_logp.shape)}")
    m_BT = mask.float()
    valid_BT = mask.bool()
    log_r_BT = torch.where(valid_BT, logp.float() - old_logp.float(), 0.0).clamp(-max_log_ratio, max_log_ratio)
    r_BT = torch.exp(log_r_BT)
    adv_B1 = advantages.float()[:, None]
    clipped_BT = r_BT.clamp(1.0 - clip_low, 1.0 + clip_high)
    obj_BT = torch.minimum(r_BT * adv_B1, clipped_BT * adv_B1)
    pg_loss = -aggregate(obj_BT, m_BT, mode="seq-mean-token-mean")
    nonempty_B = m_BT.sum(-1) > 0
    kl_penalty, kl_mean = _kl_term(logp, mask, ref_logp, kl_coef, nonempty_B)
    n_tokens = m_BT.sum().clamp_min(1)
    metrics = {
        "pg_loss": pg_loss.detach(),
        "kl": kl_mean,
        "self/ratio_mean": (r_BT.detach() * m_BT).sum() / n_tokens,
        "self/clip_frac": (((r_BT * adv_B1) > (clipped_BT * adv_B1)).float() * m_BT).sum() / n_tokens,
        "count/own": nonempty_B.sum(),
        "count/empty": (~nonempty_B).sum(),
    }
    return pg_loss + kl_penalty, metrics
