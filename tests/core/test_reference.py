"""Slow, loop-based reference implementations written from the equations, compared with the
vectorised hacrl.core code over random seeds and shapes (values, and gradients w.r.t. logp).

The references use Python floats (advantages) and per-sequence 0-d tensors with explicit if/else
clipping (losses), so that they share no code path with the library.
"""

import random
import statistics

import pytest
import torch
from torch.testing import assert_close

from hacrl.core import (
    LossInputs,
    StepSettings,
    grpo_loss,
    gspo_loss,
    hacpo_advantages,
    hacpo_loss,
    imitation_loss,
    stepwise_lower_bound,
)

SEEDS = range(24)


# ---- references ----------------------------------------------------------------------------------

def ref_advantages(rewards, groups, sources, learner, capability, aware=True, eps=1e-6):
    """eqs. 6-8 per group, plus the documented fallbacks (degenerate group → 0, baseline > max → own mean)."""
    cap = [max(c, 1e-8) for c in capability]
    out = [0.0] * len(rewards)
    for g in set(groups):
        idx = [i for i in range(len(rewards)) if groups[i] == g]
        r = [rewards[i] for i in idx]
        if len(r) < 2 or max(r) == min(r):
            continue  # A = 0
        omega = [min(10.0, max(0.1, cap[learner] / cap[sources[i]])) if aware else 1.0 for i in idx]
        mu = sum(w * x for w, x in zip(omega, r)) / len(r)
        if mu > max(r):
            own = [rewards[i] for i in idx if sources[i] == learner]
            mu = sum(own) / len(own) if own else sum(r) / len(r)
        sigma = statistics.stdev(r)  # unbiased (n − 1)
        for i in idx:
            out[i] = (rewards[i] - mu) / (sigma + eps)
    return out


def clip(x, lo, hi):
    """Clip a 0-d tensor; outside the window the result is a constant (no gradient)."""
    if x.item() < lo:
        return torch.tensor(lo)
    if x.item() > hi:
        return torch.tensor(hi)
    return x


def seq_ratio(logp_row, mask_row, old_mean, max_log_ratio):
    """s = exp(clamp(mean over answer tokens of logp − old mean)); None for an empty answer."""
    tokens = [logp_row[t] for t in range(len(mask_row)) if mask_row[t] > 0]
    if not tokens:
        return None
    log_s = sum(tokens) / len(tokens) - old_mean
    return torch.exp(clip(log_s, -max_log_ratio, max_log_ratio))


def ref_kl(logp, mask, ref_logp, kl_coef, include):
    total = torch.tensor(0.0)
    for i in range(logp.shape[0]):
        tokens = [t for t in range(logp.shape[1]) if mask[i, t] > 0]
        if not tokens or not include[i]:
            continue
        k3 = [torch.exp(ref_logp[i, t] - logp[i, t]) - (ref_logp[i, t] - logp[i, t]) - 1 for t in tokens]
        total = total + sum(k3) / len(tokens)
    return kl_coef * total / logp.shape[0]


def own_term(s, a, clip_low, clip_high):
    unclipped, clipped = s * a, clip(s, 1 - clip_low, 1 + clip_high) * a
    return unclipped if unclipped.item() <= clipped.item() else clipped  # pessimistic min


def ref_hacpo(logp, mask, old, adv, own, omega, *, clip_low, clip_high, alpha, lower, upper, cross_clip,
              max_log_ratio, ref_logp, kl_coef):
    B = logp.shape[0]
    total = 0.0 * logp.sum()  # connected to logp even if every term below is a constant
    for i in range(B):
        s = seq_ratio(logp[i], mask[i], old[i].item(), max_log_ratio)
        if s is None:
            continue
        a = adv[i].item()
        if own[i]:
            total = total + own_term(s, a, clip_low, clip_high)
        else:
            c = clip(s, lower, upper) if cross_clip else s
            total = total + c * c.detach() ** alpha * omega[i].item() * a
    loss = -total / B
    if ref_logp is not None:
        loss = loss + ref_kl(logp, mask, ref_logp, kl_coef, [bool(o) for o in own])
    return loss


def ref_grpo(logp, mask, old_logp, adv, *, clip_low, clip_high, max_log_ratio, ref_logp, kl_coef):
    B = logp.shape[0]
    total = 0.0 * logp.sum()
    for i in range(B):
        terms = []
        for t in range(logp.shape[1]):
            if mask[i, t] > 0:
                r = torch.exp(clip(logp[i, t] - old_logp[i, t], -max_log_ratio, max_log_ratio))
                terms.append(own_term(r, adv[i].item(), clip_low, clip_high))
        if terms:
            total = total + sum(terms) / len(terms)
    loss = -total / B
    if ref_logp is not None:
        loss = loss + ref_kl(logp, mask, ref_logp, kl_coef, [True] * B)
    return loss


def ref_imitation(logp, mask, old, adv, own, imitate, *, lam, clip_low, clip_high, max_log_ratio, ref_logp,
                  kl_coef):
    """GSPO's clipped term and KL averaged over the own rows, plus λ times the mean over the imitated other
    agents' rows of −(1/L) Σ_t logp; a term without rows is 0."""
    loss = 0.0 * logp.sum()
    own_rows = [i for i in range(logp.shape[0]) if own[i]]
    imitated_rows = [i for i in range(logp.shape[0]) if imitate[i] and not own[i]]
    if own_rows:
        total = 0.0 * logp.sum()
        for i in own_rows:
            s = seq_ratio(logp[i], mask[i], old[i].item(), max_log_ratio)
            if s is not None:
                total = total + own_term(s, adv[i].item(), clip_low, clip_high)
        loss = loss - total / len(own_rows)
        if ref_logp is not None:
            idx = torch.tensor(own_rows)
            loss = loss + ref_kl(logp[idx], mask[idx], ref_logp[idx], kl_coef, [True] * len(own_rows))
    if imitated_rows and lam:
        nll = 0.0 * logp.sum()
        for i in imitated_rows:
            tokens = [logp[i, t] for t in range(logp.shape[1]) if mask[i, t] > 0]
            if tokens:
                nll = nll - sum(tokens) / len(tokens)
        loss = loss + lam * nll / len(imitated_rows)
    return loss


# ---- random problems -----------------------------------------------------------------------------

def random_advantage_problem(seed):
    rng = random.Random(seed)
    n_agents = rng.choice([1, 2, 3, 4])
    B = rng.randint(1, 40)
    group_ids = rng.sample(range(-5, 50), rng.randint(1, 6))  # unsorted, non-contiguous ids
    groups = [rng.choice(group_ids) for _ in range(B)]
    sources = [rng.randrange(n_agents) for _ in range(B)]
    if seed % 3 == 0:  # binary, mostly: fallbacks and all-equal groups happen often
        rewards = [float(rng.random() < 0.5) for _ in range(B)]
    else:
        rewards = [rng.choice([0.0, 0.25, 1.0, round(rng.random(), 3)]) for _ in range(B)]
    capability = [rng.choice([0.0, rng.uniform(0.01, 1.0), rng.uniform(0.2, 1.0)]) for _ in range(n_agents)]
    return rewards, groups, sources, capability


def random_loss_problem(seed):
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    B, T = rng.randint(1, 10), rng.randint(1, 8)
    lengths = torch.randint(0, T + 1, (B,), generator=gen)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    if seed % 2:  # holes inside the answer as well
        mask = mask * (torch.rand(B, T, generator=gen) > 0.2).float()
    logp = -torch.rand(B, T, generator=gen) * 3
    token_mean = (logp * mask).sum(-1) / mask.sum(-1).clamp_min(1)
    old = token_mean + 0.3 * torch.randn(B, generator=gen)  # ratios spread around 1 (some clipped)
    old_tok = logp + 0.3 * torch.randn(B, T, generator=gen)
    adv = torch.randn(B, generator=gen)
    own = torch.rand(B, generator=gen) < 0.5
    omega = torch.empty(B).uniform_(0.1, 10.0, generator=gen)
    ref = logp + 0.5 * torch.randn(B, T, generator=gen)
    lower = stepwise_lower_bound(rng.randint(0, 6), delta=rng.uniform(0.0, 0.5),
                                 delta_step=rng.choice([0.0, 0.05]))
    kw = {
        "clip_low": rng.uniform(0.05, 0.3), "clip_high": rng.uniform(0.05, 0.3),
        "max_log_ratio": rng.choice([10.0, 0.2]),
        "kl_coef": rng.choice([0.0, 0.1]),
    }
    hacpo_kw = {"alpha": rng.choice([0.0, 1.0, 2.0, rng.uniform(0.0, 3.0)]), "lower": lower,
                "cross_clip": rng.random() < 0.8}
    return logp, mask, old, old_tok, adv, own, omega, ref, kw, hacpo_kw


def grads(loss, logp):
    (g,) = torch.autograd.grad(loss, logp)
    return g


# ---- comparisons ---------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_hacpo_advantages_match_reference(seed):
    rewards, groups, sources, capability = random_advantage_problem(seed)
    args = (torch.tensor(rewards), torch.tensor(groups), torch.tensor(sources))
    for learner in range(len(capability)):
        for aware in (True, False):
            got = hacpo_advantages(*args, learner=learner, capability=torch.tensor(capability),
                                   capability_aware=aware)
            want = ref_advantages(rewards, groups, sources, learner, capability, aware)
            assert_close(got, torch.tensor(want, dtype=torch.float32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
def test_hacpo_loss_matches_reference(seed):
    logp, mask, old, _, adv, own, omega, ref, kw, hk = random_loss_problem(seed)
    logp = logp.requires_grad_(True)
    inputs = LossInputs(logp, mask, adv, old_logp_mean_B=old, own_B=own, omega_B=omega, ref_logp_BT=ref)
    got, _ = hacpo_loss(inputs, StepSettings(alpha=hk["alpha"], cross_lower=hk["lower"], cross_clip=hk["cross_clip"],
                                             **kw))
    want = ref_hacpo(logp, mask, old, adv, own, omega, clip_low=kw["clip_low"], clip_high=kw["clip_high"],
                     alpha=hk["alpha"], lower=hk["lower"], upper=1.0, cross_clip=hk["cross_clip"],
                     max_log_ratio=kw["max_log_ratio"], ref_logp=ref if kw["kl_coef"] else None,
                     kl_coef=kw["kl_coef"])
    assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert_close(grads(got, logp), grads(want, logp), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", SEEDS)
def test_gspo_loss_matches_reference(seed):
    logp, mask, old, _, adv, _, _, ref, kw, _ = random_loss_problem(seed)
    logp = logp.requires_grad_(True)
    got, _ = gspo_loss(LossInputs(logp, mask, adv, old_logp_mean_B=old, ref_logp_BT=ref), StepSettings(**kw))
    all_own = torch.ones(logp.shape[0], dtype=torch.bool)
    want = ref_hacpo(logp, mask, old, adv, all_own, torch.ones(logp.shape[0]), clip_low=kw["clip_low"],
                     clip_high=kw["clip_high"], alpha=0.0, lower=0.0, upper=1.0, cross_clip=True,
                     max_log_ratio=kw["max_log_ratio"], ref_logp=ref if kw["kl_coef"] else None,
                     kl_coef=kw["kl_coef"])
    assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert_close(grads(got, logp), grads(want, logp), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", SEEDS)
def test_grpo_loss_matches_reference(seed):
    logp, mask, _, old_tok, adv, _, _, ref, kw, _ = random_loss_problem(seed)
    logp = logp.requires_grad_(True)
    got, _ = grpo_loss(LossInputs(logp, mask, adv, old_logp_BT=old_tok, ref_logp_BT=ref), StepSettings(**kw))
    want = ref_grpo(logp, mask, old_tok, adv, clip_low=kw["clip_low"], clip_high=kw["clip_high"],
                    max_log_ratio=kw["max_log_ratio"], ref_logp=ref if kw["kl_coef"] else None,
                    kl_coef=kw["kl_coef"])
    assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert_close(grads(got, logp), grads(want, logp), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", SEEDS)
def test_imitation_loss_matches_reference(seed):
    logp, mask, old, _, adv, own, _, ref, kw, _ = random_loss_problem(seed)
    rng = random.Random(seed)
    imitate = ~own & (torch.rand(logp.shape[0], generator=torch.Generator().manual_seed(seed)) < 0.6)
    if seed % 4 == 0:
        imitate = imitate | own  # own rows flagged too: never imitated
    lam = rng.choice([0.0, 0.5, 1.0, 3.0])
    logp = logp.requires_grad_(True)
    inputs = LossInputs(logp, mask, adv, old_logp_mean_B=old, own_B=own, imitate_B=imitate, ref_logp_BT=ref)
    got, _ = imitation_loss(inputs, StepSettings(imitation_coef=lam, **kw))
    want = ref_imitation(logp, mask, old, adv, own, imitate, lam=lam, clip_low=kw["clip_low"],
                         clip_high=kw["clip_high"], max_log_ratio=kw["max_log_ratio"],
                         ref_logp=ref if kw["kl_coef"] else None, kl_coef=kw["kl_coef"])
    assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert_close(grads(got, logp), grads(want, logp), rtol=1e-5, atol=1e-6)


def test_random_problems_exercise_every_branch():
    """Guard against the comparisons above passing vacuously: the random problems must hit fallbacks,
    degenerate groups, empty answers, both clip sides of own and cross rows, and the log-ratio clamp."""
    hits = {"fallback": 0, "degenerate": 0, "empty": 0, "own_hi": 0, "own_lo": 0, "cross_lo": 0,
            "cross_hi": 0, "cross_in": 0, "log_clamp": 0}
    for seed in SEEDS:
        rewards, groups, sources, capability = random_advantage_problem(seed)
        for g in set(groups):
            r = [x for x, gg in zip(rewards, groups) if gg == g]
            if len(r) < 2 or max(r) == min(r):
                hits["degenerate"] += 1
                continue
            for k in range(len(capability)):
                cap = [max(c, 1e-8) for c in capability]
                mu = sum(min(10, max(0.1, cap[k] / cap[s])) * x
                         for x, gg, s in zip(rewards, groups, sources) if gg == g) / len(r)
                hits["fallback"] += mu > max(r)
        logp, mask, old, _, _, own, _, _, kw, hk = random_loss_problem(seed)
        n = mask.sum(-1)
        log_s = (logp * mask).sum(-1) / n.clamp_min(1) - old
        s = log_s.exp()
        hits["empty"] += int((n == 0).sum())
        hits["log_clamp"] += int((log_s.abs() > kw["max_log_ratio"]).sum())
        hits["own_hi"] += int((own & (s > 1 + kw["clip_high"])).sum())
        hits["own_lo"] += int((own & (s < 1 - kw["clip_low"])).sum())
        hits["cross_lo"] += int((~own & (s < hk["lower"])).sum())
        hits["cross_hi"] += int((~own & (s > 1.0)).sum())
        hits["cross_in"] += int((~own & (s >= hk["lower"]) & (s <= 1.0)).sum())
    assert all(v >= 3 for v in hits.values()), hits
