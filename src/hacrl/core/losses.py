"""Policy losses: HACPO (paper Appendix E), the GSPO, GRPO and imitation baselines, and the reference KL term.

Every entry of ``POLICY_LOSSES`` has one signature (``PolicyLoss``): a ``LossInputs`` holding the rows'
tensors (the learner's current token log-probs in its own tokenization, the answer mask, π_old, advantages,
which rows are the learner's own, ω, which rows to imitate, the reference's log-probs, the rollout correction's
weights of own rows, ``hacrl.core.correction``) and a ``StepSettings`` holding the scalars of that optimizer step,
so the learner calls whichever the algorithm names without knowing which it is. GSPO is HACPO's
loss with every row own, computed by the same code. Each loss computes in float32 whatever the input dtype and returns
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

from dataclasses import dataclass, replace
from typing import Protocol

import torch
from torch import Tensor

from hacrl.registry import Registry

AGGREGATIONS = ("seq-mean-token-mean",)


@dataclass(frozen=True)
class LossInputs:
    """One minibatch (or micro-batch) of a learner's rows, as every policy loss reads it.

    Args:
        logp_BT: float[B, T], the learner's current token log-probs, in its own tokenization.
        mask_BT: [B, T], 1 on answer tokens.
        advantages_B: float[B], the learner's advantages.
        old_logp_mean_B: float[B]; own answers: the learner's rollout-time mean token log-prob; other
            agents' answers: the source's rollout-time mean token log-prob over the source's tokens.
            Needed by the sequence-level losses (hacpo, gspo).
        own_B: bool[B], the learner wrote the answer; None: every row is the learner's own.
        omega_B: float[B], each cross answer's weight in learner k's update: ω^(j,k) = clamp(P̂_j / P̂_k)
            for its source j, the transposed entry ``omega_matrix(capability)[j, k]`` (ω^(k,j) being learner
            over source); ignored on own answers; None: 1 everywhere.
        old_logp_BT: float[B, T], rollout-time token log-probs under the answer tokens (own answers only).
            Needed by the token-level loss (grpo).
        ref_logp_BT: float[B, T], reference-model log-probs for the KL term, or None (no KL term).
        imitate_B: bool[B], other agents' answers the imitation loss learns from (verified correct); None: none.
        rollout_weight_B: float[B], the rollout correction's weight of each row (``hacrl.core.correction``:
            π_prox / π_behav, truncated or masked), detached: it multiplies an own row's policy-gradient term
            (not its KL term); other agents' rows are not corrected (their weight is ignored). None: 1.
        own_share, imitate_share: when these rows are a micro-batch of a minibatch, the share of the
            minibatch's rows that are own (``own_B``) / imitated (``imitate_B``), so a loss that averages over
            those subsets divides by the minibatch's counts (share × these rows' number); None: these rows are
            the whole minibatch. Only the imitation loss reads them.
        partner_weight_B: float[B], a fixed (detached) weight of each other agent's row, set by the learner before
            the update (GRAFT's gate, ``hacrl.core.partner.gate_weight``); ignored on own rows. Only the partner
            loss reads it; None: 1.
        partner_floor_B: float[B], the lowest ratio s at which each other agent's row still trains (the ``trust``
            method's ℓ_j = floor^τ_j, ``hacrl.core.trust``): a row whose current s lies below it gives no gradient;
            ignored on own rows. Only the partner loss reads it; None: no floor.
    """

    logp_BT: Tensor
    mask_BT: Tensor
    advantages_B: Tensor
    old_logp_mean_B: Tensor | None = None
    own_B: Tensor | None = None
    omega_B: Tensor | None = None
    old_logp_BT: Tensor | None = None
    ref_logp_BT: Tensor | None = None
    imitate_B: Tensor | None = None
    rollout_weight_B: Tensor | None = None
    own_share: float | None = None
    imitate_share: float | None = None
    partner_weight_B: Tensor | None = None
    partner_floor_B: Tensor | None = None

    def __post_init__(self) -> None:
        shape = tuple(self.logp_BT.shape)
        if self.logp_BT.dim() != 2 or tuple(self.mask_BT.shape) != shape:
            raise ValueError(f"logp and mask must be [B, T] of one shape, got {shape} and {tuple(self.mask_BT.shape)}")
        if shape[0] == 0:
            raise ValueError("empty minibatch: logp has no sequences")
        for name in ("advantages_B", "old_logp_mean_B", "own_B", "omega_B", "imitate_B", "rollout_weight_B",
                     "partner_weight_B", "partner_floor_B"):
            t = getattr(self, name)
            if t is not None and tuple(t.shape) != shape[:1]:
                raise ValueError(f"{name} must be [{shape[0]}], got {tuple(t.shape)}")
        for name in ("old_logp_BT", "ref_logp_BT"):
            t = getattr(self, name)
            if t is not None and tuple(t.shape) != shape:
                raise ValueError(f"{name} must match logp's shape {shape}, got {tuple(t.shape)}")
        for name in ("own_share", "imitate_share"):
            v = getattr(self, name)
            if v is not None and not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be a share in [0, 1], got {v}")


@dataclass(frozen=True)
class StepSettings:
    """What a policy loss reads at one optimizer step besides the rows: plain scalars (and ℓ_m), the algorithm's
    switches already applied (``hacrl.learner.settings.step_settings`` builds it from the run's ``LossSettings``).
    A loss ignores the settings of answers it has none of: gspo and grpo treat every row as the learner's own
    (no α, ℓ_m, cross clip), only the imitation loss reads ``imitation_coef``, and only the partner loss
    (``hacrl.core.partner``) ``partner_term``, ``negatives``, ``is_cap``, ``shaping_gamma`` and ``veto_kl``.

    Args:
        clip_low, clip_high: the clip radii ε_l, ε_h of own answers (GSPO: 3e-4, 4e-4; DAPO: 0.2, 0.28).
        alpha: exponent of hacpo's detached exponential-IS weight; 0 switches it off (paper: 1).
        cross_lower: lower clip bound ℓ_m of hacpo's cross ratios (``stepwise_lower_bound``), the upper one 1; the
            default is the paper's ℓ_0 = 1 − 0.2. A float[B] tensor gives each row its own bound (the adaptive
            window, ``hacrl.core.window``: one bound per source agent).
        cross_clip: False removes hacpo's cross clip altogether (the paper's "no Clip" ablation).
        max_log_ratio: clamp of the (sequence or token) log-ratio before ``exp``.
        kl_coef: β of the k3 KL term on own answers (needs ``LossInputs.ref_logp_BT``).
        imitation_coef: λ of the imitation loss's NLL term.
        partner_term: a ``PARTNER_TERMS`` name; negatives: a ``NEGATIVE_FILTERS`` name (the partner loss).
        is_cap: C of ``truncated_is``; shaping_gamma: γ of ``shaping``; veto_kl: τ of the ``veto`` filter.
        mean_over_trained: the partner loss's mean runs over the rows that train (own rows 1 each, a partner row
            its weight if the floor keeps it, 0 if not) instead of over every row (``algorithm.trust_mean``
            ``trained``, where the algorithm reads a trust): cut or distrusted partner rows then no longer shrink
            the own rows' step.
    """

    clip_low: float
    clip_high: float
    alpha: float = 1.0
    cross_lower: float | Tensor = 0.8
    cross_clip: bool = True
    max_log_ratio: float = 10.0
    kl_coef: float = 0.0
    imitation_coef: float = 1.0
    partner_term: str = "ratio"
    negatives: str = "keep"
    is_cap: float = 2.0
    shaping_gamma: float = 0.1
    veto_kl: float = 0.1
    mean_over_trained: bool = False


class PolicyLoss(Protocol):
    """The one signature of every ``POLICY_LOSSES`` entry: the rows, then the step's settings."""

    def __call__(self, inputs: LossInputs, settings: StepSettings) -> tuple[Tensor, dict[str, Tensor]]: ...


POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss")


def aggregate(x_BT: Tensor, mask_BT: Tensor, *, mode: str) -> Tensor:
    """Reduce per-token values to a scalar, naming the normalisation.

    - ``seq-mean-token-mean``: mean over each sequence's tokens, then over sequences (GSPO, HACPO, GRPO
      here); a sequence without tokens counts as 0.
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation mode {mode!r}; valid: {', '.join(AGGREGATIONS)}")
    m_BT = mask_BT.to(x_BT.dtype)
    x_BT = torch.where(mask_BT.bool(), x_BT, torch.zeros_like(x_BT))  # padding may hold -inf / NaN
    return (x_BT.sum(-1) / m_BT.sum(-1).clamp_min(1)).mean()


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
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta must lie in [0, 1], got {delta}")
    return stepwise_tightened(1.0 - delta, minibatch_index, delta_step=delta_step)


def stepwise_tightened(lower0: float, minibatch_index: int, *, delta_step: float) -> float:
    """Eq. 14's tightening of a cross window that starts at ℓ_0 (1 − δ, or the adaptive window's bound):
    ℓ_m = min(1, ℓ_0 + m·δ_step).

    >>> stepwise_tightened(0.4, 2, delta_step=0.025), stepwise_tightened(0.99, 1, delta_step=0.025)
    (0.45, 1.0)
    """
    if minibatch_index < 0:
        raise ValueError(f"minibatch_index must be >= 0, got {minibatch_index}")
    if delta_step < 0:
        raise ValueError(f"delta_step must be >= 0, got {delta_step}")
    return min(1.0, lower0 + minibatch_index * delta_step)


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
    m_BT = mask_BT.bool()
    kl_B = torch.where(m_BT, kl_k3(logp_BT, ref_logp_BT), 0.0).sum(-1) / m_BT.sum(-1).clamp_min(1)
    # Dividing by B (not by the number of own sequences) keeps micro-batch accumulation exact.
    penalty = kl_coef * (kl_B * on_B.float()).sum() / logp_BT.shape[0]
    return penalty, _masked_mean(kl_B.detach(), on_B)


def _rollout_weight(inputs: LossInputs) -> Tensor:
    """float32[B]: each row's rollout-correction weight, detached (1 without one)."""
    if inputs.rollout_weight_B is None:
        return torch.ones(inputs.logp_BT.shape[0], dtype=torch.float32, device=inputs.logp_BT.device)
    return inputs.rollout_weight_B.detach().float()


def _own_objective(s_B: Tensor, adv_B: Tensor, clip_low: float, clip_high: float) -> tuple[Tensor, Tensor]:
    """GSPO's pessimistic clipped term min(s·A, clip(s, 1−ε_l, 1+ε_h)·A) and where clipping binds."""
    clipped_B = s_B.clamp(1.0 - clip_low, 1.0 + clip_high)
    obj_B = torch.minimum(s_B * adv_B, clipped_B * adv_B)
    was_clipped_B = (s_B * adv_B) > (clipped_B * adv_B)
    return obj_B, was_clipped_B


def hacpo_loss(inputs: LossInputs, settings: StepSettings) -> tuple[Tensor, dict[str, Tensor]]:
    """HACPO loss for one learner over a minibatch of its own and other agents' answers (App. E).

    Args:
        inputs: the rows (``LossInputs``); needs ``old_logp_mean_B``. ``own_B`` None: every row own (GSPO);
            ``omega_B`` None: ω = 1 (the "−ω" ablation).
        settings: reads ``clip_low``, ``clip_high`` (GSPO's radii of own answers, paper: 3e-4, 4e-4), ``alpha``,
            ``cross_lower`` (ℓ_m, a float or a float[B]), ``cross_clip``, ``max_log_ratio`` and ``kl_coef``
            (``StepSettings``).

    Returns:
        (loss, metrics). loss = −mean_i J_i (+ β·KL on own answers), with
        own:   J_i = w̃_i · min(s_i A_i, clip(s_i, 1−ε_l, 1+ε_h) A_i)
        cross: J_i = c_i · sg(c_i)^α · ω_i · A_i,  c_i = clip(s_i, cross_lower, 1),
        w̃_i the own row's detached rollout-correction weight (``inputs.rollout_weight_B``, 1 without one).
    """
    clip_low, clip_high, alpha, max_log_ratio = (settings.clip_low, settings.clip_high, settings.alpha,
                                                 settings.max_log_ratio)
    cross_lower, cross_clip = settings.cross_lower, settings.cross_clip
    if inputs.old_logp_mean_B is None:
        raise ValueError("hacpo/gspo need old_logp_mean_B, the rollout-time mean token log-prob of each row")
    if cross_clip and float(torch.as_tensor(cross_lower).max()) > 1.0:
        raise ValueError(f"cross_lower={cross_lower} exceeds the cross window's upper bound 1")
    logp, mask = inputs.logp_BT, inputs.mask_BT
    adv_B = inputs.advantages_B.float()
    own_B = inputs.own_B.bool() if inputs.own_B is not None else torch.ones_like(adv_B, dtype=torch.bool)
    omega_B = inputs.omega_B.float() if inputs.omega_B is not None else torch.ones_like(adv_B)
    log_ratio_B, nonempty_B = sequence_log_ratio(logp, mask, inputs.old_logp_mean_B, max_log_ratio=max_log_ratio)
    s_B = torch.exp(log_ratio_B)

    # eqs. 47-49: own answers, GSPO's clipped surrogate, times the rollout correction w̃ = sg(trunc(π_prox/π_behav))
    own_obj_B, own_clipped_B = _own_objective(s_B, adv_B, clip_low, clip_high)
    own_obj_B = _rollout_weight(inputs) * own_obj_B

    # eqs. 50-52: other agents' answers, clip(s, ℓ_m, 1) · sg(clip(s, ℓ_m, 1))^α · ω^(j,k) · A
    if isinstance(cross_lower, Tensor):
        cross_lower = cross_lower.to(s_B)
        c_B = s_B.clamp(cross_lower, torch.ones_like(s_B)) if cross_clip else s_B
    else:
        c_B = s_B.clamp(cross_lower, 1.0) if cross_clip else s_B
    cross_obj_B = c_B * c_B.detach().pow(alpha) * omega_B * adv_B

    obj_B = torch.where(own_B, own_obj_B, cross_obj_B)
    obj_B = torch.where(nonempty_B, obj_B, torch.zeros_like(obj_B))
    pg_loss = -obj_B.mean()
    kl_penalty, kl_mean = _kl_term(logp, mask, inputs.ref_logp_BT, settings.kl_coef, own_B & nonempty_B)

    cross_B = ~own_B & nonempty_B
    s_det_B = s_B.detach()
    in_window_B = (s_det_B >= cross_lower) & (s_det_B <= 1.0)
    has_grad_B = in_window_B if cross_clip else torch.ones_like(own_B)
    metrics = {
        "pg_loss": pg_loss.detach(),
        "kl": kl_mean,
        "self/ratio_mean": _masked_mean(s_det_B, own_B & nonempty_B),
        "self/clip_frac": _masked_mean(own_clipped_B, own_B & nonempty_B),
        "cross/ratio_mean": _masked_mean(s_det_B, cross_B),
        "cross/clip_low_frac": _masked_mean(s_det_B < cross_lower, cross_B),
        "cross/clip_high_frac": _masked_mean(s_det_B > 1.0, cross_B),
        "cross/in_window_frac": _masked_mean(in_window_B, cross_B),
        # which cross answers could teach: the positive-advantage ones, and how many of them the window holds
        "cross/adv_pos_frac": _masked_mean(adv_B > 0, cross_B),
        "cross/pos_in_window_frac": _masked_mean(in_window_B, cross_B & (adv_B > 0)),
        # the scale of a cross answer's gradient next to an own answer's (≈ 1): c^(1+α)·ω where it has one
        "cross/grad_scale": _masked_mean(torch.where(has_grad_B, c_B.detach().pow(1.0 + alpha) * omega_B, 0.0),
                                         cross_B),
        "count/own": (own_B & nonempty_B).sum(),
        "count/cross": cross_B.sum(),
        "count/empty": (~nonempty_B).sum(),
    }
    return pg_loss + kl_penalty, metrics


OWN_METRICS = ("pg_loss", "kl", "self/ratio_mean", "self/clip_frac", "count/own", "count/empty")


def gspo_loss(inputs: LossInputs, settings: StepSettings) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO: ``hacpo_loss`` with every row the learner's own, so the sequence ratio
    s_i = exp(mean log π_θ − old mean) enters the symmetric clipped surrogate for every answer, and the KL
    term covers every answer. The cross settings (``alpha``, ``cross_lower``, ``cross_clip``) and ``own_B``,
    ``omega_B`` have no effect. Used for gspo / gspo×2 and, on the joint pool, for the ``naive`` collaborator.

    Returns the metrics of own answers only (``OWN_METRICS``).
    """
    loss, metrics = hacpo_loss(replace(inputs, own_B=None, omega_B=None), settings)
    return loss, {k: metrics[k] for k in OWN_METRICS}


def grpo_loss(inputs: LossInputs, settings: StepSettings) -> tuple[Tensor, dict[str, Tensor]]:
    """GRPO with DAPO's clip-higher: token-level ratios r_t = π_θ(y_t)/π_old(y_t), clipped surrogate
    min(r_t A, clip(r_t, 1−ε_l, 1+ε_h) A), aggregated seq-mean-token-mean (DAPO's radii are 0.2 / 0.28), each
    sequence's tokens times its rollout-correction weight (``inputs.rollout_weight_B``).

    Needs ``inputs.old_logp_BT`` (the rollout-time log-probs of the same tokens). Every row counts as the
    learner's own: ``own_B``, ``omega_B``, ``old_logp_mean_B`` and the cross settings have no effect.
    """
    clip_low, clip_high, max_log_ratio = settings.clip_low, settings.clip_high, settings.max_log_ratio
    logp, mask, old_logp = inputs.logp_BT, inputs.mask_BT, inputs.old_logp_BT
    if old_logp is None:
        raise ValueError("grpo needs old_logp_BT, the rollout-time token log-probs of the learner's own answers")
    m_BT = mask.float()
    valid_BT = mask.bool()
    log_r_BT = torch.where(valid_BT, logp.float() - old_logp.float(), 0.0).clamp(-max_log_ratio, max_log_ratio)
    r_BT = torch.exp(log_r_BT)
    adv_B1 = inputs.advantages_B.float()[:, None]
    clipped_BT = r_BT.clamp(1.0 - clip_low, 1.0 + clip_high)
    # w̃_i · min(r_t A_i, clip(r_t, 1−ε_l, 1+ε_h) A_i): the sequence's rollout-correction weight on each of its tokens
    obj_BT = torch.minimum(r_BT * adv_B1, clipped_BT * adv_B1) * _rollout_weight(inputs)[:, None]
    pg_loss = -aggregate(obj_BT, m_BT, mode="seq-mean-token-mean")
    nonempty_B = m_BT.sum(-1) > 0
    kl_penalty, kl_mean = _kl_term(logp, mask, inputs.ref_logp_BT, settings.kl_coef, nonempty_B)
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


def _subset_mean(total: Tensor, sel_B: Tensor, share: float | None) -> Tensor:
    """``total`` (a sum over the rows ``sel_B`` marks) divided by the number of such rows in the whole
    minibatch: ``share`` × these rows' number when they are a micro-batch of it, else ``sel_B``'s count here;
    0 when there are none. So micro-batches weighted by their share of rows sum to the minibatch's mean."""
    n = sel_B.float().sum() if share is None else total.new_tensor(share * sel_B.shape[0])
    return torch.where(n > 0, total / n.clamp_min(1e-12), torch.zeros_like(total))


def sequence_nll(logp_BT: Tensor, mask_BT: Tensor) -> Tensor:
    """float32[B]: each sequence's token-mean negative log-likelihood −(1/L_i) Σ_t log π_θ(y_i,t); 0 without
    answer tokens (padding may hold -inf or NaN)."""
    m_BT = mask_BT.bool()
    return -torch.where(m_BT, logp_BT.float(), 0.0).sum(-1) / m_BT.sum(-1).clamp_min(1)


def imitation_loss(inputs: LossInputs, settings: StepSettings) -> tuple[Tensor, dict[str, Tensor]]:
    """The imitation baseline ("just distil the partner"): GSPO on the learner's own answers plus a supervised
    term on the other agents' verified-correct answers (``inputs.imitate_B``), λ = ``settings.imitation_coef``.

    loss = GSPO_own + λ · NLL_cross, over the minibatch the rows belong to::

        GSPO_own  = −(1/n_own) Σ_{own i} J_i + β·(1/n_own) Σ_{own i} KL_i,  J_i = w̃_i·min(s_i A_i, clip(s_i, 1−ε_l, 1+ε_h) A_i)
        NLL_cross = (1/n_imit) Σ_{imitated i} −(1/L_i) Σ_t log π_θ(y_i,t)   (L_i: the answer's tokens in the learner's
                    tokenization)

    n_own, n_imit: the minibatch's own and imitated rows (``own_share`` / ``imitate_share`` × these rows when they
    are a micro-batch of it, see ``LossInputs``), so each term is a mean over its own rows and micro-batches
    weighted by their share of the minibatch's rows add up to it exactly. Rows that are neither (other agents'
    answers not imitated) contribute nothing; with λ = 0 the loss is ``gspo_loss`` on the own rows alone. An
    answer without tokens counts in its n and contributes 0. ω, α and the cross window have no effect.

    Needs ``old_logp_mean_B`` and ``own_B``; ``imitate_B`` None imitates nothing (own rows are never imitated).
    """
    clip_low, clip_high, max_log_ratio = settings.clip_low, settings.clip_high, settings.max_log_ratio
    imitation_coef = settings.imitation_coef
    if inputs.old_logp_mean_B is None:
        raise ValueError("imitation needs old_logp_mean_B, the rollout-time mean token log-prob of each row")
    if inputs.own_B is None:
        raise ValueError("imitation needs own_B: which rows are the learner's own (GSPO) and which other agents'")
    if not imitation_coef >= 0.0:
        raise ValueError(f"imitation_coef must be >= 0, got {imitation_coef}")
    logp, mask = inputs.logp_BT, inputs.mask_BT
    adv_B = inputs.advantages_B.float()
    own_B = inputs.own_B.bool()
    imit_B = (inputs.imitate_B.bool() & ~own_B) if inputs.imitate_B is not None else torch.zeros_like(own_B)
    log_ratio_B, nonempty_B = sequence_log_ratio(logp, mask, inputs.old_logp_mean_B, max_log_ratio=max_log_ratio)
    s_B = torch.exp(log_ratio_B)

    # GSPO on own answers (eqs. 47-49), a mean over the minibatch's own rows
    own_obj_B, own_clipped_B = _own_objective(s_B, adv_B, clip_low, clip_high)
    own_obj_B = torch.where(own_B & nonempty_B, _rollout_weight(inputs) * own_obj_B, torch.zeros_like(own_obj_B))
    pg_loss = -_subset_mean(own_obj_B.sum(), own_B, inputs.own_share)
    kl_sum_over_b, kl_mean = _kl_term(logp, mask, inputs.ref_logp_BT, settings.kl_coef, own_B & nonempty_B)
    kl_penalty = _subset_mean(kl_sum_over_b * logp.shape[0], own_B, inputs.own_share)

    # NLL_cross: token-mean NLL of each imitated answer, a mean over the minibatch's imitated rows
    nll_B = sequence_nll(logp, mask)
    nll_loss = _subset_mean(torch.where(imit_B, nll_B, torch.zeros_like(nll_B)).sum(), imit_B, inputs.imitate_share)

    cross_B = ~own_B & nonempty_B
    imitated_B = imit_B & nonempty_B
    metrics = {
        "pg_loss": pg_loss.detach(),
        "kl": kl_mean,
        "self/ratio_mean": _masked_mean(s_B.detach(), own_B & nonempty_B),
        "self/clip_frac": _masked_mean(own_clipped_B, own_B & nonempty_B),
        "imitation/nll": _masked_mean(nll_B.detach(), imitated_B),
        "cross/imitated_frac": _masked_mean(imitated_B, cross_B),
        "count/own": (own_B & nonempty_B).sum(),
        "count/cross": cross_B.sum(),
        "count/imitated": imitated_B.sum(),
        "count/empty": (~nonempty_B).sum(),
    }
    loss = pg_loss + kl_penalty
    if imitation_coef != 0.0:  # λ = 0 is gspo exactly, even where an NLL is not finite
        loss = loss + imitation_coef * nll_loss
    return loss, metrics


# Registered here, after the definitions, rather than with the registry's decorator: the mutation tests
# (docs/mutation.md) do not mutate a decorated function's body.
POLICY_LOSSES.add("hacpo", hacpo_loss)
POLICY_LOSSES.add("gspo", gspo_loss)
POLICY_LOSSES.add("grpo", grpo_loss)
POLICY_LOSSES.add("imitation", imitation_loss)
