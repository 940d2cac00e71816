"""examples/minimal_hacpo.py is documentation that must keep running."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from hacrl.core import (
    CapabilityTracker,
    LossInputs,
    StepSettings,
    hacpo_advantages,
    hacpo_loss,
    stepwise_lower_bound,
)

pytestmark = pytest.mark.model

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "minimal_hacpo.py"


def test_minimal_example_runs():
    res = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "2", "--prompts", "4", "--group", "4"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[0].startswith("step   1") and lines[1].startswith("step   2")
    assert "greedy accuracy" in lines[-1] and "greedy accuracy" in lines[-2]


def test_one_step_of_the_example_is_what_hacrl_core_computes(load_script):
    """The example's capability, ω, advantages and per-minibatch loss (value and gradient) on a literal pool
    equal CapabilityTracker, hacpo_advantages and hacpo_loss on the same rows."""
    ex = load_script("examples/minimal_hacpo.py", "minimal_hacpo")  # defines, does not train (__main__ does)
    torch.manual_seed(0)
    agents = [ex.Agent("qwen2-char", lr=0.0), ex.Agent("llama-bpe", lr=0.0)]
    batch = [("12+30=", "42"), ("07+08=", "15")]
    texts = {0: [["42", "41", "42"], ["15", "15", "16"]], 1: [["42", "4", "43"], ["1", "15", "51"]]}

    def answer(agent, prompt, text, finished):
        tokens = agent.encode(text) + ([agent.tok.eos_token_id] if finished else [])
        logp, mask = ex.logprobs(agent.model, [agent.encode(prompt)], [tokens])
        with torch.no_grad():  # π_old = the source's own mean log-prob (temperature 1, no update yet)
            old_mean = float(logp.sum() / mask.sum())
        return {"tokens": tokens, "text": text, "finished": finished, "old_mean": old_mean}

    pool = [(g, j, answer(agents[j], batch[g][0], text, finished=i != 2), ex.reward(text, batch[g][1]))
            for j in (0, 1) for g in (0, 1) for i, text in enumerate(texts[j][g])]
    earlier = [(g, j, a, r * (j == 0)) for g, j, a, r in pool]  # a previous step: agent 1 solved nothing

    tracker = CapabilityTracker(2, window=ex.WINDOW)
    for step_pool in (earlier, pool):
        cap = ex.update_capability(agents, step_pool)
        tracker.update(torch.tensor([r for *_, r in step_pool]), torch.tensor([j for _, j, _, _ in step_pool]))
    # P̂_0 = (4/6 + 4/6)/2 = 2/3, P̂_1 = (0 + 2/6)/2 = 1/6: ω^(0,1) = 4, ω^(1,0) = 0.25
    assert_close(torch.tensor(cap), tracker.capability)
    assert_close(tracker.capability, torch.tensor([2 / 3, 1 / 6]))
    omega = ex.omega_table(cap)
    assert_close(torch.tensor(omega), tracker.omega_matrix())
    assert_close(tracker.omega_matrix(), torch.tensor([[1.0, 4.0], [0.25, 1.0]]))

    for k, learner in enumerate(agents):
        rows = ex.learner_rows(k, learner, pool, batch, omega)
        order = [(g, j, r) for g in (0, 1) for gg, j, _, r in pool if gg == g]  # learner_rows' row order
        groups, sources, rewards = (torch.tensor(x) for x in zip(*order))
        adv_B = hacpo_advantages(rewards.float(), groups, sources, learner=k, capability=tracker.capability)
        assert_close(torch.tensor([r["adv"] for r in rows]), adv_B, rtol=1e-5, atol=1e-6)
        omega_B = tracker.omega_matrix()[sources, k]  # ω^(source, learner)
        assert_close(torch.tensor([r["omega"] for r in rows]), omega_B)
        half = len(rows) // 2
        for m, (lo, hi) in enumerate([(0, half), (half, len(rows))]):
            mb = rows[lo:hi]
            params = [p for p in learner.model.parameters() if p.requires_grad]
            ex_loss = ex.hacpo_loss(learner, mb, m)
            logp, mask = ex.logprobs(learner.model, [r["prompt"] for r in mb], [r["answer"] for r in mb])
            inputs = LossInputs(logp, mask, adv_B[lo:hi], old_logp_mean_B=torch.tensor([r["old_mean"] for r in mb]),
                                own_B=sources[lo:hi] == k, omega_B=omega_B[lo:hi])
            step = StepSettings(clip_low=ex.CLIP_LOW, clip_high=ex.CLIP_HIGH, alpha=ex.ALPHA,
                                cross_lower=stepwise_lower_bound(m, delta=ex.DELTA, delta_step=ex.DELTA_STEP))
            core_loss, metrics = hacpo_loss(inputs, step)
            assert int(metrics["count/own"]) > 0 and int(metrics["count/cross"]) > 0
            assert_close(ex_loss, core_loss, rtol=1e-5, atol=1e-7)
            ex_grads = torch.autograd.grad(ex_loss, params, allow_unused=True)
            core_grads = torch.autograd.grad(core_loss, params, allow_unused=True)
            assert any(g is not None and g.abs().sum() > 0 for g in core_grads)
            for a, b in zip(ex_grads, core_grads, strict=True):
                assert (a is None) == (b is None)
                if a is not None:
                    assert_close(a, b, rtol=1e-4, atol=1e-7)
