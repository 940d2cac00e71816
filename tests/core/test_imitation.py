"""Hand-computed checks of imitation_loss: GSPO on own answers + λ · NLL of imitated cross answers.

Construction as in test_losses.py: every sequence has L = 2 answer tokens, every token log-prob = log p_i
and old_logp_mean = 0, so an own row's sequence ratio is exactly s_i = p_i and any row's token-mean NLL is
−log p_i. With n_own own rows and n_imit imitated ones,
    loss = −(1/n_own) Σ_own J_i + λ·(1/n_imit) Σ_imit (−log p_i),
    ∂loss/∂logp_t = −(1/n_own)·(∂J/∂s)·s/L on own rows,  −λ/(n_imit·L) on imitated rows,  0 elsewhere.
"""

import math

import pytest
import torch
from torch.testing import assert_close

from hacrl.core import POLICY_LOSSES, LossInputs, StepSettings, gspo_loss, imitation_loss, sequence_nll

T = torch.tensor
L = 2
CLIP = {"clip_low": 0.2, "clip_high": 0.28}  # own window [0.8, 1.28]


def seqs(probs):
    """logp [B, L] with every token = log p_i (a leaf that requires grad), mask of ones, old mean 0."""
    logp = torch.log(T(probs, dtype=torch.float32))[:, None].repeat(1, L).requires_grad_(True)
    return logp, torch.ones_like(logp), torch.zeros(len(probs))


def grad_of(loss, logp):
    (g,) = torch.autograd.grad(loss, logp)
    return g


def four_rows(**kw):
    """2 own + 2 cross rows, the first cross row imitated (verified correct), the second not.

    own 0: s = 1.1, A = 2  → inside the window, J = 2.2, ∂J/∂s = 2
    own 1: s = 0.9, A = −2 → inside, J = −1.8, ∂J/∂s = −2
    cross 2: p = 0.5, imitated: NLL = −log 0.5 = 0.6931472
    cross 3: p = 0.25, not imitated (a wrong answer): nothing
    The cross rows' advantages (5, −5) and ω (3) are there to show they do not enter.
    """
    logp, mask, old = seqs([1.1, 0.9, 0.5, 0.25])
    inputs = LossInputs(logp, mask, T([2.0, -2.0, 5.0, -5.0]), old_logp_mean_B=old,
                        own_B=T([True, True, False, False]), omega_B=T([1.0, 1.0, 3.0, 3.0]),
                        imitate_B=T([False, False, True, False]), **kw)
    return logp, inputs


def test_two_own_two_cross_one_correct_by_hand():
    # GSPO_own = −(2.2 − 1.8)/2 = −0.2;  NLL_cross = 0.6931472 / 1;  λ = 0.5
    # loss = −0.2 + 0.5 · 0.6931472 = 0.1465736
    # grads: own 0: −(1/2)·2·1.1/2 = −0.55; own 1: −(1/2)·(−2)·0.9/2 = 0.45;
    #        imitated: −0.5/(1·2) = −0.25; the wrong cross answer: 0
    logp, inputs = four_rows()
    loss, m = imitation_loss(inputs, StepSettings(**CLIP, imitation_coef=0.5))
    assert loss.item() == pytest.approx(0.1465736, rel=1e-5)
    expected = T([[-0.55] * 2, [0.45] * 2, [-0.25] * 2, [0.0] * 2])
    assert_close(grad_of(loss, logp), expected, rtol=1e-5, atol=1e-6)
    assert m["pg_loss"].item() == pytest.approx(-0.2, rel=1e-5)
    assert m["imitation/nll"].item() == pytest.approx(math.log(2), rel=1e-5)
    assert m["cross/imitated_frac"].item() == 0.5  # one of the two cross answers
    assert m["self/ratio_mean"].item() == pytest.approx(1.0, rel=1e-5)  # (1.1 + 0.9)/2
    counts = tuple(m[k].item() for k in ("count/own", "count/cross", "count/imitated", "count/empty"))
    assert counts == (2, 2, 1, 0)
    for v in m.values():
        assert not v.requires_grad


def test_two_imitated_rows_average_their_nll():
    # both cross rows imitated: NLL_cross = (−log 0.5 − log 0.25)/2 = (0.6931472 + 1.3862944)/2 = 1.0397208
    # loss = −0.2 + 1 · 1.0397208 = 0.8397208; each imitated token's grad −1/(2·2) = −0.25
    logp, inputs = four_rows()
    inputs = LossInputs(**{**inputs.__dict__, "imitate_B": T([False, False, True, True])})
    loss, m = imitation_loss(inputs, StepSettings(**CLIP, imitation_coef=1.0))
    assert loss.item() == pytest.approx(0.8397208, rel=1e-5)
    assert_close(grad_of(loss, logp)[2:], torch.full((2, L), -0.25), rtol=1e-5, atol=1e-6)
    assert m["count/imitated"].item() == 2


def test_minibatch_shares_set_the_denominators():
    # the same 4 rows as a micro-batch of an 8-row minibatch with 4 own and 1 imitated row:
    # n_own = 0.5·4 = 2, n_imit = 0.125·4 = 0.5 → loss = −0.4/2 + 0.5 · 0.6931472/0.5 = 0.4931472
    logp, inputs = four_rows(own_share=0.5, imitate_share=0.125)
    loss, _ = imitation_loss(inputs, StepSettings(**CLIP, imitation_coef=0.5))
    assert loss.item() == pytest.approx(0.4931472, rel=1e-5)


def test_nothing_to_imitate_is_gspo_on_own_rows():
    # no imitated rows (a minibatch where no other agent was right): the NLL term is 0, not NaN
    logp, inputs = four_rows()
    inputs = LossInputs(**{**inputs.__dict__, "imitate_B": T([False] * 4)})
    loss, m = imitation_loss(inputs, StepSettings(**CLIP, imitation_coef=2.0))
    assert loss.item() == pytest.approx(-0.2, rel=1e-5)
    assert m["imitation/nll"].item() == 0.0 and m["count/imitated"].item() == 0


def test_own_rows_are_never_imitated():
    # imitate_B marking an own row too changes nothing: own answers train through GSPO only
    logp, inputs = four_rows()
    marked = LossInputs(**{**inputs.__dict__, "imitate_B": T([True, False, True, False])})
    a, _ = imitation_loss(inputs, StepSettings(**CLIP, imitation_coef=0.5))
    b, _ = imitation_loss(marked, StepSettings(**CLIP, imitation_coef=0.5))
    assert torch.equal(a, b)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lambda_zero_is_gspo_on_the_own_answers_alone(seed):
    # value and gradient, with the KL term on and empty answers among the rows
    gen = torch.Generator().manual_seed(seed)
    B, T_len = 8, 5
    logp = (-torch.rand(B, T_len, generator=gen) * 2).requires_grad_(True)
    mask = (torch.rand(B, T_len, generator=gen) > 0.3).float()
    mask[3] = 0.0  # an empty own answer (counts in the mean as 0, as in gspo)
    old = (logp.detach() * mask).sum(-1) / mask.sum(-1).clamp_min(1) + 0.1 * torch.randn(B, generator=gen)
    adv = torch.randn(B, generator=gen)
    ref = logp.detach() - 0.2
    own = T([True, False, True, True, False, True, False, True])
    imitate = ~own & T([True, True, True, True, False, False, True, False])
    kw = {**CLIP, "kl_coef": 0.1}
    got, _ = imitation_loss(LossInputs(logp, mask, adv, old_logp_mean_B=old, own_B=own, imitate_B=imitate,
                                       ref_logp_BT=ref), StepSettings(**kw, imitation_coef=0.0))
    o = own.nonzero().squeeze(-1)
    want, _ = gspo_loss(LossInputs(logp[o], mask[o], adv[o], old_logp_mean_B=old[o], ref_logp_BT=ref[o]),
                        StepSettings(**kw))
    assert_close(got, want, rtol=1e-6, atol=1e-7)
    g_got, g_want = grad_of(got, logp), grad_of(want, logp)
    assert_close(g_got, g_want, rtol=1e-6, atol=1e-7)
    assert g_got.abs().max() > 1e-3 and torch.equal(g_got[~own], torch.zeros(int((~own).sum()), T_len))


def test_lambda_zero_ignores_a_non_finite_nll():
    # an imitated answer with a token of probability 0 has NLL = inf; λ = 0 must still give gspo, not NaN
    logp, inputs = four_rows()
    bad = logp.detach().clone()
    bad[2, 0] = float("-inf")
    bad.requires_grad_(True)
    loss, _ = imitation_loss(LossInputs(**{**inputs.__dict__, "logp_BT": bad}),
                             StepSettings(**CLIP, imitation_coef=0.0))
    assert loss.item() == pytest.approx(-0.2, rel=1e-5)
    assert torch.isfinite(grad_of(loss, bad)).all()


def test_sequence_nll_by_hand():
    # row 0: tokens log 0.5, log 0.25 → NLL (0.6931472 + 1.3862944)/2 = 1.0397208
    # row 1: one real token log 0.5 (padding holds -inf) → 0.6931472; row 2: no tokens → 0
    logp = torch.log(T([[0.5, 0.25], [0.5, 0.0], [0.3, 0.3]]))
    mask = T([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    assert_close(sequence_nll(logp, mask), T([1.0397208, 0.6931472, 0.0]))


def test_imitation_needs_its_inputs_and_a_non_negative_coef():
    logp, inputs = four_rows()
    with pytest.raises(ValueError, match="own_B"):
        imitation_loss(LossInputs(**{**inputs.__dict__, "own_B": None}), StepSettings(**CLIP))
    with pytest.raises(ValueError, match="old_logp_mean_B"):
        imitation_loss(LossInputs(**{**inputs.__dict__, "old_logp_mean_B": None}), StepSettings(**CLIP))
    with pytest.raises(ValueError, match="imitation_coef"):
        imitation_loss(inputs, StepSettings(**CLIP, imitation_coef=-0.1))
    with pytest.raises(ValueError, match="imitate_B"):
        LossInputs(**{**inputs.__dict__, "imitate_B": T([True, False])})
    with pytest.raises(ValueError, match="own_share"):
        LossInputs(**{**inputs.__dict__, "own_share": 1.5})


def test_imitation_is_registered():
    assert POLICY_LOSSES.get("imitation") is imitation_loss
