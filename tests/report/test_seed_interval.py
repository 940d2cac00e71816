"""The seed-level interval beside the bootstrap: the paired t-interval over seeds on hand-computed values, the
claim rule (both intervals must exclude 0, 3 or more seeds) and the missing baselines named in the reading."""

from __future__ import annotations

import math

import pytest

from hacrl.report.reading import automatic_reading, claim, indicative, missing_baselines
from hacrl.report.stats import seed_t_interval


def test_three_seeds_by_hand():
    # d = [0.1, 0.2, 0.3]: mean 0.2, sd = √((0.01 + 0 + 0.01) / 2) = 0.1, se = 0.1/√3 = 0.0577350,
    # t_{0.975, 2} = 4.302653 → half-width 4.302653 × 0.0577350 = 0.248414
    st = seed_t_interval([0.6, 0.7, 0.8], [0.5, 0.5, 0.5])
    assert st["mean"] == pytest.approx(0.2) and st["sd"] == pytest.approx(0.1)
    assert (st["n"], st["df"], st["level"]) == (3, 2, 0.95)
    assert st["t_quantile"] == pytest.approx(4.302653, abs=1e-6)
    assert st["half_width"] == pytest.approx(0.248414, abs=1e-6)
    assert (st["lo"], st["hi"]) == pytest.approx((-0.048414, 0.448414), abs=1e-6)
    assert st["includes_zero"] is True


def test_two_seeds_degenerate_and_too_few():
    # d = [0.1, 0.3]: mean 0.2, sd 0.1·√2, se 0.1, t_{0.975, 1} = 12.706205 → [−1.070620, 1.470620]
    st = seed_t_interval([0.6, 0.8], [0.5, 0.5])
    assert st["half_width"] == pytest.approx(1.2706205, abs=1e-6) and st["df"] == 1
    same = seed_t_interval([0.7, 0.7, 0.7], [0.5, 0.5, 0.5])  # sd 0: the point [0.2, 0.2]
    assert (same["lo"], same["hi"], same["half_width"], same["includes_zero"]) == (0.2, 0.2, 0.0, False)
    assert seed_t_interval([0.7], [0.5]) is None and seed_t_interval([], []) is None
    assert math.isclose(seed_t_interval([0.1, 0.2], [0.1, 0.2])["hi"], 0.0)  # no difference: [0, 0]


def _st(boot, seed, seeds=(0, 1, 2), mean=0.1):
    """A paired difference with a bootstrap interval ``boot`` and a seed interval ``seed`` (lo, hi or None)."""
    iv = None if boot is None else {"mean": mean, "lo": boot[0], "hi": boot[1], "includes_zero": boot[0] <= 0 <= boot[1]}
    si = None if seed is None else {"lo": seed[0], "hi": seed[1], "includes_zero": seed[0] <= 0 <= seed[1]}
    return {"mean": mean, "p": 0.2, "seeds": list(seeds), "interval": iv, "seed_interval": si}


def test_claim_needs_both_intervals_to_exclude_zero():
    assert claim(_st((0.05, 0.15), (0.02, 0.2))) == "gain"
    assert claim(_st((-0.15, -0.05), (-0.2, -0.01))) == "loss"
    assert claim(_st((0.05, 0.15), (-0.05, 0.25))) == "problems only"  # the bootstrap alone excludes 0
    assert claim(_st((0.05, 0.15), None)) == "problems only"  # one seed: no t-interval, no claim
    assert claim(_st((-0.05, 0.15), (0.02, 0.2))) == "seeds only"
    assert claim(_st((-0.05, 0.15), (-0.05, 0.25))) == "≈"
    assert claim(_st(None, (0.02, 0.2))) == "no interval"
    assert indicative(_st((0.05, 0.15), (0.02, 0.2), seeds=(0, 1))) and not indicative(_st((0, 1), (0, 1)))


def _summary(vs, seeds=(0, 1, 2), algos=("hacpo", "gspo"), agents=("a", "b")):
    return {"diagnostics": {}, "baselines": ["gspo"], "algorithms": list(algos), "seeds": list(seeds),
            "agents": dict.fromkeys(agents, "m"), "runs_with_problem_records": 6,
            "results": {"a": {"hacpo": {"final": {"mean": 0.6}, "vs": {"gspo": vs}},
                              "gspo": {"final": {"mean": 0.5}, "vs": {}}}}}


def test_the_reading_says_which_interval_holds_where_they_disagree():
    # the bootstrap over seeds × problems excludes 0, the t-interval over 3 seeds does not: not claimed
    *_, text = automatic_reading(_summary(_st((0.02, 0.18), (-0.05, 0.25))))
    assert ("+0.100 vs gspo (95% interval [+0.020, +0.180]; seed t-interval [-0.050, +0.250]; t-test p = 0.2)"
            in text)
    assert ("The intervals disagree, so not claimed: the bootstrap over seeds and problems excludes 0 but the "
            "t-interval over seeds does not for hacpo vs gspo on a (+0.100).") in text
    assert "Gains" not in text
    *_, text = automatic_reading(_summary(_st((0.02, 0.18), (0.01, 0.19))))
    assert ("Gains (both 95% intervals, over seeds × problems and over seeds, exclude 0): hacpo vs gspo on a "
            "(+0.100).") in text


def test_two_seeds_are_indicative_only():
    *_, text = automatic_reading(_summary(_st((0.02, 0.18), (0.01, 0.19), seeds=(0, 1)), seeds=(0, 1)))
    assert ("Indicative only (fewer than 3 seeds, so not claimed; both intervals exclude 0): hacpo vs gspo on a "
            "(+0.100).") in text
    assert "Gains" not in text


def test_missing_compute_matched_and_imitation_baselines_are_named():
    two = _summary(_st((0, 1), (0, 1)))
    assert [m.split(" ")[0] for m in missing_baselines(two)] == ["gspo2x", "imitation"]
    assert automatic_reading(two)[0].startswith("Missing baselines: gspo2x (GSPO with 2× the rollouts")
    three = _summary(_st((0, 1), (0, 1)), algos=("hacpo", "gspo", "gspo2x", "imitation"), agents=("a", "b", "c"))
    assert [m.split(" ")[0] for m in missing_baselines(three)] == ["gspo-x3"]  # gspo2x matches 2 agents only
    full = _summary(_st((0, 1), (0, 1)), algos=("hacpo", "gspo-x2", "imitation"))
    assert missing_baselines(full) == []
    assert missing_baselines(_summary(_st((0, 1), (0, 1)), algos=("gspo", "gspo2x"))) == []  # no pool shared
