"""The HACPO mathematics as a pure library: tensors and scalars in, tensors out.

No I/O, no config objects, no ``.item()``. Equation numbers refer to arXiv 2603.02604 v1; the
resolved ambiguities are listed in docs/architecture.md.
"""

from hacrl.core.advantages import group_advantages, hacpo_advantages, omega_matrix, weighted_group_advantages
from hacrl.core.capability import CapabilityTracker, RecentCapability
from hacrl.core.correction import ROLLOUT_CORRECTIONS, rollout_correction
from hacrl.core.logprobs import selected_logprobs
from hacrl.core.losses import (
    AGGREGATIONS,
    OWN_METRICS,
    POLICY_LOSSES,
    LossInputs,
    PolicyLoss,
    StepSettings,
    aggregate,
    grpo_loss,
    gspo_loss,
    hacpo_loss,
    imitation_loss,
    kl_k3,
    sequence_log_ratio,
    sequence_nll,
    stepwise_lower_bound,
    stepwise_tightened,
)
from hacrl.core.partner import NEGATIVE_FILTERS, PARTNER_TERMS, gate_weight, partner_loss
from hacrl.core.staleness import SELECTION_REASONS, select_within_bound, staleness_correction

__all__ = [
    "AGGREGATIONS",
    "OWN_METRICS",
    "POLICY_LOSSES",
    "ROLLOUT_CORRECTIONS",
    "SELECTION_REASONS",
    "CapabilityTracker",
    "LossInputs",
    "NEGATIVE_FILTERS",
    "PARTNER_TERMS",
    "PolicyLoss",
    "RecentCapability",
    "StepSettings",
    "aggregate",
    "gate_weight",
    "group_advantages",
    "grpo_loss",
    "gspo_loss",
    "hacpo_advantages",
    "hacpo_loss",
    "imitation_loss",
    "kl_k3",
    "omega_matrix",
    "partner_loss",
    "rollout_correction",
    "select_within_bound",
    "selected_logprobs",
    "sequence_log_ratio",
    "sequence_nll",
    "staleness_correction",
    "weighted_group_advantages",
    "stepwise_lower_bound",
    "stepwise_tightened",
]
