"""The ``trust`` method through the ``Trainer`` on ``tiny-test``: its validation checks run on the steps the config
says, every decision is in the metrics per partner and step, a harm check distrusts the partner and the next update
trains on the learner's own answers only, and a resumed run goes on with the same trust."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from hacrl.config import ConfigError, load_config
from hacrl.learner.algorithms import ALGORITHMS, resolve, uses_trust
from hacrl.trainer.trainer import Trainer

pytestmark = pytest.mark.model

TRUST = ["algorithm.name=trust", "algorithm.trust_every=2", "algorithm.trust_val_size=24", "trainer.eval_size=20"]


def make_trainer(tmp_path, *overrides, name="run", resume_from=None):
    cfg = load_config("tiny-test", overrides=[*TRUST, *overrides])
    run_dir = tmp_path / name
    run_dir.mkdir(exist_ok=True)
    return Trainer(cfg, run_dir, resume_from=resume_from)


RESUMED = ("timing/", "eval/")  # what an exact resume need not reproduce: timings, and the evaluations


def straight_and_cut(tmp_path, cut, *overrides):
    """A 4-step run trained straight through, a run trained ``cut`` steps and checkpointed there, and a trainer
    resuming the second from that checkpoint to step 4 (not yet trained)."""
    straight = make_trainer(tmp_path, "trainer.steps=4", *overrides, name="straight")
    straight.train()
    first = make_trainer(tmp_path, f"trainer.steps={cut}", f"trainer.checkpoint_every={cut}", *overrides,
                         name="resumed")
    first.train()
    second = make_trainer(tmp_path, "trainer.steps=4", *overrides, name="resumed",
                          resume_from=first.run_dir / "checkpoints" / f"step-{cut:06d}")
    return straight, first, second


def test_trust_is_registered_and_reads_a_trust():
    algo = ALGORITHMS.get("trust")
    assert (algo.loss, algo.advantage, algo.partner_weight, algo.shares_pool) == ("partner", "trust", "trust", True)
    assert uses_trust(algo) and not uses_trust(ALGORITHMS.get("naive")) and not uses_trust(ALGORITHMS.get("gspo"))
    cfg = load_config("tiny-test", overrides=["algorithm.name=hacpo", "algorithm.partner_weight=trust"])
    assert uses_trust(resolve(cfg.algorithm))  # a composition that reads the trust gets the checks too


def test_checks_run_every_k_steps_and_every_decision_is_logged(tmp_path):
    trainer = make_trainer(tmp_path, "trainer.steps=3")
    try:
        assert trainer.validation is not None and len(trainer.validation) == 24
        lines = [trainer.step() for _ in range(3)]
    finally:
        trainer.close()
    for step, metrics in enumerate(lines):  # checks before steps 1 and 3 (step_idx 0 and 2)
        checked = step % 2 == 0
        for learner, partner in (("qwen-char", "llama-bpe"), ("llama-bpe", "qwen-char")):
            tau = metrics[f"agent/{learner}/trust/{partner}"]
            assert 0.0 <= tau <= 1.0
            assert metrics[f"agent/{learner}/trust_floor/{partner}"] == pytest.approx(0.1 ** tau)
            assert (f"agent/{learner}/val/acc" in metrics) == checked
            # the first check only sets the reference; the second is tested against it
            assert (f"agent/{learner}/val/harm" in metrics) == (step == 2)
            assert math.isfinite(metrics[f"agent/{learner}/pg_loss"])
        assert (metrics["timing/validation"] > 1e-3) == checked  # no check: the phase does nothing


def test_a_harm_check_distrusts_the_partner_for_the_next_update(tmp_path):
    # z 0 and min_drop 0: any net loss on the slice is harm. Force one: the reference says every problem was right
    trainer = make_trainer(tmp_path, "trainer.steps=3", "algorithm.trust_z=0", "algorithm.trust_min_drop=0")
    try:
        trainer.step()  # check 1 (the reference) and an update at full trust
        worker = trainer.backend.workers[1]
        worker.trust.state.reference = (True,) * 24
        trainer.step()
        metrics = trainer.step()  # check 2: some problem wrong now, so harm; τ 0 in this update
    finally:
        trainer.close()
    assert metrics["agent/llama-bpe/val/harm"] == 1.0
    assert metrics["agent/llama-bpe/trust/qwen-char"] == 0.0
    assert metrics["agent/llama-bpe/trust_floor/qwen-char"] == 1.0
    assert metrics["agent/llama-bpe/cross/gate_mean"] == 0.0  # every partner row at weight 0
    assert metrics["agent/llama-bpe/cross/objective_mean"] == 0.0


def test_resume_goes_on_with_the_same_trust(tmp_path, metric_lines):
    straight, _, second = straight_and_cut(tmp_path, 3)
    assert second.backend.workers[0].trust.state.reference is not None
    second.train()
    assert metric_lines(straight.run_dir, RESUMED) == metric_lines(second.run_dir, RESUMED)


def test_trust_refuses_the_asynchronous_mode(tmp_path):
    with pytest.raises(ConfigError, match="trainer.mode=lockstep"):
        make_trainer(tmp_path, "trainer.mode=async")


def test_the_rollout_budget_moves_answers_to_the_learner_that_distrusts(tmp_path):
    # a harm check (z 0, min_drop 0, a reference that got every problem right) sets llama-bpe's τ in qwen-char to 0;
    # from the next step llama-bpe writes more than G a prompt and qwen-char fewer, N·G in all
    trainer = make_trainer(tmp_path, "trainer.steps=4", "algorithm.trust_budget=true", "algorithm.trust_z=0",
                           "algorithm.trust_min_drop=0")
    g = trainer.derived.group_size
    try:
        first = trainer.step()
        trainer.backend.workers[1].trust.state.reference = (True,) * 24
        lines = [trainer.step() for _ in range(3)]
    finally:
        trainer.close()
    assert (first["agent/qwen-char/rollouts"], first["agent/llama-bpe/rollouts"]) == (g, g)  # before any update
    assert first["pool/size"] == 2 * g * trainer.cfg.trainer.batch_size
    cut = lines[1]  # step 3: the check found harm, τ 0 in its update, so nothing of qwen-char's is usable
    assert cut["agent/llama-bpe/trust/qwen-char"] == 0.0 and cut["agent/llama-bpe/trust_usable/qwen-char"] == 0.0
    after = lines[2]  # step 4's split read step 3's updates
    counts = after["agent/qwen-char/rollouts"], after["agent/llama-bpe/rollouts"]
    assert counts[1] > g > counts[0] >= math.ceil(g / 2) and sum(counts) == 2 * g
    assert after["pool/size"] == 2 * g * trainer.cfg.trainer.batch_size  # the pooled methods' answers


def test_the_rollout_budget_resumes_with_the_same_split(tmp_path, metric_lines):
    # a floor of 0.9 cuts some partner answers at full trust, so the values the split reads are not all 1
    setting = ("algorithm.trust_budget=true", "algorithm.trust_budget_min=0.25", "algorithm.trust_floor=0.9")
    straight, first, second = straight_and_cut(tmp_path, 2, *setting)
    assert first.rollout_budget is not None and min(min(row) for row in first.rollout_budget.usable) < 1.0
    assert second.rollout_budget is not None and second.rollout_budget.usable == first.rollout_budget.usable
    second.train()
    assert metric_lines(straight.run_dir, RESUMED) == metric_lines(second.run_dir, RESUMED)
    assert any(k.endswith("/rollouts") for k in metric_lines(straight.run_dir, RESUMED)[-1])


def test_the_rollout_budget_needs_the_trust_method(tmp_path):
    cfg = load_config("tiny-test", overrides=["algorithm.name=naive", "algorithm.trust_budget=true"])
    with pytest.raises(ConfigError, match="algorithm.trust_budget: naive holds no trust"):
        Trainer(cfg, tmp_path)


def test_the_trained_mean_reaches_the_loss(tmp_path):
    # a floor of 0.9 cuts some partner answers at full trust: the trained mean divides by fewer rows than all of
    # them, so the first update's loss differs (the same rollout: the runs share the seed and start)
    losses = {}
    for mean in ("all", "trained"):
        trainer = make_trainer(tmp_path, "trainer.steps=1", "algorithm.trust_floor=0.9", f"algorithm.trust_mean={mean}",
                               name=mean)
        try:
            losses[mean] = trainer.step()
        finally:
            trainer.close()
    for agent, partner in (("qwen-char", "llama-bpe"), ("llama-bpe", "qwen-char")):
        assert losses["all"][f"agent/{agent}/trust_kept/{partner}"] < 1.0
        assert losses["all"]["agent/qwen-char/reward"] == losses["trained"]["agent/qwen-char/reward"]  # one rollout
        assert losses["trained"][f"agent/{agent}/pg_loss"] != pytest.approx(losses["all"][f"agent/{agent}/pg_loss"])


def test_the_usable_baseline_reaches_the_advantage_from_the_second_update(tmp_path):
    # a floor of 0.9 cuts some partner answers; the usable baseline weighs them by the share the last update kept:
    # the first update (nothing kept yet: weight τ) is the default's, the second's loss differs
    lines = {}
    for mode in ("tau", "usable"):
        trainer = make_trainer(tmp_path, "trainer.steps=2", "algorithm.trust_floor=0.9",
                               f"algorithm.trust_baseline={mode}", name=mode)
        try:
            lines[mode] = [trainer.step(), trainer.step()]
        finally:
            trainer.close()
    for agent, partner in (("qwen-char", "llama-bpe"), ("llama-bpe", "qwen-char")):
        first, second = lines["usable"]
        assert first[f"agent/{agent}/trust_baseline/{partner}"] == 1.0
        assert first[f"agent/{agent}/pg_loss"] == lines["tau"][0][f"agent/{agent}/pg_loss"]
        kept = first[f"agent/{agent}/trust_kept/{partner}"]
        assert 0.0 <= kept < 1.0
        assert second[f"agent/{agent}/trust_baseline/{partner}"] == pytest.approx(
            second[f"agent/{agent}/trust/{partner}"] * kept)
        assert lines["tau"][1][f"agent/{agent}/trust_baseline/{partner}"] == lines["tau"][1][
            f"agent/{agent}/trust/{partner}"]
        assert second[f"agent/{agent}/pg_loss"] != pytest.approx(lines["tau"][1][f"agent/{agent}/pg_loss"])


def test_the_usable_baseline_resumes_exactly(tmp_path, metric_lines):
    straight, _, second = straight_and_cut(tmp_path, 3, "algorithm.trust_floor=0.9", "algorithm.trust_baseline=usable")
    second.train()
    assert metric_lines(straight.run_dir, RESUMED) == metric_lines(second.run_dir, RESUMED)


def test_the_usable_baseline_needs_the_trust_method(tmp_path):
    cfg = load_config("tiny-test", overrides=["algorithm.name=naive", "algorithm.trust_baseline=usable"])
    with pytest.raises(ConfigError, match="algorithm.trust_baseline=usable: naive holds no trust"):
        Trainer(cfg, tmp_path)


def test_the_cut_distrusts_its_partner_for_good_after_its_updates(tmp_path):
    # trust_cut 100: every partner's r̄ (a mean ratio, near 1 here) is below it, so after update 2 each learner
    # trains alone: τ 0 and floor 1 from update 3 on; every partner of every learner being cut, the check due
    # before step 3 does not run (a check cannot raise a cut partner: tests/core/test_trust.py)
    trainer = make_trainer(tmp_path, "trainer.steps=4", "algorithm.trust_cut=100", "algorithm.trust_cut_steps=2")
    try:
        lines = [trainer.step() for _ in range(4)]
        assert trainer.checks_over
    finally:
        trainer.close()
    assert [m["timing/validation"] > 1e-3 for m in lines] == [True, False, False, False]
    for learner, partner in (("qwen-char", "llama-bpe"), ("llama-bpe", "qwen-char")):
        rbar = [m.get(f"agent/{learner}/trust_rbar/{partner}") for m in lines]
        assert rbar[2:] == [None, None] and all(0 < r < 100 for r in rbar[:2])
        # one minibatch a step on tiny-test: r̄ after update 1 is that update's mean cross ratio
        assert rbar[0] == pytest.approx(lines[0][f"agent/{learner}/cross/ratio_mean"], rel=1e-6)
        assert rbar[1] == pytest.approx((lines[0][f"agent/{learner}/cross/ratio_mean"]
                                         + lines[1][f"agent/{learner}/cross/ratio_mean"]) / 2, rel=1e-6)
        assert [m[f"agent/{learner}/trust_cut/{partner}"] for m in lines] == [0.0, 1.0, 1.0, 1.0]
        assert [m[f"agent/{learner}/trust/{partner}"] for m in lines] == [1.0, 1.0, 0.0, 0.0]
        assert [m[f"agent/{learner}/trust_floor/{partner}"] for m in lines[2:]] == [1.0, 1.0]
        assert [f"agent/{learner}/val/acc" in m for m in lines] == [True, False, False, False]


def test_checks_skipped_after_every_cut_change_no_update(tmp_path, metric_lines, monkeypatch):
    # the same cut run with the checks forced on after the cut (as before they stopped): every logged number
    # but the checks' own (val/) and the timings is equal, so skipping them changes nothing the learners do
    overrides = ("trainer.steps=5", "algorithm.trust_cut=100", "algorithm.trust_cut_steps=1",
                 "algorithm.trust_val_size=8")
    skipped = make_trainer(tmp_path, *overrides, name="skipped")
    skipped.train()
    monkeypatch.setattr(Trainer, "_every_partner_cut", lambda self, results: False)
    checked = make_trainer(tmp_path, *overrides, name="checked")
    checked.train()
    assert not checked.checks_over
    drop = ("timing/",)
    skipped_lines, checked_lines = metric_lines(skipped.run_dir, drop), metric_lines(checked.run_dir, drop)
    # the lines of steps 0 (the start's evaluation) to 5; checks before steps 1, 3 and 5
    assert [any("/val/" in k for k in m) for m in checked_lines] == [False, True, False, True, False, True]
    assert [any("/val/" in k for k in m) for m in skipped_lines] == [False, True, False, False, False, False]

    def learning(lines):
        return [{k: v for k, v in m.items() if "/val/" not in k} for m in lines]

    assert learning(skipped_lines) == learning(checked_lines)
    assert skipped_lines[1] == checked_lines[1]  # the first check (the reference) ran in both


def test_checks_end_only_when_every_learner_has_cut_every_partner():
    # three agents by hand: b has cut a but not c, so the checks go on; once b cuts c too, they end. No trust (no
    # validation slice), or one agent alone, never ends them
    trainer = SimpleNamespace(validation=[object()], agent_ids=["a", "b", "c"])
    every = {"a": {"trust_cut/b": 1.0, "trust_cut/c": 1.0}, "c": {"trust_cut/a": 1.0, "trust_cut/b": 1.0}}
    b_half = {"trust_cut/a": 1.0, "trust_cut/c": 0.0}
    b_all = {"trust_cut/a": 1.0, "trust_cut/c": 1.0}
    assert not Trainer._every_partner_cut(trainer, [every["a"], b_half, every["c"]])
    assert Trainer._every_partner_cut(trainer, [every["a"], b_all, every["c"]])
    assert not Trainer._every_partner_cut(trainer, [every["a"], {}, every["c"]])  # the cut off: no key
    no_trust = SimpleNamespace(validation=None, agent_ids=["a", "b", "c"])
    assert not Trainer._every_partner_cut(no_trust, [every["a"], b_all, every["c"]])
    assert not Trainer._every_partner_cut(SimpleNamespace(validation=[object()], agent_ids=["a"]), [{}])


def test_checks_stay_skipped_after_a_resume(tmp_path, metric_lines):
    # checkpointed after the cut: the resumed run knows the checks are over, and logs what the straight run logs
    straight, _, second = straight_and_cut(tmp_path, 2, "algorithm.trust_cut=100", "algorithm.trust_cut_steps=1")
    assert second.checks_over
    second.train()
    assert metric_lines(straight.run_dir, RESUMED) == metric_lines(second.run_dir, RESUMED)


def test_a_cut_below_every_ratio_cuts_nothing(tmp_path):
    trainer = make_trainer(tmp_path, "trainer.steps=3", "algorithm.trust_cut=1e-12", "algorithm.trust_cut_steps=1")
    try:
        lines = [trainer.step() for _ in range(3)]
    finally:
        trainer.close()
    for learner, partner in (("qwen-char", "llama-bpe"), ("llama-bpe", "qwen-char")):
        assert [m[f"agent/{learner}/trust_cut/{partner}"] for m in lines] == [0.0, 0.0, 0.0]
        assert lines[1][f"agent/{learner}/trust/{partner}"] == 1.0


def test_the_cut_resumes_exactly_across_its_updates(tmp_path, metric_lines):
    # checkpointed after update 1 of the 3 r̄ counts: the resumed run must count on from the saved sum
    straight, _, second = straight_and_cut(tmp_path, 1, "algorithm.trust_cut=100", "algorithm.trust_cut_steps=3")
    second.train()
    assert metric_lines(straight.run_dir, RESUMED) == metric_lines(second.run_dir, RESUMED)


def test_the_cut_needs_the_trust_method(tmp_path):
    cfg = load_config("tiny-test", overrides=["algorithm.name=naive", "algorithm.trust_cut=0.5"])
    with pytest.raises(ConfigError, match="algorithm.trust_cut=0.5: naive holds no trust to cut"):
        Trainer(cfg, tmp_path)


def _cross_keys(metrics, agent):
    return {k for k in metrics if k.startswith(f"agent/{agent}/cross/")}


def test_cut_to_hacpo_trains_a_learner_whose_partners_are_all_cut_with_hacpo(tmp_path, monkeypatch):
    # trust_cut 100 cuts every partner after update 1; with trust_cut_to hacpo each learner's later updates run
    # the registry's hacpo on the whole pool (no τ, no floor, HACPO's advantage), and update 1 ran trust
    from hacrl.backends import worker as worker_module

    seen = []
    real = worker_module.learn

    def spy(agent, pool, omega_NN, algo, *args, trust=None, baseline_N=None, **kwargs):
        seen.append((agent.index, algo.name, trust is not None, baseline_N is not None))
        return real(agent, pool, omega_NN, algo, *args, trust=trust, baseline_N=baseline_N, **kwargs)

    monkeypatch.setattr(worker_module, "learn", spy)
    trainer = make_trainer(tmp_path, "trainer.steps=3", "algorithm.trust_cut=100", "algorithm.trust_cut_steps=1",
                           "algorithm.trust_cut_to=hacpo")
    try:
        lines = [trainer.step() for _ in range(3)]
    finally:
        trainer.close()
    assert sorted(seen) == sorted([(k, "trust", True, True) for k in (0, 1)]
                                  + [(k, "hacpo", False, False) for k in (0, 1) for _ in range(2)])
    assert [x[1] for x in seen[:2]] == ["trust", "trust"]
    monkeypatch.undo()
    hacpo = make_trainer(tmp_path, "trainer.steps=1", "algorithm.name=hacpo", name="hacpo")
    try:
        plain = hacpo.step()
    finally:
        hacpo.close()
    for learner, partner in (("qwen-char", "llama-bpe"), ("llama-bpe", "qwen-char")):
        assert [m[f"agent/{learner}/trust_cut/{partner}"] for m in lines] == [1.0, 1.0, 1.0]
        assert [m[f"agent/{learner}/trust_switch/{partner}"] for m in lines] == [1.0, 1.0, 1.0]
        # τ and ℓ are logged only while trust weighs the partner; the switched updates log what hacpo logs
        assert [f"agent/{learner}/trust/{partner}" in m for m in lines] == [True, False, False]
        assert _cross_keys(lines[1], learner) == _cross_keys(plain, learner) != _cross_keys(lines[0], learner)
        assert f"agent/{learner}/val/acc" not in lines[2]  # every partner cut: no more checks


def test_cut_to_hacpo_resumes_switched(tmp_path, metric_lines):
    # checkpointed after the cut (update 1 of 1): the resumed run's updates 3-4 run hacpo as the straight run's do
    straight, _, second = straight_and_cut(tmp_path, 2, "algorithm.trust_cut=100", "algorithm.trust_cut_steps=1",
                                           "algorithm.trust_cut_to=hacpo")
    assert second.backend.workers[0].trust.switched()
    second.train()
    assert metric_lines(straight.run_dir, RESUMED) == metric_lines(second.run_dir, RESUMED)


@pytest.mark.parametrize(("overrides", "message"), [
    (("algorithm.trust_cut_to=hacpo",), "algorithm.trust_cut_to=hacpo: nothing is ever cut with trust_cut 0"),
    (("algorithm.trust_cut_to=hacpo", "algorithm.trust_cut=0.5", "algorithm.trust_budget=true"),
     "algorithm.trust_budget: a learner switched to hacpo no longer weighs its partners by trust"),
    (("algorithm.name=naive", "algorithm.trust_cut_to=hacpo"), "algorithm.trust_cut_to=hacpo: naive holds no trust"),
])
def test_cut_to_is_refused_where_it_cannot_apply(tmp_path, overrides, message):
    cfg = load_config("tiny-test", overrides=[*TRUST, *overrides])
    with pytest.raises(ConfigError, match=message):
        Trainer(cfg, tmp_path)
