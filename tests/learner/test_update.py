"""The learner's path from literal rows to the policy loss (``hacrl.learner.update``), hand-computed.

What the loss receives is recorded by a spy registry standing in for ``POLICY_LOSSES``: every entry calls the
real loss and keeps its ``LossInputs``, ``StepSettings`` and value. The agents are the shipped tiny models in
float64; a learning rate of 0 keeps the weights fixed, so two runs on the same rows see the same log-probs.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import statistics
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close

from hacrl.agents.agent import load_agent
from hacrl.agents.tiny import tiny_agent_path
from hacrl.config import derive, load_config
from hacrl.core import LossInputs, StepSettings, omega_matrix
from hacrl.learner.algorithms import ALGORITHMS
from hacrl.learner.settings import LossSettings
from hacrl.learner.update import _forward, update_learner
from hacrl.learner.view import ViewRow, assign_advantages
from hacrl.trainer.trainer import Trainer

# δ = 0.2, δ_step = 0.025: ℓ_0 = 0.8, ℓ_1 = 0.825, ℓ_2 = 0.85, ℓ_3 = 0.875
SETTINGS = LossSettings(StepSettings(clip_low=0.2, clip_high=0.28, alpha=1.0, max_log_ratio=10.0,
                                     kl_coef=0.0, imitation_coef=1.0),
                        delta=0.2, delta_step=0.025, rollout_correction="truncate", rollout_correction_cap=2.0)


def with_loss(**changes) -> LossSettings:
    """``SETTINGS`` with some of the policy loss's settings changed."""
    return dataclasses.replace(SETTINGS, loss=dataclasses.replace(SETTINGS.loss, **changes))



def make_agent(model: str = "qwen2-char", index: int = 0):
    torch.manual_seed(0)
    agent = load_agent(f"agent{index}", index, tiny_agent_path(model))
    agent.model.double()
    agent.configure_optimizer(lr=0.0)
    return agent


def row(agent, group: int, source: int, learner: int, prompt: str, answer: str, reward: float) -> ViewRow:
    answer_ids, _ = agent.encode_answer(answer, finished=True)
    return ViewRow(prompt_index=group, source=source, is_own=source == learner, prompt_ids=agent.render_prompt(prompt),
                   answer_ids=answer_ids, old_logp_mean=0.0, old_token_logps=None, reward=reward)


# ---- ω: a cross answer is scaled by ω^(source, learner) = P̂_source / P̂_learner (eq. 10) ---------------------

def test_a_stronger_sources_answer_gets_omega_above_one():
    # P̂ = [0.2, 0.4, 0.8]. Learner 1's cross answers: from agent 2 (stronger) ω^(2,1) = 0.8/0.4 = 2,
    # from agent 0 (weaker) ω^(0,1) = 0.2/0.4 = 0.5; its own answer 1. Swapping source and learner in the
    # lookup would give 0.5 and 2.
    cap = torch.tensor([0.2, 0.4, 0.8])
    rows = [ViewRow(0, src, src == 1, [1], [2], 0.0, None, reward) for src, reward in ((1, 1.0), (2, 0.0), (0, 1.0))]
    assign_advantages(rows, 1, ALGORITHMS.get("hacpo"), omega_matrix(cap))
    assert [r.omega for r in rows] == pytest.approx([1.0, 2.0, 0.5])
    assign_advantages(rows, 1, ALGORITHMS.get("hacpo-noomega"), omega_matrix(cap))
    assert [r.omega for r in rows] == [1.0, 1.0, 1.0]


def test_the_baseline_weighs_each_answer_by_omega_learner_source():
    # One group, learner 0, P̂ = [0.2, 0.8]: own rewards [1, 0], agent 1's [1, 1].
    # eq. 7: μ̂_0 = (1·1 + 1·0 + ω^(0,1)·1 + ω^(0,1)·1)/4 with ω^(0,1) = 0.2/0.8 = 0.25 → 1.5/4 = 0.375
    # std (unbiased) of [1, 0, 1, 1] = √(0.75/3) = 0.5 → A = (1 − 0.375)/0.5 = 1.25, (0 − 0.375)/0.5 = −0.75
    # (the transposed ω^(1,0) = 4 would give μ̂ = 2.25 > max R, the own-mean fallback 0.5 and A = ±1)
    cap = torch.tensor([0.2, 0.8])
    rows = [ViewRow(0, src, src == 0, [1], [2], 0.0, None, reward)
            for src, reward in ((0, 1.0), (0, 0.0), (1, 1.0), (1, 1.0))]
    assign_advantages(rows, 0, ALGORITHMS.get("hacpo"), omega_matrix(cap))
    assert [r.advantage for r in rows] == pytest.approx([1.25, -0.75, 1.25, 1.25], rel=1e-5)
    assert [r.omega for r in rows] == pytest.approx([1.0, 1.0, 4.0, 4.0])  # the update's ω^(1,0) = 0.8/0.2


# ---- the stepwise bound ℓ_m: per minibatch, restarting for every learner and every step --------------------------

@pytest.mark.model
def test_cross_lower_bound_per_minibatch_restarts_per_learner_and_step(tmp_path, spy):
    # tiny-test: B = 4 prompts, G = 4, 2 agents → 32 rows per learner in minibatches of one prompt (8 rows):
    # 4 optimizer steps, each one loss call (micro-batch 64), ℓ_m = 0.8 + 0.025·m for m = 0..3
    cfg = load_config("tiny-test", overrides=["trainer.steps=2"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    trainer = Trainer(cfg, run_dir)
    try:
        for _ in range(2):
            trainer.step()
    finally:
        trainer.close()
    bounds = [c.settings.cross_lower for c in spy]
    assert bounds == pytest.approx([0.8, 0.825, 0.85, 0.875] * 4)  # 2 steps × 2 learners
    assert all(c.loss == "hacpo" for c in spy)


# ---- each ablation changes what it names and nothing else -------------------------------------------------------

CAP = torch.tensor([0.2, 0.8])  # learner 0 is the weaker agent: its cross answers get ω^(1,0) = 4
CROSS_RATIOS = (0.5, 0.81, 0.9, 1.5)  # below ℓ, inside at ℓ_0 only, inside, above 1


def ablation_minibatches(agent) -> list[list[ViewRow]]:
    """3 minibatches of one prompt each: 2 own answers (ratio 1) and 4 of agent 1 whose sequence ratios are
    CROSS_RATIOS exactly (old_logp_mean = the learner's mean log-prob − log ratio)."""
    mbs = []
    for g in range(3):
        prompt = f"{12 + g}+{30 + g}="
        rows = [row(agent, g, 0, 0, prompt, "42", 1.0), row(agent, g, 0, 0, prompt, "7", 0.0)]
        rows += [row(agent, g, 1, 0, prompt, ans, r) for ans, r in (("43", 1.0), ("5", 0.0), ("42", 1.0), ("1", 0.0))]
        logp_BT, _, mask_BT = _forward(agent, rows, True, [False] * len(rows))
        means_B = (logp_BT * mask_BT).sum(-1) / mask_BT.sum(-1)
        for r, mean, ratio in zip(rows, means_B.tolist(), (1.0, 1.0, *CROSS_RATIOS), strict=True):
            r.old_logp_mean = mean - math.log(ratio)
        mbs.append(rows)
    return mbs


def run_algorithm(name: str, agent, mbs, spy, cap: torch.Tensor = CAP) -> list:  # the spy's Call records (conftest.py)
    mbs = copy.deepcopy(mbs)
    algo = ALGORITHMS.get(name)
    assign_advantages([r for mb in mbs for r in mb], 0, algo, omega_matrix(cap))
    start = len(spy)
    update_learner(agent, mbs, algo, SETTINGS, micro_batch_size=64, grad_clip=1.0)
    return spy[start:]


def differences(a, b) -> set[str]:  # two Call records of the spy (conftest.py)
    fields = {f.name for f in dataclasses.fields(LossInputs)}
    out = {f.name for f in dataclasses.fields(StepSettings)
           if getattr(a.settings, f.name) != getattr(b.settings, f.name)}
    for f in fields:
        x, y = getattr(a.inputs, f), getattr(b.inputs, f)
        same = x is y is None or (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and torch.equal(x, y)) \
            or (not isinstance(x, torch.Tensor) and x == y)
        if not same:
            out.add(f)
    return out


@pytest.mark.model
@pytest.mark.parametrize("ablation, changes", [
    ("hacpo-noclip", {"cross_clip"}),
    ("hacpo-alpha0", {"alpha"}),
    ("hacpo-nostep", {"cross_lower"}),
    ("hacpo-noomega", {"omega_B"}),
    ("hacpo-noadv", {"advantages_B"}),
])
def test_an_ablation_changes_only_what_it_names(spy, ablation, changes):
    agent = make_agent()
    mbs = ablation_minibatches(agent)
    plain = run_algorithm("hacpo", agent, mbs, spy)
    ablated = run_algorithm(ablation, agent, mbs, spy)
    assert len(plain) == len(ablated) == 3
    # what the loss is handed: only the named setting or input differs, in some minibatch
    assert set().union(*(differences(p, a) for p, a in zip(plain, ablated))) == changes
    assert [c.settings.cross_lower for c in plain] == pytest.approx([0.8, 0.825, 0.85])
    # and the loss moves with it
    assert any(abs(p.value - a.value) > 1e-6 for p, a in zip(plain, ablated))


@pytest.mark.model
def test_the_capped_baseline_changes_only_a_stronger_learners_advantages(spy):
    agent = make_agent()
    mbs = ablation_minibatches(agent)
    # learner 0 the weaker (ω^(0,1) = 0.25 < 1): nothing changes
    weaker = [differences(p, a) for p, a in zip(run_algorithm("hacpo", agent, mbs, spy),
                                                run_algorithm("hacpo-capbase", agent, mbs, spy), strict=True)]
    assert set().union(*weaker) == set()
    # learner 0 the stronger (ω 4): each prompt's 3 right answers of 6 give hacpo a baseline of (1 + 4·2)/6 = 1.5,
    # above every reward, so it falls back to the learner's own mean ½; capped, the plain mean ½ as well. Make the
    # partner's answers all wrong but one: hacpo (1 + 4)/6 = 5/6, capped 2/6
    for mb in mbs:
        mb[4].reward = 0.0
    strong = torch.flip(CAP, [0])
    plain, capped = run_algorithm("hacpo", agent, mbs, spy, strong), run_algorithm("hacpo-capbase", agent, mbs, spy,
                                                                                       strong)
    assert set().union(*(differences(p, a) for p, a in zip(plain, capped, strict=True))) == {"advantages_B"}
    std = math.sqrt((2 * (2 / 3) ** 2 + 4 * (1 / 3) ** 2) / 5)  # rewards [1, 0 | 1, 0, 0, 0]: mean ⅓, unbiased
    assert plain[0].inputs.advantages_B[0].item() == pytest.approx((1 - 5 / 6) / std, rel=1e-5)
    assert capped[0].inputs.advantages_B[0].item() == pytest.approx((1 - 2 / 6) / std, rel=1e-5)


@pytest.mark.model
def test_ablation_settings_are_the_papers_switches(spy):
    agent = make_agent()
    mbs = ablation_minibatches(agent)
    calls = {name: run_algorithm(name, agent, mbs, spy)
             for name in ("hacpo", "hacpo-noclip", "hacpo-alpha0", "hacpo-nostep", "hacpo-noomega")}
    assert [c.settings.cross_clip for c in calls["hacpo-noclip"]] == [False] * 3
    assert [c.settings.alpha for c in calls["hacpo-alpha0"]] == [0.0] * 3
    assert [c.settings.cross_lower for c in calls["hacpo-nostep"]] == pytest.approx([0.8] * 3)
    cross = ~calls["hacpo"][0].inputs.own_B
    assert calls["hacpo"][0].inputs.omega_B[cross].tolist() == pytest.approx([4.0] * 4)  # 0.8 / 0.2
    assert calls["hacpo-noomega"][0].inputs.omega_B.tolist() == [1.0] * 6


# ---- GRPO: π_old per token, under the answer token it belongs to ------------------------------------------------

def token_logps_by_hand(agent, prompt_ids: list[int], answer_ids: list[int]) -> tuple[float, ...]:
    """log π(answer token t | prompt, answer[:t]) from one plain forward pass of prompt + answer."""
    with torch.no_grad():
        logits = agent.model(input_ids=torch.tensor([prompt_ids + answer_ids])).logits[0]
    logp = logits.double().log_softmax(-1)
    return tuple(float(logp[len(prompt_ids) - 1 + t, tok]) for t, tok in enumerate(answer_ids))


@pytest.mark.model
@pytest.mark.parametrize("shared", [True, False])
def test_grpo_old_token_logprobs_sit_under_their_answer_tokens(spy, shared):
    # own answers of different lengths after prompts of different lengths; π_old per token is the model's
    # own log-prob of that token computed by hand, so aligned columns give token ratios of exactly 1
    agent = make_agent()
    rows = []
    for i, (prompt, answer) in enumerate((("3+4=", "7"), ("12+34=", "46"), ("7+8=", "15 15"), ("1+1=", "2"))):
        r = row(agent, i // 2, 0, 0, prompt, answer, float(i % 2))
        r.old_token_logps = token_logps_by_hand(agent, r.prompt_ids, r.answer_ids)
        r.advantage = (-1.0) ** i
        rows.append(r)
    assert len({len(r.answer_ids) for r in rows}) == 3 and len({len(r.prompt_ids) for r in rows}) == 2
    metrics = update_learner(agent, [rows], ALGORITHMS.get("grpo"), SETTINGS, micro_batch_size=64, grad_clip=1.0,
                             shared_prompt=shared)
    (call,) = spy
    x = call.inputs
    assert call.loss == "grpo" and x.old_logp_BT is not None
    for i, r in enumerate(rows):
        mask = x.mask_BT[i].bool()
        assert int(mask.sum()) == len(r.answer_ids)
        assert_close(x.old_logp_BT[i][mask], torch.tensor(r.old_token_logps, dtype=torch.float32), rtol=0, atol=0)
        assert torch.equal(x.old_logp_BT[i][~mask], torch.zeros(int((~mask).sum())))
        # the learner's log-prob in each answer column is the one of the same token
        assert_close(x.logp_BT[i][mask], torch.tensor(r.old_token_logps, dtype=torch.float64), rtol=0, atol=1e-6)
    assert metrics["self/ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    # r_t = 1 everywhere: loss = −mean_i A_i = −(1 − 1 + 1 − 1)/4 = 0
    assert call.value == pytest.approx(0.0, abs=1e-6)


# ---- GRPO's clip radii: the config's, the algorithm's default when unset ----------------------------------------

@pytest.mark.model
@pytest.mark.parametrize("overrides, expected", [
    ([], (0.2, 0.28)),  # grpo's own default (DAPO), not GSPO's 3e-4 / 4e-4
    (["algorithm.clip_low=0.1"], (0.1, 0.28)),
    (["algorithm.clip_low=0.05", "algorithm.clip_high=0.5"], (0.05, 0.5)),
])
def test_grpo_loss_gets_the_configs_clip_radii(tmp_path, spy, overrides, expected):
    cfg = load_config("tiny-test", overrides=["algorithm.name=grpo", "trainer.steps=1", *overrides])
    assert (cfg.algorithm.clip_low, cfg.algorithm.clip_high) == expected
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    trainer = Trainer(cfg, run_dir)
    try:
        trainer.step()
    finally:
        trainer.close()
    assert spy and {c.loss for c in spy} == {"grpo"}
    assert {(c.settings.clip_low, c.settings.clip_high) for c in spy} == {expected}


def test_sequence_losses_keep_gspos_default_radii():
    for name in ("hacpo", "gspo", "gspo2x", "naive", "imitation", "hacpo-noclip"):
        cfg = load_config("tiny-test", overrides=[f"algorithm.name={name}"])
        assert (cfg.algorithm.clip_low, cfg.algorithm.clip_high) == (3e-4, 4e-4), name


# ---- the imitation baseline: GSPO on own answers + λ·NLL of the others' verified-correct answers ---------------

def run_trainer(tmp_path, overrides: list[str]) -> None:
    cfg = load_config("tiny-test", overrides=["trainer.steps=1", *overrides])
    run_dir = tmp_path / cfg.algorithm.name
    run_dir.mkdir()
    trainer = Trainer(cfg, run_dir)
    try:
        trainer.step()
    finally:
        trainer.close()


def test_imitation_advantages_are_gspos_over_own_answers():
    # one group, learner 0: own rewards [1, 0], agent 1's [1, 1]. GSPO over the own answers: mean ½, unbiased
    # std 1/√2 → A = ±0.7071068; the cross answers get 0 and ω = 1. (naive's joint group [1, 0, 1, 1] would give
    # mean 0.75, std 0.5 → 0.5, −1.5, 0.5, 0.5)
    cap = torch.tensor([0.2, 0.8])
    rows = [ViewRow(0, src, src == 0, [1], [2], 0.0, None, reward)
            for src, reward in ((0, 1.0), (0, 0.0), (1, 1.0), (1, 1.0))]
    assign_advantages(rows, 0, ALGORITHMS.get("imitation"), omega_matrix(cap))
    assert [r.advantage for r in rows] == pytest.approx([0.7071068, -0.7071068, 0.0, 0.0], rel=1e-5)
    assert [r.omega for r in rows] == [1.0] * 4


def imitation_rows(agent) -> list[ViewRow]:
    """One prompt: the learner's answers "42" (reward 1) and "7" (0), and four of agent 1: "42 " correct (the
    one imitated), "5" wrong, "40" partial credit 0.5, and "42!" correct but cut at the learner's answer limit
    (not the verified text). Own π_old: the learner's own mean log-prob, so own ratios are 1."""
    prompt = "12+30="
    rows = [row(agent, 0, 0, 0, prompt, "42", 1.0), row(agent, 0, 0, 0, prompt, "7", 0.0)]
    rows += [row(agent, 0, 1, 0, prompt, ans, r) for ans, r in (("42 ", 1.0), ("5", 0.0), ("40", 0.5), ("42!", 1.0))]
    rows[5].truncated = True
    logp_BT, _, mask_BT = _forward(agent, rows, True, [False] * len(rows))
    for r, mean in zip(rows, ((logp_BT * mask_BT).sum(-1) / mask_BT.sum(-1)).tolist(), strict=True):
        r.old_logp_mean = mean
    assign_advantages(rows, 0, ALGORITHMS.get("imitation"), omega_matrix(CAP))
    return rows


@pytest.mark.model
def test_imitation_learner_path_by_hand(spy):
    agent = make_agent()
    rows = imitation_rows(agent)
    metrics = update_learner(agent, [rows], ALGORITHMS.get("imitation"),
                             with_loss(imitation_coef=0.5), micro_batch_size=64, grad_clip=1.0)
    (call,) = spy
    x = call.inputs
    assert call.loss == "imitation" and call.settings.imitation_coef == 0.5
    assert x.own_B.tolist() == [True, True, False, False, False, False]
    assert x.imitate_B.tolist() == [False, False, True, False, False, False]  # only the whole, fully correct one
    assert (x.own_share, x.imitate_share) == (2 / 6, 1 / 6)
    # own ratios 1, A = ±0.7071: GSPO_own = −(0.7071 − 0.7071)/2 = 0, so the loss is λ = 0.5 times the imitated
    # answer's token-mean NLL, here from one plain forward pass of prompt + answer
    nll = -statistics.mean(token_logps_by_hand(agent, rows[2].prompt_ids, rows[2].answer_ids))
    assert call.value == pytest.approx(0.5 * nll, rel=1e-5)
    assert metrics["imitation/nll"] == pytest.approx(nll, rel=1e-5)
    assert metrics["cross/imitated_frac"] == pytest.approx(1 / 4)
    assert metrics["count/imitated"] == 1 and metrics["count/cross"] == 4


@pytest.mark.model
@pytest.mark.parametrize("micro", [1, 4, 64])
def test_imitation_with_lambda_zero_is_gspo_on_the_own_answers(spy, micro):
    # the same update as gspo on the learner's own two rows alone: loss, gradient norm (micro-batches of the
    # six rows weighted by their share still give the means over the own rows)
    agent = make_agent()
    rows = imitation_rows(agent)
    rows[0].old_logp_mean -= math.log(1.1)  # an own ratio of 1.1, inside GSPO's window [0.8, 1.28]
    im = update_learner(agent, [copy.deepcopy(rows)], ALGORITHMS.get("imitation"),
                        with_loss(imitation_coef=0.0), micro_batch_size=micro, grad_clip=1e9)
    own = copy.deepcopy([r for r in rows if r.is_own])
    assign_advantages(own, 0, ALGORITHMS.get("gspo"), omega_matrix(CAP))
    assert [r.advantage for r in own] == [r.advantage for r in rows[:2]]
    gs = update_learner(agent, [own], ALGORITHMS.get("gspo"), SETTINGS, micro_batch_size=micro, grad_clip=1e9)
    assert im["grad_norm"] > 1e-3
    assert im["grad_norm"] == pytest.approx(gs["grad_norm"], rel=1e-6)
    assert im["pg_loss"] == pytest.approx(gs["pg_loss"], rel=1e-6, abs=1e-9)


@pytest.mark.model
def test_imitation_update_is_split_invariant(spy):
    # λ = 1: micro-batches of 1, 2 and 4 of the six rows give the full minibatch's gradient
    agent = make_agent()
    rows = imitation_rows(agent)
    norms = [update_learner(agent, [copy.deepcopy(rows)], ALGORITHMS.get("imitation"), SETTINGS,
                            micro_batch_size=micro, grad_clip=1e9)["grad_norm"] for micro in (64, 1, 2, 4)]
    assert norms[0] > 1e-3
    assert norms[1:] == pytest.approx([norms[0]] * 3, rel=1e-6)


@pytest.mark.model
def test_imitation_makes_hacpos_optimizer_steps_on_hacpos_rows(tmp_path, spy):
    # tiny-test: B = 4, G = 4, 2 agents → per learner 32 rows in minibatches of one prompt (8 rows): 4 optimizer
    # steps per learner, each one loss call (micro-batch 64), for hacpo and imitation alike
    for name in ("hacpo", "imitation"):
        cfg = load_config("tiny-test", overrides=[f"algorithm.name={name}"])
        algo = ALGORITHMS.get(name)
        d = derive(cfg, shares_pool=algo.shares_pool, rollout_multiplier=algo.rollout_multiplier, needs_groups=True)
        assert (d.rows_per_prompt, d.minibatch_size, d.num_minibatches) == (8, 8, 4), name
    run_trainer(tmp_path, ["algorithm.name=hacpo"])
    hacpo = list(spy)
    spy.clear()
    run_trainer(tmp_path, ["algorithm.name=imitation"])
    assert {c.loss for c in spy} == {"imitation"} and {c.loss for c in hacpo} == {"hacpo"}
    assert len(spy) == len(hacpo) == 8  # 2 learners × 4 optimizer steps
    assert [c.inputs.logp_BT.shape[0] for c in spy] == [c.inputs.logp_BT.shape[0] for c in hacpo] == [8] * 8


@pytest.mark.model
def test_imitation_coef_reaches_the_loss(tmp_path, spy):
    run_trainer(tmp_path, ["algorithm.name=imitation", "algorithm.imitation_coef=0.25"])
    assert spy and {c.settings.imitation_coef for c in spy} == {0.25}


# ---- found by mutation testing (docs/mutation.md) ------------------------------------------------

@pytest.mark.model
def test_build_view_rows_carry_reward_truncation_eos_and_the_per_token_behaviour_logprob():
    from hacrl.learner.view import build_view
    from hacrl.pool import TrajectoryPool
    from hacrl.types import Problem, Trajectory

    agent = make_agent()
    agent.max_answer_tokens = 3
    ids = agent.tokenizer("4", add_special_tokens=False)["input_ids"]
    # own: one token, engine log-prob −2.5 → behav_logp_mean −2.5/1 (not /2)
    own = Trajectory(0, 0, "4", False, logp_sum=-2.0, num_tokens=1, reward=1.0, token_ids=tuple(ids),
                     behav_logp_sum=-2.5)
    # cross, finished: re-tokenized with EOS (3 tokens, fits); cross, 4 chars + EOS: cut to 3, truncated
    done = Trajectory(0, 1, "43", True, logp_sum=-3.0, num_tokens=3, reward=0.5)
    cut = Trajectory(0, 1, "4321", True, logp_sum=-6.0, num_tokens=5, reward=0.25)
    unfinished = Trajectory(0, 1, "43", False, logp_sum=-2.0, num_tokens=2, reward=0.0)
    pool = TrajectoryPool([Problem("p", "12+30=", "42")], [own, done, cut, unfinished])
    rows = build_view(agent, pool, ALGORITHMS.get("hacpo"), {0: "12+30="})
    text_ids = agent.tokenizer("43", add_special_tokens=False)["input_ids"]
    assert rows[0].behav_logp_mean == -2.5 and rows[0].answer_ids == ids
    assert [(r.reward, r.truncated, r.old_token_logps) for r in rows[1:]] == [(0.5, False, None), (0.25, True, None),
                                                                             (0.0, False, None)]
    assert rows[1].answer_ids == [*text_ids, agent.eos_id] and rows[3].answer_ids == text_ids
    assert len(rows[2].answer_ids) == 3


def _own_row(old_logp_mean: float, behav: float | None = None) -> ViewRow:
    return ViewRow(0, 0, True, [1], [2], old_logp_mean, (old_logp_mean,), 1.0, behav_logp_mean=behav)


def test_staleness_weights_keep_a_rounding_sized_gap_in_float64():
    from hacrl.learner.row_weights import assign_staleness_weights

    # one token each, gap 1; a per-token gap of 9e-7 at |log π| = 16, below float32's spacing there (1.9e-6):
    # w = e^(−9e-7) and e^(+9e-7), which float32 sums would round to 1
    a, b = _own_row(-16.0), _own_row(-16.0000009)
    prox = {id(a): (-16.0000009,), id(b): (-16.0,)}
    assign_staleness_weights([a, b], [1, 1], prox, mode="truncate", cap=2.0, max_log_ratio=10.0,
                             engine_behaviour=False)
    assert a.rollout_weight == pytest.approx(math.exp(-9e-7), rel=1e-7, abs=0)
    assert b.rollout_weight == pytest.approx(math.exp(9e-7), rel=1e-7, abs=0)


@pytest.mark.parametrize("engine_behaviour, weight", [(True, math.e), (False, 1.0)])
def test_staleness_weights_take_the_engines_behaviour_logprob_only_when_told(engine_behaviour, weight):
    from hacrl.learner.row_weights import assign_staleness_weights

    # π_prox = −2 (one token); π_old at the writing version −2, the engine's −3: w = e^(−2 − (−3)) = e with the
    # engine's, 1 without; the stale row then trains against π_prox (its mean, its tokens) and keeps the weight
    stale, fresh = _own_row(-2.0, behav=-3.0), _own_row(-4.0, behav=-5.0)
    metrics = assign_staleness_weights([stale, fresh], [1, 0], {id(stale): (-2.0,)}, mode="truncate", cap=10.0,
                                       max_log_ratio=10.0, engine_behaviour=engine_behaviour)
    assert stale.rollout_weight == pytest.approx(weight, rel=1e-6)
    assert (stale.old_logp_mean, stale.old_token_logps, stale.behav_logp_mean) == (-2.0, (-2.0,), None)
    assert (fresh.old_logp_mean, fresh.behav_logp_mean, fresh.rollout_weight) == (-4.0, -5.0, 1.0)
    assert metrics["stale_frac"] == 0.5 and metrics["count"] == 1.0


def test_staleness_weights_clamp_at_the_given_max_log_ratio():
    from hacrl.learner.row_weights import assign_staleness_weights

    stale = _own_row(-5.0)
    assign_staleness_weights([stale], [2], {id(stale): (0.0,)}, mode="truncate", cap=100.0, max_log_ratio=1.0,
                             engine_behaviour=False)
    assert stale.rollout_weight == pytest.approx(math.e, rel=1e-6)  # log w = 5, clamped to 1


def test_token_level_loss_inputs_name_the_missing_rollout_logprobs():
    from hacrl.learner.update import loss_inputs

    cross = ViewRow(0, 1, False, [1], [2, 3], -1.0, None, 1.0)
    with pytest.raises(ValueError, match="^token-level losses need the learner's own rollout log-probs$"):
        loss_inputs([cross], ALGORITHMS.get("grpo"), torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool), None)


@pytest.mark.model
def test_observed_cross_ratios_are_clamped_as_the_loss_clamps_them(spy):
    # π_old mean +50 against the agent's own log-probs (< 0): log s < −50, clamped to −max_log_ratio = −2
    agent = make_agent()
    cross = row(agent, 0, 1, 0, "12+30=", "42", 1.0)
    cross.old_logp_mean = 50.0
    seen: dict[int, list[float]] = {}
    update_learner(agent, [[cross]], ALGORITHMS.get("hacpo"), with_loss(max_log_ratio=2.0),
                   micro_batch_size=64, grad_clip=1.0, observed_ratios=seen)
    assert seen == {1: [pytest.approx(math.exp(-2.0), rel=1e-6)]}


def test_a_one_row_minibatch_is_all_own():
    from hacrl.learner.view import row_shares

    own = ViewRow(0, 0, True, [1], [2], -1.0, None, 1.0)
    cross = ViewRow(0, 1, False, [1], [2], -1.0, None, 1.0)
    imitation = ALGORITHMS.get("imitation")
    assert row_shares([own], imitation) == (1.0, 0.0) and row_shares([cross], imitation) == (0.0, 1.0)


def test_loss_inputs_without_shares_are_the_whole_minibatch():
    from hacrl.learner.update import loss_inputs

    own = ViewRow(0, 0, True, [1], [2], -1.0, None, 1.0)
    inputs = loss_inputs([own], ALGORITHMS.get("hacpo"), torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool), None)
    assert inputs.own_share is None and inputs.imitate_share is None


def test_loss_inputs_carry_the_reference_logprobs_to_the_kl_term():
    from hacrl.core import hacpo_loss
    from hacrl.learner.update import loss_inputs

    # one own row of 1 token, log π = log 0.5, log π_ref = log 0.25: k3 = 0.1931472 (test_kl_k3_hand_value), β = 1
    own = ViewRow(0, 0, True, [1], [2], math.log(0.5), None, 0.0)
    ref_BT = torch.log(torch.tensor([[0.25]]))
    inputs = loss_inputs([own], ALGORITHMS.get("hacpo"), torch.log(torch.tensor([[0.5]])),
                         torch.ones(1, 1, dtype=torch.bool), ref_BT)
    assert inputs.ref_logp_BT is ref_BT
    loss, metrics = hacpo_loss(inputs, StepSettings(clip_low=0.2, clip_high=0.28, kl_coef=1.0))
    assert float(metrics["kl"]) == pytest.approx(0.1931472) and float(loss) == pytest.approx(0.1931472)


def test_rollout_weights_clamp_at_the_settings_max_log_ratio_and_report_no_count():
    from hacrl.learner.row_weights import assign_rollout_weights

    # π_prox −1, the engine's −6 per token: log w = 5, clamped to max_log_ratio = 1 → w = e (cap 100: no cut)
    own = ViewRow(0, 0, True, [1], [2, 3], -1.0, None, 1.0, behav_logp_mean=-6.0)
    settings = dataclasses.replace(with_loss(max_log_ratio=1.0), rollout_correction_cap=100.0)
    metrics = assign_rollout_weights([own], settings)
    assert own.rollout_weight == pytest.approx(math.e, rel=1e-6)
    assert set(metrics) == {"weight_mean", "weight_max", "weight_min", "truncated_frac", "masked_frac",
                            "applied_mean"}


def test_clip_grad_norm_without_gradients_is_zero():
    from hacrl.learner.sharding import clip_grad_norm

    assert clip_grad_norm(torch.nn.Linear(2, 2), 1.0) == 0.0


@pytest.mark.model
def test_a_model_that_cannot_share_the_prompt_takes_the_plain_pass(spy, monkeypatch):
    from hacrl.agents.shared_prompt import supports_shared_prompt
    from hacrl.learner import update

    # gradient checkpointing rules the shared-prompt pass out (hacrl.agents.shared_prompt): the update must not
    # take it, whatever ``shared_prompt`` asks for
    agent = make_agent()
    enable = getattr(agent.model, "activation_checkpointing_enable", None) or agent.model.gradient_checkpointing_enable
    enable()
    assert not supports_shared_prompt(agent.model)

    def refuse(*args, **kwargs):
        raise AssertionError("the shared-prompt pass ran on a model that does not support it")

    monkeypatch.setattr(update, "grouped_logprobs", refuse)
    own = row(agent, 0, 0, 0, "12+30=", "42", 1.0)
    out = update_learner(agent, [[own]], ALGORITHMS.get("gspo"), SETTINGS, micro_batch_size=64, grad_clip=1.0,
                         shared_prompt=True)
    assert len(spy) == 1 and math.isfinite(out["pg_loss"])


@pytest.mark.model
def test_a_parameter_without_a_gradient_in_a_minibatch_is_not_moved():
    # A trainable parameter that one minibatch uses and the next does not (an expert its router skipped)
    # must not move on the second: its gradient is reset to None, which AdamW skips. Reset to zeros instead,
    # AdamW would still step it on its momentum — a change to a weight that no answer asked for.
    agent = make_agent()
    expert = torch.nn.Parameter(torch.full((4,), 0.5, dtype=torch.float64))
    agent.model.register_parameter("expert", expert)
    agent.configure_optimizer(lr=1e-2)

    def route_through_expert(module, args, out):
        return out + expert.sum()

    own = row(agent, 0, 0, 0, "12+30=", "42", 1.0)
    own.advantage = 1.0
    gspo = ALGORITHMS.get("gspo")
    hook = agent.model.get_input_embeddings().register_forward_hook(route_through_expert)
    update_learner(agent, [[copy.deepcopy(own)]], gspo, SETTINGS, micro_batch_size=64, grad_clip=1.0)
    hook.remove()
    after_first = expert.detach().clone()
    assert not torch.equal(after_first, torch.full((4,), 0.5, dtype=torch.float64))  # it was used, and moved
    update_learner(agent, [[copy.deepcopy(own)]], gspo, SETTINGS, micro_batch_size=64, grad_clip=1.0)
    assert expert.grad is None
    assert torch.equal(expert.detach(), after_first)


@pytest.mark.model
@pytest.mark.parametrize("shared", [True, False])
def test_the_reference_logprobs_sit_on_the_marked_rows_only(shared):
    # the KL reference runs on the rows marked (the own answers) and leaves zeros on the others; its values
    # are the reference model's own, not the trained policy's (which has moved away from it here)
    agent = make_agent()
    agent.enable_reference()
    with torch.no_grad():
        for p in agent.model.parameters():
            p.add_(0.01)  # the policy is no longer the reference
    rows = [row(agent, 0, 0, 0, "12+30=", "42", 1.0), row(agent, 0, 1, 0, "12+30=", "7", 0.0),
            row(agent, 0, 0, 0, "12+30=", "421", 1.0)]
    logp, ref, mask = _forward(agent, rows, shared, [True, False, True])
    assert ref is not None and ref.shape == logp.shape and not ref.requires_grad
    assert (ref[1] == 0).all()
    for i in (0, 2):
        want = token_logps_by_hand(SimpleNamespace(model=agent.ref_model), rows[i].prompt_ids, rows[i].answer_ids)
        got = ref[i][mask[i].bool()].tolist()
        assert got == pytest.approx(list(want), abs=1e-9)
        assert logp[i][mask[i].bool()].tolist() != pytest.approx(list(want), abs=1e-6)
    assert _forward(agent, rows, shared, [False] * 3)[1] is None
