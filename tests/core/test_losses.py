"""Hand-computed checks of hacpo_loss, gspo_loss, grpo_loss, aggregate, kl_k3, stepwise_lower_bound.

Construction used throughout: every sequence has L = 2 answer tokens, old_logp_mean = 0 and every token
log-prob = log s, so the sequence mean log-prob is log s and the sequence ratio is exactly s. With B
sequences, loss = −(1/B) Σ_i J_i and, since ∂s/∂logp_t = s/L, ∂loss/∂logp_t = −(1/B)·(∂J/∂s)·s/2.
"""

import inspect
import math

import pytest
import torch
from torch.testing import assert_close

from hacrl.core import (
    OWN_METRICS,
    POLICY_LOSSES,
    LossInputs,
    StepSettings,
    aggregate,
    grpo_loss,
    gspo_loss,
    hacpo_loss,
    kl_k3,
    sequence_log_ratio,
    stepwise_lower_bound,
)

T = torch.tensor
L = 2


def seqs(ratios, length=L):
    """logp [B, length] with every token = log s_i (a leaf that requires grad), mask of ones, old = 0."""
    logp = torch.log(T(ratios, dtype=torch.float32))[:, None].repeat(1, length).requires_grad_(True)
    return logp, torch.ones_like(logp), torch.zeros(len(ratios))


def hacpo(logp, mask, old, adv, own, omega, ref_logp=None, **kw):
    kw = {"clip_low": 0.2, "clip_high": 0.28, "alpha": 1.0, "cross_lower": 0.8} | kw
    adv, omega = T(adv, dtype=torch.float32), T(omega, dtype=torch.float32)
    return hacpo_loss(LossInputs(logp, mask, adv, old_logp_mean_B=old, own_B=T(own), omega_B=omega,
                                 ref_logp_BT=ref_logp), StepSettings(**kw))


def gspo(logp, mask, old, adv, ref_logp=None, **kw):
    kw = {"clip_low": 0.2, "clip_high": 0.28} | kw
    return gspo_loss(LossInputs(logp, mask, adv, old_logp_mean_B=old, ref_logp_BT=ref_logp), StepSettings(**kw))


def grpo(logp, mask, old_tok, adv, ref_logp=None, **kw):
    kw = {"clip_low": 0.2, "clip_high": 0.28} | kw
    return grpo_loss(LossInputs(logp, mask, adv, old_logp_BT=old_tok, ref_logp_BT=ref_logp), StepSettings(**kw))


def grad_of(loss, logp):
    (g,) = torch.autograd.grad(loss, logp)
    return g


# ---- own answers: GSPO's pessimistic clip, ε_low = 0.2, ε_high = 0.28 → window [0.8, 1.28] -------

OWN_CASES = [  # (s, A, loss = −min(sA, clip(s)A), ∂loss/∂logp_t = −(∂J/∂s)·s/2, clipped?)
    (1.1, 2.0, -2.2, -1.1, False),    # inside: J = 1.1·2; grad −2·1.1/2
    (1.27, 2.0, -2.54, -1.27, False),  # just inside the top edge
    (1.5, 2.0, -2.56, 0.0, True),     # above, A>0: min(3.0, 1.28·2 = 2.56) = 2.56 → clip binds, no grad
    (1.5, -2.0, 3.0, 1.5, False),     # above, A<0: min(−3.0, −2.56) = −3.0 → unclipped; grad 2·1.5/2
    (0.81, -2.0, 1.62, 0.81, False),  # just inside the bottom edge, A<0
    (0.5, 2.0, -1.0, -0.5, False),    # below, A>0: min(1.0, 0.8·2 = 1.6) = 1.0 → unclipped; grad −2·0.5/2
    (0.5, -2.0, 1.6, 0.0, True),      # below, A<0: min(−1.0, −1.6) = −1.6 → clip binds, no grad
]


@pytest.mark.parametrize("s, adv, loss_expected, grad_expected, clipped", OWN_CASES)
def test_own_term_hacpo(s, adv, loss_expected, grad_expected, clipped):
    logp, mask, old = seqs([s])
    # ω is ignored for own answers: pass 7 to show it does not enter
    loss, metrics = hacpo(logp, mask, old, [adv], [True], [7.0])
    assert loss.item() == pytest.approx(loss_expected, rel=1e-5)
    assert_close(grad_of(loss, logp), torch.full((1, L), grad_expected), atol=1e-6, rtol=1e-5)
    assert metrics["self/clip_frac"].item() == float(clipped)


@pytest.mark.parametrize("s, adv, loss_expected, grad_expected, clipped", OWN_CASES)
def test_own_term_gspo(s, adv, loss_expected, grad_expected, clipped):
    logp, mask, old = seqs([s])
    loss, metrics = gspo(logp, mask, old, T([adv]), clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(loss_expected, rel=1e-5)
    assert_close(grad_of(loss, logp), torch.full((1, L), grad_expected), atol=1e-6, rtol=1e-5)
    assert metrics["self/clip_frac"].item() == float(clipped)


# ---- cross answers: clip(s, ℓ, 1) · sg(clip)^α · ω · A, no min() -------------------------------

CROSS_CASES = [  # (s, A, α, ω, loss = −c^(1+α)·ω·A, ∂loss/∂logp_t = −c^α·ω·A·(s/2) if ℓ ≤ s ≤ 1 else 0)
    (0.9, 2.0, 1.0, 1.5, -2.43, -1.215),   # in [0.8, 1]: 0.9²·1.5·2 = 2.43; grad 0.9·3·0.45 = 1.215
    (0.5, 2.0, 1.0, 1.5, -1.92, 0.0),      # s < ℓ: c = 0.8: 0.64·3 = 1.92, no grad (discarded)
    (1.2, 2.0, 1.0, 1.5, -3.0, 0.0),       # s > 1: c = 1: 1·3 = 3, no grad (never up-weighted)
    (0.9, 2.0, 0.0, 1.5, -2.7, -1.35),     # α = 0: 0.9·3 = 2.7; grad 3·0.45 = 1.35
    (0.9, 2.0, 2.0, 1.5, -2.187, -1.0935),  # α = 2: 0.729·3 = 2.187; grad 0.81·3·0.45 = 1.0935
    (0.9, -2.0, 1.0, 1.5, 2.43, 1.215),    # A < 0 mirrors A > 0 (no pessimistic min)
    (0.5, -2.0, 1.0, 1.5, 1.92, 0.0),      # s < ℓ with A < 0: still no grad (own would have one)
    (0.9, 2.0, 1.0, 1.0, -1.62, -0.81),    # ω = 1: 0.81·2 = 1.62; grad 0.9·2·0.45 = 0.81
    (0.9, 2.0, 1.0, 3.0, -4.86, -2.43),    # ω = 3: 3× the ω = 1 row
]


@pytest.mark.parametrize("s, adv, alpha, omega, loss_expected, grad_expected", CROSS_CASES)
def test_cross_term(s, adv, alpha, omega, loss_expected, grad_expected):
    logp, mask, old = seqs([s])
    loss, _ = hacpo(logp, mask, old, [adv], [False], [omega], alpha=alpha, cross_lower=0.8)
    assert loss.item() == pytest.approx(loss_expected, rel=1e-5)
    assert_close(grad_of(loss, logp), torch.full((1, L), grad_expected), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("s, loss_expected, grad_expected", [
    (0.5, -0.75, -0.375),  # no clip: 0.5²·1.5·2 = 0.75; grad 0.5·3·(0.5/2) = 0.375
    (1.2, -4.32, -2.16),   # no clip: 1.2²·3 = 4.32; grad 1.2·3·(1.2/2) = 2.16
])
def test_cross_clip_off(s, loss_expected, grad_expected):
    logp, mask, old = seqs([s])
    loss, _ = hacpo(logp, mask, old, [2.0], [False], [1.5], alpha=1.0, cross_lower=0.8, cross_clip=False)
    assert loss.item() == pytest.approx(loss_expected, rel=1e-5)
    assert_close(grad_of(loss, logp), torch.full((1, L), grad_expected), atol=1e-6, rtol=1e-5)


def test_own_rows_ignore_omega_even_if_not_finite():
    # ω is "ignored for own answers": NaN or inf there must not leak into the value or the gradient.
    # own s = 1.1, A = 2 → J = 2.2; cross s = 0.9, ω = 1.5 → J = 2.43; loss = −(2.2 + 2.43)/2 = −2.315
    for bad in (float("nan"), float("inf")):
        logp, mask, old = seqs([1.1, 0.9])
        loss, _ = hacpo(logp, mask, old, [2.0, 2.0], [True, False], [bad, 1.5])
        assert loss.item() == pytest.approx(-2.315, rel=1e-5)
        assert_close(grad_of(loss, logp), T([[-0.55, -0.55], [-0.6075, -0.6075]]), rtol=1e-5, atol=1e-6)


def test_cross_lower_above_one_raises():
    logp, mask, old = seqs([1.0])
    with pytest.raises(ValueError, match="cross_lower"):
        hacpo(logp, mask, old, [1.0], [False], [1.0], cross_lower=1.05)


def test_mixed_batch_own_and_cross_and_metrics():
    # rows: own s=1.1 A=2 (J = 2.2); cross s=0.9 (J = 2.43); cross s=0.5 (c=0.8, J = 1.92);
    #       cross s=1.2 (c=1, J = 3.0)   — α = 1, ω = 1.5, ℓ = 0.8
    # loss = −(2.2 + 2.43 + 1.92 + 3.0)/4 = −9.55/4 = −2.3875
    # grads: own −1.1/4 = −0.275, cross in window −1.215/4 = −0.30375, clipped cross rows 0
    logp, mask, old = seqs([1.1, 0.9, 0.5, 1.2])
    loss, m = hacpo(logp, mask, old, [2.0] * 4, [True, False, False, False], [1.5] * 4)
    assert loss.item() == pytest.approx(-2.3875, rel=1e-5)
    expected = T([[-0.275] * 2, [-0.30375] * 2, [0.0] * 2, [0.0] * 2])
    assert_close(grad_of(loss, logp), expected, atol=1e-6, rtol=1e-5)
    assert m["pg_loss"].item() == pytest.approx(-2.3875, rel=1e-5)
    assert m["self/ratio_mean"].item() == pytest.approx(1.1, rel=1e-5)
    assert m["cross/ratio_mean"].item() == pytest.approx((0.9 + 0.5 + 1.2) / 3, rel=1e-5)
    assert m["cross/clip_low_frac"].item() == pytest.approx(1 / 3)
    assert m["cross/clip_high_frac"].item() == pytest.approx(1 / 3)
    assert m["cross/in_window_frac"].item() == pytest.approx(1 / 3)
    assert (m["count/own"].item(), m["count/cross"].item(), m["count/empty"].item()) == (1, 3, 0)


def test_max_log_ratio_clamps_before_exp():
    # mean log-prob 20, old 0 → log s clamped to 10, s = e^10 = 22026.466; own A = −1:
    # J = min(−e^10, −1.28) = −e^10 → loss = e^10; the clamp binds, so no gradient flows
    logp = torch.full((1, 2), 20.0, requires_grad=True)
    loss, _ = gspo(logp, torch.ones(1, 2), T([0.0]), T([-1.0]), clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(math.exp(10.0), rel=1e-5)
    assert torch.equal(grad_of(loss, logp), torch.zeros(1, 2))


# ---- stepwise lower bound ℓ_m = min(1, 1 − δ + m·δ_step) -----------------------------------------

@pytest.mark.parametrize("m, expected", [
    (0, 0.8),     # 1 − 0.2
    (1, 0.825),   # 1 − 0.2 + 0.025
    (3, 0.875),   # 1 − 0.2 + 3·0.025
    (8, 1.0),     # 0.8 + 0.2 = 1.0
    (100, 1.0),   # 0.8 + 2.5 = 3.3 → capped at 1
])
def test_stepwise_lower_bound(m, expected):
    assert stepwise_lower_bound(m, delta=0.2, delta_step=0.025) == pytest.approx(expected, rel=1e-12)


def test_stepwise_lower_bound_fixed_without_step():
    assert [stepwise_lower_bound(m, delta=0.2, delta_step=0.0) for m in (0, 1, 5)] == pytest.approx([0.8] * 3)
    assert stepwise_lower_bound(2, delta=0.0, delta_step=0.025) == 1.0  # δ = 0: ℓ = 1 from the start


@pytest.mark.parametrize("m, delta, step", [(0, -0.1, 0.0), (0, 1.1, 0.0), (-1, 0.2, 0.025), (0, 0.2, -0.01)])
def test_stepwise_lower_bound_rejects_bad_arguments(m, delta, step):
    with pytest.raises(ValueError):
        stepwise_lower_bound(m, delta=delta, delta_step=step)


# ---- KL (k3) -----------------------------------------------------------------------------------

def test_kl_k3_hand_value():
    # d = log π_ref − log π = log 0.25 − log 0.5 = log 0.5 = −0.6931472
    # k3 = e^d − d − 1 = 0.5 + 0.6931472 − 1 = 0.1931472; equal inputs give 0
    k = kl_k3(torch.log(T([[0.5, 0.3]])), torch.log(T([[0.25, 0.3]])))
    assert_close(k, T([[0.1931472, 0.0]]))


def test_kl_applies_to_own_answers_only():
    # two rows, both with logp = log 0.5 on 2 tokens and ref = log 0.25, old mean = log 0.5 (s = 1),
    # A = 0, so the policy term is 0. Row 0 own, row 1 cross.
    # penalty = β · k3 · (#own)/B = 0.1 · 0.1931472 · 1/2 = 0.00965736
    # ∂/∂logp_t (own) = β/B · (1/L) · (1 − e^d) = 0.1/2 · 1/2 · 0.5 = 0.0125; cross row: 0
    logp = torch.full((2, 2), math.log(0.5), requires_grad=True)
    ref = torch.full((2, 2), math.log(0.25))
    loss, m = hacpo(logp, torch.ones(2, 2), torch.full((2,), math.log(0.5)), [0.0, 0.0], [True, False],
                    [1.0, 1.0], ref_logp=ref, kl_coef=0.1)
    assert loss.item() == pytest.approx(0.00965736, rel=1e-5)
    assert m["kl"].item() == pytest.approx(0.1931472, rel=1e-5)
    assert_close(grad_of(loss, logp), T([[0.0125, 0.0125], [0.0, 0.0]]), atol=1e-7, rtol=1e-5)


def test_kl_off_without_coef_or_reference():
    logp = torch.full((1, 2), math.log(0.5), requires_grad=True)
    ref = torch.full((1, 2), math.log(0.25))
    for kw in ({"ref_logp": ref, "kl_coef": 0.0}, {"ref_logp": None, "kl_coef": 0.1}):
        loss, _ = gspo(logp, torch.ones(1, 2), T([math.log(0.5)]), T([0.0]),
                            clip_low=0.2, clip_high=0.28, **kw)
        assert loss.item() == 0.0


def test_kl_in_gspo_and_grpo_covers_every_sequence():
    # same inputs as above, both rows count: penalty = 0.1 · 0.1931472 · 2/2 = 0.01931472
    logp = torch.full((2, 2), math.log(0.5), requires_grad=True)
    ref = torch.full((2, 2), math.log(0.25))
    g, _ = gspo(logp, torch.ones(2, 2), torch.full((2,), math.log(0.5)), T([0.0, 0.0]),
                     clip_low=0.2, clip_high=0.28, ref_logp=ref, kl_coef=0.1)
    r, _ = grpo(logp, torch.ones(2, 2), logp.detach().clone(), T([0.0, 0.0]), ref_logp=ref, kl_coef=0.1)
    assert g.item() == pytest.approx(0.01931472, rel=1e-5)
    assert r.item() == pytest.approx(0.01931472, rel=1e-5)


# ---- GRPO: token-level ratio ---------------------------------------------------------------------

def test_grpo_token_ratio_versus_gspo_sequence_ratio():
    # one sequence, tokens r = [1.1, 1.5], A = 2, old = 0, clip [0.8, 1.28]
    # GRPO: token J = [min(2.2, 2.2), min(3.0, 2.56)] = [2.2, 2.56] → mean 2.38, loss −2.38
    #       grads: token 0: −(1/2)·2·1.1 = −1.1; token 1 clipped → 0
    # GSPO: s = exp((log 1.1 + log 1.5)/2) = √1.65 = 1.2845233 > 1.28 → J = 2.56, loss −2.56, grad 0
    logp = torch.log(T([[1.1, 1.5]])).requires_grad_(True)
    mask = torch.ones(1, 2)
    loss, _ = grpo(logp, mask, torch.zeros(1, 2), T([2.0]), clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-2.38, rel=1e-5)
    assert_close(grad_of(loss, logp), T([[-1.1, 0.0]]), atol=1e-6, rtol=1e-5)
    gloss, _ = gspo(logp, mask, T([0.0]), T([2.0]), clip_low=0.2, clip_high=0.28)
    assert gloss.item() == pytest.approx(-2.56, rel=1e-5)
    assert torch.equal(grad_of(gloss, logp), torch.zeros(1, 2))


def test_grpo_is_seq_mean_token_mean():
    # seq 0: tokens r = [1.1, 1.5], A = 2 → mean J = 2.38 (above)
    # seq 1: one token r = 0.9 (second position masked out), A = −1 → J = min(−0.9, −0.9) = −0.9
    # loss = −(2.38 − 0.9)/2 = −0.74   (token-mean would give −(2.2 + 2.56 − 0.9)/3 = −1.2867)
    # grads: seq 0 token 0: −(1/2)(1/2)·2·1.1 = −0.55; token 1 clipped → 0
    #        seq 1 token 0: −(1/2)·(−1)·0.9 = 0.45; masked token → 0
    logp = torch.log(T([[1.1, 1.5], [0.9, 3.0]])).requires_grad_(True)
    mask = T([[1.0, 1.0], [1.0, 0.0]])
    loss, m = grpo(logp, mask, torch.zeros(2, 2), T([2.0, -1.0]), clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-0.74, rel=1e-5)
    assert_close(grad_of(loss, logp), T([[-0.55, 0.0], [0.45, 0.0]]), atol=1e-6, rtol=1e-5)
    # metrics over the 3 real tokens: ratio mean (1.1 + 1.5 + 0.9)/3, one token clipped of 3
    assert m["self/ratio_mean"].item() == pytest.approx(3.5 / 3, rel=1e-5)
    assert m["self/clip_frac"].item() == pytest.approx(1 / 3, rel=1e-6)


# ---- aggregate -----------------------------------------------------------------------------------

def test_aggregate_seq_mean_token_mean():
    # x = [[1, 2, 3], [4, 5, 6]], mask = [[1, 1, 0], [1, 0, 0]]
    # seq-mean-token-mean: ((1+2)/2 + 4/1)/2 = (1.5 + 4)/2 = 2.75   (a token mean would give 7/3)
    x = T([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = T([[1, 1, 0], [1, 0, 0]])
    assert aggregate(x, mask, mode="seq-mean-token-mean").item() == pytest.approx(2.75)


def test_aggregate_empty_row_counts_as_zero():
    # seq-mean-token-mean over [[1, 2], [5, 6]] with the second row masked out: (1.5 + 0)/2 = 0.75
    x = T([[1.0, 2.0], [5.0, 6.0]])
    mask = T([[1.0, 1.0], [0.0, 0.0]])
    assert aggregate(x, mask, mode="seq-mean-token-mean").item() == pytest.approx(0.75)


@pytest.mark.parametrize("mode", ["sum", "token-mean"])
def test_aggregate_unknown_mode_raises(mode):
    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        aggregate(torch.ones(1, 1), torch.ones(1, 1), mode=mode)


# ---- empty answers, dtypes, metrics --------------------------------------------------------------

def all_losses(logp, mask, old_mean, adv, **kw):
    """The three losses on one batch: hacpo with an own and a cross row pattern, gspo, grpo."""
    B = logp.shape[0]
    own = [i % 2 == 0 for i in range(B)]
    h = hacpo(logp, mask, old_mean, adv.tolist(), own, [1.5] * B, **kw)
    g = gspo(logp, mask, old_mean, adv, **kw)
    r = grpo(logp, mask, logp.detach() - 0.05, adv, **kw)
    return {"hacpo": h, "gspo": g, "grpo": r}


def test_empty_mask_rows_give_finite_loss_and_zero_grad():
    # row 0: s = 1.1 own, A = 2 → J = 2.2 (hacpo and gspo); rows 1 and 2 have no answer tokens (and a
    # wild old mean of −50, which the ±10 clamp keeps finite). loss = −2.2/3 for hacpo and gspo.
    logp = torch.log(T([[1.1, 1.1], [0.3, 0.2], [0.7, 0.9]])).requires_grad_(True)
    mask = T([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    old = T([0.0, -50.0, -50.0])
    ref = logp.detach() - 0.3
    out = all_losses(logp, mask, old, T([2.0, 2.0, -1.0]), ref_logp=ref, kl_coef=0.1)
    for name, (loss, m) in out.items():
        g = grad_of(loss, logp)
        assert torch.isfinite(loss) and torch.isfinite(g).all(), name
        assert torch.equal(g[1:], torch.zeros(2, 2)), name
        assert m["count/empty"].item() == 2, name
        assert all(torch.isfinite(v).all() for v in m.values()), name
    logp0, mask0, old0 = logp[:1].detach(), mask[:1], old[:1]
    loss_pg, _ = gspo(logp0, mask0, old0, T([2.0]), clip_low=0.2, clip_high=0.28)
    assert loss_pg.item() == pytest.approx(-2.2, rel=1e-5)
    loss3, _ = gspo(logp.detach(), mask, old, T([2.0, 2.0, -1.0]), clip_low=0.2, clip_high=0.28)
    assert loss3.item() == pytest.approx(-2.2 / 3, rel=1e-5)  # empty rows count in the mean as 0


def test_all_empty_and_zero_length_answers_are_finite():
    for T_len in (0, 3):  # T = 0: zero-length answers; T = 3 with an all-zero mask
        logp = torch.zeros(2, T_len, requires_grad=True)
        mask = torch.zeros(2, T_len)
        for name, (loss, m) in all_losses(logp, mask, T([0.3, -0.2]), T([1.0, -1.0]),
                                          ref_logp=torch.zeros(2, T_len), kl_coef=0.1).items():
            g = grad_of(loss, logp)
            assert loss.item() == 0.0, name
            assert g.shape == (2, T_len) and torch.isfinite(g).all(), name
            assert all(torch.isfinite(v).all() for v in m.values()), name


def test_bfloat16_logp_matches_float32():
    gen = torch.Generator().manual_seed(0)
    B, T_len = 6, 5
    logp32 = -torch.rand(B, T_len, generator=gen) * 2
    mask = (torch.rand(B, T_len, generator=gen) > 0.3).float()
    mask[:, 0] = 1
    old = (logp32 * mask).sum(-1) / mask.sum(-1) + 0.1 * torch.randn(B, generator=gen)
    adv = torch.randn(B, generator=gen)
    ref = logp32 - 0.2
    logp16 = logp32.to(torch.bfloat16).requires_grad_(True)
    logp32 = logp32.clone().requires_grad_(True)
    out32 = all_losses(logp32, mask, old, adv, ref_logp=ref, kl_coef=0.1)
    out16 = all_losses(logp16, mask, old, adv, ref_logp=ref, kl_coef=0.1)
    for name in out32:
        l32, l16 = out32[name][0], out16[name][0]
        assert l16.dtype == torch.float32, name  # computed in float32
        g16 = grad_of(l16, logp16)
        assert g16.dtype == torch.bfloat16, name
        # bf16 keeps 8 bits of mantissa: logp (|·| ≤ 2) is rounded by up to ~4e-3
        assert_close(l16, l32, atol=2e-2, rtol=2e-2)
        assert_close(g16.float(), grad_of(l32, logp32), atol=2e-2, rtol=2e-2)


def test_metrics_are_detached_tensors():
    gen = torch.Generator().manual_seed(1)
    logp = (-torch.rand(4, 3, generator=gen)).requires_grad_(True)
    out = all_losses(logp, torch.ones(4, 3), T([-0.5, -0.4, -0.6, -0.5]), T([1.0, -1.0, 0.5, 0.0]),
                     ref_logp=logp.detach() - 0.1, kl_coef=0.1)
    for name, (loss, metrics) in out.items():
        assert loss.requires_grad and loss.dim() == 0, name
        assert {"pg_loss", "kl", "self/ratio_mean", "self/clip_frac"} <= metrics.keys(), name
        for key, v in metrics.items():
            assert isinstance(v, torch.Tensor), (name, key)
            assert not v.requires_grad and v.grad_fn is None, (name, key)


@pytest.mark.parametrize("bad, message", [
    ("mask", r"logp and mask must be \[B, T\] of one shape, got \(3, 2\) and \(3, 3\)"),
    ("adv", r"advantages_B must be \[3\], got \(2,\)"),  # B = 3 (not T = 2) named
    ("empty_batch", "empty minibatch: logp has no sequences"),
    ("ref", r"ref_logp_BT must match logp's shape \(3, 2\), got \(3, 3\)"),
    ("own", r"own_B must be \[3\], got \(3, 1\)"),
    ("omega", r"omega_B must be \[3\], got \(4,\)"),
    ("old_mean", r"old_logp_mean_B must be \[3\], got \(3, 2\)"),
    ("old_tok", r"old_logp_BT must match logp's shape \(3, 2\), got \(3,\)"),
    ("own_share", r"own_share must be a share in \[0, 1\], got 1.5"),
    ("imitate_share", r"imitate_share must be a share in \[0, 1\], got -0.25"),
])
def test_loss_input_shape_errors(bad, message):
    good = {"logp_BT": torch.zeros(3, 2), "mask_BT": torch.ones(3, 2), "advantages_B": torch.zeros(3),
            "old_logp_mean_B": torch.zeros(3), "own_B": torch.ones(3, dtype=torch.bool), "omega_B": torch.ones(3),
            "old_logp_BT": torch.zeros(3, 2), "ref_logp_BT": torch.zeros(3, 2)}
    wrong = {"mask": {"mask_BT": torch.ones(3, 3)}, "adv": {"advantages_B": torch.zeros(2)},
             "empty_batch": {k: v[:0] for k, v in good.items()}, "ref": {"ref_logp_BT": torch.zeros(3, 3)},
             "own": {"own_B": torch.ones(3, 1)}, "omega": {"omega_B": torch.ones(4)},
             "old_mean": {"old_logp_mean_B": torch.zeros(3, 2)}, "old_tok": {"old_logp_BT": torch.zeros(3)},
             "own_share": {"own_share": 1.5}, "imitate_share": {"imitate_share": -0.25}}[bad]
    LossInputs(**good)
    with pytest.raises(ValueError, match=f"^{message}$"):
        LossInputs(**(good | wrong))


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_a_share_of_none_or_all_of_the_rows_is_accepted(share):
    # a micro-batch whose minibatch has no own rows (share 0) or only own rows (share 1)
    x = LossInputs(torch.zeros(2, 1), torch.ones(2, 1), torch.zeros(2), own_share=share, imitate_share=share)
    assert (x.own_share, x.imitate_share) == (share, share)


def test_each_loss_names_the_input_it_lacks():
    inputs = LossInputs(torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2))
    for loss_fn, needed in ((hacpo_loss, "old_logp_mean_B"), (gspo_loss, "old_logp_mean_B"),
                            (grpo_loss, "old_logp_BT")):
        with pytest.raises(ValueError, match=needed):
            loss_fn(inputs, StepSettings(clip_low=0.2, clip_high=0.28))


# ---- one signature behind the registry ---------------------------------------------------------------

def test_every_registered_loss_has_one_signature():
    signatures = {name: inspect.signature(POLICY_LOSSES.get(name)) for name in POLICY_LOSSES}
    assert set(signatures) == {"hacpo", "gspo", "grpo", "imitation", "partner"}
    assert len({str(sig) for sig in signatures.values()}) == 1, signatures


def test_gspo_is_hacpo_with_every_row_own():
    # the same rows, half of them marked cross with ω = 3: gspo ignores both marks, so it equals hacpo with
    # every row own, value and gradient; and it reports only the own-answer metrics
    gen = torch.Generator().manual_seed(3)
    logp = (-torch.rand(6, 4, generator=gen)).requires_grad_(True)
    mask, old, adv = torch.ones(6, 4), -torch.rand(6, generator=gen), torch.randn(6, generator=gen)
    ref = logp.detach() - 0.1
    kw = {"ref_logp": ref, "kl_coef": 0.1, "cross_lower": 0.9}
    g, gm = gspo(logp, mask, old, adv, **kw)
    gspo_grad = grad_of(g, logp)
    marked = LossInputs(logp, mask, adv, old_logp_mean_B=old, own_B=T([True, False] * 3),
                        omega_B=torch.full((6,), 3.0), ref_logp_BT=ref)
    g2, _ = gspo_loss(marked, StepSettings(clip_low=0.2, clip_high=0.28, kl_coef=0.1, cross_lower=0.9))
    h, hm = hacpo(logp, mask, old, adv.tolist(), [True] * 6, [3.0] * 6, **kw)
    assert torch.equal(g, h) and torch.equal(g2, h)
    assert torch.equal(gspo_grad, grad_of(h, logp))
    assert tuple(gm) == OWN_METRICS
    assert all(torch.equal(gm[k], hm[k]) for k in OWN_METRICS)


# ---- found by mutation testing (docs/mutation.md) ------------------------------------------------

def test_kl_k3_clamps_the_log_ratio_at_plus_minus_20():
    # d = log π_ref − log π = ±25 is clamped to ±20 before exp: k3 = e^20 − 20 − 1 and e^−20 + 20 − 1
    k = kl_k3(T([[0.0, -25.0]], dtype=torch.float64), T([[-25.0, 0.0]], dtype=torch.float64))
    assert k[0].tolist() == pytest.approx([math.exp(-20.0) + 19.0, math.exp(20.0) - 21.0], rel=1e-6)


def test_sequence_log_ratio_default_clamp_is_ten():
    # one token, log π = 0 against an old mean of −10.5: log s = 10.5, clamped to the default 10
    log_ratio, nonempty = sequence_log_ratio(torch.zeros(1, 1), torch.ones(1, 1), T([-10.5]))
    assert log_ratio.tolist() == [10.0] and nonempty.tolist() == [True]


def test_stepwise_bound_edges_and_messages():
    assert stepwise_lower_bound(0, delta=1.0, delta_step=0.0) == 0.0  # δ = 1: the widest window, [0, 1]
    for (m, delta, step), message in [((0, 1.1, 0.0), r"delta must lie in \[0, 1\], got 1.1"),
                                      ((-1, 0.2, 0.025), r"minibatch_index must be >= 0, got -1"),
                                      ((0, 0.2, -0.01), r"delta_step must be >= 0, got -0.01")]:
        with pytest.raises(ValueError, match=message):
            stepwise_lower_bound(m, delta=delta, delta_step=step)


def test_the_loss_stays_float32_under_a_float64_default_dtype():
    # "each loss computes in float32 whatever the input dtype": the weight of 1 without a rollout correction
    # must not promote it to torch's default dtype
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        x = LossInputs(logp_BT=torch.zeros(2, 1, dtype=torch.float32), mask_BT=torch.ones(2, 1),
                       advantages_B=torch.tensor([1.0, -1.0], dtype=torch.float32),
                       old_logp_mean_B=torch.zeros(2, dtype=torch.float32))
        loss, _ = hacpo_loss(x, StepSettings(clip_low=0.2, clip_high=0.28))
    finally:
        torch.set_default_dtype(previous)
    assert loss.dtype == torch.float32


@pytest.mark.parametrize("loss_fn", [hacpo_loss, gspo_loss])
def test_float64_logprobs_without_a_kl_term_give_a_float32_loss(loss_fn):
    # the KL term's zero (no reference) must be float32 too, or it promotes the loss to the log-probs' dtype
    x = LossInputs(logp_BT=torch.zeros(2, 1, dtype=torch.float64), mask_BT=torch.ones(2, 1),
                   advantages_B=T([1.0, -1.0]), old_logp_mean_B=torch.zeros(2, dtype=torch.float64))
    loss, metrics = loss_fn(x, StepSettings(clip_low=0.2, clip_high=0.28))
    assert loss.dtype == torch.float32 and metrics["kl"].dtype == torch.float32
