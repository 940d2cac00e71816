"""The ``trust`` method's rows (``hacrl.learner.view``): each partner row takes its author's τ and ratio floor, and
the advantage weighs each partner by τ in the joint group's baseline: τ 0 gives the learner's own group's (GSPO),
τ 1 the joint group's (``naive``)."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from hacrl.core import group_advantages, omega_matrix
from hacrl.core.trust import TrustRule
from hacrl.learner.algorithms import ALGORITHMS
from hacrl.learner.trust import LearnerTrust
from hacrl.learner.view import ViewRow, apply_trust, assign_advantages

OMEGA = omega_matrix(torch.tensor([0.5, 0.5, 0.5]))


def rows() -> list[ViewRow]:
    """Learner 0, partners 1 and 2, one prompt: own rewards [1, 0, 0], partner 1 [1, 1], partner 2 [0, 1]."""
    spec = [(0, 1.0), (0, 0.0), (0, 0.0), (1, 1.0), (1, 1.0), (2, 0.0), (2, 1.0)]
    return [ViewRow(0, src, src == 0, [1], [2], 0.0, None, r) for src, r in spec]


def test_each_partner_row_takes_its_authors_trust_and_floor():
    view = rows()
    apply_trust(view, [1.0, 0.5, 0.0], [0.0, 0.316, 1.0])
    assert [(r.partner_weight, r.partner_floor) for r in view] == [
        (1.0, 0.0)] * 3 + [(0.5, 0.316)] * 2 + [(0.0, 1.0)] * 2


def test_zero_trust_gives_the_own_groups_advantage_and_full_trust_the_joint_groups():
    algo = ALGORITHMS.get("trust")
    alone = rows()
    assign_advantages(alone, 0, algo, OMEGA, [1.0, 0.0, 0.0])
    own = group_advantages(torch.tensor([1.0, 0.0, 0.0]), torch.zeros(3, dtype=torch.long))
    assert_close(torch.tensor([r.advantage for r in alone[:3]]), own)  # 1 − ⅓ over std 0.577: +1.155, −0.577
    joint = rows()
    assign_advantages(joint, 0, algo, OMEGA, [1.0, 1.0, 1.0])
    naive = rows()
    assign_advantages(naive, 0, ALGORITHMS.get("naive"), OMEGA)
    assert [r.advantage for r in joint] == [r.advantage for r in naive]
    # partner 2 half trusted: weights [1, 1, 1, 0, 0, ½, ½]: mean (1 + ½)/4 = 0.375
    half = rows()
    assign_advantages(half, 0, algo, OMEGA, [1.0, 0.0, 0.5])
    sd = ((0.625**2 + 2 * 0.375**2 + 0.5 * 0.375**2 + 0.5 * 0.625**2) / 3) ** 0.5
    assert_close(torch.tensor(half[0].advantage), torch.tensor(0.625 / (sd + 1e-6)))


def test_what_an_update_kept_of_each_partner_and_what_it_was_worth():
    # learner 1 of three; τ 0.5 in agent 0 (floor √0.1 ≈ 0.316), τ 1 in agent 2 (floor 0.1)
    trust = LearnerTrust(1, ["a", "b", "c"], TrustRule())
    tau, floors = [0.5, 1.0, 1.0], [0.1 ** 0.5, 0.0, 0.1]
    out = trust.kept(tau, floors, {0: [0.2, 0.4, 1.0, 3.0], 2: [0.05, 0.5]})
    assert out == {"trust_kept/a": 0.75, "trust_usable/a": 0.375, "trust_kept/c": 0.5, "trust_usable/c": 0.5}


def test_the_usable_baseline_weighs_each_partner_by_what_its_floor_kept():
    # algorithm.trust_baseline=usable: before any update every weight is τ; after one that kept half of partner 1's
    # answers and none of partner 2's, the weights are τ × that share: [1, 0.5, 0]
    trust = LearnerTrust(0, ["a", "b", "c"], TrustRule(), "usable")
    assert trust.baseline([1.0, 1.0, 0.5]) == [1.0, 1.0, 0.5]
    trust.kept([1.0, 1.0, 1.0], [0.0, 0.1, 0.1], {1: [0.05, 0.5], 2: [0.01, 0.02]})
    weights = trust.baseline([1.0, 1.0, 1.0])
    assert weights == [1.0, 0.5, 0.0]
    metrics = trust.metrics([1.0, 1.0, 1.0], [0.0, 0.1, 0.1])
    assert (metrics["trust_baseline/b"], metrics["trust_baseline/c"]) == (0.5, 0.0)
    # rows [1, 0, 0 | 1, 1 | 0, 1] at weights [1, 1, 1, ½, ½, 0, 0]: W 4, mean (1 + ½ + ½)/4 = ½, variance
    # (3 · ¼ + ½ · ¼ + ½ · ¼)/(4 − 1) = ⅓: the learner's right answer +½/√⅓ = +0.866, a wrong one −0.866
    view = rows()
    assign_advantages(view, 0, ALGORITHMS.get("trust"), OMEGA, weights)
    assert_close(torch.tensor([r.advantage for r in view[:2]]), torch.tensor([0.5, -0.5]) / (3 ** -0.5 + 1e-6))
    # the default keeps τ whatever the floor kept
    plain = LearnerTrust(0, ["a", "b", "c"], TrustRule())
    plain.kept([1.0, 1.0, 1.0], [0.0, 0.1, 0.1], {1: [0.05, 0.5], 2: [0.01, 0.02]})
    assert plain.baseline([1.0, 1.0, 1.0]) == [1.0, 1.0, 1.0]


def test_the_kept_shares_the_baseline_reads_survive_a_checkpoint(tmp_path):
    trust = LearnerTrust(1, ["a", "b"], TrustRule(), "usable")
    trust.kept([0.75, 1.0], [0.1 ** 0.75, 0.0], {0: [0.01, 0.9, 0.9, 0.9]})
    agent_dir = tmp_path / "checkpoint" / "agents" / "b"
    agent_dir.mkdir(parents=True)
    trust.save(agent_dir)
    back = LearnerTrust(1, ["a", "b"], TrustRule(), "usable")
    back.restore(tmp_path / "checkpoint", "b")
    assert back.last_kept == [0.75, 1.0] and back.baseline([0.75, 1.0]) == [0.5625, 1.0]
    # a checkpoint written before the key existed reads as nothing cut yet
    (agent_dir / "trust.json").write_text('{"tau": [1.0, 1.0], "reference": null}')
    old = LearnerTrust(1, ["a", "b"], TrustRule(), "usable")
    old.restore(tmp_path / "checkpoint", "b")
    assert old.last_kept == [1.0, 1.0]


def test_a_learner_switches_only_once_every_partner_is_cut():
    # three agents, learner 1: r̄ of source 0 is 0.2 (cut at 0.5), of source 2 0.8 (kept), after one counted
    # update; with cut_to hacpo the learner switches only when both are cut, and logs it per partner
    rule = TrustRule(cut=0.5, cut_steps=1)
    some = LearnerTrust(1, ["a", "b", "c"], rule, cut_to="hacpo")
    assert some.observe_ratios({0: [0.1, 0.3], 2: [0.8]}) == {
        "trust_rbar/a": pytest.approx(0.2), "trust_rbar/c": 0.8, "trust_cut/a": 1.0, "trust_cut/c": 0.0,
        "trust_switch/a": 0.0, "trust_switch/c": 0.0}
    assert not some.switched() and some.settings()[0] == [0.0, 1.0, 1.0]
    every = LearnerTrust(1, ["a", "b", "c"], TrustRule(cut=0.9, cut_steps=1), cut_to="hacpo")
    assert every.observe_ratios({0: [0.1, 0.3], 2: [0.8]})["trust_switch/c"] == 1.0 and every.switched()
    alone = LearnerTrust(1, ["a", "b", "c"], TrustRule(cut=0.9, cut_steps=1))  # the default: τ 0, no switch
    assert "trust_switch/a" not in alone.observe_ratios({0: [0.1], 2: [0.8]}) and not alone.switched()
    assert alone.settings()[0] == [0.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="cut_to must be one of alone, hacpo"):
        LearnerTrust(1, ["a", "b"], rule, cut_to="naive")


def test_a_switched_learner_stays_switched_after_a_checkpoint(tmp_path):
    trust = LearnerTrust(0, ["a", "b"], TrustRule(cut=0.5, cut_steps=1), cut_to="hacpo")
    trust.observe_ratios({1: [0.1]})
    (tmp_path / "run" / "agents" / "a").mkdir(parents=True)
    trust.save(tmp_path / "run" / "agents" / "a")
    back = LearnerTrust(0, ["a", "b"], TrustRule(cut=0.5, cut_steps=1), cut_to="hacpo")
    assert not back.switched()
    back.restore(tmp_path / "run", "a")
    assert back.switched()
