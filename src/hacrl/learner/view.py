"""One learner's view of the pool (``build_view``): its rows (``ViewRow``), their advantages and ω
(``assign_advantages``), the trust method's weights (``apply_trust``), and the minibatches they train in.

Minibatches hold whole prompt groups (a prompt's own and cross answers together), taken in a seeded
random prompt order, so every optimizer step mixes own and other agents' answers in the pool's
proportion.

A verified-correct answer (the imitation baseline's targets) is one whose reward reaches ``CORRECT_REWARD`` = 1,
a task's full reward, the same threshold as the trainer's accuracy: with partial-credit rewards in [0, 1] only
full-credit answers count.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

from hacrl.agents.agent import Agent
from hacrl.learner.algorithms import Algorithm
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
