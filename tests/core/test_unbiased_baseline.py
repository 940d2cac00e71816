"""Appendix D as a simulation: with ω set to the TRUE capability ratio, the capability-aware baseline
μ̂_k = (1/(N·G)) Σ_j Σ_i ω^(k,j) R_{j,i} is an unbiased estimate of the learner's own success rate p_k,
whereas the plain joint mean is pulled toward the pool mean.

E[μ̂_k] = (1/(N·G)) Σ_j G · (p_k/p_j) · p_j = p_k.   Plain mean: E = (1/N) Σ_j p_j.
"""

import pytest
import torch
from torch.testing import assert_close

from hacrl.core import hacpo_advantages, omega_matrix

PROMPTS, G = 20_000, 8


def simulate(p, seed):
    """Bernoulli(p_j) rewards, float64 [PROMPTS, N, G]."""
    gen = torch.Generator().manual_seed(seed)
    p_N = torch.tensor(p, dtype=torch.float64)
    return torch.bernoulli(p_N[None, :, None].expand(PROMPTS, len(p), G), generator=gen)


def baselines(rewards_PNG, omega_NN):
    """μ̂ for every learner k and prompt: [PROMPTS, N] = (1/(N·G)) Σ_j ω[k, j] Σ_i R[., j, i]."""
    n_agents = rewards_PNG.shape[1]
    sums_PN = rewards_PNG.sum(-1)
    return sums_PN @ omega_NN.double().T / (n_agents * G)


def mean_and_se(x_P):
    return x_P.mean().item(), (x_P.std() / x_P.numel() ** 0.5).item()


def library_baseline(rewards_PNG, p, learner, capability_aware=True):
    """The baseline ``hacpo_advantages`` used for ``learner`` in each group, b = R_i − A_i·(σ + eps), one per
    answer ([P, N·G]), and which groups are not degenerate (where A = 0 says nothing about b)."""
    n_prompts, n_agents, g = rewards_PNG.shape
    groups = torch.arange(n_prompts).repeat_interleave(n_agents * g)
    sources = torch.arange(n_agents).repeat_interleave(g).repeat(n_prompts)
    adv = hacpo_advantages(rewards_PNG.reshape(-1).float(), groups, sources, learner=learner,
                           capability=torch.tensor(p), capability_aware=capability_aware)
    r_PM = rewards_PNG.reshape(n_prompts, -1)
    sigma_P = r_PM.std(-1)  # unbiased, over the raw joint rewards
    return r_PM - adv.reshape(n_prompts, -1).double() * (sigma_P[:, None] + 1e-6), sigma_P > 0


@pytest.mark.parametrize("p, seed", [((0.2, 0.8), 0), ((0.2, 0.5, 0.8), 1), ((0.35, 0.6, 0.1, 0.9), 2)])
def test_capability_aware_baseline_is_unbiased(p, seed):
    rewards = simulate(p, seed)
    omega = omega_matrix(torch.tensor(p))  # the library's ω with the true P: p_k/p_j, within [0.1, 10]
    mu = baselines(rewards, omega)
    for k, p_k in enumerate(p):
        mean, se = mean_and_se(mu[:, k])
        assert abs(mean - p_k) < 4 * se, (k, mean, p_k, se)
        assert se < 0.003  # the test has the power to see a bias of ~0.01


@pytest.mark.parametrize("p, seed", [((0.2, 0.8), 3), ((0.2, 0.5, 0.8), 4)])
def test_plain_mean_is_biased_toward_the_pool_mean(p, seed):
    """The "−Adv" ablation: ``hacpo_advantages(capability_aware=False)`` measures every answer against the
    joint group mean, whose expectation is the pool mean (1/N) Σ_j p_j for every learner, not its p_k."""
    rewards = simulate(p, seed)
    pool = sum(p) / len(p)
    joint_mean_P = rewards.reshape(PROMPTS, -1).mean(-1)
    for k, p_k in enumerate(p):
        implied, ok = library_baseline(rewards, p, k, capability_aware=False)
        assert ok.float().mean() > 0.99  # all-equal groups are rare here: conditioning on the rest is no bias
        assert_close(implied[ok], joint_mean_P[ok, None].expand_as(implied[ok]), rtol=0, atol=2e-6)
        mean, se = mean_and_se(implied[ok, 0])
        assert abs(mean - pool) < 4 * se
        if abs(p_k - pool) > 0.1:  # the weakest and the strongest agent
            assert abs(mean - p_k) > 50 * se, (k, mean, p_k)


def test_clamped_ratio_gives_the_predicted_bias():
    # p = (0.05, 0.9): p_1/p_0 = 18 is clamped to 10, so E[μ̂_1] = (0.9 + 10·0.05)/2 = 0.7, not 0.9;
    # the weak learner is unaffected: ω^(0,1) = 0.05/0.9 = 0.0556 → 0.1, E[μ̂_0] = (0.05 + 0.1·0.9)/2 = 0.07
    p = (0.05, 0.9)
    mu = baselines(simulate(p, 5), omega_matrix(torch.tensor(p)))
    for k, predicted in enumerate([0.07, 0.7]):
        mean, se = mean_and_se(mu[:, k])
        assert abs(mean - predicted) < 4 * se, (k, mean, predicted)


@pytest.mark.parametrize("p, seed", [((0.2, 0.8), 6), ((0.2, 0.5, 0.8), 7)])
def test_library_advantages_use_this_baseline(p, seed):
    """hacpo_advantages(capability = true p) implies, per non-degenerate group, the baseline
    b = R_i − A_i·(σ + eps); it must equal the formula μ̂_k above, or — only where μ̂_k > max R = 1 —
    the learner's own mean in the group. Degenerate groups must get A = 0."""
    rewards = simulate(p, seed)[:4000]
    n_agents = len(p)
    mu = baselines(rewards, omega_matrix(torch.tensor(p)))
    for k in range(n_agents):
        implied, ok = library_baseline(rewards, p, k)
        # degenerate groups get A = 0, so their implied baseline is each answer's own reward
        assert torch.equal(implied[~ok], rewards.reshape(rewards.shape[0], -1)[~ok])
        expected = torch.where(mu[:, k] > 1.0, rewards[:, k].mean(-1), mu[:, k])
        assert_close(implied[ok], expected[ok, None].expand_as(implied[ok]), rtol=0, atol=2e-6)
        if k == n_agents - 1:  # the strong learner: the fallback is exercised here
            assert (mu[ok, k] > 1.0).sum() > 0
