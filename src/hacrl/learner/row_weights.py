"""The fixed weights of a learner's own rows for one update, set before its first optimizer step: the rollout
correction (``assign_rollout_weights``: π_prox over the engine's π_behav) and, in the asynchronous mode, the
decoupled objective on rows an older version of the learner wrote (``correct_stale_rows``: π_old becomes π_prox,
the learner's pass now, with the staleness weight). The formulas are ``hacrl.core``'s (``rollout_correction``,
``staleness_correction``); docs/architecture.md ("Rollout correction") and docs/async.md say why.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from hacrl.core import rollout_correction, staleness_correction
from hacrl.learner.settings import LossSettings
from hacrl.learner.view import ViewRow


def assign_rollout_weights(rows: list[ViewRow], s: LossSettings) -> dict[str, float]:
    """Fill ``rollout_weight`` of the own rows that carry the engine's log-prob (in place) and return the
    correction's metrics (``hacrl.core.rollout_correction``): π_prox = the row's ``old_logp_mean`` (the
    training pass before the update), π_behav = its ``behav_logp_mean`` (the engine's). Without such rows
    (π_old is the engine's own log-prob, the hf engine at temperature 1) the weight is 1 by construction: the
    rows keep 1 and there are no metrics. Cross rows always keep 1: their ratio already divides by their
    author's π_old (docs/architecture.md, "Rollout correction")."""
    own = [r for r in rows if r.is_own and r.behav_logp_mean is not None]
    if not own:
        return {}
    n_B = torch.tensor([len(r.answer_ids) for r in own], dtype=torch.float64)
    weights_B, metrics = rollout_correction(
        prox_logp_sum_B=torch.tensor([r.old_logp_mean for r in own], dtype=torch.float64) * n_B,
        behav_logp_sum_B=torch.tensor([r.behav_logp_mean for r in own], dtype=torch.float64) * n_B,
        num_tokens_B=n_B, mode=s.rollout_correction, cap=s.rollout_correction_cap,
        max_log_ratio=s.loss.max_log_ratio)
    for r, w in zip(own, weights_B.tolist(), strict=True):
        r.rollout_weight = w
    return {k: float(v) for k, v in metrics.items() if k != "count"}


def assign_staleness_weights(own: list[ViewRow], gaps: list[int], prox: dict[int, tuple[float, ...]], *, mode: str,
                             cap: float, max_log_ratio: float, engine_behaviour: bool) -> dict[str, float]:
    """The asynchronous mode's decoupled objective on the learner's own rows (docs/async.md, in place): each row
    with a version gap > 0 (``gaps``, aligned with ``own``) trains against π_prox, its token log-probs under the
    learner now (``prox``, by ``id(row)``), with ``staleness_correction``'s weight of π_prox over π_behav. π_behav
    is the engine's log-prob at the version that wrote it where the rollout correction is on
    (``engine_behaviour`` and the row has one: one weight covers the engine gap and the version gap), else the
    row's π_old at that version. Its ``behav_logp_mean`` is cleared, so ``assign_rollout_weights`` keeps this
    weight; fresh rows (gap 0) are left as they are. Returns the correction's metrics."""
    if not own:
        return {}
    n_B = torch.tensor([len(r.answer_ids) for r in own], dtype=torch.float64)
    prox_B = torch.tensor([sum(prox[id(r)]) if id(r) in prox else r.old_logp_mean * len(r.answer_ids) for r in own],
                          dtype=torch.float64)
    behav_B = torch.tensor([r.behav_logp_mean if engine_behaviour and r.behav_logp_mean is not None
                            else r.old_logp_mean for r in own], dtype=torch.float64) * n_B
    weights_B, metrics = staleness_correction(prox_logp_sum_B=prox_B, behav_logp_sum_B=behav_B, num_tokens_B=n_B,
                                              version_gap_B=torch.tensor(gaps, dtype=torch.long), mode=mode, cap=cap,
                                              max_log_ratio=max_log_ratio)
    for r, gap, w in zip(own, gaps, weights_B.tolist(), strict=True):
        if gap > 0:
            token_logps = prox[id(r)]
            r.old_logp_mean = sum(token_logps) / max(len(token_logps), 1)
            r.old_token_logps, r.behav_logp_mean, r.rollout_weight = token_logps, None, w
    return {k: float(v) for k, v in metrics.items()}


def correct_stale_rows(rows: list[ViewRow], prox_logps: Callable[[list[ViewRow]], list[tuple[float, ...]]], *,
                       mode: str, cap: float, max_log_ratio: float, engine_behaviour: bool) -> dict[str, float]:
    """The decoupled objective on the learner's own rows written by an older version of it (docs/async.md, in
    place): each own row's ``version_gap`` says how old it is; ``prox_logps`` returns π_prox's token log-probs of
    the stale ones (gap > 0), the learner's pass now, in their order; ``assign_staleness_weights`` does the rest.
    Returns its metrics as ``staleness_is/*``."""
    own = [r for r in rows if r.is_own]
    stale = [r for r in own if r.version_gap > 0]
    prox = prox_logps(stale) if stale else []
    metrics = assign_staleness_weights(own, [r.version_gap for r in own],
                                       {id(r): lp for r, lp in zip(stale, prox, strict=True)}, mode=mode, cap=cap,
                                       max_log_ratio=max_log_ratio, engine_behaviour=engine_behaviour)
    return {f"staleness_is/{k}": v for k, v in metrics.items()}
