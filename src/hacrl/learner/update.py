"""One learner's optimizer steps (``update_learner``): one per minibatch of its view (``hacrl.learner.view``), the
rows' fixed weights set first (``hacrl.learner.row_weights``), each micro-batch's forward pass, the policy loss and
its backward, the data-parallel gradient sum or FSDP padding passes, and the metrics. The formulas live in
``hacrl.core``; this module only arranges tensors for them. Minibatch m gets the stepwise cross bound ℓ_m (paper
eq. 14, index restarting each step; ``hacrl.learner.settings.step_settings``).
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from hacrl.agents.agent import Agent, token_logprobs
from hacrl.agents.shared_prompt import group_batch, grouped_logprobs, supports_shared_prompt
from hacrl.core import POLICY_LOSSES, LossInputs, gate_weight, sequence_log_ratio
from hacrl.learner.algorithms import Algorithm
from hacrl.learner.row_weights import assign_rollout_weights
from hacrl.learner.settings import LossSettings, step_settings
from hacrl.learner.sharding import clip_grad_norm, is_sharded, sum_replica_gradients
from hacrl.learner.view import ViewRow, imitated, row_shares


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
                ref_BT: Tensor | None, shares: tuple[float, float] | None = None) -> LossInputs:
    """The policy loss's view of a micro-batch: its rows' tensors on the log-probs' device. ``shares``: its
    minibatch's ``row_shares`` (None: the micro-batch is the whole minibatch)."""
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
            inputs = loss_inputs(micro, algo, logp_BT, answer_mask_BT, ref_BT, shares)
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
