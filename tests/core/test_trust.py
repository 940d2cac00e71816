"""The ``trust`` method's math on literal values (``hacrl.core.trust``, ``weighted_group_advantages`` and the partner
loss's ratio floor): its trust update on hand-made validation checks, its fallback to training alone (τ 0), and its
limit at full trust (``naive``'s loss, less the answers below the floor).

One-token answers make ℓ̄_θ the token's log-prob, so s = exp(logp − old) and ds/dlogp = s.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch
from torch.testing import assert_close

from hacrl.core import (
    LossInputs,
    StepSettings,
    group_advantages,
    gspo_loss,
    partner_loss,
    weighted_group_advantages,
)
from hacrl.core.trust import TrustRule, TrustState, kept_shares, paired_check, ratio_floor, rollout_budget

KW = {"clip_low": 0.2, "clip_high": 0.28}
TRUST = StepSettings(partner_term="trust", **KW)
TRAINED = StepSettings(partner_term="trust", mean_over_trained=True, **KW)  # trust_mean=trained


# ---- the paired check and the trust update ----------------------------------------------------------------------

def test_paired_check_counts_wins_and_losses_against_the_reference():
    # reference right on 0-5, now right on 0-1 and 8-9: losses {2, 3, 4, 5} = 4, wins {8, 9} = 2
    ref = [True] * 6 + [False] * 4
    now = [True, True, False, False, False, False, False, False, True, True]
    check = paired_check(now, ref, TrustRule(z=0.0, min_drop=0.0))
    assert (check.wins, check.losses, check.n, check.accuracy) == (2, 4, 10, 0.4)
    assert check.harm  # net 2 > 0 at z 0


def test_harm_needs_both_the_z_test_and_the_minimum_drop():
    # 100 problems: 20 losses, 2 wins: net 18 ≥ 2·√22 ≈ 9.38 and 18/100 ≥ 0.02: harm
    ref = [True] * 50 + [False] * 50
    now = [False] * 20 + [True] * 30 + [True] * 2 + [False] * 48
    assert paired_check(now, ref, TrustRule()).harm
    # the same counts with min_drop 0.2: 0.18 < 0.2, no harm
    assert not paired_check(now, ref, TrustRule(min_drop=0.2)).harm
    # 6 losses, 1 win: net 5 < 2·√7 ≈ 5.29, no harm at z 2
    now2 = [False] * 6 + [True] * 44 + [True] + [False] * 49
    check = paired_check(now2, ref, TrustRule())
    assert (check.losses, check.wins, check.harm) == (6, 1, False)


def test_paired_check_refuses_slices_of_different_size():
    with pytest.raises(ValueError, match="same problems"):
        paired_check([True], [True, False], TrustRule())


def test_trust_update_on_hand_made_checks():
    # learner 0, partners 1 and 2; a slice of 10 problems; z 1, min_drop 0.1, regain 0.5
    state = TrustState(0, 3, TrustRule(floor=0.1, z=1.0, min_drop=0.1, regain=0.5))
    assert state.tau == [1.0, 1.0, 1.0] and state.floors() == [0.0, 0.1, 0.1]
    assert state.observe([True] * 5 + [False] * 5) is None  # the first check only sets the reference
    assert state.tau == [1.0, 1.0, 1.0]
    # 3 losses, 0 wins: net 3 ≥ 1·√3 ≈ 1.73 and 0.3 ≥ 0.1: harm, every partner's τ to 0, floor to 1
    check = state.observe([True] * 2 + [False] * 8)
    assert check is not None and check.harm and (check.losses, check.wins) == (3, 0)
    assert state.tau == [1.0, 0.0, 0.0] and state.floors() == [0.0, 1.0, 1.0]
    assert state.reference == (True,) * 2 + (False,) * 8  # the reference moves to the check after a cut
    # no change against it: no harm, τ + 0.5, floor 0.1^0.5
    check = state.observe([True] * 2 + [False] * 8)
    assert check is not None and not check.harm
    assert state.tau == [1.0, 0.5, 0.5]
    assert state.floors()[1] == pytest.approx(math.sqrt(0.1))
    # a better check: τ to 1 (capped) and the reference moves up to it
    state.observe([True] * 4 + [False] * 6)
    assert state.tau == [1.0, 1.0, 1.0] and sum(state.reference or ()) == 4
    # one loss and one win against it: net 0, no harm, τ stays 1; as accurate (4 right), so it is the reference now
    check = state.observe([True] * 3 + [False] * 6 + [True])
    assert check is not None and (check.losses, check.wins, check.harm) == (1, 1, False)
    assert state.tau == [1.0, 1.0, 1.0] and state.reference == (True,) * 3 + (False,) * 6 + (True,)


def test_trust_state_round_trips_through_its_state_dict():
    state = TrustState(1, 2, TrustRule(z=0.0, min_drop=0.0))
    state.observe([True, True])
    state.observe([True, False])  # harm at z 0: τ of agent 0 to 0
    other = TrustState(1, 2, TrustRule(z=0.0, min_drop=0.0))
    other.load_state_dict(state.state_dict())
    assert other.tau == state.tau == [0.0, 1.0] and other.reference == state.reference
    with pytest.raises(ValueError, match="3 agents"):
        TrustState(0, 2).load_state_dict({"tau": [1.0, 1.0, 1.0], "reference": None})


def test_the_cut_on_hand_made_ratios():
    # learner 1 of three; cut 0.5 after 3 updates. Partner 0's answers: step means 0.2, 0.6, 0.4 → r̄ 0.4 (cut);
    # partner 2's: 0.9, (no answers in update 2), 0.05 → r̄ (0.9 + 0.05) / 2 = 0.475 (cut); at 0.45 it would stay
    for cut, expect in ((0.5, [0, 2]), (0.45, [0])):
        state = TrustState(1, 3, TrustRule(z=0.0, min_drop=0.0, regain=0.25, cut=cut, cut_steps=3))
        assert state.observe_ratios({0: [0.1, 0.3], 2: [0.9]}) == []
        assert state.observe_ratios({0: [0.6], 1: [0.01], 2: []}) == []  # the learner's own ratios never count
        assert state.rbar(0) == pytest.approx(0.4) and state.rbar(2) == pytest.approx(0.9)
        assert state.observe_ratios({0: [0.4], 2: [0.05]}) == expect
        assert state.rbar(0) == pytest.approx(0.4) and state.rbar(2) == pytest.approx(0.475)
        assert state.tau == [0.0 if j in expect else 1.0 for j in range(3)]
        assert state.floors() == [1.0 if j in expect else (0.0 if j == 1 else 0.1) for j in range(3)]
        # later updates count no more, and checks without harm raise only the partners not cut
        assert state.observe_ratios({0: [5.0], 2: [5.0]}) == [] and state.rbar(0) == pytest.approx(0.4)
        state.observe([True, False])
        state.observe([True, True])
        assert state.tau == [0.0 if j in expect else 1.0 for j in range(3)]


def test_the_cut_is_off_by_default_and_a_partner_without_answers_is_not_cut():
    state = TrustState(0, 2, TrustRule(cut_steps=1))  # cut 0: nothing is counted
    assert state.observe_ratios({1: [0.0]}) == [] and state.rbar(1) is None and state.tau == [1.0, 1.0]
    state = TrustState(0, 2, TrustRule(cut=0.5, cut_steps=1))
    assert state.observe_ratios({}) == [] and state.tau == [1.0, 1.0] and state.cut_off == [False, False]
    with pytest.raises(ValueError, match="cut >= 0 and cut_steps >= 1"):
        TrustRule(cut=0.5, cut_steps=0)


def test_the_cut_state_round_trips_and_an_older_state_loads_uncut():
    rule = TrustRule(cut=0.5, cut_steps=2)
    state = TrustState(0, 2, rule)
    state.observe_ratios({1: [0.3]})
    other = TrustState(0, 2, rule)
    other.load_state_dict(state.state_dict())
    assert (other.updates, other.ratio_sum, other.ratio_updates) == (1, [0.0, 0.3], [0, 1])
    assert other.observe_ratios({1: [0.6]}) == [1] and other.tau == [1.0, 0.0]  # r̄ 0.45 < 0.5
    old = TrustState(0, 2, rule)
    old.load_state_dict({"tau": [1.0, 0.5], "reference": [True]})  # saved before the cut existed
    assert (old.tau, old.updates, old.cut_off) == ([1.0, 0.5], 0, [False, False])


def test_ratio_floor_spans_the_floor_to_one():
    assert ratio_floor(1.0, 0.1) == pytest.approx(0.1)
    assert ratio_floor(0.0, 0.1) == 1.0
    assert ratio_floor(0.5, 0.04) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="floor"):
        TrustRule(floor=1.0)


# ---- the trusted baseline ---------------------------------------------------------------------------------------

def _slow_weighted(rewards: list[float], groups: list[int], weights: list[float], eps: float = 1e-6) -> list[float]:
    out = []
    for i, g in enumerate(groups):
        members = [j for j, h in enumerate(groups) if h == g]
        w = sum(weights[j] for j in members)
        counted = [rewards[j] for j in members if weights[j] > 0]
        if w < 2 or max(counted) == min(counted):
            out.append(0.0)
            continue
        mean = sum(weights[j] * rewards[j] for j in members) / w
        var = sum(weights[j] * (rewards[j] - mean) ** 2 for j in members) / (w - 1)
        out.append((rewards[i] - mean) / (math.sqrt(var) + eps))
    return out


def test_weighted_advantages_match_a_slow_loop_reference():
    rng = random.Random(0)
    for _ in range(30):
        n = rng.randint(2, 12)
        groups = [rng.randrange(3) for _ in range(n)]
        rewards = [float(rng.random() < 0.5) if rng.random() < 0.7 else rng.random() for _ in range(n)]
        weights = [rng.choice([0.0, 0.25, 0.5, 1.0, 1.0]) for _ in range(n)]
        got = weighted_group_advantages(torch.tensor(rewards), torch.tensor(groups), torch.tensor(weights))
        assert_close(got, torch.tensor(_slow_weighted(rewards, groups, weights)), atol=1e-5, rtol=1e-5)


def test_weights_of_one_are_the_plain_group_and_zero_leaves_the_partner_out():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    assert_close(weighted_group_advantages(rewards, groups, torch.ones(6)), group_advantages(rewards, groups))
    # rows 2, 3 a partner's at weight 0: group 0's statistics are the own rows' {1, 0}: ±0.7071; the partner's
    # rows get advantages against them (0 → −0.7071, 1 → +0.7071)
    out = weighted_group_advantages(rewards, groups, torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 1.0]))
    assert_close(out, torch.tensor([0.7071, -0.7071, -0.7071, 0.7071, 0.7071, -0.7071]), atol=1e-4, rtol=0)


def test_weighted_advantages_refuse_negative_weights():
    with pytest.raises(ValueError, match=">= 0"):
        weighted_group_advantages(torch.ones(2), torch.zeros(2, dtype=torch.long), torch.tensor([1.0, -1.0]))


# ---- the loss: weight, floor, fallback and limit --------------------------------------------------------------

def _gspo_alone(logps: list[float], adv: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """GSPO on the given rows alone, the learner's own (π_old mean 0), after its backward: (loss, logp with .grad)."""
    own = torch.tensor([[x] for x in logps], dtype=torch.float64, requires_grad=True)
    alone, _ = gspo_loss(LossInputs(logp_BT=own, mask_BT=torch.ones_like(own, dtype=torch.bool),
                                    advantages_B=torch.tensor(adv, dtype=torch.float64),
                                    old_logp_mean_B=torch.zeros(len(logps), dtype=torch.float64)), StepSettings(**KW))
    alone.backward()
    return alone, own


def _rows(logps: list[float], adv: list[float], own: list[bool], tau: list[float], floor: list[float]
          ) -> tuple[LossInputs, torch.Tensor]:
    logp_BT = torch.tensor([[x] for x in logps], dtype=torch.float64, requires_grad=True)
    inputs = LossInputs(logp_BT=logp_BT, mask_BT=torch.ones_like(logp_BT, dtype=torch.bool),
                        advantages_B=torch.tensor(adv, dtype=torch.float64),
                        old_logp_mean_B=torch.zeros(len(logps), dtype=torch.float64), own_B=torch.tensor(own),
                        partner_weight_B=torch.tensor(tau, dtype=torch.float64),
                        partner_floor_B=torch.tensor(floor, dtype=torch.float64))
    return inputs, logp_BT


def test_the_floor_cuts_and_trust_scales_partner_rows_by_hand():
    # own row s = 1, A = 1; partner rows s = 0.05 (below the floor 0.1) and s = 0.5 (above), A = 1, τ = 0.5:
    # own J = min(1·1, clip(1)·1) = 1, gradient s·A = 1; partner 1: cut, 0; partner 2: τ·s·A = 0.25, gradient
    # τ·s·A = 0.25 (inside GSPO's clip for A > 0: s < 1 + ε_h). loss = −(1 + 0 + 0.25)/3
    inputs, logp_BT = _rows([0.0, math.log(0.05), math.log(0.5)], [1.0, 1.0, 1.0], [True, False, False],
                            [1.0, 0.5, 0.5], [0.0, 0.1, 0.1])
    loss, metrics = partner_loss(inputs, TRUST)
    assert float(loss.detach()) == pytest.approx(-1.25 / 3)
    loss.backward()
    assert_close(logp_BT.grad[:, 0], torch.tensor([-1 / 3, 0.0, -0.25 / 3], dtype=torch.float64))
    assert float(metrics["cross/kept_frac"]) == pytest.approx(0.5)


def test_zero_trust_is_training_alone():
    # τ 0 (floor 1): the partner rows give nothing, the own rows train exactly as GSPO on them alone, scaled by
    # their share of the minibatch (2 of 4 rows)
    logps, adv = [math.log(1.1), math.log(0.9), math.log(0.9), math.log(1.5)], [1.0, -1.0, 1.0, -1.0]
    inputs, logp_BT = _rows(logps, adv, [True, True, False, False], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0])
    loss, _ = partner_loss(inputs, TRUST)
    loss.backward()
    alone, own = _gspo_alone(logps[:2], adv[:2])
    assert float(loss.detach()) == pytest.approx(float(alone.detach()) * 2 / 4)
    assert_close(logp_BT.grad[:2, 0], own.grad[:, 0] * 2 / 4)
    assert_close(logp_BT.grad[2:, 0], torch.zeros(2, dtype=torch.float64))


def test_full_trust_is_naive_above_the_floor():
    # τ 1: every partner row above the floor trains as naive's (gspo with every row own, KL off): the same loss
    # and gradient, row by row; below the floor (s 0.05 < 0.1) it gives none
    logps = [math.log(1.1), math.log(0.3), math.log(0.8), math.log(1.3), math.log(0.05)]
    adv = [1.0, 1.0, -1.0, -1.0, 1.0]
    inputs, logp_BT = _rows(logps, adv, [True, False, False, False, False], [1.0] * 5, [0.0] + [0.1] * 4)
    loss, _ = partner_loss(inputs, TRUST)
    loss.backward()
    naive_logp = torch.tensor([[x] for x in logps], dtype=torch.float64, requires_grad=True)
    naive, _ = gspo_loss(LossInputs(logp_BT=naive_logp, mask_BT=torch.ones_like(naive_logp, dtype=torch.bool),
                                    advantages_B=torch.tensor(adv, dtype=torch.float64),
                                    old_logp_mean_B=torch.zeros(5, dtype=torch.float64)), StepSettings(**KW))
    naive.backward()
    assert_close(logp_BT.grad[:4, 0], naive_logp.grad[:4, 0])
    assert float(logp_BT.grad[4, 0]) == 0.0 and float(naive_logp.grad[4, 0]) != 0.0


def test_the_trained_mean_divides_by_the_rows_that_train_by_hand():
    # the rows of the first hand test, with trust_mean=trained: the own row weighs 1, the cut partner row 0, the kept
    # one its τ 0.5, so the mean is over 1.5 rows: loss −1.25/1.5, gradients −1/1.5, 0, −0.25/1.5
    inputs, logp_BT = _rows([0.0, math.log(0.05), math.log(0.5)], [1.0, 1.0, 1.0], [True, False, False],
                            [1.0, 0.5, 0.5], [0.0, 0.1, 0.1])
    loss, _ = partner_loss(inputs, TRAINED)
    assert float(loss.detach()) == pytest.approx(-1.25 / 1.5)
    loss.backward()
    assert_close(logp_BT.grad[:, 0], torch.tensor([-1 / 1.5, 0.0, -0.25 / 1.5], dtype=torch.float64))


def test_zero_trust_with_the_trained_mean_is_gspo_on_the_own_rows_exactly():
    logps, adv = [math.log(1.1), math.log(0.9), math.log(0.9), math.log(1.5)], [1.0, -1.0, 1.0, -1.0]
    inputs, logp_BT = _rows(logps, adv, [True, True, False, False], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0])
    loss, _ = partner_loss(inputs, TRAINED)
    loss.backward()
    alone, own = _gspo_alone(logps[:2], adv[:2])
    assert float(loss.detach()) == pytest.approx(float(alone.detach()))  # not scaled by the own share 2/4
    assert_close(logp_BT.grad[:2, 0], own.grad[:, 0])


def test_the_trained_mean_is_the_plain_mean_when_every_row_trains_at_full_trust():
    logps, adv = [math.log(1.1), math.log(0.3), math.log(0.8)], [1.0, 1.0, -1.0]
    inputs, _ = _rows(logps, adv, [True, False, False], [1.0] * 3, [0.0, 0.1, 0.1])
    plain, _ = partner_loss(inputs, TRUST)
    trained, _ = partner_loss(inputs, TRAINED)
    assert float(trained) == pytest.approx(float(plain))


# ---- the rollout budget (algorithm.trust_budget) -------------------------------------------------------------------
def _worst(usable, counts):
    n = len(counts)
    return min(sum((1.0 if k == j else usable[k][j]) * counts[j] for j in range(n)) for k in range(n))


def test_rollout_budget_by_hand():
    # learner 0 values agent 1's answers at 0.5, learner 1 values none of 0's; G 4, each keeps at least 2.
    # From (2, 2): U = (3, 2). Agent 1 writes the 3rd (U 3.5, 3), 4th (4, 4) and 5th (4.5, 5) answers; the last
    # leaves 5 either way (agent 0: U 5.5, 5; agent 1: 5, 6), so the agent with fewer answers, 0, writes it
    assert rollout_budget([[1, 0.5], [0.0, 1]], 4) == [3, 5]
    # three agents: the first takes nothing from the others, who take everything: it writes all but the floors
    assert rollout_budget([[1, 0, 0], [1, 1, 1], [1, 1, 1]], 4) == [8, 2, 2]
    assert rollout_budget([[1, 1, 1]] * 3, 4) == [4, 4, 4]  # full trust everywhere: the pooled split
    assert rollout_budget([[1, 0.3], [0.3, 1]], 8) == [8, 8]  # a symmetric pair: the pooled split
    with pytest.raises(ValueError, match="min_share"):
        rollout_budget([[1, 1], [1, 1]], 8, min_share=0.0)


def test_rollout_budget_is_the_best_split_for_two_agents():
    # the slow reference: every split of the 2G answers with both at or above the floor
    rng = random.Random(0)
    for _ in range(400):
        g, share = rng.choice([2, 3, 4, 8, 16]), rng.choice([0.125, 0.25, 0.5, 1.0])
        usable = [[1.0, rng.choice([0.0, 0.25, 1.0, rng.random()])], [rng.choice([0.0, 0.5, 1.0, rng.random()]), 1.0]]
        counts = rollout_budget(usable, g, share)
        floor = max(1, math.ceil(share * g))
        assert sum(counts) == 2 * g and min(counts) >= floor
        best = max(_worst(usable, (a, 2 * g - a)) for a in range(floor, 2 * g - floor + 1))
        assert _worst(usable, counts) == pytest.approx(best)


def test_rollout_budget_is_never_worse_than_the_pooled_split():
    rng = random.Random(1)
    for _ in range(300):
        n, g = rng.choice([3, 4]), rng.choice([2, 4, 8])
        usable = [[1.0 if k == j else rng.choice([0.0, 0.5, 1.0, rng.random()]) for j in range(n)] for k in range(n)]
        counts = rollout_budget(usable, g)
        assert sum(counts) == n * g and min(counts) >= math.ceil(g / 2)
        assert _worst(usable, counts) >= _worst(usable, [g] * n) - 1e-9
        # and no single answer moved from one agent to another would help the worst off
        for a, b in itertools.permutations(range(n), 2):
            if counts[a] > math.ceil(g / 2):
                moved = list(counts)
                moved[a], moved[b] = moved[a] - 1, moved[b] + 1
                assert _worst(usable, moved) <= _worst(usable, counts) + 1e-9


def test_kept_shares_count_the_answers_at_or_above_their_sources_floor():
    assert kept_shares({1: [0.05, 0.1, 0.5, 2.0], 2: [0.2, 0.3]}, [0.0, 0.1, 0.31]) == {1: 0.75, 2: 0.0}
    assert kept_shares({1: []}, [0.0, 0.1]) == {}  # no answers: no share
