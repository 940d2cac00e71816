"""The staleness correction reads each own row's version gap from the row itself (``ViewRow.version_gap``, from
``Trajectory.version_gap`` set by ``PoolTake.trajectory_pool``), not from a list aligned with the pool's order.
Hand-computed: w = min(exp(mean log π_prox − mean log π_behav), C), C = 1.5 (``truncate``)."""

from __future__ import annotations

import math

import pytest

from hacrl.learner.algorithms import ALGORITHMS
from hacrl.learner.row_weights import correct_stale_rows
from hacrl.learner.view import ViewRow, build_view
from hacrl.pool import PooledAnswer, PoolTake
from hacrl.types import Problem, Trajectory

# π_prox token log-probs (the learner's pass now) of each stale row, by its answer tokens
PROX = {(11, 12): (-0.5, -0.7), (21, 22): (-0.2, -0.2)}


def _rows() -> list[ViewRow]:
    # in an order no pool position predicts: a cross row, a fresh own row, gap 2, a cross row, gap 1
    return [
        ViewRow(0, 1, False, [1], [5], -2.0, None, 1.0),
        ViewRow(0, 0, True, [1], [31, 32], -0.9, (-0.8, -1.0), 0.0),                  # C: gap 0
        ViewRow(1, 0, True, [2], [21, 22], -1.0, (-1.0, -1.0), 1.0, version_gap=2),    # B: gap 2
        ViewRow(1, 1, False, [2], [6], -3.0, None, 0.0),
        ViewRow(2, 0, True, [3], [11, 12], -1.0, (-1.2, -0.8), 1.0, version_gap=1),    # A: gap 1
    ]


def test_the_rows_version_gaps_give_the_hand_computed_weights():
    rows = _rows()
    asked: list[list[int]] = []

    def prox(stale: list[ViewRow]) -> list[tuple[float, ...]]:
        asked.append([r.answer_ids[0] for r in stale])
        return [PROX[tuple(r.answer_ids)] for r in stale]

    m = correct_stale_rows(rows, prox, mode="truncate", cap=1.5, max_log_ratio=10.0, engine_behaviour=False)
    assert asked == [[21, 11]]  # π_prox of the stale own rows only (gap > 0), in row order
    cross1, fresh, b, cross2, a = rows
    # A: mean π_prox = −0.6, π_behav = −1.0: w = exp(0.4) = 1.4918247 (under C)
    assert a.rollout_weight == pytest.approx(math.exp(0.4)) and a.old_logp_mean == pytest.approx(-0.6)
    assert a.old_token_logps == (-0.5, -0.7) and a.behav_logp_mean is None
    # B: mean π_prox = −0.2: w = exp(0.8) = 2.2255 → truncated at C = 1.5
    assert b.rollout_weight == 1.5 and b.old_logp_mean == pytest.approx(-0.2)
    # the fresh own row and the cross rows are left as they were
    assert (fresh.rollout_weight, fresh.old_logp_mean, fresh.old_token_logps) == (1.0, -0.9, (-0.8, -1.0))
    assert [(r.rollout_weight, r.old_logp_mean) for r in (cross1, cross2)] == [(1.0, -2.0), (1.0, -3.0)]
    # over the 3 own rows: 2 stale, gaps (0, 2, 1)
    assert m["staleness_is/stale_frac"] == pytest.approx(2 / 3)
    assert m["staleness_is/version_gap_mean"] == pytest.approx(1.0) and m["staleness_is/version_gap_max"] == 2
    # the weights before the cut, and as applied
    assert m["staleness_is/weight_mean"] == pytest.approx((math.exp(0.4) + math.exp(0.8)) / 2)
    assert m["staleness_is/applied_mean"] == pytest.approx((math.exp(0.4) + 1.5) / 2)


def test_without_stale_rows_nothing_is_recomputed():
    rows = [r for r in _rows() if r.version_gap == 0]
    m = correct_stale_rows(rows, lambda stale: pytest.fail("no π_prox needed"), mode="truncate", cap=1.5,
                           max_log_ratio=10.0, engine_behaviour=False)
    assert m["staleness_is/stale_frac"] == 0.0 and all(r.rollout_weight == 1.0 for r in rows)


class _Learner:
    """Just enough of an ``Agent`` for ``build_view``: index 0, one token per prompt, answers by length."""

    index = 0

    def render_prompt(self, prompt: str) -> list[int]:
        return [len(prompt)]

    def encode_answer(self, text: str, finished: bool) -> tuple[list[int], bool]:
        return [len(text)], False


def test_the_gap_travels_from_the_take_to_the_learners_row():
    # learner 0 at version 3 takes its answers written by versions 1 and 3 and agent 1's (version 0)
    problems = {7: Problem("p7", "7+7=", "14")}

    def answer(uid: int, author: int, version: int) -> PooledAnswer:
        return PooledAnswer(uid, 7, author, version, Trajectory(7, author, "x" * (uid + 1), True, -1.0, 1, 1.0,
                                                               token_ids=(uid,), token_logps=(-1.0,)))

    take = PoolTake(0, 3, (answer(0, 0, 1), answer(1, 0, 3), answer(2, 1, 0)), (2, 0, 3), (), {}, problems)
    pool = take.trajectory_pool()
    assert [t.version_gap for t in pool.trajectories] == [2, 0, 0]  # own: 3 − 1, 3 − 3; the other's: 0
    rows = build_view(_Learner(), pool, ALGORITHMS.get("hacpo"), {0: "7+7="})
    assert [(r.is_own, r.answer_ids, r.version_gap) for r in rows] == [(True, [0], 2), (True, [1], 0),
                                                                       (False, [3], 0)]
