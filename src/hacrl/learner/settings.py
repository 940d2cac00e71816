"""The learner's loss settings: the run's (``LossSettings``, built from the config in ``loss_settings``) and those
of one optimizer step (``step_settings``: a ``hacrl.core.StepSettings`` with the algorithm's switches and the
step's cross bound ℓ_m applied), the one object every policy loss takes.

A new setting of a policy loss is added in four places: the config schema (``hacrl.config.AlgorithmConfig``),
``loss_settings`` here, ``hacrl.core.StepSettings`` and the loss that reads it. A new setting of the learner's own
(one the update reads, not the loss) goes into ``LossSettings`` in place of ``StepSettings``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from hacrl.config import AlgorithmConfig
from hacrl.core import PARTNER_TERMS, StepSettings, stepwise_lower_bound, stepwise_tightened
from hacrl.learner.algorithms import Algorithm


@dataclass(frozen=True)
class LossSettings:
    """The run's loss settings (``algorithm`` section and the agent's ``kl_coef``). ``loss``: the policy loss's
    settings as the config gives them, before the algorithm's switches and the step's ℓ_m (``step_settings``);
    ``clip_low`` / ``clip_high`` there reach every algorithm's loss as given: their per-algorithm defaults (GSPO's
    3e-4 / 4e-4, grpo's 0.2 / 0.28) are filled in by the config (``hacrl.config.CLIP_DEFAULTS``)."""

    loss: StepSettings
    delta: float  # the cross window's ℓ_0 = 1 − δ ...
    delta_step: float  # ... tightened by δ_step per optimizer step (eq. 14)
    # the rollout correction of own answers (``hacrl.core.correction``): a resolved mode (off, truncate, mask,
    # masked-is: ``hacrl.config.rollout_correction_mode``) and its cap C; no defaults: every caller says them
    rollout_correction: str
    rollout_correction_cap: float
    gate_threshold: float = 0.8  # GRAFT's gate threshold (``algorithm.gate_threshold``, ``recompute_partner_old``)


def loss_settings(a: AlgorithmConfig, *, kl_coef: float, rollout_correction: str) -> LossSettings:
    """The run's loss settings from its ``algorithm`` section, the agent's ``kl_coef`` (β) and the resolved
    rollout-correction mode (``Derived.rollout_correction``): the one place a config key becomes a loss setting."""
    loss = StepSettings(clip_low=a.clip_low, clip_high=a.clip_high, alpha=a.alpha, max_log_ratio=a.max_log_ratio,
                        kl_coef=kl_coef, imitation_coef=a.imitation_coef, is_cap=a.is_cap,
                        shaping_gamma=a.shaping_gamma, veto_kl=a.veto_kl,
                        mean_over_trained=a.trust_mean == "trained")
    return LossSettings(loss=loss, delta=a.delta, delta_step=a.delta_step, rollout_correction=rollout_correction,
                        rollout_correction_cap=a.rollout_correction_cap, gate_threshold=a.gate_threshold)


def step_settings(algo: Algorithm, s: LossSettings, m: int, lower0: Sequence[float] | None = None) -> StepSettings:
    """The policy loss's settings at optimizer step ``m`` of the learner's update: ``s.loss`` with the algorithm's
    switches applied (α = 0, ℓ fixed at ℓ_0, no cross clip, the partner term and negative filter, trust's mean
    only where the algorithm reads a trust) and the step's
    cross bound ℓ_m. ``lower0``: each row's ℓ_0 in place of 1 − δ (the adaptive window); ``cross_lower`` is then a
    float[B] tensor."""
    index = m if algo.stepwise else 0
    lower: float | Tensor = (
        stepwise_lower_bound(index, delta=s.delta, delta_step=s.delta_step) if lower0 is None else
        torch.tensor([stepwise_tightened(x, index, delta_step=s.delta_step) for x in lower0]))
    # partner_term: the partner loss's term (a loss of another kind ignores it, and the partner settings)
    term = algo.partner_weight if algo.partner_weight in PARTNER_TERMS else "ratio"
    return replace(s.loss, alpha=0.0 if algo.alpha_zero else s.loss.alpha, cross_lower=lower,
                   cross_clip=algo.cross_clip, partner_term=term, negatives=algo.negatives,
                   mean_over_trained=s.loss.mean_over_trained and algo.partner_weight == "trust")
