"""bench/trust_study.py on a hand-made comparison directory (a minimal summary.json, two trust runs' metrics and
configs): the best fixed arm, the pre-registered rules' readings, trust's decisions and its answers per step, each
against arithmetic done by hand. No training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml


@pytest.fixture(scope="module")
def study(load_script):
    return load_script("bench/trust_study.py", "bench_trust_study")


def _vs(mean, lo, hi, seed_lo, seed_hi):
    return {"mean": mean, "interval": {"lo": lo, "hi": hi}, "seed_interval": {"lo": seed_lo, "hi": seed_hi}}


def make_cell(root: Path) -> Path:
    """Agents a and b, seeds 0-1. a: best fixed naive 0.60, trust 0.595, within 0.01 by both intervals; b: best
    fixed gspo2x 0.50, trust 0.45, regret by both. Trust runs: a's trust cut once in seed 0 (τ 0 for 1 of 3
    updates, 0.25 for 1); b's never."""
    cell = root / "cell"
    finals = {"a": {"hacpo": 0.58, "naive": 0.60, "imitation": 0.59, "gspo2x": 0.57, "trust": 0.595},
              "b": {"hacpo": 0.44, "naive": 0.46, "imitation": 0.30, "gspo2x": 0.50, "trust": 0.45}}
    vs = {"a": {"naive": _vs(-0.005, -0.009, 0.0, -0.008, 0.001), "gspo2x": _vs(0.025, 0.01, 0.04, 0.012, 0.038)},
          "b": {"gspo2x": _vs(-0.05, -0.07, -0.03, -0.08, -0.02), "naive": _vs(-0.01, -0.03, 0.01, -0.04, 0.02)}}
    results = {agent: {arm: {"final": {"mean": acc, "by_seed": {"0": acc, "1": acc}}} for arm, acc in arms.items()}
               for agent, arms in finals.items()}
    for agent in results:
        results[agent]["trust"]["vs"] = vs[agent]
    runs = [{"algorithm": arm, "seed": s, "dir": f"elsewhere/cell/runs/{arm}/seed-{s}"}
            for arm in finals["a"] for s in (0, 1)]
    summary = {"agents": {"a": "builtin:x", "b": "builtin:y"}, "results": results, "runs": runs,
               "cost": {"trust": {"wall_s": [30.0, 1.0]}, "naive": {"wall_s": [25.0, 1.0]}}}
    cell.mkdir()
    (cell / "summary.json").write_text(json.dumps(summary))
    cfg = {"trainer": {"batch_size": 16, "steps": 30}, "rollout": {"rollouts_per_prompt": 8},
           "algorithm": {"trust_every": 5, "trust_val_size": 256}}
    taus = {0: ([1.0, 0.0, 0.25], [0.0, 1.0, 0.0]), 1: ([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])}
    for seed, (tau_a, harm_a) in taus.items():
        run = cell / "runs" / "trust" / f"seed-{seed}"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(yaml.safe_dump(cfg))
        lines = [{"step": i + 1, "agent/a/trust/b": t, "agent/a/val/harm": h, "agent/b/trust/a": 1.0}
                 for i, (t, h) in enumerate(zip(tau_a, harm_a, strict=True))]
        (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return cell


def test_rows_read_the_best_arm_the_rules_and_the_decisions(study, tmp_path):
    rows = {r["agent"]: r for r in study.cell_rows(make_cell(tmp_path))}
    a, b = rows["a"], rows["b"]
    assert (a["best"], a["best_acc"], a["trust_acc"]) == ("naive", 0.60, 0.595)
    assert (a["rule1"], a["rule2"]) == ("within", "within")
    assert (b["best"], b["rule1"], b["rule2"]) == ("gspo2x", "regret", "regret")
    # a: harm checks 1 (seed 0) and 0 (seed 1): 0.5 a run; τ < 1 in 2 of 3 updates, then 0 of 3: a third
    assert a["harm_checks"] == pytest.approx(0.5) and a["distrust_share"] == pytest.approx(1 / 3)
    assert b["harm_checks"] == 0.0 and b["distrust_share"] == 0.0
    # 2 agents × 16 prompts × G 8 = 256 sampled answers; checks before steps 1, 6, ..., 26: 6 × 2 × 256 / 30 = 102.4
    assert a["answers_pooled"] == 256.0 and a["answers_validation"] == pytest.approx(102.4)
    assert (a["wall_trust"], a["wall_naive"]) == (30.0, 25.0)


def test_the_verdict_names_the_worst_cell_and_agent(study, tmp_path):
    rows = study.cell_rows(make_cell(tmp_path))
    text = study.overall(rows)
    assert text.startswith("not shown: 1 of 2")
    assert "the worst is cell b: trust − gspo2x -0.050 [-0.070, -0.030]" in text
    ok = [dict(r, rule1="within", rule2="within") for r in rows]
    assert study.overall(ok).startswith("no regret")
    table = study.table(rows)
    assert table.count("\n") == 3 and "| cell | a | naive (0.600) | 0.595 |" in table


def test_updates_after_a_switch_count_at_tau_zero(study, tmp_path):
    # trust_cut_to: hacpo logs no τ once the learner has switched, only trust_switch/<partner> 1: the update of the
    # cut (τ 1 logged, the switch flag already 1) counts at its τ, the two after it at 0, so 2 of 3 below 1
    run = tmp_path / "run"
    run.mkdir()
    lines = [{"step": 1, "agent/a/trust/b": 1.0, "agent/a/trust_switch/b": 1.0},
             {"step": 2, "agent/a/trust_switch/b": 1.0}, {"step": 3, "agent/a/trust_switch/b": 1.0},
             {"step": 4}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert study.decisions(run, "a", "b") == (0.0, pytest.approx(2 / 3), None)


def test_a_cell_without_a_summary_is_one_line(study, tmp_path):
    with pytest.raises(SystemExit, match="no summary.json"):
        study.cell_rows(tmp_path)


def test_another_arm_in_trusts_place_read_against_a_named_arm(study, tmp_path):
    # stage 2's reading: the cell's trust runs read as the method, their vs entries against naive at −0.01, and a
    # budget run's answers per prompt averaged over its steps (a: 12, 10, 12 → 11.33)
    cell = make_cell(tmp_path)
    for seed in (0, 1):
        path = cell / "runs" / "trust" / f"seed-{seed}" / "metrics.jsonl"
        lines = [dict(json.loads(x), **{"agent/a/rollouts": r, "agent/b/rollouts": 16 - r})
                 for x, r in zip(path.read_text().splitlines(), (12, 10, 12), strict=True)]
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rows = {r["agent"]: r for r in study.cell_rows(cell, "trust", "naive", -0.01)}
    assert rows["a"]["side"] == "at or above"  # a − naive: lower ends −0.009 and −0.008, both ≥ −0.01
    assert rows["b"]["side"] == "undecided"  # b − naive: lower ends −0.03, −0.04 below; upper +0.01, +0.02 above
    assert rows["a"]["vs_other"]["mean"] == -0.005
    assert study.cell_rows(cell, "trust", "naive", 0.0)[0]["side"] == "undecided"  # the same, against 0
    assert rows["a"]["rollouts"] == pytest.approx(34 / 3) and rows["b"]["rollouts"] == pytest.approx(14 / 3)
    table = study.table(list(rows.values()))
    assert "| trust − naive [boot] (seeds) | against -0.01 |" in table and "| 11.3 |" in table
    with pytest.raises(SystemExit, match="no run of 'trust@trust_budget=true'"):
        study.cell_rows(cell, "trust@trust_budget=true")


def test_the_foreignness_signal_and_its_prediction(study, tmp_path):
    # stage 6: r̄ is the mean of cross/ratio_mean over a run's first steps, then over runs. a: seed 0 logs 0.8, 0.6,
    # 0.1 (first 3: 0.5, first 2: 0.7), seed 1 0.9 each → r̄ 0.7 (3 steps) or 0.8 (2 steps); b: 0.1, 0.2, 0.3 and
    # 0.6 each → 0.4. Gaps by hand: a's GSPO×2 0.57 − naive 0.60 = −0.03 (sharing wins); b's 0.50 − naive 0.46 = +0.04
    cell = make_cell(tmp_path)
    ratios = {0: {"a": (0.8, 0.6, 0.1), "b": (0.1, 0.2, 0.3)}, 1: {"a": (0.9,) * 3, "b": (0.6,) * 3}}
    kept = {"a": (1.0, 0.5, 0.0), "b": (0.2, 0.2, 0.2)}
    for seed in (0, 1):
        path = cell / "runs" / "trust" / f"seed-{seed}" / "metrics.jsonl"
        lines = [dict(json.loads(x), **{f"agent/{k}/cross/ratio_mean": ratios[seed][k][i] for k in "ab"},
                      **{f"agent/{k}/cross/kept_frac": kept[k][i] for k in "ab"})
                 for i, x in enumerate(path.read_text().splitlines())]
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    dirs = [cell / "runs" / "trust" / f"seed-{s}" for s in (0, 1)]
    assert study.foreignness(dirs, "a", steps=3) == pytest.approx((0.7, 0.5))
    assert study.foreignness(dirs, "a", steps=2) == pytest.approx((0.8, 0.75))
    rows = {r["agent"]: r for r in study.signal_rows(cell)}
    assert rows["a"]["foreign"] == pytest.approx(0.7) and rows["b"]["foreign"] == pytest.approx(0.4)
    assert (rows["a"]["best_sharing"], rows["a"]["gap"]) == ("naive", pytest.approx(-0.03))
    assert (rows["a"]["predicted"], rows["a"]["observed"], rows["a"]["hit"]) == ("sharing wins",) * 2 + (True,)
    assert (rows["b"]["predicted"], rows["b"]["observed"], rows["b"]["hit"]) == ("2G not beaten",) * 2 + (True,)
    assert study.signal_table(list(rows.values())).endswith("2 of 2 agents as predicted (r̄ < 0.5: 2G not beaten)")
    assert study.predicts(0.4, -0.03) == ("2G not beaten", "sharing wins", False)
    assert rows["a"]["cut"] is None and "runs that cut" not in study.signal_table(list(rows.values()))
    # with the cut on (stage 9): a cut its partner in seed 0 only (its last line), b in neither
    for seed in (0, 1):
        path = cell / "runs" / "trust" / f"seed-{seed}" / "metrics.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        lines[-1].update({"agent/a/trust_cut/b": float(seed == 0), "agent/b/trust_cut/a": 0.0})
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rows = {r["agent"]: r for r in study.signal_rows(cell)}
    assert (rows["a"]["cut"], rows["b"]["cut"]) == (0.5, 0.0)
    assert "| 0.70 | 0.50 | naive | -0.030 | sharing wins | sharing wins | yes | 50% |" in study.signal_table(
        list(rows.values()))


def test_the_same_start_check_compares_the_first_steps_rewards(study, tmp_path):
    cell = make_cell(tmp_path)
    summary = json.loads((cell / "summary.json").read_text())
    for arm, seed, late in (("hacpo", 0, 0.9), ("hacpo", 1, 0.5), ("trust", 0, 0.1), ("trust", 1, 0.5)):
        # rewards of steps 1-10 as the seed gives them; step 11 differs between the arms (after the cut)
        run = cell / "runs" / arm / f"seed-{seed}"
        run.mkdir(parents=True, exist_ok=True)
        lines = [{"step": i, "agent/a/reward": 0.1 * i + seed, "agent/b/reward": 0.5} for i in range(1, 11)]
        lines.append({"step": 11, "agent/a/reward": late, "agent/b/reward": 0.5})
        if (arm, seed) == ("hacpo", 1):
            lines[3]["agent/b/reward"] = 0.25  # seed 1 departs at step 4: not the same agents or not the same start
        (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (cell / "summary.json").write_text(json.dumps(summary))
    assert study.same_start(cell, "trust", "hacpo") == (1, 2, ["cell/seed-1"])
    assert study.same_start(cell, "trust", "hacpo", steps=3) == (2, 2, [])
    assert study.same_start(cell, "trust", "hacpo", steps=11) == (0, 2, ["cell/seed-0", "cell/seed-1"])
