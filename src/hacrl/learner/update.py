"""One learner's part of a step: its training view of the pool, its advantages, and its minibatch
updates. The formulas live in ``hacrl.core``; this module only arranges tensors for them.

Minibatches hold whole prompt groups (a prompt's own and cross answers together), taken in a seeded
random prompt order, so every optimizer step mixes own and other agents' answers in the pool's
proportion; minibatch m gets the stepwise cross bound ℓ_m (paper eq. 14, index restarting each step).

A verified-correct answer (the imitation baseline's targets) is one whose reward reaches ``CORRECT_REWARD`` = 1,
a task's full reward, the same threshold as the trainer's accuracy: with partial-credit rewards in [0, 1] only
full-credit answers count.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import Tensor

from hacrl.agents.agent import Agent, token_logprobs
from hacrl.agents.shared_prompt import group_batch, grouped_logprobs, supports_shared_prompt
from hacrl.core import (
    POLICY_LOSSES,
    LossInputs,
    gate_weight,
    rollout_correction,
    sequence_log_ratio,
    staleness_correction,
)
from hacrl.learner.algorithms import Algorithm
from hacrl.learner.settings import LossSettings, step_settings
from hacrl.learner.sharding import clip_grad_norm, is_sharded, sum_replica_gradients
from hacrl.learner.sharing import ADVANTAGES, CORRECT_REWARD, select_partner_rows
from hacrl.pool import TrajectoryPool


@dataclass
class ViewRow:
    """One answer as the learner trains on it (in the learner's tokenization): a ``Trajectory`` tokenized
    for this learner, with its advantage and ω; it never leaves the learner's worker."""

    prompt_index: int  # the Trajectory's: the prompt within the step's batch, the advantage group
    source: int
    is_own: bool
    prompt_ids: list[int]
    answer_ids: list[int]
    old_logp_mean: float
    old_token_logps: tuple[float, ...] | None  # own answers only (token-level losses)
    reward: float
    truncated: bool = False
    advantage: float = 0.0
    omega: float = 1.0
    # own answers whose π_old (old_logp_mean) was recomputed by the training pass: the engine's mean token
    # log-prob, the rollout correction's behaviour policy; None: old_logp_mean is the engine's own
    behav_logp_mean: float | None = None
    rollout_weight: float = 1.0  # the rollout correction's weight (assign_rollout_weights); 1 on cross answers
    # the asynchronous mode: an own answer's version gap (its Trajectory's: the learner's version now minus the
    # one that wrote it); > 0 trains against π_prox with the staleness weight (correct_stale_rows)
    version_gap: int = 0
    # a fixed weight of a partner row, set before the update (GRAFT's gate, ``recompute_partner_old``; the learner's
    # trust in its author, ``apply_trust``); 1 elsewhere
    partner_weight: float = 1.0
    partner_floor: float = 0.0  # trust: the lowest ratio s at which this partner row trains (``apply_trust``)


def build_view(learner: Agent, pool: TrajectoryPool, algo: Algorithm, prompts: dict[int, str]) -> list[ViewRow]:
    """The learner's rows: own answers as generated, others' re-tokenized from text (shared algorithms), those
    of them that ``algo``'s ``share_prompts`` and ``partner_answers`` keep (``sharing.select_partner_rows``)."""
    sources = None if algo.shares_pool else [learner.index]
    rows = []
    for t in pool.scored(sources):  # scored: every reward is a float
        reward = float(cast(float, t.reward))
        prompt_ids = learner.render_prompt(prompts[t.prompt_index])
        if t.source == learner.index:
            behav = t.behav_logp_sum / max(t.num_tokens, 1) if t.behav_logp_sum is not None else None
            rows.append(ViewRow(t.prompt_index, t.source, True, prompt_ids, list(t.token_ids), t.logp_mean,
                                t.token_logps, reward, behav_logp_mean=behav, version_gap=t.version_gap))
        else:
            answer_ids, truncated = learner.encode_answer(t.text, t.finished)
            rows.append(ViewRow(t.prompt_index, t.source, False, prompt_ids, answer_ids, t.logp_mean, None,
                                reward, truncated))
    return select_partner_rows(rows, algo.share_prompts, algo.partner_answers)


def assign_advantages(rows: list[ViewRow], learner: int, algo: Algorithm, omega_NN: Tensor,
                      trust_N: Sequence[float] | None = None) -> None:
    """Fill ``advantage`` and ``omega`` of every row (in place). ``omega_NN``: the driver's ω^(k,j) (its clamps
    applied), the update's one ω: row ``learner`` weighs the baseline (eq. 7), column ``learner`` the cross
    answers in the loss (eq. 50). ``trust_N``: the learner's trust per source (the ``trust`` advantage's weights)."""
    if not rows:
        return
    rewards_B = torch.tensor([r.reward for r in rows])
    groups_B = torch.tensor([r.prompt_index for r in rows])
    sources_B = torch.tensor([r.source for r in rows])
    adv_B = ADVANTAGES.get(algo.advantage)(
        rewards_B, groups_B, sources_B, learner=learner, omega_N=omega_NN[learner],
        capability_aware=algo.capability_aware, source_weight_N=None if trust_N is None else torch.tensor(trust_N))
    # ω^(source, learner) scales a cross answer's update (eq. 10)
    omega_B = omega_NN[sources_B, learner] if algo.use_omega else torch.ones(len(rows))
    for row, a, w in zip(rows, adv_B.tolist(), omega_B.tolist(), strict=True):
        row.advantage, row.omega = a, (1.0 if row.is_own else w)


def apply_trust(rows: list[ViewRow], trust_N: Sequence[float], floor_N: Sequence[float]) -> None:
    """The ``trust`` method's weight and ratio floor of each partner row (in place): its author's τ and ℓ
    (``hacrl.core.trust.TrustState``)."""
    for row in rows:
        if not row.is_own:
            row.partner_weight, row.partner_floor = float(trust_N[row.source]), float(floor_N[row.source])


def imitated(row: ViewRow) -> bool:
    """Whether the imitation loss learns from this row: another agent's answer, verified correct (reward ≥
    ``CORRECT_REWARD``) and whole in the learner's tokens (one cut at the learner's answer limit is not the
    text that was verified)."""
    return not row.is_own and row.reward >= CORRECT_REWARD and not row.truncated


def row_shares(mb: list[ViewRow], algo: Algorithm) -> tuple[float, float]:
    """The shares of a minibatch's rows that train as own answers and that are imitated (``LossInputs``'
    ``own_share`` / ``imitate_share`` of its micro-batches)."""
    n = max(len(mb), 1)
    return sum(r.is_own or algo.cross_as_own for r in mb) / n, sum(imitated(r) for r in mb) / n


def minibatches(rows: list[ViewRow], minibatch_size: int, rows_per_prompt: int, seed: int) -> list[list[ViewRow]]:
    """Split rows into minibatches of whole prompt groups, prompts in a seeded random order."""
    by_group: dict[int, list[ViewRow]] = defaultdict(list)
    for r in rows:
        by_group[r.prompt_index].append(r)
    order = sorted(by_group)
    random.Random(seed).shuffle(order)
    prompts_per_mb = max(1, minibatch_size // rows_per_prompt)
    out = []
    for i in range(0, len(order), prompts_per_mb):
        mb = [r for g in order[i : i + prompts_per_mb] for r in by_group[g]]
        if mb:
            out.append(mb)
    return out


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


def _old_token_logps(rows: list[ViewRow], answer_mask_BT: Tensor) -> Tensor:
    """float[B, T]: each row's rollout-time token log-probs under its answer tokens (``answer_mask_BT``), 0
    elsewhere."""
    old_BT = torch.zeros(answer_mask_BT.shape)
    for i, r in enumerate(rows):
        if r.old_token_logps is None:
            raise ValueError("token-level losses need the learner's own rollout log-probs")
        old_BT[i, answer_mask_BT[i]] = torch.tensor(r.old_token_logps, dtype=torch.float32)
    return old_BT


def loss_inputs(micro: list[ViewRow], algo: Algorithm, logp_BT: Tensor, answer_mask_BT: Tensor,
                ref_BT: Tensor | None, shares: tuple[float, float] | None = None,
                mean_over_trained: bool = False) -> LossInputs:
    """The policy loss's view of a micro-batch: its rows' tensors on the log-probs' device. ``shares``: its
    minibatch's ``row_shares`` (None: the micro-batch is the whole minibatch). ``mean_over_trained``: trust's
    ``trust_mean=trained`` (read only where the algorithm reads a trust)."""
    device = logp_BT.device
    own_share, imitate_share = shares if shares is not None else (None, None)
    return LossInputs(
        logp_BT=logp_BT,
        mask_BT=answer_mask_BT.to(device),
        advantages_B=torch.tensor([r.advantage for r in micro], device=device),
        old_logp_mean_B=torch.tensor([r.old_logp_mean for r in micro], device=device),
        own_B=torch.tensor([r.is_own or algo.cross_as_own for r in micro], device=device),
        omega_B=torch.tensor([r.omega for r in micro], device=device),
        old_logp_BT=_old_token_logps(micro, answer_mask_BT).to(device) if algo.token_level else None,
        ref_logp_BT=ref_BT,
        imitate_B=torch.tensor([imitated(r) for r in micro], device=device),
        rollout_weight_B=torch.tensor([r.rollout_weight for r in micro], device=device),
        own_share=own_share,
        imitate_share=imitate_share,
        partner_weight_B=(torch.tensor([r.partner_weight for r in micro], device=device)
                          if algo.partner_weight in ("gate", "trust") else None),
        partner_floor_B=(torch.tensor([r.partner_floor for r in micro], device=device)
                         if algo.partner_weight == "trust" else None),
        mean_over_trained=mean_over_trained and algo.partner_weight == "trust",
    )


def recompute_partner_old(agent: Agent, mbs: list[list[ViewRow]], algo: Algorithm, settings: LossSettings, *,
                          micro_batch_size: int, shared: bool) -> dict[str, float]:
    """``partner_old = learner``: each partner row's π_old becomes the learner's own mean token log-prob before the
    update (in place), from a no-grad pass over the very micro-batches the update will run, so that the first
    minibatch's ratio of those rows is exactly 1; with ``partner_weight = gate`` each row's ``partner_weight``
    becomes GRAFT's gate of the learner's π_old over the author's. Returns ``partner_old/*`` metrics (none without
    partner rows): the mean ℓ̄_learner − ℓ̄_author, and with the gate the share of partner rows that pass it."""
    if algo.partner_old != "learner":
        return {}
    log_gaps: list[float] = []
    for mb in mbs:
        for start in range(0, len(mb), micro_batch_size):
            micro = mb[start : start + micro_batch_size]
            if all(r.is_own for r in micro):
                continue
            with torch.no_grad():
                logp_BT, _, mask_BT = _forward(agent, micro, shared, [False] * len(micro))
            m_BT = mask_BT.to(logp_BT.device).bool()
            # the loss's ℓ̄ (sequence_log_ratio): the masked token mean in float32
            mean_B = torch.where(m_BT, logp_BT.float(), 0.0).sum(-1) / m_BT.sum(-1).clamp_min(1)
            author_B = torch.tensor([r.old_logp_mean for r in micro])
            gate_B = gate_weight(learner_logp_mean_B=mean_B.cpu(), author_logp_mean_B=author_B,
                                 threshold=settings.gate_threshold, max_log_ratio=settings.loss.max_log_ratio)
            for r, mean, author, g in zip(micro, mean_B.tolist(), author_B.tolist(), gate_B.tolist(), strict=True):
                if not r.is_own:
                    log_gaps.append(mean - author)
                    r.old_logp_mean = mean
                    r.partner_weight = g if algo.partner_weight == "gate" else 1.0
    if not log_gaps:  # no partner row: nothing to report
        return {}
    out = {"partner_old/log_ratio_to_author": sum(log_gaps) / len(log_gaps)}
    if algo.partner_weight == "gate":
        gates = [r.partner_weight for mb in mbs for r in mb if not r.is_own]
        out["partner_old/gate_pass_frac"] = sum(g > 0 for g in gates) / len(gates)
    return out


def update_learner(
    agent: Agent,
    mbs: list[list[ViewRow]],
    algo: Algorithm,
    settings: LossSettings,
    *,
    micro_batch_size: int,
    grad_clip: float,
    dp_group: Any = None,
    shared_prompt: bool = True,
    cross_lower0: Sequence[float] | None = None,
    observed_ratios: dict[int, list[float]] | None = None,
) -> dict[str, float]:
    """Run one optimizer step per minibatch; returns metrics averaged over minibatches (weighted by rows), and
    the rollout correction's (``rollout_is/*``, over the own answers, once: ``assign_rollout_weights``).

    ``cross_lower0`` (the adaptive cross window, ``hacrl.core.window``): ℓ_0 per source agent, in place of
    1 − δ; the stepwise tightening ℓ_m = min(1, ℓ_0 + m·δ_step) applies to each. ``observed_ratios`` (filled
    if given): source → the sequence ratios of that source's cross answers, each as its minibatch saw it.

    With ``dp_group`` (a ``torch.distributed`` group of replicas of this agent, each calling this with the
    same rows), rank r takes micro-batches r, r+W, ...; gradients are summed across ranks before clipping,
    so every replica takes the step one process would take on the whole minibatch. An FSDP-sharded agent
    (``hacrl.learner.sharding``) sums them in its reduce-scatter instead, and pads with zero-weight
    passes so that every rank runs as many forward/backward passes."""
    assert agent.optimizer is not None
    rank, world = (dist.get_rank(dp_group), dist.get_world_size(dp_group)) if dp_group is not None else (0, 1)
    loss_fn = POLICY_LOSSES.get(algo.loss)
    totals: dict[str, float] = defaultdict(float)
    weights: dict[str, float] = defaultdict(float)
    agent.model.train()
    shared = shared_prompt and supports_shared_prompt(agent.model)
    sharded = is_sharded(agent.model)
    clock = PhaseClock()
    # the rollout correction's weights: fixed for the whole update (π_prox and π_behav do not move), every rank alike
    correction = assign_rollout_weights([r for mb in mbs for r in mb], settings)
    partner_old = recompute_partner_old(agent, mbs, algo, settings, micro_batch_size=micro_batch_size, shared=shared)
    for m, mb in enumerate(mbs):
        agent.optimizer.zero_grad(set_to_none=True)
        step = step_settings(algo, settings, m)
        shares = row_shares(mb, algo)
        starts = list(range(0, len(mb), micro_batch_size))
        # sharded: every rank runs as many passes (forward and backward are collectives); a rank short of
        # a micro-batch repeats its first one with weight 0 (a padding pass, metrics dropped)
        mine = starts[rank::world] or starts[:1]
        passes = -(-len(starts) // world) if sharded else len(starts[rank::world])
        for j in range(passes):
            pad = j >= len(starts[rank::world])
            start = mine[0] if pad else mine[j]
            micro = mb[start : start + micro_batch_size]
            use_ref = settings.loss.kl_coef > 0 and agent.ref_model is not None
            # the KL term is on the learner's own answers only: the reference runs on those rows (all of them
            # when sharded, where every rank must run the same passes)
            ref_rows = ([r.is_own or algo.cross_as_own or sharded for r in micro] if use_ref else
                        [False] * len(micro))
            logp_BT, ref_BT, answer_mask_BT = _forward(agent, micro, shared, ref_rows, clock)
            inputs = loss_inputs(micro, algo, logp_BT, answer_mask_BT, ref_BT, shares,
                                 mean_over_trained=settings.trust_mean == "trained")
            if cross_lower0 is not None:  # each row's bound: its source's ℓ_0, tightened as ℓ_m
                step = step_settings(algo, settings, m, [cross_lower0[r.source] for r in micro])
            if observed_ratios is not None and not pad:
                _record_cross_ratios(observed_ratios, micro, inputs, settings.loss.max_log_ratio)
            loss, metrics = loss_fn(inputs, step)
            # weight by the micro-batch's share of the minibatch: the sum equals the minibatch's mean loss
            with clock("backward"):
                (loss * (0.0 if pad else len(micro) / len(mb))).backward()
            if not pad:
                _accumulate(totals, weights, metrics, len(micro))
        if dp_group is not None and not sharded:  # FSDP has reduce-scattered (summed) them in backward
            sum_replica_gradients(agent.model, dp_group)
        with clock("optimizer"):
            grad_norm = clip_grad_norm(agent.model, grad_clip)
            agent.optimizer.step()
        totals["grad_norm"] += grad_norm * len(mb)
        weights["grad_norm"] += len(mb)
    if dp_group is not None:
        totals, weights = _merge_across(totals, weights, dp_group)
        if observed_ratios is not None:
            _merge_ratios(observed_ratios, dp_group)
    out = {k: totals[k] / weights[k] for k in totals if weights[k] > 0}
    out.update({f"rollout_is/{k}": v for k, v in correction.items()})
    out.update(partner_old)
    out.update({f"busy_{phase}_s": seconds for phase, seconds in clock.seconds.items()})  # this rank's
    return out


def _record_cross_ratios(out: dict[int, list[float]], micro: list[ViewRow], inputs: LossInputs,
                         max_log_ratio: float) -> None:
    """Append each cross row's sequence ratio s (as the loss computes it, detached) under its source."""
    assert inputs.old_logp_mean_B is not None
    log_ratio_B, nonempty_B = sequence_log_ratio(inputs.logp_BT.detach(), inputs.mask_BT, inputs.old_logp_mean_B,
                                                 max_log_ratio=max_log_ratio)
    for r, lr, keep in zip(micro, torch.exp(log_ratio_B).tolist(), nonempty_B.tolist(), strict=True):
        if not r.is_own and keep:
            out.setdefault(r.source, []).append(lr)


def _merge_ratios(out: dict[int, list[float]], group: Any) -> None:
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, dict(out), group=group)
    out.clear()
    for part in gathered:
        for source, ratios in part.items():
            out.setdefault(source, []).extend(ratios)


class PhaseClock:
    """Seconds spent per named phase of an update (``with clock("forward"): ...``), summed."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - start


def _forward(agent: Agent, micro: list[ViewRow], shared: bool, ref_rows: list[bool],
             clock: PhaseClock | None = None) -> tuple[Tensor, Tensor | None, Tensor]:
    """Answer log-probs of the policy with their answer mask, each prompt once (``shared_prompt``) or
    prompt + answer per row, and the reference's on the rows ``ref_rows`` marks (zeros elsewhere; None if
    it marks none)."""
    clock = clock or PhaseClock()
    prompts, answers = [r.prompt_ids for r in micro], [r.answer_ids for r in micro]
    with agent.autocast():
        if shared:
            grouped = group_batch(prompts, answers, int(agent.tokenizer.pad_token_id))
            with clock("forward"):
                logp = grouped_logprobs(agent.model, grouped)
            mask = grouped.answer_mask_BA
        else:
            batch = agent.batch(prompts, answers)
            with clock("forward"):
                logp = token_logprobs(agent.model, batch)
            mask = batch.answer_mask_BT
        if not any(ref_rows):
            return logp, None, mask
        with clock("reference"):
            ref = _reference_logprobs(agent, prompts, answers, ref_rows, shared, logp.shape)
    return logp, ref.to(logp.device), mask


def _reference_logprobs(agent: Agent, prompts: list[list[int]], answers: list[list[int]], rows: list[bool],
                        shared: bool, shape: torch.Size) -> Tensor:
    """The reference's answer log-probs of the marked rows, placed in a [B, ·] tensor of ``shape``: in both
    layouts every row starts at column 0, so a sub-batch's columns are the full batch's first ones."""
    idx = [i for i, keep in enumerate(rows) if keep]
    sub_p, sub_a = [prompts[i] for i in idx], [answers[i] for i in idx]
    with torch.no_grad():  # a block, not the decorator: the mutation tests (docs/mutation.md) skip decorated functions
        if shared:
            sub = grouped_logprobs(agent.ref_model, group_batch(sub_p, sub_a, int(agent.tokenizer.pad_token_id)))
        else:
            sub = token_logprobs(agent.ref_model, agent.batch(sub_p, sub_a))
    if len(idx) == len(rows) and sub.shape == shape:
        return sub
    out = torch.zeros(shape, dtype=sub.dtype, device=sub.device)
    out[idx, : sub.shape[1]] = sub
    return out


def _merge_across(totals: dict, weights: dict, group: Any) -> tuple[dict, dict]:
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, (dict(totals), dict(weights)), group=group)
    merged_t: dict[str, float] = defaultdict(float)
    merged_w: dict[str, float] = defaultdict(float)
    for t, w in gathered:
        for k, v in t.items():
            merged_t[k] += v
        for k, v in w.items():
            # count/* carry weight 1 on every rank (a total, not a mean)
            merged_w[k] = 1.0 if k.startswith("count/") else merged_w[k] + v
    return merged_t, merged_w  # grad_norm: the same total and weight on every rank, so the same ratio


def _accumulate(totals: dict, weights: dict, metrics: dict[str, Tensor], n: int) -> None:
    own = float(metrics.get("count/own", torch.tensor(0)))
    cross = float(metrics.get("count/cross", torch.tensor(0)))
    imitated_n = float(metrics.get("count/imitated", torch.tensor(0)))
    for key, value in metrics.items():
        v = float(value)
        if key.startswith("count/"):
            totals[key] += v
            weights[key] = 1.0
            continue
        # self/* metrics are means over own answers, cross/* over cross answers, imitation/* over imitated ones
        w = (own if key.startswith("self/") else cross if key.startswith("cross/")
             else imitated_n if key.startswith("imitation/") else n)
        if w > 0:
            totals[key] += v * w
            weights[key] += w
