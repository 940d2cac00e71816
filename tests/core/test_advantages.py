"""Hand-computed checks of group_advantages, omega_matrix and hacpo_advantages (paper eqs. 5-8).

Notation: μ̂ = (1/|group|) Σ_i ω^(k, src(i)) R_i, σ = unbiased std of the group's raw rewards,
A_i = (R_i − μ̂) / (σ + 1e-6), ω^(k,j) = clamp(P̂_k / P̂_j, 0.1, 10).
"""

import pytest
import torch
from torch.testing import assert_close

from hacrl.core import group_advantages, hacpo_advantages, omega_matrix

EPS = 1e-6
T = torch.tensor


def adv(rewards, groups, sources, *, learner, capability, **kw):
    return hacpo_advantages(T(rewards, dtype=torch.float32), T(groups), T(sources),
                            learner=learner, capability=T(capability), **kw)


# ---- two agents -------------------------------------------------------------------------------

# Group: agent 0 wrote R = [1, 0], agent 1 wrote R = [1, 0].
# σ: mean 0.5, unbiased var = 4·0.25/3 = 1/3, σ = 0.5773503.
TWO_R, TWO_SRC, TWO_CAP = [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], [0.8, 0.4]


def test_two_agents_strong_learner():
    # learner 0: ω^(0,1) = 0.8/0.4 = 2 → μ̂ = (1 + 0 + 2·1 + 2·0)/4 = 0.75
    # A(R=1) = 0.25/0.5773503 = 0.4330120, A(R=0) = −0.75/0.5773503 = −1.2990359
    a = adv(TWO_R, [0, 0, 0, 0], TWO_SRC, learner=0, capability=TWO_CAP)
    assert_close(a, T([0.4330120, -1.2990359, 0.4330120, -1.2990359]))


def test_two_agents_weak_learner():
    # learner 1: ω^(1,0) = 0.4/0.8 = 0.5 → μ̂ = (0.5·1 + 0.5·0 + 1 + 0)/4 = 0.375
    # A(R=1) = 0.625/0.5773503 = 1.0825299, A(R=0) = −0.375/0.5773503 = −0.6495179
    a = adv(TWO_R, [0, 0, 0, 0], TWO_SRC, learner=1, capability=TWO_CAP)
    assert_close(a, T([1.0825299, -0.6495179, 1.0825299, -0.6495179]))


# ---- three agents -----------------------------------------------------------------------------

THREE_SRC, THREE_CAP = [0, 0, 1, 1, 2, 2], [0.6, 0.3, 0.9]


def test_three_agents_binary_rewards():
    # learner 0: ω^(0,·) = [0.6/0.6, 0.6/0.3, 0.6/0.9] = [1, 2, 2/3]; R = [1, 0 | 1, 1 | 0, 1]
    # μ̂ = (1 + 0 + 2·(1 + 1) + (2/3)·(0 + 1))/6 = 5.6667/6 = 0.9444444
    # σ: mean 4/6, Σ(R − mean)² = 4·(1/9) + 2·(4/9) = 4/3, var = (4/3)/5 = 0.2666667, σ = 0.5163978
    # A(R=1) = 0.0555556/0.5163978 = 0.1075827, A(R=0) = −0.9444444/0.5163978 = −1.8289053
    a = adv([1.0, 0.0, 1.0, 1.0, 0.0, 1.0], [3] * 6, THREE_SRC, learner=0, capability=THREE_CAP)
    assert_close(a, T([0.1075827, -1.8289053, 0.1075827, 0.1075827, -1.8289053, 0.1075827]))


def test_three_agents_fractional_reward_weak_learner():
    # learner 1: ω^(1,·) = [0.3/0.6, 1, 0.3/0.9] = [0.5, 1, 1/3]; R = [1, 0 | 0.5, 1 | 0, 1]
    # μ̂ = (0.5·1 + 0.5·0 + 0.5 + 1 + (1/3)·0 + (1/3)·1)/6 = 2.3333333/6 = 0.3888889
    # σ: mean 3.5/6 = 0.5833333, Σ(R − mean)² = 3·0.1736111 + 2·0.3402778 + 0.0069444 = 1.2083333,
    #    var = 1.2083333/5 = 0.2416667, σ = 0.4915960
    # A(1) = 0.6111111/0.4915960 = 1.2431169, A(0) = −0.3888889/0.4915960 = −0.7910744,
    # A(0.5) = 0.1111111/0.4915960 = 0.2260213
    a = adv([1.0, 0.0, 0.5, 1.0, 0.0, 1.0], [3] * 6, THREE_SRC, learner=1, capability=THREE_CAP)
    assert_close(a, T([1.2431169, -0.7910744, 0.2260213, 1.2431169, -0.7910744, 1.2431169]))


# ---- the fallback when the weighted baseline exceeds the group's largest reward -----------------

def test_fallback_to_learners_own_mean():
    # learner 2 in the three-agent group: ω^(2,·) = [0.9/0.6, 0.9/0.3, 1] = [1.5, 3, 1]
    # R = [1, 0 | 0.5, 1 | 0, 1] → μ̂ = (1.5·1 + 0 + 3·0.5 + 3·1 + 0 + 1)/6 = 7/6 = 1.1667 > max R = 1
    # → fallback to agent 2's own mean (0 + 1)/2 = 0.5;  σ = 0.4915960 as above
    # A(1) = 0.5/0.4915960 = 1.0170949, A(0) = −1.0170949, A(0.5) = 0
    a = adv([1.0, 0.0, 0.5, 1.0, 0.0, 1.0], [3] * 6, THREE_SRC, learner=2, capability=THREE_CAP)
    assert_close(a, T([1.0170949, -1.0170949, 0.0, 1.0170949, -1.0170949, 1.0170949]))


def test_fallback_to_plain_mean_when_learner_has_no_answer_in_group():
    # capability [1, 0.1, 0.5], learner 0: ω^(0,1) = 10, ω^(0,2) = 2; the group holds no agent-0 answer.
    # R = [1, 0 (agent 1), 1 (agent 2)] → μ̂ = (10·1 + 10·0 + 2·1)/3 = 4 > 1 → plain mean 2/3
    # σ: Σ(R − 2/3)² = 1/9 + 4/9 + 1/9 = 2/3, var = 1/3, σ = 0.5773503
    # A(1) = (1/3)/0.5773503 = 0.5773493, A(0) = −(2/3)/0.5773503 = −1.1546986
    a = adv([1.0, 0.0, 1.0], [0, 0, 0], [1, 1, 2], learner=0, capability=[1.0, 0.1, 0.5])
    assert_close(a, T([0.5773493, -1.1546986, 0.5773493]))


def test_no_fallback_when_baseline_equals_max_exactly():
    # capability [1, 0.05] → ω^(0,1) = 20 → clamp → exactly 10; one agent-1 answer with R = 1 and
    # nine agent-0 answers with R = 0: μ̂ = 10·1/10 = 1.0 = max R: not above it, so no fallback, A(1) = 0
    # (the fallback would give the learner's own mean 0 and A(1) = 1/σ = 3.16).
    rewards = [1.0] + [0.0] * 9
    sources = [1] + [0] * 9
    a = adv(rewards, [0] * 10, sources, learner=0, capability=[1.0, 0.05])
    # σ: mean 0.1, Σ(R − 0.1)² = 0.81 + 9·0.01 = 0.9, var = 0.1, σ = 0.3162278; A(0) = −1/0.3162278
    assert a[0].item() == pytest.approx(0.0, abs=1e-6)
    assert_close(a[1:], torch.full((9,), -3.1622677))


# ---- degenerate groups ------------------------------------------------------------------------

@pytest.mark.parametrize("learner", [0, 1])
@pytest.mark.parametrize("value", [0.0, 1.0, 0.5])
def test_all_equal_group_is_exactly_zero(value, learner):
    # every R equal: σ = 0. Learner 1 (ω^(1,0) = 1/3): μ̂ = (2·R/3 + 2·R)/4 = 2R/3 ≠ R, so without the
    # rule A would be (R/3)/1e-6; learner 0 (ω^(0,1) = 3): μ̂ = 2R > R falls back to its own mean R.
    a = adv([value] * 4, [0] * 4, [0, 0, 1, 1], learner=learner, capability=[0.9, 0.3])
    assert torch.equal(a, torch.zeros(4))
    g = group_advantages(T([value] * 4), T([0] * 4))
    assert torch.equal(g, torch.zeros(4))


def test_single_answer_group_is_zero_next_to_a_normal_group():
    # group 5 has one answer (unbiased std undefined) → 0; group 1 is the two-agent case above
    a = adv([1.0] + TWO_R, [5, 1, 1, 1, 1], [1] + TWO_SRC, learner=0, capability=TWO_CAP)
    assert_close(a, T([0.0, 0.4330120, -1.2990359, 0.4330120, -1.2990359]))
    assert torch.isfinite(a).all()


# ---- switches, many groups, permutation -------------------------------------------------------

def test_capability_unaware_equals_plain_joint_mean():
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 2, (40,), generator=gen).float()
    groups = torch.randint(0, 6, (40,), generator=gen)
    sources = torch.randint(0, 3, (40,), generator=gen)
    cap = T([0.9, 0.2, 0.5])
    plain = group_advantages(rewards, groups)
    for k in range(3):
        a = hacpo_advantages(rewards, groups, sources, learner=k, capability=cap, capability_aware=False)
        assert_close(a, plain)
    # and the capability-aware version really differs here (so the line above is not vacuous)
    aware = hacpo_advantages(rewards, groups, sources, learner=0, capability=cap)
    assert (aware - plain).abs().max() > 0.1


def test_group_advantages_hand_values():
    # group 0: R = [1, 0, 0] → mean 1/3, var = (4/9 + 1/9 + 1/9)/2 = 1/3, σ = 0.5773503
    #   A = [0.6667, −0.3333, −0.3333]/0.5773503 = [1.1546986, −0.5773493, −0.5773493]
    # group 1: R = [2, 4] → mean 3, var = 2, σ = 1.4142136; normalize_std=False → R − mean
    r, g = T([1.0, 0.0, 0.0, 2.0, 4.0]), T([0, 0, 0, 1, 1])
    assert_close(group_advantages(r, g), T([1.1546986, -0.5773493, -0.5773493, -0.7071065, 0.7071065]))
    assert_close(group_advantages(r, g, normalize_std=False), T([2 / 3, -1 / 3, -1 / 3, -1.0, 1.0]))


def test_unsorted_non_contiguous_group_ids():
    # two-agent group (id 42) interleaved with the three-agent group of learner 0 (id 7) and a
    # single answer (id −3); each group must get exactly its stand-alone values.
    # learner 0, capability [0.6, 0.3, 0.9]: the two-agent group now has ω^(0,1) = 2 as before.
    rows = [  # (group id, source, reward, expected A)
        (7, 0, 1.0, 0.1075827), (42, 0, 1.0, 0.4330120), (7, 0, 0.0, -1.8289053),
        (-3, 2, 1.0, 0.0), (42, 1, 0.0, -1.2990359), (7, 1, 1.0, 0.1075827),
        (7, 1, 1.0, 0.1075827), (42, 0, 0.0, -1.2990359), (7, 2, 0.0, -1.8289053),
        (42, 1, 1.0, 0.4330120), (7, 2, 1.0, 0.1075827),
    ]
    groups, sources, rewards, expected = zip(*rows)
    a = adv(list(rewards), list(groups), list(sources), learner=0, capability=THREE_CAP)
    assert_close(a, T(expected))


def test_permuting_the_batch_permutes_the_advantages():
    gen = torch.Generator().manual_seed(1)
    rewards = torch.rand(30, generator=gen).round(decimals=1)
    groups = torch.randint(0, 5, (30,), generator=gen) * 3
    sources = torch.randint(0, 3, (30,), generator=gen)
    cap = T([0.7, 0.2, 0.45])
    perm = torch.randperm(30, generator=gen)
    a = hacpo_advantages(rewards, groups, sources, learner=1, capability=cap)
    a_perm = hacpo_advantages(rewards[perm], groups[perm], sources[perm], learner=1, capability=cap)
    assert_close(a_perm, a[perm])


# ---- ω: floor and clamp -----------------------------------------------------------------------

def test_zero_capability_is_floored_and_omega_clamped():
    # capability [0, 0.5] → P̂_0 floored at 1e-8; group: agent 0 R = 0, agent 1 R = 1; σ = 0.7071068
    # learner 0: ω^(0,1) = 1e-8/0.5 → clamp → 0.1: μ̂ = (0 + 0.1·1)/2 = 0.05
    #   A = [−0.05, 0.95]/0.7071068 = [−0.0707106, 1.3435010]
    # learner 1: ω^(1,0) = 0.5/1e-8 → clamp → 10: μ̂ = (10·0 + 1)/2 = 0.5, A = [−0.7071058, 0.7071058]
    a0 = adv([0.0, 1.0], [0, 0], [0, 1], learner=0, capability=[0.0, 0.5])
    a1 = adv([0.0, 1.0], [0, 0], [0, 1], learner=1, capability=[0.0, 0.5])
    assert torch.isfinite(a0).all() and torch.isfinite(a1).all()
    assert_close(a0, T([-0.0707106, 1.3435010]))
    assert_close(a1, T([-0.7071058, 0.7071058]))


def test_omega_matrix_ratios_and_clamp():
    # rows = learner k, cols = source j, ω^(k,j) = clamp(P̂_k / P̂_j, 0.1, 10)
    # P̂ = [1, 0.05, 0.5, 0]: 1/0.05 = 20 → 10; 0.05/1 = 0.05 → 0.1; 0.5/0.05 = 10; anything/1e-8 → 10
    w = omega_matrix(T([1.0, 0.05, 0.5, 0.0]))
    expected = T([
        [1.0, 10.0, 2.0, 10.0],
        [0.1, 1.0, 0.1, 10.0],
        [0.5, 10.0, 1.0, 10.0],
        [0.1, 0.1, 0.1, 1.0],
    ])
    assert_close(w, expected)
    assert w.dtype == torch.float32


# ---- input validation -------------------------------------------------------------------------

@pytest.mark.parametrize("rewards, groups, sources", [
    ([1.0, 0.0, 1.0], [0, 0], [0, 1, 1]),          # group_ids too short
    ([1.0, 0.0, 1.0], [0, 0, 0], [0, 1]),          # source_ids too short
    ([[1.0, 0.0]], [[0, 0]], [[0, 1]]),            # 2-D
])
def test_mismatched_shapes_raise(rewards, groups, sources):
    with pytest.raises(ValueError):
        adv(rewards, groups, sources, learner=0, capability=[0.5, 0.5])


def test_group_advantages_mismatched_shapes_raise():
    with pytest.raises(ValueError):
        group_advantages(T([1.0, 0.0]), T([0, 0, 0]))


@pytest.mark.parametrize("learner", [-1, 2])
def test_learner_out_of_range_raises(learner):
    with pytest.raises(ValueError):
        adv([1.0, 0.0], [0, 0], [0, 1], learner=learner, capability=[0.5, 0.5])


def test_eps_enters_the_denominator():
    # R = [1, 0]: σ = 0.7071068; with eps = 0.5, A = ±0.5/(0.7071068 + 0.5) = ±0.4142136
    a = adv([1.0, 0.0], [0, 0], [0, 0], learner=0, capability=[0.5], eps=0.5)
    assert_close(a, T([0.4142136, -0.4142136]))
    assert_close(group_advantages(T([1.0, 0.0]), T([0, 0]), eps=0.5), T([0.4142136, -0.4142136]))


# ---- found by mutation testing (docs/mutation.md) ------------------------------------------------

def test_shape_error_names_the_tensors_and_their_shapes():
    # rewards too short: the check must cover rewards too (not only group_ids / source_ids), and say which
    with pytest.raises(ValueError, match=r"'rewards': torch.Size\(\[2\]\), 'group_ids': torch.Size\(\[3\]\)"):
        adv([1.0, 0.0], [0, 0, 0], [0, 1, 1], learner=0, capability=[0.5, 0.5])
    with pytest.raises(ValueError, match=r"shapes \{'rewards': torch.Size\(\[2\]\), 'group_ids'"):
        group_advantages(T([1.0, 0.0]), T([0, 0, 0]))


def test_learner_error_names_the_learner_and_the_capability_shape():
    with pytest.raises(ValueError, match=r"learner=2 is not an index into capability of shape \(2,\)"):
        adv([1.0, 0.0], [0, 0], [0, 1], learner=2, capability=[0.5, 0.5])


@pytest.mark.parametrize("sources", [[0, -1], [-1, -1], [0, 2], [2, 2]])
def test_source_ids_out_of_range_raise(sources):
    # -1 alone must raise too (it would silently index the last agent's ω), and N alone (one past the end)
    with pytest.raises(ValueError, match=r"source_ids must lie in \[0, 2\) \(one capability per agent\)"):
        adv([1.0, 0.0], [0, 0], sources, learner=0, capability=[0.5, 0.5])


def test_empty_batch_gives_empty_advantages():
    empty_f, empty_l = torch.zeros(0), torch.zeros(0, dtype=torch.long)
    assert group_advantages(empty_f, empty_l).shape == (0,)
    a = hacpo_advantages(empty_f, empty_l, empty_l, learner=0, capability=T([0.5, 0.5]))
    assert a.shape == (0,) and a.dtype == torch.float32


@pytest.fixture
def float64_default():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def test_same_values_under_a_float64_default_dtype(float64_default):
    # the group sums and extremes must take their inputs' dtype (float32), not torch's default: a user's
    # torch.set_default_dtype(torch.float64) must not break or change the advantages
    a = adv(TWO_R, [0, 0, 0, 0], TWO_SRC, learner=0, capability=TWO_CAP)
    assert a.dtype == torch.float32
    assert_close(a, torch.tensor([0.4330120, -1.2990359, 0.4330120, -1.2990359], dtype=torch.float32))
    g = group_advantages(T([1.0, 0.0, 0.0, 1.0]), T([0, 0, 1, 1]))
    assert g.dtype == torch.float32
    assert_close(g, torch.tensor([0.7071064, -0.7071064, -0.7071064, 0.7071064], dtype=torch.float32))
