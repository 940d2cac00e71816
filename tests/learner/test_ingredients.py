"""The ingredients of docs/methods.md on literal rows: the prompt gate, the answer selection, the advantages,
π_old recomputed by the learner, the gate weight, and the named compositions (``hacrl.learner.algorithms``).

Rows are ``ViewRow`` literals; the model tests use the shipped tiny model in float64 (as tests/learner/test_update.py).
"""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from hacrl.agents.agent import load_agent
from hacrl.agents.tiny import tiny_agent_path
from hacrl.config import ConfigError, load_config
from hacrl.core import StepSettings, omega_matrix, sequence_log_ratio
from hacrl.learner.algorithms import ALGORITHMS, INGREDIENTS, PARTNER_WEIGHT_LOSS, compose, resolve
from hacrl.learner.settings import LossSettings
from hacrl.learner.sharing import select_partner_rows
from hacrl.learner.update import _forward, update_learner
from hacrl.learner.view import ViewRow, assign_advantages

SETTINGS = LossSettings(StepSettings(clip_low=0.2, clip_high=0.28, alpha=1.0, max_log_ratio=10.0,
                                     kl_coef=0.0, imitation_coef=0.1),
                        delta=0.2, delta_step=0.025, rollout_correction="off", rollout_correction_cap=2.0)
OMEGA = omega_matrix(torch.tensor([0.5, 0.5, 0.5]))  # ω = 1 everywhere


def vrow(prompt: int, source: int, reward: float, truncated: bool = False, learner: int = 0) -> ViewRow:
    return ViewRow(prompt, source, source == learner, [1], [2], 0.0, None, reward, truncated)


def literal_pool() -> list[ViewRow]:
    """Learner 0 and partners 1 and 2, two answers each per prompt (rewards own | partner 1 | partner 2):
    prompt 0: [0, 0] | [1, 0] | [0, 0]   learner failed; partner 1 mixed, partner 2 failed
    prompt 1: [1, 0] | [1, 1] | [1, 0]   the learner has one correct answer: not failed
    prompt 2: [0, 0] | [1, 1] | [1, 0]   learner failed; partner 1 solved (not mixed), partner 2 mixed
    prompt 3: [0, 0] | [0, 0] | [0, 0]   nobody solved it
    """
    rewards = {0: ([0, 0], [1, 0], [0, 0]), 1: ([1, 0], [1, 1], [1, 0]), 2: ([0, 0], [1, 1], [1, 0]),
               3: ([0, 0], [0, 0], [0, 0])}
    return [vrow(p, src, float(r)) for p, by_src in rewards.items() for src, rs in enumerate(by_src) for r in rs]


def kept(rows: list[ViewRow]) -> list[tuple[int, int, float]]:
    return [(r.prompt_index, r.source, r.reward) for r in rows if not r.is_own]


# ---- the prompt gate and the answer selection ------------------------------------------------------------------

def test_the_defaults_keep_the_view_as_it_is():
    rows = literal_pool()
    assert select_partner_rows(rows, "all", "group") is rows


def test_learner_failed_keeps_every_partner_of_the_prompts_the_learner_failed():
    # prompts 0, 2, 3 (not 1: the learner has a correct answer there), both partners' whole groups
    rows = select_partner_rows(literal_pool(), "learner_failed", "group")
    assert {p for p, _, _ in kept(rows)} == {0, 2, 3}
    assert len(kept(rows)) == 12
    assert sum(r.is_own for r in rows) == 8  # the learner's own rows all stay


def test_partner_solved_gates_each_partner_by_its_own_success():
    # prompt 0: partner 1 (has a 1), not partner 2; prompt 2: both; prompt 3: neither
    rows = select_partner_rows(literal_pool(), "learner_failed_partner_solved", "group")
    assert kept(rows) == [(0, 1, 1.0), (0, 1, 0.0), (2, 1, 1.0), (2, 1, 1.0), (2, 2, 1.0), (2, 2, 0.0)]


def test_partner_mixed_wants_a_success_and_a_failure_in_that_partners_group():
    # prompt 0: partner 1 [1, 0] mixed; prompt 2: partner 1 [1, 1] is not mixed, partner 2 [1, 0] is
    rows = select_partner_rows(literal_pool(), "learner_failed_partner_mixed", "group")
    assert kept(rows) == [(0, 1, 1.0), (0, 1, 0.0), (2, 2, 1.0), (2, 2, 0.0)]


def test_correct_keeps_the_whole_verified_correct_answers():
    rows = literal_pool()
    rows[2].truncated = True  # prompt 0's correct answer of partner 1 cut at the learner's limit: not verified text
    out = select_partner_rows(rows, "all", "correct")
    assert kept(out) == [(1, 1, 1.0), (1, 1, 1.0), (1, 2, 1.0), (2, 1, 1.0), (2, 1, 1.0), (2, 2, 1.0)]


def test_one_correct_keeps_the_first_correct_answer_per_prompt():
    # sgt's selection: prompt 0 → partner 1's first; prompt 2 → partner 1's first of three correct; prompt 3 none
    rows = select_partner_rows(literal_pool(), "learner_failed_partner_solved", "one_correct")
    assert kept(rows) == [(0, 1, 1.0), (2, 1, 1.0)]
    picked = [r for r in rows if not r.is_own]
    pool = literal_pool()
    assert [pool.index(next(p for p in pool if (p.prompt_index, p.source, p.reward) == (r.prompt_index, r.source,
            r.reward))) for r in picked] == [2, 14]  # the first in the pool's order


def test_a_prompt_without_own_answers_is_not_failed():
    # the asynchronous mode: no own answer to prompt 0 → nothing to rescue, no partner row shared
    rows = [vrow(0, 1, 1.0), vrow(0, 1, 0.0)]
    assert select_partner_rows(rows, "learner_failed", "group") == []


# ---- advantages -----------------------------------------------------------------------------------------------

def test_partner_advantage_is_each_authors_own_group():
    # prompt 0 of literal_pool under gated-group's selection: own [0, 0] → 0, 0 (all equal);
    # partner 1 [1, 0] in its own group: mean ½, unbiased std 1/√2 → ±0.7071 (the joint group [0, 0, 1, 0] would
    # give mean ¼, std ½ → 1.5, −0.5)
    rows = [r for r in literal_pool() if r.prompt_index == 0 and r.source in (0, 1)]
    assign_advantages(rows, 0, ALGORITHMS.get("gated-group"), OMEGA)
    assert [r.advantage for r in rows] == pytest.approx([0.0, 0.0, 0.7071068, -0.7071068], rel=1e-5)


def test_group_mean_has_no_std():
    # luffy: own [1, 0] + a partner's correct 1: mean 2/3 → 1/3, −2/3, 1/3 (with the std, 0.577, −1.155, 0.577)
    rows = [vrow(0, 0, 1.0), vrow(0, 0, 0.0), vrow(0, 1, 1.0)]
    assign_advantages(rows, 0, ALGORITHMS.get("luffy"), OMEGA)
    assert [r.advantage for r in rows] == pytest.approx([1 / 3, -2 / 3, 1 / 3], rel=1e-5)
    assert [r.omega for r in rows] == [1.0, 1.0, 1.0]


def test_capped_baseline_counts_a_weaker_partners_successes_once():
    # own [1, 1, 0, 0], partner [1, 0, 0, 0]; P̂ 0.6 and 0.3, so ω^(0,1) = 2 and ω^(1,0) = 0.5. The joint std
    # (unbiased, 3 of 8 right) is √(15/56) = 0.517549.
    # Learner 0 (stronger): hacpo's baseline (1 + 1 + 2·1)/8 = 0.5 → ±0.5/0.5175 = ±0.9661; capped, ω → 1, the
    # plain joint mean 3/8 → 0.625/0.5175 = 1.2076 and −0.375/0.5175 = −0.7246.
    # Learner 1 (weaker): ω 0.5 < 1 is kept, both give (0.5·2 + 1)/8 = 0.25 → 1.4491, −0.4830.
    omega = omega_matrix(torch.tensor([0.6, 0.3]))
    rewards = ([1, 1, 0, 0], [1, 0, 0, 0])

    def advantages(name: str, learner: int) -> list[float]:
        rows = [vrow(0, src, float(r), learner=learner) for src, rs in enumerate(rewards) for r in rs]
        assign_advantages(rows, learner, ALGORITHMS.get(name), omega)
        return [r.advantage for r in rows]

    std = math.sqrt(15 / 56)
    assert advantages("hacpo", 0) == pytest.approx([0.5 / std if r else -0.5 / std for rs in rewards for r in rs],
                                                   rel=1e-5)
    assert advantages("hacpo-capbase", 0) == pytest.approx(
        [0.625 / std if r else -0.375 / std for rs in rewards for r in rs], rel=1e-5)
    assert advantages("hacpo-capbase", 0) == pytest.approx(advantages("hacpo-noadv", 0))
    weaker = [0.75 / std if r else -0.25 / std for rs in rewards for r in rs]
    assert advantages("hacpo-capbase", 1) == pytest.approx(weaker, rel=1e-5)
    assert advantages("hacpo", 1) == pytest.approx(weaker, rel=1e-5)


# ---- the named compositions ---------------------------------------------------------------------------------

COMPOSITIONS = {  # name: (share_prompts, partner_answers, partner_old, partner_weight, advantage, negatives, loss)
    "hacpo": ("all", "group", "author", "hacpo", "hacpo", "keep", "hacpo"),
    "hacpo-capbase": ("all", "group", "author", "hacpo", "hacpo_capped", "keep", "hacpo"),
    "naive": ("all", "group", "author", "ratio", "group", "keep", "gspo"),
    "imitation": ("all", "group", "none", "nll", "own", "keep", "imitation"),
    "naive-recompute": ("all", "group", "learner", "ratio", "group", "keep", "gspo"),
    "sgt": ("learner_failed_partner_solved", "one_correct", "none", "nll", "own", "keep", "imitation"),
    "luffy": ("all", "correct", "none", "shaping", "group_mean", "keep", "partner"),
    "ftis": ("all", "group", "author", "truncated_is", "group", "veto", "partner"),
    "gated-group": ("learner_failed_partner_mixed", "group", "learner", "gate", "partner", "keep", "partner"),
}


@pytest.mark.parametrize("name", sorted(COMPOSITIONS))
def test_each_named_method_is_its_ingredients(name):
    a = ALGORITHMS.get(name)
    assert (a.share_prompts, a.partner_answers, a.partner_old, a.partner_weight, a.advantage, a.negatives,
            a.loss) == COMPOSITIONS[name]
    assert (a.loss, a.cross_as_own) == PARTNER_WEIGHT_LOSS[a.partner_weight]
    assert a.shares_pool


def test_a_config_composes_a_variant():
    cfg = load_config("tiny-test", overrides=["algorithm.share_prompts=learner_failed",
                                              "algorithm.partner_weight=truncated_is", "algorithm.negatives=drop"])
    a = resolve(cfg.algorithm)
    assert (a.name, a.share_prompts, a.partner_weight, a.loss, a.partner_old, a.negatives) == (
        "hacpo", "learner_failed", "truncated_is", "partner", "author", "drop")
    assert resolve(load_config("tiny-test").algorithm) is ALGORITHMS.get("hacpo")  # nothing set: the registry's


def test_compose_follows_the_weights_loss_and_pi_old():
    naive = ALGORITHMS.get("naive")
    assert compose(naive, partner_weight="shaping").partner_old == "none"
    assert compose(naive, partner_weight="gate").partner_old == "learner"
    assert compose(ALGORITHMS.get("imitation"), partner_weight="hacpo").partner_old == "author"
    assert compose(naive, partner_old="learner") == ALGORITHMS.get("naive-recompute").__class__(
        **{**dataclasses.asdict(ALGORITHMS.get("naive-recompute")), "name": "naive"})


@pytest.mark.parametrize(("ingredients", "message"), [
    ({"share_prompts": "failed"}, "algorithm.share_prompts='failed': valid values: all, learner_failed"),
    ({"partner_weight": "ratio", "partner_old": "none"}, "partner_weight=ratio needs author or learner"),
    ({"partner_weight": "nll", "partner_old": "author"}, "has no ratio, so partner_old must be none"),
    ({"partner_weight": "gate", "partner_old": "author"}, "gate needs partner_old=learner"),
    ({"negatives": "drop"}, "only the partner loss filters negatives"),
])
def test_compose_refuses_what_cannot_run_in_one_line(ingredients, message):
    with pytest.raises(ValueError, match=message) as info:
        compose(ALGORITHMS.get("hacpo"), **ingredients)
    assert "\n" not in str(info.value)


def test_an_algorithm_without_a_pool_takes_no_ingredient():
    with pytest.raises(ValueError, match="algorithm.share_prompts: gspo trains on its own answers only"):
        compose(ALGORITHMS.get("gspo"), share_prompts="learner_failed")


def test_the_config_names_a_bad_ingredient_value():
    with pytest.raises(ConfigError, match="share_prompts"):
        load_config("tiny-test", overrides=["algorithm.share_prompts=sometimes"])


def test_sgts_lambda_defaults_to_a_tenth_and_imitations_to_one():
    assert load_config("tiny-test", overrides=["algorithm.name=sgt"]).algorithm.imitation_coef == 0.1
    assert load_config("tiny-test", overrides=["algorithm.name=imitation"]).algorithm.imitation_coef == 1.0
    assert load_config("tiny-test", overrides=["algorithm.name=sgt",
                                               "algorithm.imitation_coef=0.3"]).algorithm.imitation_coef == 0.3


def test_every_ingredient_is_a_config_key():
    fields = load_config("tiny-test").algorithm.model_fields
    assert set(INGREDIENTS) <= set(fields)


# ---- the learner's update on the tiny model ------------------------------------------------------------------

def make_agent(lr: float = 0.0):
    torch.manual_seed(0)
    agent = load_agent("agent0", 0, tiny_agent_path("qwen2-char"))
    agent.model.double()
    agent.configure_optimizer(lr=lr)
    return agent


def row(agent, group: int, source: int, answer: str, reward: float, author_mean: float = -1.0) -> ViewRow:
    answer_ids, _ = agent.encode_answer(answer, finished=True)
    return ViewRow(prompt_index=group, source=source, is_own=source == 0,
                   prompt_ids=agent.render_prompt(f"{12 + group}+30="), answer_ids=answer_ids,
                   old_logp_mean=author_mean, old_token_logps=None, reward=reward)


def own_ratio_one(agent, rows: list[ViewRow]) -> None:
    """Own rows' π_old: the learner's mean log-prob now (own ratios 1)."""
    logp_BT, _, mask_BT = _forward(agent, rows, True, [False] * len(rows))
    for r, mean in zip(rows, ((logp_BT * mask_BT).sum(-1) / mask_BT.sum(-1)).tolist(), strict=True):
        if r.is_own:
            r.old_logp_mean = mean


def two_prompt_minibatches(agent) -> list[list[ViewRow]]:
    mbs = []
    for g in range(2):
        rows = [row(agent, g, 0, "42", 1.0), row(agent, g, 0, "7", 0.0),
                row(agent, g, 1, "43", 1.0, -0.3), row(agent, g, 1, "5", 0.0, -4.0)]
        own_ratio_one(agent, rows)
        mbs.append(rows)
    return mbs


def ratios(calls) -> list[float]:
    """Every row's sequence ratio s as the loss saw it, the calls' rows in order."""
    out: list[float] = []
    for c in calls:
        x = c.inputs
        out += torch.exp(sequence_log_ratio(x.logp_BT.detach(), x.mask_BT, x.old_logp_mean_B)[0]).tolist()
    return out


@pytest.mark.model
@pytest.mark.parametrize("micro", [64, 3])
def test_naive_recompute_has_ratio_exactly_one_at_the_first_minibatch(spy, micro):
    # the authors' log-probs (−0.3, −4.0) are far from the learner's: naive sees ratios ≠ 1; naive-recompute's
    # π_old is the learner's own pre-update pass over the same micro-batches, so its first minibatch's ratios
    # are exactly 1, and the second one's (after an optimizer step with lr 0.05) are not
    algo = ALGORITHMS.get("naive-recompute")
    agent = make_agent(lr=0.05)
    mbs = two_prompt_minibatches(agent)
    for mb in mbs:
        assign_advantages(mb, 0, algo, OMEGA)
    metrics = update_learner(agent, copy.deepcopy(mbs), algo, SETTINGS, micro_batch_size=micro, grad_clip=1e9)
    calls = len(spy) // 2  # per minibatch; each minibatch's rows: own, own, partner, partner
    first, later = ratios(spy[:calls])[2:], ratios(spy[calls:])[2:]
    assert first == [1.0, 1.0]
    assert all(abs(s - 1.0) > 1e-9 for s in later)
    assert metrics["partner_old/log_ratio_to_author"] != 0.0
    assert "partner_old/gate_pass_frac" not in metrics  # no gate in naive-recompute
    spy.clear()
    update_learner(make_agent(lr=0.05), copy.deepcopy(mbs), ALGORITHMS.get("naive"), SETTINGS,
                   micro_batch_size=micro, grad_clip=1e9)
    assert all(abs(s - 1.0) > 1e-3 for s in ratios(spy[: len(spy) // 2])[2:])


@pytest.mark.model
def test_gated_groups_gate_is_the_learners_pi_old_over_the_authors(spy):
    # author means set so that s = exp(ℓ̄_learner − ℓ̄_author) = 0.5, 0.9 and 1.5 on three partner rows:
    # gate 1[s > 0.8]·min(s, 1) = 0, 0.9, 1; the loss receives them as partner_weight_B (own rows: 1)
    algo = ALGORITHMS.get("gated-group")
    agent = make_agent()
    rows = [row(agent, 0, 0, "42", 0.0), row(agent, 0, 0, "7", 0.0)]
    rows += [row(agent, 0, 1, ans, r) for ans, r in (("43", 1.0), ("5", 0.0), ("42", 1.0))]
    logp_BT, _, mask_BT = _forward(agent, rows, True, [False] * len(rows))
    means = ((logp_BT * mask_BT).sum(-1) / mask_BT.sum(-1)).tolist()
    for r, mean, s in zip(rows[2:], means[2:], (0.5, 0.9, 1.5), strict=True):
        r.old_logp_mean = mean - math.log(s)
    own_ratio_one(agent, rows)
    assign_advantages(rows, 0, algo, OMEGA)
    metrics = update_learner(agent, [rows], algo, SETTINGS, micro_batch_size=64, grad_clip=1.0)
    (call,) = spy
    assert call.loss == "partner" and call.settings.partner_term == "gate"
    assert call.inputs.partner_weight_B.tolist() == pytest.approx([1.0, 1.0, 0.0, 0.9, 1.0], rel=1e-6)
    assert ratios([call])[2:] == [1.0, 1.0, 1.0]  # the PPO ratio is against the learner's own π_old
    assert metrics["partner_old/gate_pass_frac"] == pytest.approx(2 / 3)


@pytest.mark.model
def test_build_view_applies_the_algorithms_selection():
    from hacrl.learner.view import build_view
    from hacrl.pool import TrajectoryPool
    from hacrl.types import Problem, Trajectory

    # prompt 0: the learner's answer failed, the partner has one correct ("42") and one wrong answer;
    # prompt 1: the learner solved it. sgt keeps the one correct partner answer of prompt 0 only; hacpo keeps all
    agent = make_agent()
    ids = tuple(agent.tokenizer("7", add_special_tokens=False)["input_ids"])
    trajs = [Trajectory(0, 0, "7", True, -1.0, 1, reward=0.0, token_ids=ids),
             Trajectory(0, 1, "42", True, -1.0, 2, reward=1.0), Trajectory(0, 1, "5", True, -1.0, 1, reward=0.0),
             Trajectory(1, 0, "7", True, -1.0, 1, reward=1.0, token_ids=ids),
             Trajectory(1, 1, "7", True, -1.0, 1, reward=1.0)]
    pool = TrajectoryPool([Problem("p", "3+4=", "7"), Problem("q", "1+6=", "7")], trajs)
    prompts = {0: "3+4=", 1: "1+6="}
    sgt = build_view(agent, pool, ALGORITHMS.get("sgt"), prompts)
    assert [(r.prompt_index, r.source, r.reward) for r in sgt] == [(0, 0, 0.0), (0, 1, 1.0), (1, 0, 1.0)]
    assert len(build_view(agent, pool, ALGORITHMS.get("hacpo"), prompts)) == 5


@pytest.mark.model
def test_sgt_gives_no_partner_term_where_the_learner_had_a_correct_answer(spy):
    # prompt 0: own [0, 0], the partner's [1, 1] → one correct partner answer imitated;
    # prompt 1: own [1, 0] → no partner row at all; NLL over the one imitated row, λ 0.1
    algo = ALGORITHMS.get("sgt")
    agent = make_agent()
    rows = [row(agent, 0, 0, "7", 0.0), row(agent, 0, 0, "8", 0.0), row(agent, 0, 1, "42", 1.0),
            row(agent, 0, 1, "42 ", 1.0), row(agent, 1, 0, "43", 1.0), row(agent, 1, 0, "9", 0.0),
            row(agent, 1, 1, "43", 1.0), row(agent, 1, 1, "1", 0.0)]
    rows = select_partner_rows(rows, algo.share_prompts, algo.partner_answers)
    assert [(r.prompt_index, r.source, r.reward) for r in rows if not r.is_own] == [(0, 1, 1.0)]
    own_ratio_one(agent, rows)
    assign_advantages(rows, 0, algo, OMEGA)
    by_prompt = [[r for r in rows if r.prompt_index == g] for g in (0, 1)]
    metrics = update_learner(agent, by_prompt, algo, SETTINGS, micro_batch_size=64, grad_clip=1.0)
    first, second = spy
    assert first.inputs.imitate_B.tolist() == [False, False, True]
    assert second.inputs.imitate_B.tolist() == [False, False]
    assert first.settings.imitation_coef == 0.1
    # prompt 0: own advantages 0 (all failed), so its loss is λ·NLL of "42" alone
    assert first.value == pytest.approx(0.1 * metrics["imitation/nll"], rel=1e-6)


def test_compares_variant_label_composes_the_same_algorithm():
    # hacrl compare --algos hacpo@share_prompts=learner_failed@partner_answers=correct
    from hacrl.report.compare import parse_variant

    name, overrides = parse_variant("hacpo@share_prompts=learner_failed@partner_answers=correct")
    a = resolve(load_config("tiny-test", overrides=[*overrides, f"algorithm.name={name}"]).algorithm)
    assert (a.name, a.share_prompts, a.partner_answers, a.loss) == ("hacpo", "learner_failed", "correct", "hacpo")


@pytest.mark.model  # it builds a Trainer (which stops before loading a model)
def test_the_trainer_refuses_an_ingredient_that_cannot_run_before_loading_anything(tmp_path):
    from hacrl.trainer.trainer import Trainer

    cfg = load_config("tiny-test", overrides=["algorithm.name=gspo", "algorithm.share_prompts=learner_failed"])
    with pytest.raises(ConfigError, match="^algorithm.share_prompts: gspo trains on its own answers only"):
        Trainer(cfg, tmp_path)
