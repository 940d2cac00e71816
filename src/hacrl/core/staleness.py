"""Stale answers in the asynchronous mode (docs/async.md): which answers of the shared pool an update may use
under a staleness bound, and the correction of a learner's own answers written by an older version of itself.

**Versions and staleness.** Agent k's version v_k is the number of updates it has made. An answer's staleness
for learner k is v_k − a, where a is the first version of k that could take the answer:

- k's own answer: the version v_b that wrote it, so the staleness v_k − v_b is the off-policy gap (AReaL's);
- another agent's answer: the version of k's first take after the answer entered the pool (k's version then,
  or the next one if k had already taken at that version). One clock per learner: agents that train at their
  own pace have versions that do not compare (a fast agent at 100 beside a slow one at 10), and what ages a
  cross answer for k is how far k has moved since it could have used it.

``select_within_bound``: an update takes its own answers whose staleness is at most the bound B, and the other
agents' answers within B to the prompts it takes own answers to (the joint groups of HACPO's advantage);
answers past B expire; a cross answer within B to a prompt the learner has no own answer to waits.

**The decoupled objective** (AReaL's decoupled PPO, at GSPO's sequence level). An own answer y_i written by
π_behav = π_{v_b}, v_b < v, trains with

    J_i = w̃_i · min(s_i A_i, clip(s_i, 1 − ε_low, 1 + ε_high) A_i),
    s_i = exp(mean_t log π_θ − mean_t log π_prox),   w_i = exp(mean_t log π_prox − mean_t log π_behav)

where π_prox is the learner's own pass at the start of this update (version v) and w̃_i is w_i truncated (or
masked) by ``hacrl.core.rollout_correction``, detached. The clip keeps the step in a trust region around the
policy the update starts from; the weight corrects for the answer having been drawn from the older policy.
Uncut, s_i · w_i = exp(mean log π_θ − mean log π_behav): GSPO's ratio against the policy that wrote the answer.
It is ``hacpo_loss`` (or any ``POLICY_LOSSES`` entry) with ``old_logp_mean_B`` = π_prox's mean and
``rollout_weight_B`` = ``staleness_correction``'s weights: no second copy of the objective. Without π_prox (the
ratio taken against π_behav directly) GSPO's clip radii (3e-4 / 4e-4) would clip nearly every stale answer out
of the gradient: one update moves a sequence's mean log-prob by far more than that.

**Other agents' answers need nothing new.** Learner k's ratio of agent j's answer, exp(mean log π_k,θ − mean
log π_j,old), divides by j's log-prob at the version that wrote the answer (its ``logp_sum``), whatever that
version is: an older cross answer is simply an answer by another policy, which is what every cross answer
already is. Its staleness bounds only how old the joint groups are (docs/async.md).

Run the hand-computed tests: ``OMP_NUM_THREADS=1 python -m pytest -q tests/core/test_staleness.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from hacrl.core.correction import rollout_correction

# the counts ``select_within_bound`` returns, one reason each; every pending answer is in exactly one of them
SELECTION_REASONS = ("own_fresh", "own_stale", "cross", "waiting_cross", "expired_own", "expired_cross")


def _check_1d(**tensors: Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) != 1 or any(len(s) != 1 for s in shapes.values()):
        raise ValueError(f"expected 1-D tensors of one length, got shapes {shapes}")


def select_within_bound(
    *,
    learner: int,
    learner_version: int,
    bound: int,
    author_M: Tensor,
    prompt_M: Tensor,
    available_M: Tensor,
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """Which of learner k's pending answers its update at version v may use under the staleness bound B.

    Args:
        learner: k.
        learner_version: v, the version the update starts from.
        bound: B ≥ 0, the largest staleness an update may use (0: the lock-step trainer's rule).
        author_M: long[M], the agent that wrote each pending answer.
        prompt_M: long[M], its prompt's id (the joint group).
        available_M: long[M], the first version of k that could take it (own answers: the version that wrote
            them); staleness = v − available, which must be ≥ 0.

    Returns:
        (take_M bool, expire_M bool, metrics). take: own answers with staleness ≤ B, and other agents' answers
        with staleness ≤ B to a prompt with an own answer taken; expire: staleness > B (never usable again:
        staleness only grows); the rest wait (cross answers within B to a prompt without an own answer).
        metrics (long counts, detached, one per ``SELECTION_REASONS``; their sum is M): ``own_fresh`` (taken,
        staleness 0), ``own_stale`` (taken, > 0), ``cross`` (taken), ``waiting_cross``, ``expired_own``,
        ``expired_cross``; and ``staleness_mean`` / ``staleness_max`` over the taken answers (0 without one).
    """
    if bound < 0:
        raise ValueError(f"the staleness bound must be >= 0 (0: lock-step), got {bound}")
    _check_1d(author_M=author_M, prompt_M=prompt_M, available_M=available_M)
    # staleness_i = v − a_i, a_i the first version of the learner that could take answer i
    stale_M = learner_version - available_M.long()
    if bool((stale_M < 0).any()):
        raise ValueError(f"learner {learner} at version {learner_version} was given an answer available only from "
                         f"version {int(available_M.max())}: versions must not go back, and a learner takes once "
                         f"per version")
    own_M = author_M.long() == learner
    within_M = stale_M <= bound
    take_own_M = own_M & within_M
    # a cross answer joins the update only in a joint group: its prompt has an own answer taken now
    anchored_M = torch.isin(prompt_M.long(), prompt_M.long()[take_own_M])
    take_cross_M = ~own_M & within_M & anchored_M
    take_M = take_own_M | take_cross_M
    expire_M = ~within_M
    taken_stale_M = torch.where(take_M, stale_M, torch.zeros_like(stale_M))
    metrics = {
        "own_fresh": (take_own_M & (stale_M == 0)).sum(),
        "own_stale": (take_own_M & (stale_M > 0)).sum(),
        "cross": take_cross_M.sum(),
        "waiting_cross": (~own_M & within_M & ~anchored_M).sum(),
        "expired_own": (own_M & expire_M).sum(),
        "expired_cross": (~own_M & expire_M).sum(),
        "staleness_mean": taken_stale_M.double().sum() / take_M.sum().clamp_min(1),
        "staleness_max": taken_stale_M.max() if taken_stale_M.numel() else stale_M.new_zeros(()),
    }
    return take_M, expire_M, metrics


def staleness_correction(
    *,
    prox_logp_sum_B: Tensor,
    behav_logp_sum_B: Tensor,
    num_tokens_B: Tensor,
    version_gap_B: Tensor,
    own_B: Tensor | None = None,
    mode: str,
    cap: float,
    max_log_ratio: float = 10.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The decoupled objective's weight w̃_i of each own answer written by an older version of the learner.

    The weight is ``rollout_correction``'s, w_i = exp(mean_t log π_prox − mean_t log π_behav) truncated or masked
    by ``mode`` at ``cap``, on the stale own rows (own, version gap > 0); every other row gets 1. Pass the result
    as ``LossInputs.rollout_weight_B`` with ``old_logp_mean_B`` = π_prox's mean (module docstring).

    Args:
        prox_logp_sum_B: float[B], Σ_t log π_prox(y_i,t): the learner's pass at the start of this update.
        behav_logp_sum_B: float[B], Σ_t log π_behav(y_i,t): the log-probs the answer was sampled with, at the
            version that wrote it.
        num_tokens_B: int[B], the answer's tokens L_i.
        version_gap_B: int[B], v − v_b: the learner's version now minus the version that wrote the answer
            (≥ 0 on own rows; other rows are ignored).
        own_B: bool[B], the learner's own answers; None: every row.
        mode, cap, max_log_ratio: as ``rollout_correction`` (``ROLLOUT_CORRECTIONS``: off, truncate, mask,
            masked-is; C ≥ 1).

    Returns:
        (weights_B float32, detached; metrics, detached: ``rollout_correction``'s over the stale own rows with
        tokens (``weight_mean``, ``weight_max``, ``weight_min``, ``truncated_frac``, ``masked_frac``,
        ``applied_mean``, ``count``), and over the own rows ``stale_frac``, ``version_gap_mean``,
        ``version_gap_max`` (0 without own rows)).
    """
    shape = tuple(prox_logp_sum_B.shape)
    for name, t in (("version_gap_B", version_gap_B), ("own_B", own_B)):
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"{name} must be {list(shape)} like prox_logp_sum_B, got {list(t.shape)}")
    own = own_B.bool() if own_B is not None else torch.ones(shape, dtype=torch.bool)
    gap_B = version_gap_B.detach().long()
    if bool((own & (gap_B < 0)).any()):
        raise ValueError("version_gap_B < 0 on an own answer: written by a later version than the learner's")
    stale_B = own & (gap_B > 0)
    weights_B, metrics = rollout_correction(prox_logp_sum_B=prox_logp_sum_B, behav_logp_sum_B=behav_logp_sum_B,
                                            num_tokens_B=num_tokens_B, mode=mode, cap=cap, rows_B=stale_B,
                                            max_log_ratio=max_log_ratio)
    n_own = own.sum().clamp_min(1)
    own_gap_B = torch.where(own, gap_B, torch.zeros_like(gap_B))
    metrics["stale_frac"] = stale_B.sum() / n_own
    metrics["version_gap_mean"] = own_gap_B.double().sum() / n_own
    metrics["version_gap_max"] = own_gap_B.max() if own_gap_B.numel() else gap_B.new_zeros(())
    return weights_B, metrics
