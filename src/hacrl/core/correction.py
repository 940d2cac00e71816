"""Rollout correction: a sequence-level importance weight between the policy that wrote an answer (the
behaviour policy π_behav: the rollout engine's log-probs) and the policy the update's ratio divides by (the
proximal policy π_prox: the trainer's own forward pass before the update, π_old in GSPO's ratio).

Why it exists: an engine other than the training model (vLLM) computes the same policy with other kernels,
so its log-probs differ from the training pass's by rounding (float32 ~1e-6 per token, bfloat16 ~2e-3 mean
and 5e-2 worst: docs/distributed.md). hacrl recomputes π_old by the training pass for such engines, so GSPO's
clipped ratio π_θ / π_prox is exact; what is left is that the answers were sampled from π_behav, not π_prox.
The weight π_prox / π_behav, detached and truncated or masked, corrects for that (TIS; TRL's
``vllm_importance_sampling_correction``, verl's ``rollout_is`` / ``rollout_rs``, slime's ``--use-tis``).
The same function serves an asynchronous learner whose own answers were written by an older policy version
(AReaL's decoupled PPO): π_behav is then the older version's rollout log-prob, π_prox the learner's pass now.

The weight is length-normalised, w_i = exp(mean_t log π_prox(y_i,t) − mean_t log π_behav(y_i,t)), the
geometric mean of the per-token ratios, not their product exp(Σ_t ...), because

- GSPO's own ratio is length-normalised: s_i · w_i = exp(mean log π_θ − mean log π_behav), GSPO's ratio taken
  against the behaviour policy, split into the clipped part s_i and the detached, truncated part w_i (the
  decoupled form of AReaL, at the sequence level);
- the product compounds per-token rounding with length: a per-token gap δ that does not cancel moves it by
  e^{Lδ} (bfloat16's 1.6e-3 over 1,000 tokens: e^{1.6} ≈ 5), so one cap would be loose for short answers and
  would truncate or mask long ones for their length alone; the geometric mean moves by e^{δ} at any length.

Modes (``ROLLOUT_CORRECTIONS``, C = the cap ≥ 1): ``off`` (1), ``truncate`` (min(w, C): TIS), ``mask``
(1 inside [1/C, C], 0 outside: rejection, no reweighting), ``masked-is`` (w inside [1/C, C], 0 outside;
TRL's ``sequence_mask`` is its one-sided form). The cap acts on the geometric mean, so C = 2 is a per-token
mean gap of log 2 ≈ 0.69 nats: far past rounding, it binds on a broken engine (stale weights, another
template), not on numerics; a mask meant to act on rounding needs a band like [0.99, 1.01].

Run the hand-computed tests: ``OMP_NUM_THREADS=1 python -m pytest -q tests/core/test_correction.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from hacrl.registry import Registry

# mode → (w_B, cap) → (w̃_B the applied weight ≥ 0, truncated_B: w̃ is w cut to C, masked_B: w̃ set to 0)
RolloutCorrection = Callable[[Tensor, float], tuple[Tensor, Tensor, Tensor]]
ROLLOUT_CORRECTIONS: Registry[RolloutCorrection] = Registry("rollout correction")


def _off(w_B: Tensor, cap: float) -> tuple[Tensor, Tensor, Tensor]:
    none_B = torch.zeros_like(w_B, dtype=torch.bool)
    return torch.ones_like(w_B), none_B, none_B


def _truncate(w_B: Tensor, cap: float) -> tuple[Tensor, Tensor, Tensor]:
    # TIS: w̃_i = min(w_i, C)
    return w_B.clamp(max=cap), w_B > cap, torch.zeros_like(w_B, dtype=torch.bool)


def _in_band(w_B: Tensor, cap: float) -> Tensor:
    return (w_B >= 1.0 / cap) & (w_B <= cap)


def _mask(w_B: Tensor, cap: float) -> tuple[Tensor, Tensor, Tensor]:
    # rejection: w̃_i = 1[1/C ≤ w_i ≤ C]
    keep_B = _in_band(w_B, cap)
    return keep_B.to(w_B.dtype), torch.zeros_like(keep_B), ~keep_B


def _masked_is(w_B: Tensor, cap: float) -> tuple[Tensor, Tensor, Tensor]:
    # masked importance sampling: w̃_i = w_i · 1[1/C ≤ w_i ≤ C]
    keep_B = _in_band(w_B, cap)
    return torch.where(keep_B, w_B, torch.zeros_like(w_B)), torch.zeros_like(keep_B), ~keep_B


def _select_mean(x_B: Tensor, sel_B: Tensor) -> Tensor:
    sel = sel_B.float()
    return (x_B.float() * sel).sum() / sel.sum().clamp_min(1)


def _select_max(x_B: Tensor, sel_B: Tensor) -> Tensor:
    """The largest selected value, 0 without one (an empty batch included)."""
    padded = torch.cat((torch.where(sel_B, x_B, -torch.inf), x_B.new_full((1,), -torch.inf)))
    return torch.where(sel_B.any(), padded.max(), 0.0)


def rollout_correction(
    *,
    prox_logp_sum_B: Tensor,
    behav_logp_sum_B: Tensor,
    num_tokens_B: Tensor,
    mode: str,
    cap: float,
    rows_B: Tensor | None = None,
    max_log_ratio: float = 10.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Sequence-level rollout-correction weights, detached, one per answer.

    Args:
        prox_logp_sum_B: float[B], Σ_t log π_prox(y_i,t) over each answer's tokens (the trainer's pass).
        behav_logp_sum_B: float[B], Σ_t log π_behav(y_i,t) over the same tokens (the engine's log-probs).
        num_tokens_B: int[B], the answer's tokens L_i (both sums run over them).
        mode: a ``ROLLOUT_CORRECTIONS`` name: off, truncate, mask, masked-is.
        cap: C ≥ 1; truncate caps w at C, mask and masked-is keep [1/C, C].
        rows_B: bool[B], the rows to correct (a learner's own answers); None: all. The others get weight 1
            and stay out of the metrics, as do answers without tokens.
        max_log_ratio: clamp of log w before ``exp``, as the losses clamp theirs.

    Returns:
        (weights_B float32, detached; metrics over the corrected rows with tokens, detached, 0 when none:
        ``weight_mean`` / ``weight_max`` / ``weight_min`` of w itself, before the mode acts, so they show the
        engine/trainer gap in every mode, off included; ``truncated_frac`` the share the mode cut to C
        (truncate); ``masked_frac`` the share it set to 0 (mask, masked-is); ``applied_mean`` the mean w̃;
        ``count`` how many rows these are).
    """
    if not cap >= 1.0:
        raise ValueError(f"the rollout-correction cap must be >= 1 (a band [1/C, C]), got {cap}")
    correct = ROLLOUT_CORRECTIONS.get(mode)
    shape = tuple(prox_logp_sum_B.shape)
    for name, t in (("behav_logp_sum_B", behav_logp_sum_B), ("num_tokens_B", num_tokens_B), ("rows_B", rows_B)):
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"{name} must be {list(shape)} like prox_logp_sum_B, got {list(t.shape)}")
    n_B = num_tokens_B.float()
    sel_B = n_B > 0
    if rows_B is not None:
        sel_B = sel_B & rows_B.bool()
    # w_i = exp( (1/L_i) Σ_t [log π_prox(y_i,t) − log π_behav(y_i,t)] ); the difference of the sums in their own
    # dtype (float64 sums keep a gap of 1e-6 per token that float32 sums of ~1e3 would round away)
    log_w_B = (prox_logp_sum_B.detach() - behav_logp_sum_B.detach()).float() / n_B.clamp_min(1)
    w_B = torch.exp(torch.where(sel_B, log_w_B, 0.0).clamp(-max_log_ratio, max_log_ratio))
    corrected_B, truncated_B, masked_B = correct(w_B, cap)
    applied_B = torch.where(sel_B, corrected_B, torch.ones_like(w_B))
    metrics = {
        "weight_mean": _select_mean(w_B, sel_B),
        "weight_max": _select_max(w_B, sel_B),
        "weight_min": -_select_max(-w_B, sel_B),
        "truncated_frac": _select_mean(truncated_B, sel_B),
        "masked_frac": _select_mean(masked_B, sel_B),
        "applied_mean": _select_mean(applied_B, sel_B),
        "count": sel_B.sum(),
    }
    return applied_B, metrics


# Registered here, after the definitions, rather than with the registry's decorator: the mutation tests
# (docs/mutation.md) do not mutate a decorated function's body.
ROLLOUT_CORRECTIONS.add("off", _off)
ROLLOUT_CORRECTIONS.add("truncate", _truncate)
ROLLOUT_CORRECTIONS.add("mask", _mask)
ROLLOUT_CORRECTIONS.add("masked-is", _masked_is)
