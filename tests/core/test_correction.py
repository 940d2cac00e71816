"""The rollout correction (``hacrl.core.correction``) by hand, against a loop reference, and in every policy loss.

w_i = exp((Σ_t log π_prox − Σ_t log π_behav) / L_i); truncate min(w, C); mask 1[1/C ≤ w ≤ C]; masked-is
w·1[1/C ≤ w ≤ C]; off 1. The weight multiplies an own answer's policy-gradient term only.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from hacrl.core import (
    ROLLOUT_CORRECTIONS,
    LossInputs,
    StepSettings,
    grpo_loss,
    gspo_loss,
    hacpo_loss,
    imitation_loss,
    rollout_correction,
)

LN3, LN15, LN4 = math.log(3.0), math.log(1.5), math.log(4.0)

# four answers of L = 2, 4, 1 and 0 tokens; per-token mean log-ratios ln 3, ln 1.5, −ln 4 (and none):
#   w = 3, 1.5, 0.25; the empty answer is not corrected (weight 1) and stays out of the metrics
PROX_B = torch.tensor([-1.0, -4.0, -0.5, 0.0], dtype=torch.float64)
BEHAV_B = torch.tensor([-1.0 - 2 * LN3, -4.0 - 4 * LN15, -0.5 + LN4, 0.0], dtype=torch.float64)
TOKENS_B = torch.tensor([2, 4, 1, 0])


def correct(mode: str, cap: float = 2.0, **kw):
    return rollout_correction(prox_logp_sum_B=PROX_B, behav_logp_sum_B=BEHAV_B, num_tokens_B=TOKENS_B,
                              mode=mode, cap=cap, **kw)


# ---- the modes, by hand ----------------------------------------------------------------------------------

def test_truncate_caps_the_weight_at_c():
    w, m = correct("truncate")
    # min(3, 2), min(1.5, 2), min(0.25, 2), empty → 1
    assert w.tolist() == pytest.approx([2.0, 1.5, 0.25, 1.0], rel=1e-6)
    assert float(m["truncated_frac"]) == pytest.approx(1 / 3)  # the 3 of (3, 1.5, 0.25)
    assert float(m["masked_frac"]) == 0.0
    # w itself: mean (3 + 1.5 + 0.25)/3 = 4.75/3, max 3, min 0.25; applied (2 + 1.5 + 0.25)/3 = 1.25
    assert float(m["weight_mean"]) == pytest.approx(4.75 / 3, rel=1e-6)
    assert (float(m["weight_max"]), float(m["weight_min"])) == pytest.approx((3.0, 0.25), rel=1e-6)
    assert float(m["applied_mean"]) == pytest.approx(1.25, rel=1e-6)
    assert int(m["count"]) == 3


def test_mask_keeps_the_band_with_weight_one_and_drops_the_rest():
    w, m = correct("mask")
    # band [1/2, 2]: 3 out, 1.5 in → 1, 0.25 out; empty → 1
    assert w.tolist() == [0.0, 1.0, 0.0, 1.0]
    assert float(m["masked_frac"]) == pytest.approx(2 / 3)
    assert float(m["truncated_frac"]) == 0.0
    assert float(m["applied_mean"]) == pytest.approx(1 / 3)


def test_masked_is_keeps_the_weight_inside_the_band():
    w, m = correct("masked-is")
    assert w.tolist() == pytest.approx([0.0, 1.5, 0.0, 1.0], rel=1e-6)
    assert float(m["masked_frac"]) == pytest.approx(2 / 3)
    assert float(m["applied_mean"]) == pytest.approx(0.5, rel=1e-6)  # (0 + 1.5 + 0)/3


def test_off_is_one_but_still_reports_the_gap():
    w, m = correct("off")
    assert w.tolist() == [1.0] * 4
    assert float(m["weight_mean"]) == pytest.approx(4.75 / 3, rel=1e-6)  # what the weight would be
    assert float(m["truncated_frac"]) == float(m["masked_frac"]) == 0.0
    assert float(m["applied_mean"]) == 1.0


def test_a_wider_cap_truncates_and_masks_less():
    # C = 4: band [1/4, 4] holds 3, 1.5 and 0.25 (its edge, kept: the band is closed)
    w, m = correct("mask", cap=4.0)
    assert w.tolist() == [1.0, 1.0, 1.0, 1.0] and float(m["masked_frac"]) == 0.0
    w, m = correct("truncate", cap=4.0)
    assert w.tolist() == pytest.approx([3.0, 1.5, 0.25, 1.0], rel=1e-6) and float(m["truncated_frac"]) == 0.0


def test_cap_one_band_keeps_only_an_exact_match():
    # C = 1: the band is {1}. Equal sums → w = exp(0) = 1 exactly, kept by mask, not counted as truncated
    prox = torch.tensor([-3.0, -3.0])
    behav = torch.tensor([-3.0, -3.5])  # w = exp(0.5/2) > 1
    w, m = rollout_correction(prox_logp_sum_B=prox, behav_logp_sum_B=behav, num_tokens_B=torch.tensor([2, 2]),
                              mode="mask", cap=1.0)
    assert w.tolist() == [1.0, 0.0]
    w, m = rollout_correction(prox_logp_sum_B=prox, behav_logp_sum_B=behav, num_tokens_B=torch.tensor([2, 2]),
                              mode="truncate", cap=1.0)
    assert w.tolist() == [1.0, 1.0] and float(m["truncated_frac"]) == 0.5


def test_rows_outside_the_selection_get_one_and_no_say_in_the_metrics():
    # the second answer (w = 1.5) is another agent's: weight 1; metrics over 3 and 0.25 only
    w, m = correct("truncate", rows_B=torch.tensor([True, False, True, True]))
    assert w.tolist() == pytest.approx([2.0, 1.0, 0.25, 1.0], rel=1e-6)
    assert float(m["weight_mean"]) == pytest.approx((3 + 0.25) / 2, rel=1e-6)
    assert float(m["truncated_frac"]) == pytest.approx(0.5) and int(m["count"]) == 2


def test_no_answer_to_correct_gives_ones_and_zero_metrics():
    w, m = rollout_correction(prox_logp_sum_B=torch.zeros(2), behav_logp_sum_B=torch.tensor([1.0, -1.0]),
                              num_tokens_B=torch.zeros(2, dtype=torch.long), mode="truncate", cap=2.0)
    assert w.tolist() == [1.0, 1.0]
    assert {k: float(v) for k, v in m.items()} == {k: 0.0 for k in m}
    assert all(math.isfinite(float(v)) for v in m.values())


def test_an_empty_batch_gives_empty_weights_and_zero_metrics():
    w, m = rollout_correction(prox_logp_sum_B=torch.zeros(0), behav_logp_sum_B=torch.zeros(0),
                              num_tokens_B=torch.zeros(0, dtype=torch.long), mode="mask", cap=2.0)
    assert w.shape == (0,) and {k: float(v) for k, v in m.items()} == {k: 0.0 for k in m}


def test_the_weight_is_length_normalised():
    # the same sum gap of ln 4 over 1 token and over 4: w = 4 and 4^(1/4) = √2 (the product would be 4 for both)
    w, m = rollout_correction(prox_logp_sum_B=torch.tensor([LN4, LN4]), behav_logp_sum_B=torch.zeros(2),
                              num_tokens_B=torch.tensor([1, 4]), mode="truncate", cap=2.0)
    assert (float(m["weight_max"]), float(m["weight_min"])) == pytest.approx((4.0, math.sqrt(2)), rel=1e-6)
    assert w.tolist() == pytest.approx([2.0, math.sqrt(2)], rel=1e-6)  # only the short answer is cut


def test_float64_sums_keep_a_rounding_sized_gap():
    # 1,000 tokens, a gap of 1e-6 per token: the sums −1000 and −1000.001 differ by 1e-3, which float32 sums
    # (spacing 6e-5 at 1000) would blur; w = exp(1e-6)
    _, m = rollout_correction(prox_logp_sum_B=torch.tensor([-1000.0], dtype=torch.float64),
                              behav_logp_sum_B=torch.tensor([-1000.001], dtype=torch.float64),
                              num_tokens_B=torch.tensor([1000]), mode="truncate", cap=2.0)
    assert float(m["weight_mean"]) == pytest.approx(1.0 + 1e-6, abs=2e-7)


def test_the_log_weight_is_clamped_and_the_result_is_detached():
    prox = torch.tensor([100.0, -100.0], requires_grad=True)
    w, m = rollout_correction(prox_logp_sum_B=prox, behav_logp_sum_B=torch.zeros(2), num_tokens_B=torch.tensor([1, 1]),
                              mode="masked-is", cap=2.0, max_log_ratio=10.0)
    assert not w.requires_grad and not any(v.requires_grad for v in m.values())
    assert float(m["weight_max"]) == pytest.approx(math.exp(10.0), rel=1e-5)
    assert float(m["weight_min"]) == pytest.approx(math.exp(-10.0), rel=1e-5)
    assert w.tolist() == [0.0, 0.0]


def test_bad_arguments_say_what_is_wrong():
    with pytest.raises(ValueError, match="cap must be >= 1"):
        correct("truncate", cap=0.5)
    with pytest.raises(KeyError, match="valid: .*masked-is.*truncate"):
        correct("clip")
    with pytest.raises(ValueError, match="num_tokens_B must be"):
        rollout_correction(prox_logp_sum_B=PROX_B, behav_logp_sum_B=BEHAV_B, num_tokens_B=TOKENS_B[:2],
                           mode="off", cap=2.0)


def test_the_configs_modes_are_the_registrys():
    from typing import get_args

    from hacrl.config import AlgorithmConfig

    modes = set(get_args(AlgorithmConfig.model_fields["rollout_correction"].annotation))
    assert modes == set(ROLLOUT_CORRECTIONS) | {"auto"}


# ---- the loop reference over random seeds ---------------------------------------------------------------

def reference(prox: list[list[float]], behav: list[list[float]], rows: list[bool], mode: str, cap: float,
              max_log_ratio: float) -> tuple[list[float], dict[str, float]]:
    weights, raw, applied, cut, dropped = [], [], [], 0, 0
    for p, b, sel in zip(prox, behav, rows, strict=True):
        if not p or not sel:
            weights.append(1.0)
            continue
        log_w = sum(x - y for x, y in zip(p, b, strict=True)) / len(p)
        w = math.exp(min(max(log_w, -max_log_ratio), max_log_ratio))
        inside = 1.0 / cap <= w <= cap
        v = {"off": 1.0, "truncate": min(w, cap), "mask": 1.0 if inside else 0.0,
             "masked-is": w if inside else 0.0}[mode]
        cut += mode == "truncate" and w > cap
        dropped += v == 0.0
        weights.append(v)
        raw.append(w)
        applied.append(v)
    n = len(raw)
    metrics = {"weight_mean": sum(raw) / n if n else 0.0, "weight_max": max(raw, default=0.0),
               "weight_min": min(raw, default=0.0), "truncated_frac": cut / n if n else 0.0,
               "masked_frac": dropped / n if n else 0.0, "applied_mean": sum(applied) / n if n else 0.0,
               "count": float(n)}
    return weights, metrics


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("mode", ["off", "truncate", "mask", "masked-is"])
def test_vectorised_matches_the_loop_reference(seed, mode):
    rng = random.Random(seed)
    B, T = rng.randint(1, 9), rng.randint(1, 7)
    lengths = [rng.randint(0, T) for _ in range(B)]
    spread = rng.choice([0.01, 0.5, 3.0])  # rounding-sized gaps to gaps past any cap, and past the clamp
    prox = [[rng.uniform(-6, 0) for _ in range(n)] for n in lengths]
    behav = [[x + rng.gauss(0, spread) for x in p] for p in prox]
    rows = [rng.random() < 0.8 for _ in range(B)]
    cap, max_log_ratio = rng.choice([1.0, 1.2, 2.0, 3.0]), rng.choice([2.0, 10.0])
    mask_BT = torch.tensor([[t < n for t in range(T)] for n in lengths])
    pad = [[float("nan")] * T for _ in range(B)]  # padding never reaches the sums

    def padded(xs: list[list[float]]) -> torch.Tensor:
        return torch.tensor([x + row[len(x):] for x, row in zip(xs, pad, strict=True)], dtype=torch.float64)

    prox_BT, behav_BT = padded(prox), padded(behav)
    w, m = rollout_correction(prox_logp_sum_B=torch.where(mask_BT, prox_BT, 0.0).sum(-1),
                              behav_logp_sum_B=torch.where(mask_BT, behav_BT, 0.0).sum(-1),
                              num_tokens_B=mask_BT.sum(-1), mode=mode, cap=cap, rows_B=torch.tensor(rows),
                              max_log_ratio=max_log_ratio)
    ref_w, ref_m = reference(prox, behav, rows, mode, cap, max_log_ratio)
    assert w.tolist() == pytest.approx(ref_w, rel=1e-5, abs=1e-7)
    assert {k: float(v) for k, v in m.items()} == pytest.approx(ref_m, rel=1e-5, abs=1e-7)


# ---- in the policy losses: own answers' policy-gradient term times w̃, nothing else --------------------------

def three_rows(weights: list[float] | None, grad: bool = False, **extra) -> LossInputs:
    # two own answers with ratio 1 (old mean = the current mean) and one cross answer with ratio 0.9 (inside
    # the cross window [0.8, 1]); A = 1, −2, 1; weights 0.5, 2 on the own rows, 7 on the cross row (ignored)
    logp_BT = torch.tensor([[-1.0, -1.0], [-2.0, 0.0], [-0.5, -0.5]], requires_grad=grad)
    return LossInputs(logp_BT=logp_BT, mask_BT=torch.tensor([[1, 1], [1, 0], [1, 1]]),
                      advantages_B=torch.tensor([1.0, -2.0, 1.0]),
                      old_logp_mean_B=torch.tensor([-1.0, -2.0, -0.5 - math.log(0.9)]),
                      own_B=torch.tensor([True, True, False]),
                      rollout_weight_B=None if weights is None else torch.tensor(weights), **extra)


CLIP = {"clip_low": 0.2, "clip_high": 0.28}


def test_hacpo_weights_own_terms_and_leaves_cross_terms():
    x = three_rows([0.5, 2.0, 7.0], grad=True)
    loss, _ = hacpo_loss(x, StepSettings(**CLIP, cross_lower=0.8))
    loss.backward()
    loss = loss.detach()
    # own: w·A at s = 1 → 0.5·1, 2·(−2); cross: c·sg(c)·ω·A = 0.9·0.9·1·1 = 0.81 → −(0.5 − 4 + 0.81)/3
    assert float(loss) == pytest.approx(-(0.5 - 4.0 + 0.81) / 3, rel=1e-6)
    # ∂/∂logp_t, over B = 3: own w·s·A with ∂s/∂logp_t = s/L → w·A/L; cross c·sg(c)·ω·A with ∂c/∂logp_t = c/L
    # (inside the window) → 0.9·0.9/2, the same as without weights
    g = x.logp_BT.grad
    assert g[0].tolist() == pytest.approx([-(0.5 * 1 / 2) / 3] * 2, rel=1e-5)
    assert float(g[1, 0]) == pytest.approx(-(2.0 * -2.0) / 3, rel=1e-5)
    assert g[2].tolist() == pytest.approx([-(0.81 / 2) / 3] * 2, rel=1e-5)
    plain, _ = hacpo_loss(three_rows(None), StepSettings(**CLIP, cross_lower=0.8))
    assert float(plain) == pytest.approx(-(1.0 - 2.0 + 0.81) / 3, rel=1e-6)  # None = 1 everywhere


def test_hacpo_keeps_the_kl_term_unweighted():
    ref_BT = torch.tensor([[-1.5, -0.5], [-1.0, 0.0], [-0.5, -0.5]])
    kl = {"kl_coef": 0.1, "cross_lower": 0.8}
    a, ma = hacpo_loss(three_rows([0.5, 2.0, 1.0], ref_logp_BT=ref_BT), StepSettings(**CLIP, **kl))
    b, mb = hacpo_loss(three_rows([1.0, 1.0, 1.0], ref_logp_BT=ref_BT), StepSettings(**CLIP, **kl))
    # the loss moves by the policy-gradient terms alone: −((0.5 − 1)·1 + (2 − 1)·(−2))/3 = 2.5/3
    assert float(a) - float(b) == pytest.approx(2.5 / 3, rel=1e-5)
    assert float(ma["kl"]) == float(mb["kl"]) > 0


def test_gspo_weights_every_row():
    loss, _ = gspo_loss(three_rows([0.5, 2.0, 0.0]), StepSettings(**CLIP))
    # all rows own: the third at s = 0.9 → clip(0.9, 0.8, 1.28)·1 = 0.9, times w = 0 → −(0.5 − 4 + 0)/3
    assert float(loss) == pytest.approx(-(0.5 - 4.0) / 3, rel=1e-6)


def test_grpo_weights_each_sequences_tokens():
    x = three_rows([0.5, 2.0, 3.0])
    x = LossInputs(**{**x.__dict__, "old_logp_BT": x.logp_BT.detach().clone(), "own_B": None})
    loss, _ = grpo_loss(x, StepSettings(**CLIP))
    # r_t = 1 everywhere: per-sequence token mean of w·A = 0.5, −4, 3 → −(0.5 − 4 + 3)/3
    assert float(loss) == pytest.approx(-(0.5 - 4.0 + 3.0) / 3, rel=1e-6)


def test_imitation_weights_the_gspo_part_only():
    x = three_rows([0.5, 2.0, 7.0], imitate_B=torch.tensor([False, False, True]))
    loss, m = imitation_loss(x, StepSettings(**CLIP, imitation_coef=1.0))
    # GSPO over the 2 own rows: −(0.5 − 4)/2; NLL of the imitated row: token mean 0.5, weight ignored
    assert float(loss) == pytest.approx(-(0.5 - 4.0) / 2 + 0.5, rel=1e-6)
    assert float(m["imitation/nll"]) == pytest.approx(0.5)


# ---- found by mutation testing (docs/mutation.md) ------------------------------------------------

def test_the_default_log_weight_clamp_is_ten():
    w, m = rollout_correction(prox_logp_sum_B=torch.tensor([10.5]), behav_logp_sum_B=torch.zeros(1),
                              num_tokens_B=torch.tensor([1]), mode="truncate", cap=1e9)
    assert w.tolist() == pytest.approx([math.exp(10.0)], rel=1e-6)


@pytest.mark.parametrize("name", ["behav_logp_sum_B", "num_tokens_B", "rows_B"])
def test_a_misshapen_input_is_named_with_both_shapes(name):
    kw = {"behav_logp_sum_B": BEHAV_B, "num_tokens_B": TOKENS_B, "rows_B": torch.ones(4, dtype=torch.bool)}
    kw[name] = kw[name][:3]
    with pytest.raises(ValueError, match=rf"^{name} must be \[4\] like prox_logp_sum_B, got \[3\]$"):
        rollout_correction(prox_logp_sum_B=PROX_B, mode="off", cap=2.0, **kw)
