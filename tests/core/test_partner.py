"""The partner loss's ingredients (``hacrl.core.partner``) on literal rows, hand-computed, and the whole loss
against a slow loop-based reference.

One-token answers make ℓ̄_θ the token's log-prob, so s = exp(logp − old) and ds/dlogp = s.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from hacrl.core import (
    NEGATIVE_FILTERS,
    PARTNER_TERMS,
    POLICY_LOSSES,
    LossInputs,
    StepSettings,
    gate_weight,
    partner_loss,
)
from hacrl.core.partner import (
    clipped_term,
    drop_negatives,
    keep_all,
    kl_veto,
    shaping_term,
    truncated_is_term,
)

KW = {"clip_low": 0.2, "clip_high": 0.28, "is_cap": 2.0, "shaping_gamma": 0.1}


def one_token(logps: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    logp_BT = torch.tensor([[x] for x in logps], dtype=torch.float64, requires_grad=True)
    return logp_BT, torch.ones_like(logp_BT, dtype=torch.bool)


# ---- partner terms ------------------------------------------------------------------------------------------

def test_truncated_is_value_and_gradient_by_hand():
    # s = [0.5, 3.0] (logp = log s, old 0), A = [1, −1], C = 2:
    # value: min(0.5, 2)·1 = 0.5; min(3, 2)·(−1) = −2
    # gradient dJ/dlogp = min(s, C)·A (the score function of the detached weight): [0.5, −2]
    logp_BT, mask_BT = one_token([math.log(0.5), math.log(3.0)])
    s_B = torch.exp(logp_BT[:, 0])
    adv_B = torch.tensor([1.0, -1.0], dtype=torch.float64)
    j_B = truncated_is_term(s_B=s_B, adv_B=adv_B, logp_BT=logp_BT, mask_BT=mask_BT, **KW)
    assert_close(j_B.detach(), torch.tensor([0.5, -2.0], dtype=torch.float64))
    j_B.sum().backward()
    assert_close(logp_BT.grad[:, 0], torch.tensor([0.5, -2.0], dtype=torch.float64))


def test_truncated_is_below_the_cap_is_the_plain_ratio():
    # s = 1.5 < C = 2, A = 2: J = 1.5·2 = 3, dJ/dlogp = s·A = 3 (as s·A would give)
    logp_BT, mask_BT = one_token([math.log(1.5)])
    j_B = truncated_is_term(s_B=torch.exp(logp_BT[:, 0]), adv_B=torch.tensor([2.0], dtype=torch.float64),
                            logp_BT=logp_BT, mask_BT=mask_BT, **KW)
    j_B.sum().backward()
    assert float(j_B.detach()) == pytest.approx(3.0)
    assert float(logp_BT.grad[0, 0]) == pytest.approx(3.0)


def test_shaping_value_and_gradient_by_hand():
    # one row of two tokens, π = 0.1 and 0.9, γ = 0.1, A = 2:
    # f = 0.1/0.2 = 0.5 and 0.9/1.0 = 0.9, token mean 0.7, J = 1.4
    # dJ/dlogp_t = (1/2)·γπ/(π + γ)²·A: 0.5·0.01/0.04·2 = 0.25; 0.5·0.09/1.0·2 = 0.09
    logp_BT = torch.log(torch.tensor([[0.1, 0.9, 0.5]], dtype=torch.float64)).requires_grad_()
    mask_BT = torch.tensor([[True, True, False]])  # the third token is padding
    j_B = shaping_term(s_B=torch.ones(1, dtype=torch.float64), adv_B=torch.tensor([2.0], dtype=torch.float64),
                       logp_BT=logp_BT, mask_BT=mask_BT, **KW)
    assert float(j_B.detach()) == pytest.approx(1.4)
    j_B.sum().backward()
    assert_close(logp_BT.grad[0], torch.tensor([0.25, 0.09, 0.0], dtype=torch.float64))


def test_shaping_ignores_the_ratio():
    # no π_old: the same tokens with any s give the same J
    logp_BT, mask_BT = one_token([math.log(0.3)])
    adv_B = torch.tensor([1.0], dtype=torch.float64)
    a = shaping_term(s_B=torch.tensor([0.1], dtype=torch.float64), adv_B=adv_B, logp_BT=logp_BT, mask_BT=mask_BT, **KW)
    b = shaping_term(s_B=torch.tensor([9.0], dtype=torch.float64), adv_B=adv_B, logp_BT=logp_BT, mask_BT=mask_BT, **KW)
    assert float(a.detach()) == float(b.detach()) == pytest.approx(0.3 / 0.4)


def test_clipped_term_is_gspos_pessimistic_clip():
    # ε = 0.2 / 0.28. s = 1.5, A = 1: min(1.5, 1.28) = 1.28; s = 0.5, A = −1: min(−0.5, −0.8) = −0.8;
    # s = 0.9, A = 1: 0.9 (inside)
    s_B = torch.tensor([1.5, 0.5, 0.9])
    j_B = clipped_term(s_B=s_B, adv_B=torch.tensor([1.0, -1.0, 1.0]), logp_BT=torch.zeros(3, 1),
                       mask_BT=torch.ones(3, 1), **KW)
    assert_close(j_B, torch.tensor([1.28, -0.8, 0.9]))


# ---- negative filters -------------------------------------------------------------------------------------

def test_negative_filters_by_hand():
    # A = [1, −1, −1, 0], log s = [−0.5, −0.05, −0.5, −3]
    # keep: all; drop: A ≥ 0 → [T, F, F, T];
    # veto τ = 0.1: positives kept; −log s = 0.05 ≤ 0.1 kept; 0.5 > 0.1 dropped; A = 0 kept → [T, T, F, T]
    adv_B = torch.tensor([1.0, -1.0, -1.0, 0.0])
    log_ratio_B = torch.tensor([-0.5, -0.05, -0.5, -3.0])
    assert keep_all(adv_B=adv_B, log_ratio_B=log_ratio_B, veto_kl=0.1).tolist() == [True] * 4
    assert drop_negatives(adv_B=adv_B, log_ratio_B=log_ratio_B, veto_kl=0.1).tolist() == [True, False, False, True]
    assert kl_veto(adv_B=adv_B, log_ratio_B=log_ratio_B, veto_kl=0.1).tolist() == [True, True, False, True]


def test_the_veto_keeps_a_negative_the_learner_finds_more_likely():
    # log s = +2 (the learner likes the answer more than its author): −log s = −2 ≤ τ, kept
    assert kl_veto(adv_B=torch.tensor([-1.0]), log_ratio_B=torch.tensor([2.0]), veto_kl=0.1).tolist() == [True]


# ---- the gate -----------------------------------------------------------------------------------------------

def test_gate_weight_by_hand():
    # s = exp(learner − author) = [0.5, 0.85, 2.0, 0.8], threshold 0.8:
    # 0.5 → 0; 0.85 → min(0.85, 1) = 0.85; 2 → min(2, 1) = 1; exactly 0.8 → not > 0.8 → 0
    author_B = torch.tensor([-1.0, -1.0, -1.0, -1.0], dtype=torch.float64)
    learner_B = author_B + torch.log(torch.tensor([0.5, 0.85, 2.0, 0.8], dtype=torch.float64))
    w_B = gate_weight(learner_logp_mean_B=learner_B, author_logp_mean_B=author_B, threshold=0.8)
    assert_close(w_B, torch.tensor([0.0, 0.85, 1.0, 0.0]))


def test_the_gate_is_strict_at_its_threshold():
    # s = exp(0) = 1 exactly; threshold 1: 1[1 > 1] = 0 (a gate of ≥ would pass it with weight 1)
    zero = torch.zeros(1)
    assert gate_weight(learner_logp_mean_B=zero, author_logp_mean_B=zero, threshold=1.0).tolist() == [0.0]
    assert gate_weight(learner_logp_mean_B=zero, author_logp_mean_B=zero, threshold=0.999).tolist() == [1.0]


# ---- the whole loss by hand ---------------------------------------------------------------------------------

def rows_4() -> LossInputs:
    """Two own rows (s = 1.1, 0.95) and two partner rows (s = 0.5, 3.0), one token each; A = [1, −1, −1, 1]."""
    logp_BT = torch.log(torch.tensor([[1.1], [0.95], [0.5], [3.0]], dtype=torch.float64)).requires_grad_()
    return LossInputs(logp_BT=logp_BT, mask_BT=torch.ones(4, 1, dtype=torch.bool),
                      advantages_B=torch.tensor([1.0, -1.0, -1.0, 1.0]), old_logp_mean_B=torch.zeros(4),
                      own_B=torch.tensor([True, True, False, False]))


def test_partner_loss_truncated_is_with_the_veto_by_hand():
    # own (ε 0.2/0.28): s = 1.1, A = 1 → min(1.1, 1.1) = 1.1; s = 0.95, A = −1 → min(−0.95, −0.95) = −0.95
    # partner: s = 0.5, A = −1: −log s = 0.693 > τ 0.1 → vetoed, 0; s = 3, A = 1 → min(3, 2)·1 = 2
    # loss = −(1.1 − 0.95 + 0 + 2)/4 = −0.5375
    inputs = rows_4()
    loss, metrics = partner_loss(inputs, StepSettings(clip_low=0.2, clip_high=0.28, partner_term="truncated_is",
                                 negatives="veto", is_cap=2.0, veto_kl=0.1))
    assert float(loss.detach()) == pytest.approx(-0.5375)
    assert float(metrics["cross/kept_frac"]) == pytest.approx(0.5)
    loss.backward()
    # d/dlogp: own −s·A/4 = −0.275, +0.2375; vetoed 0; truncated −min(3, 2)·1/4 = −0.5
    assert_close(inputs.logp_BT.grad[:, 0], torch.tensor([-0.275, 0.2375, 0.0, -0.5], dtype=torch.float64))


def test_truncated_is_still_trains_where_the_log_ratio_is_clamped():
    # one partner row, one token: ℓ̄_θ = 12, author mean 0, A = 1. log s = 12 is clamped at max_log_ratio 10, so s
    # = e^10 and a gradient through s would be 0; F-TIS's weight is min(e^10, C 2) = 2: loss −2·1/1 = −2 and
    # d loss/dlogp = −2 (docs/methods.md: "above the cap the answer still trains, at weight C")
    logp_BT = torch.tensor([[12.0]], dtype=torch.float64, requires_grad=True)
    inputs = LossInputs(logp_BT=logp_BT, mask_BT=torch.ones(1, 1, dtype=torch.bool), advantages_B=torch.tensor([1.0]),
                        old_logp_mean_B=torch.zeros(1), own_B=torch.tensor([False]))
    loss, _ = partner_loss(inputs, StepSettings(clip_low=0.2, clip_high=0.28, partner_term="truncated_is",
                                                is_cap=2.0, max_log_ratio=10.0))
    assert float(loss.detach()) == pytest.approx(-2.0)
    loss.backward()
    assert float(logp_BT.grad[0, 0]) == pytest.approx(-2.0)


def test_partner_loss_keep_trains_the_negative():
    # as above with negatives=keep: the s = 0.5, A = −1 row adds min(0.5, 2)·(−1) = −0.5
    # loss = −(1.1 − 0.95 − 0.5 + 2)/4 = −0.4125
    loss, _ = partner_loss(rows_4(), StepSettings(clip_low=0.2, clip_high=0.28, partner_term="truncated_is",
                                                  negatives="keep"))
    assert float(loss.detach()) == pytest.approx(-0.4125)


def test_partner_loss_gate_weights_the_partner_rows_only():
    # gate: GSPO's clip on the partner rows, times the fixed weight g = [9, 9, 0.5, 0] (own rows ignore it)
    # partner: s = 0.5, A = −1 → min(−0.5, −0.8) = −0.8, × 0.5 = −0.4; s = 3, A = 1 → 1.28 × 0 = 0
    # loss = −(1.1 − 0.95 − 0.4 + 0)/4 = 0.0625
    inputs = rows_4()
    gated = LossInputs(**{**inputs.__dict__, "partner_weight_B": torch.tensor([9.0, 9.0, 0.5, 0.0])})
    loss, metrics = partner_loss(gated, StepSettings(clip_low=0.2, clip_high=0.28, partner_term="gate"))
    assert float(loss.detach()) == pytest.approx(0.0625)
    assert float(metrics["cross/gate_mean"]) == pytest.approx(0.25)


def test_the_partner_loss_is_registered_and_checks_its_names():
    assert POLICY_LOSSES.get("partner") is partner_loss
    assert sorted(PARTNER_TERMS) == ["gate", "ratio", "shaping", "truncated_is", "trust"]
    assert sorted(NEGATIVE_FILTERS) == ["drop", "keep", "veto"]
    with pytest.raises(KeyError, match="unknown partner term 'tis'"):
        partner_loss(rows_4(), StepSettings(clip_low=0.2, clip_high=0.28, partner_term="tis"))
    with pytest.raises(ValueError, match="old_logp_mean_B and own_B"):
        partner_loss(LossInputs(logp_BT=torch.zeros(1, 1), mask_BT=torch.ones(1, 1), advantages_B=torch.zeros(1)),
                     StepSettings(clip_low=0.2, clip_high=0.28))


# ---- the slow reference -------------------------------------------------------------------------------------

def reference_partner_loss(logp, mask, adv, old, own, g, *, term, negatives, clip_low, clip_high, cap, gamma, tau):
    """Row by row, token by token, in Python floats."""
    total = 0.0
    B = len(logp)
    for i in range(B):
        toks = [logp[i][t] for t in range(len(logp[i])) if mask[i][t]]
        if not toks:
            continue
        mean = sum(toks) / len(toks)
        log_s = max(-10.0, min(10.0, mean - old[i]))
        s = math.exp(log_s)
        if own[i] or term in ("ratio", "gate"):
            clipped = min(max(s, 1 - clip_low), 1 + clip_high)
            j = min(s * adv[i], clipped * adv[i])
        elif term == "truncated_is":
            j = min(s, cap) * adv[i]
        else:  # shaping
            j = sum(math.exp(x) / (math.exp(x) + gamma) for x in toks) / len(toks) * adv[i]
        if not own[i]:
            dropped = adv[i] < 0 and (negatives == "drop" or (negatives == "veto" and -log_s > tau))
            j = 0.0 if dropped else g[i] * j
        total += j
    return -total / B


@pytest.mark.parametrize("term", ["ratio", "gate", "truncated_is", "shaping"])
@pytest.mark.parametrize("negatives", ["keep", "drop", "veto"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_partner_loss_matches_the_slow_reference(term, negatives, seed):
    gen = torch.Generator().manual_seed(seed)
    B, T = 7, 5
    logp = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 3
    mask = torch.rand(B, T, generator=gen) > 0.3
    mask[-1] = False  # an empty row counts in B and contributes 0
    adv = torch.randn(B, generator=gen, dtype=torch.float64)
    old = -torch.rand(B, generator=gen, dtype=torch.float64) * 3
    own = torch.rand(B, generator=gen) > 0.5
    g = torch.rand(B, generator=gen, dtype=torch.float64)
    settings = {"clip_low": 0.2, "clip_high": 0.28}
    inputs = LossInputs(logp_BT=logp, mask_BT=mask, advantages_B=adv, old_logp_mean_B=old, own_B=own,
                        partner_weight_B=g)
    loss, _ = partner_loss(inputs, StepSettings(**settings, partner_term=term, negatives=negatives, is_cap=1.5,
                           shaping_gamma=0.1, veto_kl=0.5))
    expected = reference_partner_loss(logp.tolist(), mask.tolist(), adv.tolist(), old.tolist(), own.tolist(),
                                      g.tolist(), term=term, negatives=negatives, cap=1.5, gamma=0.1, tau=0.5,
                                      **settings)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_partner_loss_is_split_invariant():
    # two micro-batches weighted by their share of rows give the full batch's loss and gradient
    gen = torch.Generator().manual_seed(3)
    logp = (-torch.rand(6, 4, generator=gen, dtype=torch.float64)).requires_grad_()
    mask = torch.ones(6, 4, dtype=torch.bool)
    adv = torch.randn(6, generator=gen, dtype=torch.float64)
    old = -torch.rand(6, generator=gen, dtype=torch.float64)
    own = torch.tensor([True, False, True, False, False, True])

    def loss_of(sl):
        inp = LossInputs(logp_BT=logp[sl], mask_BT=mask[sl], advantages_B=adv[sl], old_logp_mean_B=old[sl],
                         own_B=own[sl])
        return partner_loss(inp, StepSettings(clip_low=0.2, clip_high=0.28, partner_term="truncated_is",
                                              negatives="drop"))[0]

    full = loss_of(slice(0, 6))
    (g_full,) = torch.autograd.grad(full, logp)
    split = loss_of(slice(0, 2)) * 2 / 6 + loss_of(slice(2, 6)) * 4 / 6
    (g_split,) = torch.autograd.grad(split, logp)
    assert float(split.detach()) == pytest.approx(float(full.detach()))
    assert_close(g_split, g_full)
