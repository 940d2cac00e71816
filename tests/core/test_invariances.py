"""Structural invariances: one agent reduces HACPO to GSPO, micro-batch splitting is exact, and the
batch order does not matter."""

import pytest
import torch
from torch.testing import assert_close

from hacrl.core import (
    LossInputs,
    StepSettings,
    group_advantages,
    grpo_loss,
    gspo_loss,
    hacpo_advantages,
    hacpo_loss,
    imitation_loss,
)

B, T, V, D = 8, 6, 11, 5


def tiny_policy(seed):
    """A shared-parameter 'model' so that micro-batch gradients really have to be summed:
    logp_BT = log_softmax(emb[prev token] @ W)[token]."""
    gen = torch.Generator().manual_seed(seed)
    emb = torch.randn(V, D, generator=gen).requires_grad_(True)
    W = torch.randn(D, V, generator=gen).requires_grad_(True)
    tokens = torch.randint(0, V, (B, T + 1), generator=gen)
    lengths = torch.tensor([6, 1, 4, 0, 5, 2, 6, 3])  # uneven, with one empty answer
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()

    def logp_of(rows):
        logits = emb[tokens[rows, :-1]] @ W
        return torch.log_softmax(logits, -1).gather(-1, tokens[rows, 1:, None]).squeeze(-1)

    with torch.no_grad():
        base = logp_of(torch.arange(B))
    data = {
        "mask": mask,
        "old_mean": (base * mask).sum(-1) / mask.sum(-1).clamp_min(1) + 0.08 * torch.randn(B, generator=gen),
        "old_tok": base + 0.1 * torch.randn(B, T, generator=gen),
        "ref": base + 0.3 * torch.randn(B, T, generator=gen),
        "adv": torch.randn(B, generator=gen),
        "own": torch.tensor([True, False, True, False, False, True, False, True]),
        "omega": torch.tensor([1.0, 2.5, 1.0, 0.4, 3.0, 1.0, 0.7, 1.0]),
        # cross rows 1, 3 (the empty one) and 6 are other agents' correct answers (imitation)
        "imitate": torch.tensor([False, True, False, True, False, False, True, False]),
    }
    return (emb, W), logp_of, data


LOSSES = {"hacpo": hacpo_loss, "gspo": gspo_loss, "grpo": grpo_loss, "imitation": imitation_loss}


def loss_on(name, logp_of, data, rows, shares=(None, None)):
    """The loss of the rows ``rows``; ``shares``: the minibatch's own / imitated shares (imitation only)."""
    d = {k: v[rows] for k, v in data.items()}
    logp = logp_of(rows)
    inputs = LossInputs(logp, d["mask"], d["adv"], old_logp_mean_B=d["old_mean"], own_B=d["own"],
                        omega_B=d["omega"], old_logp_BT=d["old_tok"], ref_logp_BT=d["ref"],
                        imitate_B=d["imitate"], own_share=shares[0], imitate_share=shares[1])
    loss, _ = LOSSES[name](inputs, StepSettings(clip_low=0.2, clip_high=0.28, alpha=1.0, cross_lower=0.85,
                                                kl_coef=0.05, imitation_coef=0.7))
    return loss


def accumulated_grads(name, seed, split, weights=None, minibatch_shares=True):
    params, logp_of, data = tiny_policy(seed)
    # the whole minibatch's shares, as the learner passes them to each micro-batch (4/8 own, 3/8 imitated)
    own, imitate = data["own"], data["imitate"] & ~data["own"]
    shares = (float(own.float().mean()), float(imitate.float().mean())) if minibatch_shares else (None, None)
    total = [torch.zeros_like(p) for p in params]
    start = 0
    for j, size in enumerate(split):
        rows = torch.arange(start, start + size)
        start += size
        w = size / B if weights is None else weights[j]
        gs = torch.autograd.grad(w * loss_on(name, logp_of, data, rows, shares), params)
        total = [t + g for t, g in zip(total, gs)]
    return total


@pytest.mark.parametrize("name", list(LOSSES))
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("split", [(4, 4), (1,) * 8, (3, 5)])
def test_microbatch_split_gives_the_full_minibatch_gradient(name, seed, split):
    full = accumulated_grads(name, seed, (8,))
    assert all(g.abs().max() > 1e-3 for g in full)  # a real, non-zero gradient
    for g_split, g_full in zip(accumulated_grads(name, seed, split), full):
        assert_close(g_split, g_full, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(LOSSES))
def test_microbatch_split_is_sensitive_to_the_weights(name):
    # the check above can fail: weighting the uneven 3/5 split by 1/2 each (a common bug) is wrong
    full = accumulated_grads(name, 0, (8,))
    wrong = accumulated_grads(name, 0, (3, 5), weights=(0.5, 0.5))
    assert max((a - b).abs().max() for a, b in zip(wrong, full)) > 1e-3


@pytest.mark.parametrize("split", [(3, 5), (1,) * 8])
def test_imitation_micro_batches_need_the_minibatch_shares(split):
    # each micro-batch averaging over its own subsets (own rows, imitated rows) instead of the minibatch's
    # gives another gradient: the 3/5 split has 2 of 4 own rows and 1 of 3 imitated ones in its first part
    full = accumulated_grads("imitation", 0, (8,))
    assert all(torch.equal(a, b) for a, b in zip(full, accumulated_grads("imitation", 0, (8,),
                                                                          minibatch_shares=False)))
    wrong = accumulated_grads("imitation", 0, split, minibatch_shares=False)
    assert max((a - b).abs().max() for a, b in zip(wrong, full)) > 1e-3


# ---- one agent: HACPO reduces to GSPO ------------------------------------------------------------

@pytest.mark.parametrize("p", [0.05, 0.5, 0.9])
def test_single_agent_advantages_equal_group_advantages(p):
    gen = torch.Generator().manual_seed(3)
    rewards = torch.randint(0, 2, (48,), generator=gen).float()
    groups = torch.randint(0, 6, (48,), generator=gen)
    a = hacpo_advantages(rewards, groups, torch.zeros(48, dtype=torch.long), learner=0,
                         capability=torch.tensor([p]))
    assert_close(a, group_advantages(rewards, groups), rtol=0, atol=0)


@pytest.mark.parametrize("seed", [0, 1])
def test_single_agent_hacpo_loss_equals_gspo_loss(seed):
    params, logp_of, data = tiny_policy(seed)
    rows = torch.arange(B)
    d = dict(data, own=torch.ones(B, dtype=torch.bool))
    h = loss_on("hacpo", logp_of, d, rows)
    g = loss_on("gspo", logp_of, d, rows)
    assert_close(h, g, rtol=1e-6, atol=1e-7)
    for gh, gg in zip(torch.autograd.grad(h, params), torch.autograd.grad(g, params)):
        assert_close(gh, gg, rtol=1e-6, atol=1e-7)


# ---- permutation ---------------------------------------------------------------------------------

def test_permuting_the_batch():
    gen = torch.Generator().manual_seed(7)
    n = 24
    rewards = torch.randint(0, 2, (n,), generator=gen).float()
    groups = torch.randint(0, 4, (n,), generator=gen)
    sources = torch.randint(0, 3, (n,), generator=gen)
    cap = torch.tensor([0.8, 0.3, 0.55])
    perm = torch.randperm(n, generator=gen)

    adv = hacpo_advantages(rewards, groups, sources, learner=0, capability=cap)
    adv_p = hacpo_advantages(rewards[perm], groups[perm], sources[perm], learner=0, capability=cap)
    assert_close(adv_p, adv[perm])

    logp = -torch.rand(n, 4, generator=gen)
    mask = (torch.rand(n, 4, generator=gen) > 0.3).float()
    old = (logp * mask).sum(-1) / mask.sum(-1).clamp_min(1) + 0.1 * torch.randn(n, generator=gen)
    own = sources == 0
    omega = cap[sources] / cap[0]
    ref = logp - 0.2
    kw = dict(clip_low=0.2, clip_high=0.28, alpha=1.0, cross_lower=0.8, kl_coef=0.1)

    x = logp.clone().requires_grad_(True)
    loss, _ = hacpo_loss(LossInputs(x, mask, adv, old_logp_mean_B=old, own_B=own, omega_B=omega, ref_logp_BT=ref),
                         StepSettings(**kw))
    (g,) = torch.autograd.grad(loss, x)
    xp = logp[perm].clone().requires_grad_(True)
    loss_p, _ = hacpo_loss(LossInputs(xp, mask[perm], adv_p, old_logp_mean_B=old[perm], own_B=own[perm],
                                      omega_B=omega[perm], ref_logp_BT=ref[perm]), StepSettings(**kw))
    (gp,) = torch.autograd.grad(loss_p, xp)
    assert_close(loss_p, loss)
    assert_close(gp, g[perm])
