"""The adaptive cross window through the learner and the trainer, and the N-agent baseline gspo-x<N>.

The pure parts (``coverage_lower_bound``, ``CrossWindow``) are tested in tests/core/test_window.py; here: the
bounds reach the loss per row with the paper's stepwise tightening, the learner reports each cross answer's
ratio once under its source, the trainer feeds them back (ℓ_0 of step 2 is the coverage bound of step 1's
ratios), logs the bound, and resumes it exactly.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from test_update import (  # the spy fixture is tests/learner/conftest.py's
    CROSS_RATIOS,
    SETTINGS,
    ablation_minibatches,
    make_agent,
    run_algorithm,
)

from hacrl.config import derive, load_config
from hacrl.core import StepSettings, hacpo_loss
from hacrl.core.losses import LossInputs
from hacrl.core.window import CrossWindow, coverage_lower_bound
from hacrl.learner.algorithms import ALGORITHMS, adaptive_window
from hacrl.learner.update import update_learner
from hacrl.learner.view import ViewRow, minibatches
from hacrl.pool import TrajectoryPool
from hacrl.trainer.phases import rescue_share
from hacrl.trainer.trainer import Trainer
from hacrl.types import Problem, Trajectory

# ---- the loss takes one bound per row -----------------------------------------------------------------------

def _cross_inputs(ratios: list[float], advantages: list[float]) -> LossInputs:
    """One-token cross answers whose sequence ratio is exactly ``ratios`` (logp 0, old mean −log s)."""
    n = len(ratios)
    logp = torch.zeros(n, 1, dtype=torch.float64, requires_grad=True)
    return LossInputs(logp_BT=logp, mask_BT=torch.ones(n, 1), advantages_B=torch.tensor(advantages),
                      old_logp_mean_B=torch.tensor([-math.log(r) for r in ratios], dtype=torch.float64),
                      own_B=torch.zeros(n, dtype=torch.bool), omega_B=torch.tensor([2.0] * n))


def test_a_constant_bound_tensor_equals_the_float():
    ratios, adv = [0.5, 0.81, 0.9, 1.5], [1.0, -1.0, 1.0, 1.0]
    a, b = _cross_inputs(ratios, adv), _cross_inputs(ratios, adv)
    loss_a, m_a = hacpo_loss(a, StepSettings(clip_low=0.2, clip_high=0.28, cross_lower=0.8))
    loss_b, m_b = hacpo_loss(b, StepSettings(clip_low=0.2, clip_high=0.28, cross_lower=torch.full((4,), 0.8)))
    loss_a.backward()
    loss_b.backward()
    assert float(loss_a.detach()) == float(loss_b.detach())
    assert torch.equal(a.logp_BT.grad, b.logp_BT.grad)
    assert {k: float(v) for k, v in m_a.items()} == {k: float(v) for k, v in m_b.items()}


def test_each_row_is_clipped_at_its_own_bound():
    # ratio 0.6 under bounds 0.5 (inside: gradient) and 0.7 (below: none); α = 1, ω = 2, A = 1, B = 2:
    # J = c·sg(c)·ω·A, d(−J/B)/d logp = −c·c·ω/B = −0.36 for the row inside
    x = _cross_inputs([0.6, 0.6], [1.0, 1.0])
    loss, metrics = hacpo_loss(x, StepSettings(clip_low=0.2, clip_high=0.28, cross_lower=torch.tensor([0.5, 0.7])))
    loss.backward()
    assert x.logp_BT.grad[:, 0].tolist() == pytest.approx([-0.36, 0.0])
    assert float(metrics["cross/in_window_frac"]) == 0.5
    # the diagnostics: both advantages positive, half of them inside; c^(1+α)·ω where there is a gradient
    assert float(metrics["cross/adv_pos_frac"]) == 1.0
    assert float(metrics["cross/pos_in_window_frac"]) == 0.5
    assert float(metrics["cross/grad_scale"]) == pytest.approx((0.36 * 2 + 0.0) / 2)


# ---- the learner: bounds per source and step, ratios reported -------------------------------------------------

@pytest.mark.model
def test_the_learner_hands_each_row_its_sources_bound_and_reports_the_ratios(spy):
    agent = make_agent()
    mbs = ablation_minibatches(agent)  # 3 minibatches: 2 own rows, then 4 of agent 1 at CROSS_RATIOS
    from hacrl.core import omega_matrix
    from hacrl.learner.view import assign_advantages
    cap = torch.tensor([0.2, 0.8])
    assign_advantages([r for mb in mbs for r in mb], 0, ALGORITHMS.get("hacpo"), omega_matrix(cap))
    seen: dict[int, list[float]] = {}
    update_learner(agent, mbs, ALGORITHMS.get("hacpo"), SETTINGS, micro_batch_size=64, grad_clip=1.0,
                   cross_lower0=[0.9, 0.3], observed_ratios=seen)
    # own rows: their (unused) entry 0.9; agent 1's rows: ℓ_0 = 0.3, + m·δ_step = 0.025 per minibatch
    for m, call in enumerate(spy):
        expected = [min(1.0, 0.9 + 0.025 * m)] * 2 + [0.3 + 0.025 * m] * 4
        assert call.settings.cross_lower.tolist() == pytest.approx(expected)
    # lr 0: the weights never move, so every minibatch sees its cross rows at exactly CROSS_RATIOS
    assert list(seen) == [1]
    assert seen[1] == pytest.approx(list(CROSS_RATIOS) * 3, rel=1e-6)  # π_old travels in float32


@pytest.mark.model
def test_a_fixed_window_passes_the_float_bound(spy):
    agent = make_agent()
    calls = run_algorithm("hacpo", agent, ablation_minibatches(agent), spy)
    assert [c.settings.cross_lower for c in calls] == pytest.approx([0.8, 0.825, 0.85])


@pytest.mark.parametrize(("name", "cross_window", "expected"), [
    ("hacpo", "fixed", False), ("hacpo-adaptive", "fixed", True), ("hacpo", "adaptive", True),
    ("hacpo-noclip", "adaptive", False), ("gspo", "adaptive", False), ("naive", "adaptive", False),
    ("hacpo-nostep", "adaptive", True),
])
def test_which_runs_adapt(name, cross_window, expected):
    assert adaptive_window(ALGORITHMS.get(name), cross_window) is expected


# ---- the trainer: feeds the ratios back, logs the bound, resumes it ---------------------------------------------

def _trainer(tmp_path, name, *extra, resume_from=None):
    cfg = load_config("tiny-test", overrides=["algorithm.name=hacpo-adaptive", "trainer.eval_size=10",
                                              "algorithm.window_smoothing=1.0", *extra])
    run_dir = tmp_path / name
    run_dir.mkdir(exist_ok=True)
    return Trainer(cfg, run_dir, resume_from=resume_from)


@pytest.mark.model
def test_the_trainer_sets_step_twos_bound_from_step_ones_ratios(tmp_path, monkeypatch):
    observed: list[tuple[int, int, list[float]]] = []
    real = CrossWindow.observe

    def record(self, learner, source, ratios):
        observed.append((learner, source, ratios.tolist()))
        return real(self, learner, source, ratios)

    monkeypatch.setattr(CrossWindow, "observe", record)
    trainer = _trainer(tmp_path, "run")
    try:
        first, second = trainer.step(), trainer.step()
    finally:
        trainer.close()
    assert first["agent/qwen-char/window_lower/llama-bpe"] == pytest.approx(0.8)  # 1 − δ before any ratio
    assert first["agent/llama-bpe/window_lower/qwen-char"] == pytest.approx(0.8)
    # smoothing 1: step 2 uses exactly the coverage bound of what step 1 saw (B·G = 16 cross answers each)
    for learner, source, ratios in observed[:2]:
        assert len(ratios) == 16
        expected = coverage_lower_bound(torch.tensor(ratios, dtype=torch.float64), target=0.75, floor=0.1,
                                        ceiling=0.8)
        ids = ["qwen-char", "llama-bpe"]
        assert second[f"agent/{ids[learner]}/window_lower/{ids[source]}"] == pytest.approx(expected)
    assert sorted((lrn, src) for lrn, src, _ in observed[:2]) == [(0, 1), (1, 0)]


@pytest.mark.model
def test_an_adaptive_run_resumes_exactly(tmp_path):
    def lines(run_dir):
        return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]

    smooth = "algorithm.window_smoothing=0.5"
    straight = _trainer(tmp_path, "straight", "trainer.steps=3", smooth)
    straight.train()
    first = _trainer(tmp_path, "resumed", "trainer.steps=2", smooth)
    first.train()
    second = _trainer(tmp_path, "resumed", "trainer.steps=3", smooth,
                      resume_from=first.run_dir / "checkpoints" / "step-000002")
    second.train()
    # as tests/integration/test_trainer.py: the first part evaluated at step 2, so its eval lines differ there
    strip = lambda rec: {k: v for k, v in rec.items() if not k.startswith(("eval/", "timing/"))}  # noqa: E731
    a, b = lines(straight.run_dir), lines(second.run_dir)
    assert a[-1]["agent/qwen-char/window_lower/llama-bpe"] < 0.8  # it did move
    assert [strip(r) for r in a] == [strip(r) for r in b]


# ---- gspo-x<N>: the baseline matching N-agent hacpo's rollouts and updates -------------------------------------

def test_gspo_xn_matches_three_agent_hacpo_in_answers_and_updates():
    cfg = load_config("tiny-3agents")
    g, b = cfg.rollout.rollouts_per_prompt, cfg.trainer.batch_size
    hacpo = derive(cfg, shares_pool=True, rollout_multiplier=1, needs_groups=True)
    x3 = ALGORITHMS.get("gspo-x3")
    gspo3 = derive(load_config("tiny-3agents", overrides=["algorithm.name=gspo-x3"]), shares_pool=False,
                   rollout_multiplier=x3.rollout_multiplier, needs_groups=True)
    assert (x3.name, x3.shares_pool, x3.rollout_multiplier) == ("gspo-x3", False, 3)
    assert gspo3.rows_per_prompt == hacpo.rows_per_prompt == 3 * g  # a learner's answers per prompt
    # B·G/2 = 64 sequences, in whole prompt groups of 3G = 24: 2 prompts (48 rows) per optimizer step
    assert gspo3.minibatch_size == hacpo.minibatch_size == 48

    def updates(d):
        rows = [ViewRow(p, 0, True, [1], [2], 0.0, None, 0.0) for p in range(b) for _ in range(d.rows_per_prompt)]
        return len(minibatches(rows, d.minibatch_size, d.rows_per_prompt, seed=0))

    assert updates(gspo3) == updates(hacpo) == 8  # 16 prompts, 2 per step (2N = 6 when 2N divides B)
    assert "gspo-x0" not in ALGORITHMS and "gspo-xx" not in ALGORITHMS
    with pytest.raises(KeyError, match="gspo-x<N>"):
        ALGORITHMS.get("gspo-y3")


@pytest.mark.parametrize("n", ["2", "5"])
def test_gspo_xn_is_plain_gspo_with_n_times_the_rollouts(n):
    from hacrl.learner.algorithms import Algorithm

    expected = Algorithm(f"gspo-x{n}", shares_pool=False, advantage="group", loss="gspo", rollout_multiplier=int(n))
    assert ALGORITHMS.get(f"gspo-x{n}") == expected
    # the family's builder itself: the registry keeps a member once looked up, so in one process (mutation
    # testing's included) a lookup may not run the builder again
    pattern, _, build = next(f for f in ALGORITHMS._families if f[1] == "gspo-x<N>")
    assert build(**pattern.fullmatch(f"gspo-x{n}").groupdict()) == expected


# ---- rescue: what the partner solves that the learner does not --------------------------------------------------

def test_rescue_share_hand_computed():
    problems = [Problem(f"p{i}", f"{i}+1=", str(i + 1)) for i in range(4)]

    def t(group, source, reward):
        return Trajectory(prompt_index=group, source=source, text="x", finished=True, reward=reward, logp_sum=0.0,
                          num_tokens=1, token_ids=(1,), token_logps=(0.0,))

    # prompt 0: both solve; 1: only agent 1 (a rescue for 0); 2: neither (agent 1's answer unscorable);
    # 3: only agent 0 (a rescue for 1)
    pool = TrajectoryPool(problems, [t(0, 0, 1.0), t(0, 1, 1.0), t(1, 0, 0.0), t(1, 1, 0.0), t(1, 1, 1.0),
                                     t(2, 0, 0.0), t(2, 1, None), t(3, 0, 1.0), t(3, 1, 0.0)])
    assert rescue_share(pool, learner=0, source=1) == 0.25
    assert rescue_share(pool, learner=1, source=0) == 0.25
