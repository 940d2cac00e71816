"""The asynchronous mode's staleness rule and decoupled objective (``hacrl.core.staleness``), by hand, against
loop references, and through the policy loss.

select_within_bound: staleness = v − available; own answers within the bound B are taken, others' within B are
taken where the prompt has an own answer taken now, anything past B expires, the rest waits.
staleness_correction: w̃ = rollout_correction(π_prox, π_behav) on own rows with a version gap > 0, 1 elsewhere;
the objective is hacpo_loss with old_logp_mean = π_prox's mean and rollout_weight = w̃.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from hacrl.core import (
    SELECTION_REASONS,
    LossInputs,
    StepSettings,
    hacpo_loss,
    select_within_bound,
    staleness_correction,
)

T = torch.tensor


def select(learner=0, version=5, bound=2, authors=(), prompts=(), available=()):
    return select_within_bound(learner=learner, learner_version=version, bound=bound,
                               author_M=T(list(authors), dtype=torch.long),
                               prompt_M=T(list(prompts), dtype=torch.long),
                               available_M=T(list(available), dtype=torch.long))


# ---- the selection, by hand ------------------------------------------------------------------------------

# learner 0 at version 5, bound 2 (staleness = 5 − available):
#   0: own,      prompt 10, available 5 → staleness 0: taken (own_fresh)
#   1: own,      prompt 11, available 3 → 2 = B: taken (own_stale)
#   2: own,      prompt 12, available 2 → 3 > B: expired (expired_own)
#   3: agent 1,  prompt 10, available 4 → 1: taken, prompt 10 has own answer 0 (cross)
#   4: agent 2,  prompt 11, available 5 → 0: taken, prompt 11 has own answer 1 (cross)
#   5: agent 1,  prompt 12, available 5 → 0: waits, prompt 12's own answer expired (waiting_cross)
#   6: agent 2,  prompt 10, available 2 → 3 > B: expired although its prompt is taken (expired_cross)
#   7: agent 1,  prompt 13, available 5 → 0: waits, no own answer to prompt 13 (waiting_cross)
AUTHORS = (0, 0, 0, 1, 2, 1, 2, 1)
PROMPTS = (10, 11, 12, 10, 11, 12, 10, 13)
AVAILABLE = (5, 3, 2, 4, 5, 5, 2, 5)


def test_the_rule_by_hand():
    take, expire, m = select(authors=AUTHORS, prompts=PROMPTS, available=AVAILABLE)
    assert take.tolist() == [True, True, False, True, True, False, False, False]
    assert expire.tolist() == [False, False, True, False, False, False, True, False]
    counts = {k: int(m[k]) for k in SELECTION_REASONS}
    assert counts == {"own_fresh": 1, "own_stale": 1, "cross": 2, "waiting_cross": 2, "expired_own": 1,
                      "expired_cross": 1}
    assert sum(counts.values()) == len(AUTHORS)  # every pending answer has exactly one reason
    # staleness of the taken answers 0, 2, 1, 0: mean 3/4, max 2
    assert float(m["staleness_mean"]) == pytest.approx(0.75)
    assert int(m["staleness_max"]) == 2


def test_the_bound_itself_is_allowed_and_one_past_it_is_not():
    # own answers at staleness 0..4, bound 2: staleness 2 is taken, 3 expires
    take, expire, _ = select(version=4, bound=2, authors=[0] * 5, prompts=range(5), available=[4, 3, 2, 1, 0])
    assert take.tolist() == [True, True, True, False, False]
    assert expire.tolist() == [False, False, False, True, True]


def test_bound_zero_takes_only_what_the_current_version_could_take():
    # the lock-step rule: own answers of this version, cross answers that arrived for this version's take
    take, expire, m = select(version=3, bound=0, authors=(0, 1, 0, 1), prompts=(7, 7, 8, 8),
                             available=(3, 3, 2, 3))
    assert take.tolist() == [True, True, False, False]  # prompt 8's own answer is one version old: expired
    assert expire.tolist() == [False, False, True, False]
    assert int(m["waiting_cross"]) == 1 and float(m["staleness_max"]) == 0


def test_nothing_pending_gives_zero_counts_and_no_nan():
    take, expire, m = select()
    assert take.shape == expire.shape == (0,)
    assert {k: float(v) for k, v in m.items()} == {k: 0.0 for k in m}


def test_bad_arguments_say_what_is_wrong():
    with pytest.raises(ValueError, match="bound must be >= 0"):
        select(bound=-1)
    with pytest.raises(ValueError, match="available only from version 6"):
        select(version=5, authors=[1], prompts=[1], available=[6])
    with pytest.raises(ValueError, match="1-D tensors of one length"):
        select_within_bound(learner=0, learner_version=1, bound=0, author_M=T([0, 1]), prompt_M=T([0]),
                            available_M=T([0, 0]))


def reference_select(learner, version, bound, authors, prompts, available):
    """The rule written per answer, two passes: own answers first, then the others by their prompt."""
    take, expire, reasons = [], [], dict.fromkeys(SELECTION_REASONS, 0)
    own_taken = set()
    for a, p, av in zip(authors, prompts, available, strict=True):
        if a == learner and version - av <= bound:
            own_taken.add(p)
    stale = []
    for a, p, av in zip(authors, prompts, available, strict=True):
        s = version - av
        if s > bound:
            take.append(False)
            expire.append(True)
            reasons["expired_own" if a == learner else "expired_cross"] += 1
            continue
        expire.append(False)
        if a == learner:
            take.append(True)
            reasons["own_fresh" if s == 0 else "own_stale"] += 1
        elif p in own_taken:
            take.append(True)
            reasons["cross"] += 1
        else:
            take.append(False)
            reasons["waiting_cross"] += 1
        if take[-1]:
            stale.append(s)
    return take, expire, reasons, (sum(stale) / len(stale) if stale else 0.0), max(stale, default=0)


@pytest.mark.parametrize("seed", range(16))
def test_vectorised_selection_matches_the_loop_reference(seed):
    rng = random.Random(seed)
    n_agents, version, bound = rng.randint(1, 4), rng.randint(0, 8), rng.randint(0, 3)
    M = rng.randint(0, 30)
    authors = [rng.randrange(n_agents) for _ in range(M)]
    prompts = [rng.randrange(8) for _ in range(M)]
    available = [rng.randint(0, version) for _ in range(M)]
    learner = rng.randrange(n_agents)
    take, expire, m = select(learner, version, bound, authors, prompts, available)
    ref_take, ref_expire, reasons, mean, worst = reference_select(learner, version, bound, authors, prompts,
                                                                  available)
    assert take.tolist() == ref_take and expire.tolist() == ref_expire
    assert {k: int(m[k]) for k in SELECTION_REASONS} == reasons
    assert float(m["staleness_mean"]) == pytest.approx(mean) and int(m["staleness_max"]) == worst


# ---- the staleness weight, by hand ----------------------------------------------------------------------

LN3, LN2 = math.log(3.0), math.log(2.0)
# four rows of 2 tokens; per-token mean log π_prox − log π_behav = ln 3, ln 3, ln 3, −ln 2 (w = 3, 3, 3, 0.5)
#   0: own, gap 2 → stale: truncate min(3, 2) = 2
#   1: own, gap 0 → fresh: 1 here (an engine gap of a fresh answer is the rollout correction's, not this one's)
#   2: cross, gap 7 (ignored) → 1
#   3: own, gap 1 → stale: 0.5
PROX = T([-2.0, -2.0, -2.0, -2.0], dtype=torch.float64)
BEHAV = T([-2.0 - 2 * LN3, -2.0 - 2 * LN3, -2.0 - 2 * LN3, -2.0 + 2 * LN2], dtype=torch.float64)
OWN = T([True, True, False, True])
GAP = T([2, 0, 7, 1])


def weights(mode="truncate", cap=2.0, gap=GAP, own=OWN):
    return staleness_correction(prox_logp_sum_B=PROX, behav_logp_sum_B=BEHAV, num_tokens_B=T([2, 2, 2, 2]),
                                version_gap_B=gap, own_B=own, mode=mode, cap=cap)


def test_stale_own_rows_get_the_truncated_weight_and_the_rest_one():
    w, m = weights()
    assert w.tolist() == pytest.approx([2.0, 1.0, 1.0, 0.5], rel=1e-6)
    # over the stale own rows (w = 3 and 0.5): mean 1.75, one of two cut at C
    assert float(m["weight_mean"]) == pytest.approx(1.75, rel=1e-6)
    assert float(m["truncated_frac"]) == pytest.approx(0.5) and int(m["count"]) == 2
    # over the own rows (gaps 2, 0, 1): 2 of 3 stale, mean gap 1, max 2
    assert float(m["stale_frac"]) == pytest.approx(2 / 3)
    assert float(m["version_gap_mean"]) == pytest.approx(1.0) and int(m["version_gap_max"]) == 2


def test_the_modes_are_the_rollout_corrections():
    w, _ = weights("mask")  # band [1/2, 2]: 3 out → 0, 0.5 in (its edge) → 1
    assert w.tolist() == [0.0, 1.0, 1.0, 1.0]
    w, _ = weights("off")
    assert w.tolist() == [1.0] * 4


def test_no_gap_means_no_correction():
    w, m = weights(gap=T([0, 0, 0, 0]))
    assert w.tolist() == [1.0] * 4
    assert float(m["stale_frac"]) == 0.0 and int(m["count"]) == 0


def test_an_own_answer_from_the_future_is_refused_and_a_cross_gap_ignored():
    with pytest.raises(ValueError, match="later version"):
        weights(gap=T([2, -1, 0, 0]))
    w, _ = weights(gap=T([0, 0, -3, 0]))  # row 2 is another agent's: its gap means nothing here
    assert w.tolist() == [1.0] * 4


# ---- the decoupled objective: hacpo_loss with π_old := π_prox and the weight ---------------------------------

CLIP = {"clip_low": 0.2, "clip_high": 0.28}


def test_decoupled_objective_by_hand():
    # one stale own answer (2 tokens) and one cross answer:
    #   own:   mean log π_θ = −1, π_prox mean −1.1 → s = e^0.1 = 1.10517 (inside [0.8, 1.28]); π_behav mean
    #          −1.1 − ln 1.5 → w = 1.5 (under C = 2); A = 1 → J = 1.5 · e^0.1
    #   cross: s = 0.9 in [0.8, 1], α = 1, ω = 1, A = −1 → J = −0.81 (its old mean is the author's, no weight)
    w, _ = staleness_correction(prox_logp_sum_B=T([-2.2, -2.0]),
                                behav_logp_sum_B=T([-2.2 - 2 * math.log(1.5), 0.0]), num_tokens_B=T([2, 2]), version_gap_B=T([3, 0]), own_B=T([True, False]),
                                mode="truncate", cap=2.0)
    logp = T([[-1.0, -1.0], [-0.5, -0.5]], requires_grad=True)
    x = LossInputs(logp_BT=logp, mask_BT=torch.ones(2, 2), advantages_B=T([1.0, -1.0]),
                   old_logp_mean_B=T([-1.1, -0.5 - math.log(0.9)]), own_B=T([True, False]), rollout_weight_B=w)
    loss, _ = hacpo_loss(x, StepSettings(**CLIP, cross_lower=0.8))
    assert float(loss.detach()) == pytest.approx(-(1.5 * math.exp(0.1) - 0.81) / 2, rel=1e-5)
    loss.backward()
    # ∂/∂logp_t of the own term: w · A · s / L over B = 2 rows → −1.5 · e^0.1 / 2 / 2
    assert logp.grad[0].tolist() == pytest.approx([-1.5 * math.exp(0.1) / 4] * 2, rel=1e-5)


def test_uncut_the_decoupled_gradient_is_the_ratio_against_the_behaviour_policy():
    # s · w = exp(mean log π_θ − mean log π_behav): inside the clip and under the cap, the gradient of the
    # decoupled objective is that of importance sampling against the policy that wrote the answers
    gen = torch.Generator().manual_seed(0)
    B, L = 5, 4
    logp = (torch.rand(B, L, generator=gen, dtype=torch.float64) * -2).requires_grad_()
    prox_mean = logp.detach().mean(-1) + 0.05 * (torch.rand(B, generator=gen, dtype=torch.float64) - 0.5)
    behav_mean = prox_mean + 0.3 * (torch.rand(B, generator=gen, dtype=torch.float64) - 0.5)
    adv = torch.randn(B, generator=gen, dtype=torch.float64)
    w, m = staleness_correction(prox_logp_sum_B=prox_mean * L, behav_logp_sum_B=behav_mean * L,
                                num_tokens_B=torch.full((B,), L), version_gap_B=torch.full((B,), 2),
                                mode="truncate", cap=2.0)
    assert float(m["truncated_frac"]) == 0.0
    x = LossInputs(logp_BT=logp, mask_BT=torch.ones(B, L), advantages_B=adv, old_logp_mean_B=prox_mean,
                   rollout_weight_B=w)
    loss, metrics = hacpo_loss(x, StepSettings(**CLIP))
    assert float(metrics["self/clip_frac"]) == 0.0
    (g_decoupled,) = torch.autograd.grad(loss, logp)
    is_loss = -(torch.exp(logp.mean(-1) - behav_mean) * adv).mean()
    (g_is,) = torch.autograd.grad(is_loss, logp)
    torch.testing.assert_close(g_decoupled.double(), g_is, rtol=1e-5, atol=1e-7)


def reference_objective(logp, lengths, prox_mean, behav_mean, gap, own, adv, old_mean, cap, clip_low, clip_high,
                        cross_lower, alpha, omega):
    """Per row in floats: own stale w̃·min(sA, clip(s)A) with s against π_prox; own fresh the same with w̃ = 1;
    cross c·c^α·ω·A with s against the author's mean. −mean over the rows."""
    total = 0.0
    for i, n in enumerate(lengths):
        if n == 0:
            continue
        mean = sum(logp[i][:n]) / n
        if own[i]:
            s = math.exp(min(max(mean - prox_mean[i], -10.0), 10.0))
            w = min(math.exp(prox_mean[i] - behav_mean[i]), cap) if gap[i] > 0 else 1.0
            total += w * min(s * adv[i], min(max(s, 1 - clip_low), 1 + clip_high) * adv[i])
        else:
            s = math.exp(min(max(mean - old_mean[i], -10.0), 10.0))
            c = min(max(s, cross_lower), 1.0)
            total += c * c**alpha * omega[i] * adv[i]
    return -total / len(lengths)


@pytest.mark.parametrize("seed", range(12))
def test_decoupled_objective_matches_the_loop_reference(seed):
    rng = random.Random(seed)
    B, L = rng.randint(1, 8), rng.randint(1, 6)
    lengths = [rng.randint(0, L) for _ in range(B)]
    logp = [[rng.uniform(-3, 0) for _ in range(L)] for _ in range(B)]
    own = [rng.random() < 0.6 for _ in range(B)]
    gap = [rng.randint(0, 3) if o else 0 for o in own]
    means = [sum(row[:n]) / max(n, 1) for row, n in zip(logp, lengths, strict=True)]
    prox_mean = [m + rng.gauss(0, 0.1) for m in means]
    behav_mean = [p + rng.gauss(0, 0.5) if g > 0 else p for p, g in zip(prox_mean, gap, strict=True)]
    old_mean = [m + rng.gauss(0, 0.2) for m in means]  # cross rows: the author's mean
    adv = [rng.gauss(0, 1) for _ in range(B)]
    omega = [rng.uniform(0.5, 2) for _ in range(B)]
    cap = rng.choice([1.5, 2.0, 5.0])
    n_B = T(lengths)
    w, _ = staleness_correction(prox_logp_sum_B=T(prox_mean, dtype=torch.float64) * n_B,
                                behav_logp_sum_B=T(behav_mean, dtype=torch.float64) * n_B, num_tokens_B=n_B,
                                version_gap_B=T(gap), own_B=T(own), mode="truncate", cap=cap)
    # π_old of each row: π_prox for own answers, the author's rollout-time mean for the others'
    old_B = T([p if o else c for p, c, o in zip(prox_mean, old_mean, own, strict=True)])
    x = LossInputs(logp_BT=T(logp, dtype=torch.float64), mask_BT=T([[t < n for t in range(L)] for n in lengths]),
                   advantages_B=T(adv), old_logp_mean_B=old_B, own_B=T(own), omega_B=T(omega), rollout_weight_B=w)
    loss, _ = hacpo_loss(x, StepSettings(**CLIP, cross_lower=0.8, alpha=1.0))
    ref = reference_objective(logp, lengths, prox_mean, behav_mean, gap, own, adv, old_mean, cap, 0.2, 0.28, 0.8,
                              1.0, omega)
    assert float(loss) == pytest.approx(ref, rel=1e-4, abs=1e-6)


def test_at_bound_zero_the_objective_is_the_lock_step_one():
    # every own answer fresh (gap 0): the weights are 1 and the loss is the synchronous trainer's exactly
    gen = torch.Generator().manual_seed(3)
    B, L = 6, 3
    logp = torch.rand(B, L, generator=gen) * -2
    base = LossInputs(logp_BT=logp, mask_BT=torch.ones(B, L), advantages_B=torch.randn(B, generator=gen),
                      old_logp_mean_B=logp.mean(-1) + 0.01, own_B=T([True, False] * 3))
    w, _ = staleness_correction(prox_logp_sum_B=torch.randn(B, generator=gen),
                                behav_logp_sum_B=torch.randn(B, generator=gen), num_tokens_B=torch.full((B,), L), version_gap_B=torch.zeros(B, dtype=torch.long),
                                own_B=base.own_B, mode="truncate", cap=2.0)
    a, _ = hacpo_loss(base, StepSettings(**CLIP))
    b, _ = hacpo_loss(LossInputs(**{**base.__dict__, "rollout_weight_B": w}), StepSettings(**CLIP))
    assert torch.equal(a, b)


# ---- found by mutation testing (docs/mutation.md) ------------------------------------------------

def one_stale_row(log_w, **kw):
    """One own answer of 1 token, version gap 3, with log π_prox − log π_behav = ``log_w``; truncation far off."""
    return staleness_correction(prox_logp_sum_B=T([-1.0 + log_w], dtype=torch.float64),
                                behav_logp_sum_B=T([-1.0], dtype=torch.float64), num_tokens_B=T([1]),
                                version_gap_B=T([3]), mode="truncate", cap=1e9, **kw)


def test_the_log_weight_is_clamped_at_max_log_ratio_default_ten_and_as_given():
    w, _ = one_stale_row(10.5)  # default clamp ±10: e^10, not e^10.5
    assert w.tolist() == pytest.approx([math.exp(10.0)], rel=1e-6)
    w, _ = one_stale_row(10.5, max_log_ratio=1.0)  # the given clamp reaches the weight
    assert w.tolist() == pytest.approx([math.e], rel=1e-6)


def test_a_single_own_row_counts_once_in_the_own_row_metrics():
    # one own row, stale by 3: stale_frac = 1/1, version_gap_mean = 3/1, version_gap_max = 3
    _, m = one_stale_row(0.0)
    assert float(m["stale_frac"]) == 1.0 and float(m["version_gap_mean"]) == 3.0 and int(m["version_gap_max"]) == 3


def test_no_rows_gives_no_weights_and_zero_metrics():
    empty = torch.zeros(0, dtype=torch.float64)
    w, m = staleness_correction(prox_logp_sum_B=empty, behav_logp_sum_B=empty, num_tokens_B=torch.zeros(0),
                                version_gap_B=torch.zeros(0, dtype=torch.long), mode="truncate", cap=2.0)
    assert w.shape == (0,)
    assert float(m["stale_frac"]) == 0.0 and float(m["version_gap_mean"]) == 0.0
    assert int(m["version_gap_max"]) == 0 and m["version_gap_max"].shape == ()


@pytest.mark.parametrize("name", ["version_gap_B", "own_B"])
def test_a_misshapen_gap_or_own_mask_is_named_with_both_shapes(name):
    kw = {"version_gap_B": GAP, "own_B": OWN, name: T([1, 1, 1])}
    with pytest.raises(ValueError, match=rf"^{name} must be \[4\] like prox_logp_sum_B, got \[3\]$"):
        staleness_correction(prox_logp_sum_B=PROX, behav_logp_sum_B=BEHAV, num_tokens_B=T([2, 2, 2, 2]),
                             mode="truncate", cap=2.0, **kw)
    with pytest.raises(ValueError, match=r"^version_gap_B < 0 on an own answer: written by a later version than "
                                         r"the learner's$"):
        weights(gap=T([2, -1, 0, 0]))


@pytest.mark.parametrize("short", ["author_M", "available_M"])
def test_selection_checks_every_input_length(short):
    kw = {"author_M": T([0, 1]), "prompt_M": T([0, 0]), "available_M": T([0, 0]), short: T([0])}
    with pytest.raises(ValueError, match=rf"1-D tensors of one length, got shapes .*'{short}': \(1,\)"):
        select_within_bound(learner=0, learner_version=1, bound=0, **kw)


def test_staleness_mean_over_a_single_taken_answer():
    # one own answer, available at 3, learner at 5, bound 2: taken with staleness 2; mean 2/1, max 2
    take, _, m = select(version=5, bound=2, authors=[0], prompts=[7], available=[3])
    assert take.tolist() == [True]
    assert float(m["staleness_mean"]) == 2.0 and int(m["staleness_max"]) == 2
