"""One learner's whole update, in one call: the pool in, the optimizer steps taken, the metrics out.

``learn`` is the learner's script, top to bottom: its view of the pool (``build_view``: the ingredients' prompt
gate and answer selection applied), the asynchronous mode's stale own rows against π_prox
(``correct_stale_rows``), the advantages (``assign_advantages``), the minibatches, and one optimizer step per
minibatch (``update_learner``: the rollout correction, π_old of partner rows recomputed where the algorithm says so,
the policy loss). The worker (``hacrl.backends.worker``) keeps only its own concerns around the call: its own
answers' tokens, the adaptive window's bounds, the divergence check and the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from hacrl.agents.agent import Agent
from hacrl.learner.algorithms import Algorithm
from hacrl.learner.old_logprobs import prox_logprobs
from hacrl.learner.row_weights import correct_stale_rows
from hacrl.learner.settings import LossSettings
from hacrl.learner.update import update_learner
from hacrl.learner.view import apply_trust, assign_advantages, build_view, minibatches
from hacrl.pool import TrajectoryPool


@dataclass(frozen=True)
class StaleSettings:
    """The asynchronous mode's correction of stale own answers (``async.staleness_correction``, ``staleness_cap``;
    ``engine_behaviour``: the engine's log-prob is the behaviour policy, as with the rollout correction on)."""

    mode: str
    cap: float
    engine_behaviour: bool


@dataclass(frozen=True)
class Schedule:
    """How the update is cut and run: ``minibatch_size`` sequences (whole prompt groups of ``rows_per_prompt``)
    per optimizer step, prompts shuffled with ``seed``, ``micro_batch_size`` sequences a pass."""

    minibatch_size: int
    rows_per_prompt: int
    seed: int
    micro_batch_size: int
    grad_clip: float
    shared_prompt: bool = True


def learn(agent: Agent, pool: TrajectoryPool, omega_NN: Tensor, algo: Algorithm, settings: LossSettings,
          schedule: Schedule, *, stale: StaleSettings | None = None, dp_group: Any = None,
          cross_lower0: Sequence[float] | None = None, observed_ratios: dict[int, list[float]] | None = None,
          trust: tuple[Sequence[float], Sequence[float]] | None = None,
          baseline_N: Sequence[float] | None = None,
          before_update: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Train ``agent`` on ``pool`` (its own answers with their token ids) for one step of ``algo``; returns the
    update's metrics (``update_learner``'s), ``optimizer_steps``, ``truncated_frac`` (the share of its rows cut at
    its answer limit) and, with ``stale``, ``staleness_is/*``. ``trust``: the ``trust`` method's τ and ratio floor per
    source agent (``hacrl.learner.trust``); ``baseline_N``: each source's weight in the ``trust`` advantage's
    baseline (default: that τ). ``before_update`` runs once the rows are ready and before the first optimizer step
    (the worker puts its engine to sleep there)."""
    prompts = {i: p.prompt for i, p in enumerate(pool.problems)}
    rows = build_view(agent, pool, algo, prompts)
    stale_metrics = correct_stale_rows(rows, lambda rs: prox_logprobs(
        agent, [r.prompt_ids for r in rs], [r.answer_ids for r in rs], schedule.micro_batch_size),
        mode=stale.mode, cap=stale.cap, max_log_ratio=settings.loss.max_log_ratio,
        engine_behaviour=stale.engine_behaviour) if stale is not None else {}
    if trust is not None:
        apply_trust(rows, *trust)
    weights_N = baseline_N if baseline_N is not None else (trust[0] if trust is not None else None)
    assign_advantages(rows, agent.index, algo, omega_NN, weights_N)
    mbs = minibatches(rows, schedule.minibatch_size, schedule.rows_per_prompt, seed=schedule.seed)
    before_update()
    metrics: dict[str, Any] = update_learner(
        agent, mbs, algo, settings, micro_batch_size=schedule.micro_batch_size, grad_clip=schedule.grad_clip,
        dp_group=dp_group, shared_prompt=schedule.shared_prompt, cross_lower0=cross_lower0,
        observed_ratios=observed_ratios)
    metrics["optimizer_steps"] = len(mbs)
    metrics["truncated_frac"] = sum(r.truncated for r in rows) / max(len(rows), 1)
    metrics.update(stale_metrics)
    return metrics
