"""The ``partner`` policy loss: GSPO on the learner's own answers plus one of several ways of learning from a
partner's answers (the ingredients of docs/methods.md), each a pure function of tensors and scalars.

    loss = −(1/B) Σ_i J_i + β·KL(own rows)
    own row:     J_i = w̃_i · min(s_i A_i, clip(s_i, 1−ε_l, 1+ε_h) A_i)          (GSPO, as ``hacpo_loss``)
    partner row: J_i = g_i · keep_i · T_i                                       (T: ``PARTNER_TERMS``)

with s_i = exp(ℓ̄_θ(y_i) − old_logp_mean_i) the sequence ratio (π_old of a partner row: the author's rollout mean
log-prob, or the learner's own pre-update one, as the learner set it), g_i a fixed detached weight per row
(``LossInputs.partner_weight_B``: GRAFT's gate, ``gate_weight``; 1 without one) and keep_i the negative filter
(``NEGATIVE_FILTERS``), and a row whose current s lies below its floor (``LossInputs.partner_floor_B``, the
``trust`` method's) gives no gradient. Every term is a mean over a sequence's own tokens, so a partner row counts once in the
mean over rows, as an own row does (seq-mean-token-mean).

Partner terms (``PARTNER_TERMS``):
- ``ratio`` / ``gate`` / ``trust``: GSPO's clipped surrogate min(s·A, clip(s, 1−ε_l, 1+ε_h)·A) on the partner row
  too (``gate`` is the same term, with the fixed gate weight g and the learner's own π_old; ``trust`` with the
  weight g = τ_j and the floor ℓ_j of ``hacrl.core.trust``);
- ``truncated_is``: F-TIS's truncated importance weight, sg(min(s, C))·A·∇ℓ̄_θ (value min(s, C)·A);
- ``shaping``: LUFFY's f(π) = π/(π + γ) per token, no ratio: (1/L) Σ_t f(π_θ(y_t))·A.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from hacrl.core.losses import (
    POLICY_LOSSES,
    LossInputs,
    StepSettings,
    _kl_term,
    _masked_mean,
    _own_objective,
    _rollout_weight,
    sequence_log_ratio,
)
from hacrl.registry import Registry

PartnerTerm = Callable[..., Tensor]
NegativeFilter = Callable[..., Tensor]

PARTNER_TERMS: Registry[PartnerTerm] = Registry("partner term")
NEGATIVE_FILTERS: Registry[NegativeFilter] = Registry("negative filter")


def clipped_term(*, s_B: Tensor, adv_B: Tensor, logp_BT: Tensor, mask_BT: Tensor, clip_low: float,
                 clip_high: float, is_cap: float, shaping_gamma: float) -> Tensor:
    """float[B]: GSPO's pessimistic clipped surrogate min(s·A, clip(s, 1−ε_l, 1+ε_h)·A) (GSPO eq. 5)."""
    return _own_objective(s_B, adv_B, clip_low, clip_high)[0]


def truncated_is_term(*, s_B: Tensor, adv_B: Tensor, logp_BT: Tensor, mask_BT: Tensor, clip_low: float,
                      clip_high: float, is_cap: float, shaping_gamma: float) -> Tensor:
    """float[B]: truncated importance sampling (F-TIS; IMPALA's ρ̄ = min(ρ, C)): J = sg(min(s, C))·e^(ℓ̄_θ − sg(ℓ̄_θ))·A,
    whose value is min(s, C)·A and whose gradient is min(s, C)·A·∇ℓ̄_θ: weight s below the cap, C above it (the
    truncation bounds the weight, it does not cut the gradient). The score function is taken from ℓ̄_θ itself (the
    masked token mean of ``logp_BT``), not from s, so it survives where the sequence log-ratio is clamped at
    ±max_log_ratio (a clamped s has no gradient): an answer the learner finds e^12 times likelier than its author
    still trains, at weight C."""
    if not is_cap > 0:
        raise ValueError(f"is_cap must be > 0, got {is_cap}")
    m_BT = mask_BT.bool()
    mean_B = torch.where(m_BT, logp_BT.float(), 0.0).sum(-1) / m_BT.sum(-1).clamp_min(1)
    # w = min(π_θ / π_author, C), detached; e^(ℓ̄ − sg(ℓ̄)) is 1 in value and carries the score function ∇ℓ̄_θ
    return s_B.detach().clamp_max(is_cap) * torch.exp(mean_B - mean_B.detach()).to(s_B) * adv_B


def shaping_term(*, s_B: Tensor, adv_B: Tensor, logp_BT: Tensor, mask_BT: Tensor, clip_low: float,
                 clip_high: float, is_cap: float, shaping_gamma: float) -> Tensor:
    """float[B]: LUFFY's policy shaping (arXiv 2504.14945 eq. 8), per token and without a ratio: the token-mean
    of f(π_θ(y_t)) = π_θ(y_t)/(π_θ(y_t) + γ) times A. ∇f = γπ/(π + γ)²·∇log π: an SFT gradient weighted most
    at π = γ."""
    if not shaping_gamma > 0:
        raise ValueError(f"shaping_gamma must be > 0, got {shaping_gamma}")
    m_BT = mask_BT.bool()
    p_BT = torch.exp(torch.where(m_BT, logp_BT.float(), 0.0))
    f_BT = torch.where(m_BT, p_BT / (p_BT + shaping_gamma), 0.0)  # f(π) = π / (π + γ)
    return f_BT.sum(-1) / m_BT.sum(-1).clamp_min(1) * adv_B


def keep_all(*, adv_B: Tensor, log_ratio_B: Tensor, veto_kl: float) -> Tensor:
    """bool[B]: every partner row trains, negatives included."""
    return torch.ones_like(adv_B, dtype=torch.bool)


def drop_negatives(*, adv_B: Tensor, log_ratio_B: Tensor, veto_kl: float) -> Tensor:
    """bool[B]: partner rows with A < 0 are dropped (positives and zero advantages kept)."""
    return adv_B >= 0


def kl_veto(*, adv_B: Tensor, log_ratio_B: Tensor, veto_kl: float) -> Tensor:
    """bool[B]: a negative partner row is dropped when the learner is too far from its author: KL > τ, with
    KL(π_author ‖ π_θ) estimated per token by the sequence's k1, −log s = ℓ̄_author − ℓ̄_θ (F-TIS's veto; its
    estimator and τ are not published). Positives are always kept."""
    return (adv_B >= 0) | (-log_ratio_B.detach() <= veto_kl)


for _name, _term in (("ratio", clipped_term), ("gate", clipped_term), ("trust", clipped_term),
                     ("truncated_is", truncated_is_term), ("shaping", shaping_term)):
    PARTNER_TERMS.add(_name, _term)
for _name, _filter in (("keep", keep_all), ("drop", drop_negatives), ("veto", kl_veto)):
    NEGATIVE_FILTERS.add(_name, _filter)


def gate_weight(*, learner_logp_mean_B: Tensor, author_logp_mean_B: Tensor, threshold: float,
                max_log_ratio: float = 10.0) -> Tensor:
    """float32[B]: GRAFT's fixed gate of a partner answer, w = 1[s > threshold]·min(s, 1), with
    s = exp(ℓ̄_{π_old, learner}(y) − ℓ̄_{π, author}(y)) (each in its own tokens, the log-ratio clamped to
    ±max_log_ratio); detached by construction (the inputs are log-probs before the update).

    Two answers the learner finds half and twice as likely as their author did, threshold 0.8: s = 0.5 fails the
    gate (0); s = 2 passes it, min(2, 1) = 1.

    >>> import math
    >>> gate_weight(learner_logp_mean_B=torch.tensor([-2.0 + math.log(0.5), -2.0 + math.log(2.0)]),
    ...             author_logp_mean_B=torch.tensor([-2.0, -2.0]), threshold=0.8).tolist()
    [0.0, 1.0]
    """
    log_s_B = (learner_logp_mean_B.float() - author_logp_mean_B.float()).clamp(-max_log_ratio, max_log_ratio)
    s_B = torch.exp(log_s_B)
    # w = 1[s > 0.8] · min(s, 1)
    return torch.where(s_B > threshold, s_B.clamp_max(1.0), torch.zeros_like(s_B))


def partner_loss(inputs: LossInputs, settings: StepSettings) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO on own answers plus ``partner_term`` on the others' (module docstring), filtered by ``negatives``.

    Args:
        inputs: the rows; needs ``old_logp_mean_B`` and ``own_B``. ``partner_weight_B``: a fixed weight of each
            partner row (None: 1); ``partner_floor_B``: the lowest ratio s at which a partner row trains (None:
            none); ``omega_B`` is not read.
        settings: reads ``clip_low``, ``clip_high`` (GSPO's radii, for own rows and the ``ratio`` / ``gate`` /
            ``trust`` partner term), ``partner_term`` (a ``PARTNER_TERMS`` name), ``negatives`` (a
            ``NEGATIVE_FILTERS`` name), ``is_cap`` (C of ``truncated_is``), ``shaping_gamma`` (γ of ``shaping``),
            ``veto_kl`` (τ of the ``veto`` filter), ``max_log_ratio`` and ``kl_coef`` (β of the k3 KL term on own
            rows, needs ``ref_logp_BT``); not ``alpha``, ``cross_lower``, ``cross_clip`` or ``imitation_coef``.
    """
    if inputs.old_logp_mean_B is None or inputs.own_B is None:
        raise ValueError("the partner loss needs old_logp_mean_B and own_B")
    clip_low, clip_high, max_log_ratio = settings.clip_low, settings.clip_high, settings.max_log_ratio
    term, keep = PARTNER_TERMS.get(settings.partner_term), NEGATIVE_FILTERS.get(settings.negatives)
    logp, mask = inputs.logp_BT, inputs.mask_BT
    adv_B = inputs.advantages_B.float()
    own_B = inputs.own_B.bool()
    log_ratio_B, nonempty_B = sequence_log_ratio(logp, mask, inputs.old_logp_mean_B, max_log_ratio=max_log_ratio)
    s_B = torch.exp(log_ratio_B)

    own_obj_B, own_clipped_B = _own_objective(s_B, adv_B, clip_low, clip_high)
    own_obj_B = _rollout_weight(inputs) * own_obj_B
    g_B = (inputs.partner_weight_B.detach().float() if inputs.partner_weight_B is not None
           else torch.ones_like(adv_B))
    kept_B = keep(adv_B=adv_B, log_ratio_B=log_ratio_B, veto_kl=settings.veto_kl)
    if inputs.partner_floor_B is not None:  # trust: s < ℓ_j gives no gradient (the floor, not a clip: no constant)
        kept_B = kept_B & (s_B.detach() >= inputs.partner_floor_B.to(s_B))
    partner_obj_B = g_B * term(s_B=s_B, adv_B=adv_B, logp_BT=logp, mask_BT=mask, clip_low=clip_low,
                               clip_high=clip_high, is_cap=settings.is_cap, shaping_gamma=settings.shaping_gamma)
    partner_obj_B = torch.where(kept_B, partner_obj_B, torch.zeros_like(partner_obj_B))

    obj_B = torch.where(own_B, own_obj_B, partner_obj_B)
    obj_B = torch.where(nonempty_B, obj_B, torch.zeros_like(obj_B))
    if settings.mean_over_trained:  # trust_mean=trained: own rows 1 each, a partner row its weight where it trains
        trained_B = torch.where(own_B, torch.ones_like(g_B), g_B * kept_B.float()) * nonempty_B.float()
        pg_loss = -obj_B.sum() / trained_B.sum().clamp_min(1.0)
    else:
        pg_loss = -obj_B.mean()
    kl_penalty, kl_mean = _kl_term(logp, mask, inputs.ref_logp_BT, settings.kl_coef, own_B & nonempty_B)

    cross_B = ~own_B & nonempty_B
    s_det_B = s_B.detach()
    metrics = {
        "pg_loss": pg_loss.detach(),
        "kl": kl_mean,
        "self/ratio_mean": _masked_mean(s_det_B, own_B & nonempty_B),
        "self/clip_frac": _masked_mean(own_clipped_B, own_B & nonempty_B),
        "cross/ratio_mean": _masked_mean(s_det_B, cross_B),
        "cross/adv_pos_frac": _masked_mean(adv_B > 0, cross_B),
        "cross/kept_frac": _masked_mean(kept_B, cross_B),
        "cross/gate_mean": _masked_mean(g_B, cross_B),
        "cross/objective_mean": _masked_mean(partner_obj_B.detach(), cross_B),
        "count/own": (own_B & nonempty_B).sum(),
        "count/cross": cross_B.sum(),
        "count/empty": (~nonempty_B).sum(),
    }
    return pg_loss + kl_penalty, metrics


POLICY_LOSSES.add("partner", partner_loss)
