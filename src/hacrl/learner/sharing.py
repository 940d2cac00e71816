"""Which of the partners' answers a learner trains on, and the advantage each row gets: the row-level
ingredients of docs/methods.md (``share_prompts``, ``partner_answers``, ``advantage``), each a registry.

A prompt gate looks at one prompt and one partner (source) at a time: the learner's own rewards on the prompt
and that partner's. "Failed" and "solved" use the trainer's accuracy threshold, ``CORRECT_REWARD`` (a full
reward): the learner failed a prompt when it has answers there and none reaches it; a prompt where the learner
has no answer (the asynchronous mode) never counts as failed. An answer selection then picks, among the gated
partners' answers to one prompt (in the pool's order), those the learner trains on; the rest leave its view.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

from hacrl.core import group_advantages, hacpo_advantages, weighted_group_advantages
from hacrl.registry import Registry

CORRECT_REWARD = 1.0  # a verified-correct answer has the task's full reward (as the trainer's accuracy counts)


class Row(Protocol):
    """What the selection reads of a ``ViewRow``."""

    prompt_index: int
    source: int
    is_own: bool
    reward: float
    truncated: bool


PromptGate = Callable[[list[float], list[float]], bool]
AnswerSelection = Callable[[list[Row]], list[Row]]
PROMPT_GATES: Registry[PromptGate] = Registry("share_prompts")
ANSWER_SELECTIONS: Registry[AnswerSelection] = Registry("partner_answers")


def _failed(own: list[float]) -> bool:
    return bool(own) and all(r < CORRECT_REWARD for r in own)


def _solved(partner: list[float]) -> bool:
    return any(r >= CORRECT_REWARD for r in partner)


def _mixed(partner: list[float]) -> bool:
    return _solved(partner) and any(r < CORRECT_REWARD for r in partner)


def correct(row: Row) -> bool:
    """A verified-correct answer, whole in the learner's tokens (a cut one is not the text that was verified)."""
    return row.reward >= CORRECT_REWARD and not row.truncated


for _name, _gate in (
    ("all", lambda own, partner: True),
    ("learner_failed", lambda own, partner: _failed(own)),
    ("learner_failed_partner_solved", lambda own, partner: _failed(own) and _solved(partner)),
    ("learner_failed_partner_mixed", lambda own, partner: _failed(own) and _mixed(partner)),
):
    PROMPT_GATES.add(_name, _gate)
for _name, _select in (
    ("group", lambda rows: rows),
    ("correct", lambda rows: [r for r in rows if correct(r)]),
    ("one_correct", lambda rows: [r for r in rows if correct(r)][:1]),  # the first in the pool's order
):
    ANSWER_SELECTIONS.add(_name, _select)


def select_partner_rows(rows: list, share_prompts: str, partner_answers: str) -> list:
    """``rows`` without the partner rows that ``share_prompts`` (per prompt and partner) and ``partner_answers``
    (per prompt, over the gated partners' rows) leave out; the learner's own rows all stay, the order is kept.
    The defaults (all, group) return ``rows`` itself."""
    gate, select = PROMPT_GATES.get(share_prompts), ANSWER_SELECTIONS.get(partner_answers)
    if share_prompts == "all" and partner_answers == "group":
        return rows
    own: dict[int, list[float]] = defaultdict(list)
    partner: dict[tuple[int, int], list[float]] = defaultdict(list)
    for r in rows:
        (own[r.prompt_index] if r.is_own else partner[r.prompt_index, r.source]).append(r.reward)
    gated: dict[int, list] = defaultdict(list)
    for r in rows:
        if not r.is_own and gate(own[r.prompt_index], partner[r.prompt_index, r.source]):
            gated[r.prompt_index].append(r)
    kept = {id(r) for group in gated.values() for r in select(group)}
    return [r for r in rows if r.is_own or id(r) in kept]


class AdvantageFn(Protocol):
    def __call__(self, rewards_B: Tensor, groups_B: Tensor, sources_B: Tensor, *, learner: int, omega_N: Tensor,
                 capability_aware: bool, source_weight_N: Tensor | None = None) -> Tensor: ...


ADVANTAGES: Registry[AdvantageFn] = Registry("advantage")


def _hacpo(rewards_B: Tensor, groups_B: Tensor, sources_B: Tensor, *, learner: int, omega_N: Tensor,
           capability_aware: bool, source_weight_N: Tensor | None = None) -> Tensor:
    """HACPO's capability-aware advantage over the joint group (eqs. 6-7)."""
    return hacpo_advantages(rewards_B, groups_B, sources_B, learner=learner, omega=omega_N,
                            capability_aware=capability_aware)


def _hacpo_capped(rewards_B: Tensor, groups_B: Tensor, sources_B: Tensor, *, learner: int, omega_N: Tensor,
                  capability_aware: bool, source_weight_N: Tensor | None = None) -> Tensor:
    """HACPO's advantage with ω ≤ 1 in the baseline: a learner discounts a stronger partner's successes as HACPO
    does, but counts a weaker partner's once, as the plain joint mean, never ω > 1 times (this project's variant:
    HACPO's ω > 1 raises a stronger learner's baseline and lowers the advantage of its own right answers)."""
    return hacpo_advantages(rewards_B, groups_B, sources_B, learner=learner, omega=omega_N.clamp(max=1.0),
                            capability_aware=capability_aware)


def _group(rewards_B: Tensor, groups_B: Tensor, sources_B: Tensor, *, learner: int, omega_N: Tensor,
           capability_aware: bool, source_weight_N: Tensor | None = None) -> Tensor:
    """The plain mean/std advantage of the joint group (every row the learner sees of the prompt)."""
    return group_advantages(rewards_B, groups_B)


def _group_mean(rewards_B: Tensor, groups_B: Tensor, sources_B: Tensor, *, learner: int, omega_N: Tensor,
                capability_aware: bool, source_weight_N: Tensor | None = None) -> Tensor:
    """The joint group's R − mean, no std (LUFFY's released script, ``grpo_use_std=False``)."""
    return group_advantages(rewards_B, groups_B, normalize_std=False)


def _own(rewards_B: Tensor, groups_B: Tensor, sources_B: Tensor, *, learner: int, omega_N: Tensor,
         capability_aware: bool, source_weight_N: Tensor | None = None) -> Tensor:
    """GSPO's group advantage over the learner's own answers; 0 on the others'."""
    own_B = sources_B == learner
    adv_B = torch.zeros(len(rewards_B))
    adv_B[own_B] = group_advantages(rewards_B[own_B], groups_B[own_B])
    return adv_B


def _partner(rewards_B: Tensor, groups_B: Tensor, sources_B: Tensor, *, learner: int, omega_N: Tensor,
             capability_aware: bool, source_weight_N: Tensor | None = None) -> Tensor:
    """Each answer's advantage in its author's own group (prompt × source; GRAFT: the partner's own advantages),
    the learner's own answers in the learner's group."""
    n_sources = int(sources_B.max()) + 1 if sources_B.numel() else 1
    return group_advantages(rewards_B, groups_B * n_sources + sources_B)


def _trusted_group(rewards_B: Tensor, groups_B: Tensor, sources_B: Tensor, *, learner: int, omega_N: Tensor,
                   capability_aware: bool, source_weight_N: Tensor | None = None) -> Tensor:
    """The joint group's mean/std with each partner's answers weighted by the learner's trust in that partner
    (``source_weight_N``, the ``trust`` method's τ; the learner's own answers weigh 1): τ 1 everywhere is
    ``group``, τ 0 the learner's own group's (``hacrl.core.weighted_group_advantages``)."""
    weight_N = source_weight_N.float().clone() if source_weight_N is not None else torch.ones(int(omega_N.shape[0]))
    weight_N[learner] = 1.0
    return weighted_group_advantages(rewards_B, groups_B, weight_N[sources_B])


for _name, _fn in (("hacpo", _hacpo), ("hacpo_capped", _hacpo_capped), ("group", _group),
                   ("group_mean", _group_mean), ("own", _own), ("partner", _partner), ("trust", _trusted_group)):
    ADVANTAGES.add(_name, _fn)
