"""The rollout correction in the learner: the engine's log-prob of an own answer reaches the loss as the weight
w̃ = trunc(exp(mean log π_old − mean log π_engine)) of that answer's policy-gradient term, from the config on.

Rows are literal (the shipped tiny model in float64, learning rate 0, so every update sees the same
log-probs); own ratios are 1 (π_old = the learner's own mean log-prob), so with advantages A the policy loss
of own answers is −mean(w̃·A) and its gradient scales with w̃.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from hacrl.agents.agent import load_agent
from hacrl.agents.tiny import tiny_agent_path
from hacrl.config import derive, load_config, rollout_correction_mode
from hacrl.core import StepSettings
from hacrl.learner.algorithms import ALGORITHMS
from hacrl.learner.settings import LossSettings
from hacrl.learner.update import _forward, update_learner
from hacrl.learner.view import ViewRow, build_view
from hacrl.pool import TrajectoryPool
from hacrl.trainer.trainer import Trainer
from hacrl.types import Problem, Trajectory

SETTINGS = LossSettings(StepSettings(clip_low=0.2, clip_high=0.28, alpha=1.0, max_log_ratio=10.0,
                                     kl_coef=0.0, imitation_coef=1.0),
                        delta=0.2, delta_step=0.025, rollout_correction="off", rollout_correction_cap=2.0)


def make_agent():
    torch.manual_seed(0)
    agent = load_agent("agent0", 0, tiny_agent_path("qwen2-char"))
    agent.model.double()
    agent.configure_optimizer(lr=0.0)
    return agent


def rows_with_weight(agent, w: float | None, cross: bool = False) -> list[ViewRow]:
    """One prompt: the learner's answers "42" (A = 1) and "7" (A = 0.5) with ratio 1 and, unless ``w`` is None,
    an engine log-prob that puts the rollout weight at ``w`` (behav mean = π_old mean − ln w); with ``cross``
    also agent 1's "43" (A = 1, ratio 1) carrying the same engine log-prob (which must be ignored)."""
    prompt = "12+30="
    answers = [(0, "42", 1.0), (0, "7", 0.5)] + ([(1, "43", 1.0)] if cross else [])
    rows = []
    for source, answer, adv in answers:
        ids, _ = agent.encode_answer(answer, finished=True)
        rows.append(ViewRow(0, source, source == 0, agent.render_prompt(prompt), ids, 0.0, None, 1.0, advantage=adv))
    logp_BT, _, mask_BT = _forward(agent, rows, True, [False] * len(rows))
    for r, mean in zip(rows, ((logp_BT * mask_BT).sum(-1) / mask_BT.sum(-1)).tolist(), strict=True):
        r.old_logp_mean = mean
        r.behav_logp_mean = None if w is None else mean - math.log(w)
    return rows


def run(agent, rows, mode: str, cap: float = 2.0, algo: str = "gspo") -> dict[str, float]:
    settings = dataclasses.replace(SETTINGS, rollout_correction=mode, rollout_correction_cap=cap)
    return update_learner(agent, [copy.deepcopy(rows)], ALGORITHMS.get(algo), settings, micro_batch_size=64,
                          grad_clip=1e9)


@pytest.mark.model
def test_the_weight_scales_the_own_answers_loss_and_gradient(spy):
    # w = 3 on both own answers. off: pg = −(1 + 0.5)/2 = −0.75. truncate at 2: min(3, 2) = 2 → −1.5, gradient
    # ×2. masked-is with C = 4: 3 lies in [1/4, 4] → −2.25, ×3. mask at C = 2: 3 is outside [1/2, 2] → 0, no gradient.
    agent = make_agent()
    rows = rows_with_weight(agent, 3.0)
    off, trunc, mis, mask = (run(agent, rows, mode, cap) for mode, cap in
                             (("off", 2.0), ("truncate", 2.0), ("masked-is", 4.0), ("mask", 2.0)))
    assert [w for x in spy for w in x.inputs.rollout_weight_B.tolist()] == pytest.approx([1, 1, 2, 2, 3, 3, 0, 0], rel=1e-6)
    assert off["pg_loss"] == pytest.approx(-0.75, rel=1e-6)
    assert trunc["pg_loss"] == pytest.approx(-1.5, rel=1e-6)
    assert mis["pg_loss"] == pytest.approx(-2.25, rel=1e-6)
    assert mask["pg_loss"] == 0.0
    assert off["grad_norm"] > 1e-3
    assert trunc["grad_norm"] == pytest.approx(2 * off["grad_norm"], rel=1e-6)
    assert mis["grad_norm"] == pytest.approx(3 * off["grad_norm"], rel=1e-6)
    assert mask["grad_norm"] == 0.0
    # logged: w itself in every mode, what the mode did
    for m in (off, trunc, mis, mask):
        assert m["rollout_is/weight_mean"] == pytest.approx(3.0, rel=1e-6)
        assert m["rollout_is/weight_max"] == m["rollout_is/weight_min"] == pytest.approx(3.0, rel=1e-6)
    assert (trunc["rollout_is/truncated_frac"], trunc["rollout_is/masked_frac"]) == (1.0, 0.0)
    assert (mask["rollout_is/truncated_frac"], mask["rollout_is/masked_frac"]) == (0.0, 1.0)
    assert (off["rollout_is/truncated_frac"], off["rollout_is/masked_frac"]) == (0.0, 0.0)
    assert trunc["rollout_is/applied_mean"] == pytest.approx(2.0, rel=1e-6)


@pytest.mark.model
def test_weighted_micro_batches_add_up_to_the_minibatch(spy):
    # different weights per answer (w = 1.5 on one, min(3, 2) = 2 on the other): one pass of both rows or one
    # per row gives the same gradient
    agent = make_agent()
    rows = rows_with_weight(agent, 3.0)
    rows[1].behav_logp_mean = rows[1].old_logp_mean - math.log(1.5)
    settings = dataclasses.replace(SETTINGS, rollout_correction="truncate")
    norms = [update_learner(agent, [copy.deepcopy(rows)], ALGORITHMS.get("gspo"), settings, micro_batch_size=micro,
                            grad_clip=1e9)["grad_norm"] for micro in (64, 1)]
    assert [w for x in spy for w in x.inputs.rollout_weight_B.tolist()] == pytest.approx([2.0, 1.5, 2.0, 1.5], rel=1e-6)
    assert norms[0] > 1e-3 and norms[1] == pytest.approx(norms[0], rel=1e-9)


@pytest.mark.model
def test_cross_answers_are_never_weighted(spy):
    # hacpo: agent 1's answer keeps weight 1 whatever it carries; own answers get min(3, 2) = 2.
    # A cross answer at ratio 1 is inside [ℓ_0, 1] = [0.8, 1]: c·sg(c)·ω·A = 1 → pg = −(2·1 + 2·0.5 + 1)/3
    agent = make_agent()
    rows = rows_with_weight(agent, 3.0, cross=True)
    metrics = run(agent, rows, "truncate", algo="hacpo")
    (x,) = [c.inputs for c in spy]
    assert x.own_B.tolist() == [True, True, False]
    assert x.rollout_weight_B.tolist() == pytest.approx([2.0, 2.0, 1.0])
    assert metrics["pg_loss"] == pytest.approx(-(2.0 + 1.0 + 1.0) / 3, rel=1e-6)
    # naive trains cross answers as its own; their π_old is the source's, so they are not corrected either
    run(agent, rows, "truncate", algo="naive")
    assert spy[-1].inputs.rollout_weight_B.tolist() == pytest.approx([2.0, 2.0, 1.0])


@pytest.mark.model
def test_without_the_engines_logprob_the_weight_is_one_by_construction(spy):
    # π_old is the engine's own log-prob (hf at temperature 1): no behaviour log-prob, w = 1, nothing logged
    agent = make_agent()
    rows = rows_with_weight(agent, None)
    plain, trunc = run(agent, rows, "off"), run(agent, rows, "mask", cap=1.0)
    assert [x.inputs.rollout_weight_B.tolist() for x in spy] == [[1.0, 1.0]] * 2
    assert not any(k.startswith("rollout_is/") for k in trunc)
    assert trunc["pg_loss"] == plain["pg_loss"] and trunc["grad_norm"] == plain["grad_norm"]


@pytest.mark.model
def test_the_view_reads_the_engines_logprob_of_own_answers_only():
    agent = make_agent()
    ids = tuple(agent.encode_answer("42", finished=True)[0])
    own = Trajectory(0, 0, "42", True, logp_sum=-2.0 * len(ids), num_tokens=len(ids), reward=1.0, token_ids=ids,
                     behav_logp_sum=-2.5 * len(ids))
    other = Trajectory(0, 1, "43", True, logp_sum=-3.0, num_tokens=2, reward=0.0, behav_logp_sum=-9.0)
    pool = TrajectoryPool([Problem("p", "12+30=", "42")], [own, other])
    rows = build_view(agent, pool, ALGORITHMS.get("hacpo"), {0: "12+30="})
    assert [(r.is_own, r.old_logp_mean, r.behav_logp_mean) for r in rows] == [(True, -2.0, -2.5), (False, -1.5, None)]


# ---- from the config: the mode and its cap reach the loss ---------------------------------------------------

@pytest.mark.parametrize("overrides, resolved", [
    ([], "off"),  # hf: the engine's log-probs are the training model's
    (["rollout.engine=vllm"], "truncate"),
    (["rollout.engine=vllm", "rollout.temperature=0.7", "rollout.engine_options.logprobs_mode=processed_logprobs"],
     "off"),  # the tempered distribution's log-probs: the weight would measure the temperature
    (["rollout.engine=vllm", "algorithm.rollout_correction=off"], "off"),
    (["algorithm.rollout_correction=masked-is"], "masked-is"),
])
def test_auto_is_on_with_vllm_and_off_with_hf(overrides, resolved):
    cfg = load_config("tiny-test", overrides=overrides)
    assert rollout_correction_mode(cfg) == resolved
    assert derive(cfg, shares_pool=True, rollout_multiplier=1, needs_groups=True).rollout_correction == resolved


def step_weights(tmp_path, spy, overrides: list[str]) -> tuple[list[float], dict[str, float]]:
    """One gspo step of tiny-test sampled at temperature 0.7 (so π_old is recomputed at temperature 1 and the
    hf engine's tempered log-probs are a behaviour policy that differs from it): every own row's weight as the
    loss received it, and the step's metrics."""
    spy.clear()
    cfg = load_config("tiny-test", overrides=["trainer.steps=1", "algorithm.name=gspo", "rollout.temperature=0.7",
                                              *overrides])
    run_dir = tmp_path / "-".join(overrides).replace("=", "_").replace("/", "_")
    run_dir.mkdir()
    trainer = Trainer(cfg, run_dir)
    try:
        metrics = trainer.step()
    finally:
        trainer.close()
    return [w for x in spy for w in x.inputs.rollout_weight_B.tolist()], metrics


@pytest.mark.model
def test_the_configs_mode_and_cap_reach_the_loss(tmp_path, spy):
    off, m_off = step_weights(tmp_path, spy, ["algorithm.rollout_correction=auto"])  # hf: off
    assert off and set(off) == {1.0}
    # the gap is logged with the correction off; it exists (sampled at 0.7, trained at 1)
    raw = m_off["agent/qwen-char/rollout_is/weight_mean"]
    assert math.isfinite(raw) and m_off["agent/qwen-char/rollout_is/weight_min"] < 1.0
    assert m_off["agent/llama-bpe/rollout_is/truncated_frac"] == 0.0
    # C = 1 makes the band {1}: mask drops every own answer, truncate cuts every weight above 1
    masked, m_mask = step_weights(tmp_path, spy, ["algorithm.rollout_correction=mask",
                                                   "algorithm.rollout_correction_cap=1.0"])
    assert len(masked) == len(off) and set(masked) == {0.0}
    assert m_mask["agent/qwen-char/pg_loss"] == 0.0 and m_mask["agent/qwen-char/grad_norm"] == 0.0
    assert m_mask["agent/qwen-char/rollout_is/masked_frac"] == 1.0
    trunc, _ = step_weights(tmp_path, spy, ["algorithm.rollout_correction=truncate",
                                             "algorithm.rollout_correction_cap=1.0"])
    assert max(trunc) <= 1.0 and min(trunc) < 1.0
    # a cap past every weight: truncate is plain importance weighting, and the weights are not all 1
    wide, _ = step_weights(tmp_path, spy, ["algorithm.rollout_correction=truncate",
                                            "algorithm.rollout_correction_cap=1e6"])
    assert wide != off and max(wide) >= max(trunc)
