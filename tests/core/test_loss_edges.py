"""The registered losses at their edges: the cross window's bounds hit exactly, a zero advantage, the "no Clip"
ablation with one bound per row, the documented defaults, imitation without ``imitate_B``, the metrics of
mixed minibatches, and the dtypes of the rollout-correction modes. Each test holds a line that mutation
testing (docs/mutation.md) found unchecked once the losses were mutated at all.

Construction as in test_losses.py: L = 2 answer tokens, every token log-prob log s, old mean 0, so each
sequence ratio is exactly s (exp(0) = 1 exactly for s = 1).
"""

import math

import pytest
import torch

from hacrl.core import LossInputs, StepSettings, gspo_loss, hacpo_loss, sequence_log_ratio
from hacrl.core.correction import ROLLOUT_CORRECTIONS
from hacrl.core.losses import grpo_loss, imitation_loss

T = torch.tensor
RADII = {"clip_low": 0.2, "clip_high": 0.28}


def seqs(ratios, length=2):
    logp = torch.log(T(ratios, dtype=torch.float32))[:, None].repeat(1, length).requires_grad_(True)
    return logp, torch.ones_like(logp), torch.zeros(len(ratios))


def test_the_cross_windows_bounds_are_inside_it_and_a_zero_advantage_is_not_positive():
    # rows: own s=1.1 A=+2; cross s=1.0 exactly (the upper bound) A=+2; cross s=0.85 A=+1 with its own lower
    # bound equal to its ratio (the lower bound, hit exactly); cross s=0.5 A=0 and s=0.5 A=−1 (below the window)
    logp, mask, old = seqs([1.1, 1.0, 0.85, 0.5, 0.5])
    s_B = torch.exp(sequence_log_ratio(logp.detach(), mask, old, max_log_ratio=10.0)[0])  # the loss's own s
    assert s_B[1].item() == 1.0
    lower = T([0.8, 0.8, s_B[2].item(), 0.8, 0.8])
    _, m = hacpo_loss(LossInputs(logp, mask, T([2.0, 2.0, 1.0, 0.0, -1.0]), old_logp_mean_B=old,
                                 own_B=T([True, False, False, False, False]), omega_B=torch.ones(5)),
                      StepSettings(cross_lower=lower, **RADII))
    assert m["cross/in_window_frac"].item() == pytest.approx(2 / 4)   # s = 1 and s = ℓ are in
    assert m["cross/clip_low_frac"].item() == pytest.approx(2 / 4)    # the two at s = 0.5
    assert m["cross/clip_high_frac"].item() == 0.0                    # s = 1 is not above
    assert m["cross/adv_pos_frac"].item() == pytest.approx(2 / 4)     # A = 0 is not positive
    # of the cross rows with A > 0 (not the own row, not the one with A = 0 below the window): both inside
    assert m["cross/pos_in_window_frac"].item() == 1.0
    # own rows only: the cross row s = 0.5, A = −1 would count as clipped by GSPO's own-answer clip
    assert m["self/clip_frac"].item() == 0.0


def test_no_clip_with_a_bound_per_row_leaves_the_ratio_unclipped():
    # the "no Clip" ablation with the adaptive window's per-row bounds: c = s, J = s·s^α·ω·A;
    # s = 1.2, α = 1, ω = 1.5, A = 2 → J = 4.32; every cross row has a gradient: grad_scale = c^(1+α)·ω = 2.16
    logp, mask, old = seqs([1.2])
    inputs = LossInputs(logp, mask, T([2.0]), old_logp_mean_B=old, own_B=T([False]), omega_B=T([1.5]))
    loss, m = hacpo_loss(inputs, StepSettings(cross_lower=T([0.8]), cross_clip=False, **RADII))
    assert loss.item() == pytest.approx(-4.32, rel=1e-5)
    assert m["cross/grad_scale"].item() == pytest.approx(2.16, rel=1e-5)


def test_a_float64_bound_per_row_keeps_the_loss_float32():
    logp, mask, old = seqs([0.9, 0.5])
    inputs = LossInputs(logp, mask, T([1.0, 1.0]), old_logp_mean_B=old, own_B=T([False, False]),
                        omega_B=torch.ones(2))
    loss, _ = hacpo_loss(inputs, StepSettings(cross_lower=T([0.8, 0.8], dtype=torch.float64), **RADII))
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(-(0.9 * 0.9 + 0.8 * 0.8) / 2, rel=1e-5)


def everything(ratio_log: float = 10.5) -> LossInputs:
    """Two rows, every optional input given: an own row whose log ratio (10.5) passes the clamp at 10 with a
    negative advantage (so the clamp decides its term), and an imitated cross row; a reference for the KL."""
    logp = T([[ratio_log, ratio_log], [-0.1, -0.3]], requires_grad=True)
    mask = torch.ones(2, 2)
    return LossInputs(logp, mask, T([-1.0, 1.0]), old_logp_mean_B=torch.zeros(2), own_B=T([True, False]),
                      omega_B=T([1.0, 1.5]), old_logp_BT=torch.zeros(2, 2), ref_logp_BT=torch.full((2, 2), -0.5),
                      imitate_B=T([False, True]))


@pytest.mark.parametrize("loss_fn", [hacpo_loss, gspo_loss, grpo_loss, imitation_loss])
def test_every_loss_defaults_to_the_documented_settings(loss_fn):
    # α = 1, ℓ_0 = 0.8, the cross clip on, the log ratio clamped at 10, no KL term, λ = 1 — what a caller gets
    # by passing the clip radii alone
    explicit = {"alpha": 1.0, "cross_lower": 0.8, "cross_clip": True, "max_log_ratio": 10.0, "kl_coef": 0.0,
                "imitation_coef": 1.0}
    default, _ = loss_fn(everything(), StepSettings(**RADII))
    given, _ = loss_fn(everything(), StepSettings(**RADII, **explicit))
    assert default.item() == given.item()
    # and each of those settings can change the value here, so the equality above says something
    for key, other in (("max_log_ratio", 11.0), ("kl_coef", 1.0)):
        changed, _ = loss_fn(everything(), StepSettings(**RADII, **(explicit | {key: other})))
        assert changed.item() != given.item(), key
    if loss_fn is imitation_loss:
        changed, _ = loss_fn(everything(), StepSettings(**RADII, **(explicit | {"imitation_coef": 2.0})))
        assert changed.item() != given.item()


def test_imitation_without_imitate_b_imitates_nothing():
    inputs = everything(0.2)
    none = LossInputs(**{**inputs.__dict__, "imitate_B": None})
    nothing = LossInputs(**{**inputs.__dict__, "imitate_B": T([False, False])})
    loss_none, m_none = imitation_loss(none, StepSettings(**RADII))
    loss_nothing, m_nothing = imitation_loss(nothing, StepSettings(**RADII))
    assert loss_none.item() == loss_nothing.item()
    assert m_none["count/imitated"].item() == 0 and m_nothing["count/imitated"].item() == 0


def test_imitation_metrics_by_hand():
    # own row: s = 1.1, A = 2 (inside GSPO's clip); cross row imitated, s = 0.5 with A = −1, which GSPO's own
    # clip would call clipped were it an own row; the reference equals the policy: KL 0
    logp, mask, old = seqs([1.1, 0.5])
    ref = torch.log(T([[1.1, 1.1], [0.5, 0.5]]))
    inputs = LossInputs(logp, mask, T([2.0, -1.0]), old_logp_mean_B=old, own_B=T([True, False]),
                        ref_logp_BT=ref, imitate_B=T([False, True]))
    _, m = imitation_loss(inputs, StepSettings(kl_coef=0.1, **RADII))
    assert set(m) == {"pg_loss", "kl", "self/ratio_mean", "self/clip_frac", "imitation/nll", "cross/imitated_frac",
                      "count/own", "count/cross", "count/imitated", "count/empty"}
    assert m["kl"].item() == pytest.approx(0.0, abs=1e-7)
    assert m["self/clip_frac"].item() == 0.0       # the own row alone, not the imitated one
    assert m["self/ratio_mean"].item() == pytest.approx(1.1, rel=1e-6)
    assert m["imitation/nll"].item() == pytest.approx(-math.log(0.5), rel=1e-6)


def test_grpo_metrics_over_a_single_token():
    # one answer of one token, ratio 1.5 with A = 2: the token mean is that token's (no division by 2)
    logp = torch.log(T([[1.5]])).requires_grad_(True)
    _, m = grpo_loss(LossInputs(logp, torch.ones(1, 1), T([2.0]), old_logp_BT=torch.zeros(1, 1)),
                     StepSettings(**RADII))
    assert m["self/ratio_mean"].item() == pytest.approx(1.5, rel=1e-6)
    assert m["self/clip_frac"].item() == 1.0


@pytest.mark.parametrize("loss_fn, message", [
    (hacpo_loss, r"^hacpo/gspo need old_logp_mean_B, the rollout-time mean token log-prob of each row$"),
    (grpo_loss, r"^grpo needs old_logp_BT, the rollout-time token log-probs of the learner's own answers$"),
    (imitation_loss, r"^imitation needs old_logp_mean_B, the rollout-time mean token log-prob of each row$"),
])
def test_each_loss_says_which_input_it_lacks_in_one_line(loss_fn, message):
    with pytest.raises(ValueError, match=message):
        loss_fn(LossInputs(torch.zeros(1, 2), torch.ones(1, 2), torch.zeros(1)), StepSettings(**RADII))


def test_imitation_says_it_needs_own_b():
    inputs = LossInputs(torch.zeros(1, 2), torch.ones(1, 2), torch.zeros(1), old_logp_mean_B=torch.zeros(1))
    with pytest.raises(ValueError, match=r"^imitation needs own_B: which rows are the learner's own \(GSPO\) and "
                                         r"which other agents'$"):
        imitation_loss(inputs, StepSettings(**RADII))


@pytest.mark.parametrize("mode", ["off", "truncate", "mask", "masked-is"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_correction_mode_returns_a_weight_in_ws_dtype_and_boolean_flags(mode, dtype):
    w_B = T([0.2, 1.0, 3.0], dtype=dtype)
    weight_B, truncated_B, masked_B = ROLLOUT_CORRECTIONS.get(mode)(w_B, 2.0)
    assert weight_B.dtype == dtype
    assert truncated_B.dtype == torch.bool and masked_B.dtype == torch.bool
