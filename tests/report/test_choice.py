"""Which arm a comparison recommends (hacrl.report.reading.advice) from hand-made ``choice`` entries: the arm
within the margin of the best for every agent by both intervals, the smallest mean shortfall first; where none
is, the smallest worst shortfall said as a point estimate; nothing with fewer than 3 seeds; hacpo, the default
hacrl recommends for an unmeasured pair, named where the comparison lacks it."""

from __future__ import annotations

from hacrl.report.reading import advice, within_margin


def _vs(lo: float, hi: float, seed_lo: float, seed_hi: float) -> dict:
    return {"mean": (lo + hi) / 2, "interval": {"mean": (lo + hi) / 2, "lo": lo, "hi": hi},
            "seed_interval": {"lo": seed_lo, "hi": seed_hi}}


def _summary(arms_by_agent: dict, seeds=(0, 1, 2, 3), algorithms=("trust", "naive", "gspo2x", "hacpo")) -> dict:
    """``arms_by_agent``: agent → {arm: (mean, vs_best or None for the best)}; readings as within_margin gives."""
    agents = {}
    for agent, arms in arms_by_agent.items():
        best = next(a for a, (_, vs) in arms.items() if vs is None)
        agents[agent] = {"best": best, "seeds": list(seeds), "arms": {
            a: {"mean": m, "reading": "best"} if vs is None else {"mean": m, "vs_best": vs, "reading": within_margin(vs)}
            for a, (m, vs) in arms.items()}}
    return {"algorithms": list(algorithms), "choice": {"margin": 0.01, "agents": agents}}


def test_the_arm_within_the_margin_for_every_agent_is_recommended():
    s = _summary({
        "a": {"naive": (0.80, None), "trust": (0.79, _vs(-0.009, 0.0, -0.008, 0.0)),
              "gspo2x": (0.70, _vs(-0.12, -0.08, -0.13, -0.07))},
        "b": {"trust": (0.60, None), "naive": (0.55, _vs(-0.08, -0.02, -0.09, -0.011)),
              "gspo2x": (0.59, _vs(-0.02, 0.0, -0.02, 0.0))}})
    out = advice(s)
    assert out[0] == ("a: naive ended highest (0.800, mean of 4 seeds). Within 0.01 of it by both intervals: trust "
                      "(-0.004). Behind it by more than 0.01 by both intervals: gspo2x (-0.100).")
    assert out[1] == ("b: trust ended highest (0.600, mean of 4 seeds). Undecided: gspo2x (-0.010). Behind it by "
                      "more than 0.01 by both intervals: naive (-0.050).")
    assert out[2] == "Within 0.01 of the best arm for every agent by both intervals: trust. Train with trust."
    assert len(out) == 3  # hacpo is in the comparison: no line naming it


def test_several_safe_arms_are_ordered_by_mean_shortfall():
    near = _vs(-0.005, 0.005, -0.006, 0.004)
    s = _summary({"a": {"naive": (0.80, None), "trust": (0.79, near), "gspo2x": (0.795, near)},
                  "b": {"gspo2x": (0.60, None), "trust": (0.598, near), "naive": (0.50, _vs(-0.2, -0.05, -0.2, -0.04))}})
    # trust short by 0.010 and 0.002 (mean 0.006), gspo2x by 0.005 and 0 (mean 0.0025): gspo2x first
    assert advice(s)[2] == ("Within 0.01 of the best arm for every agent by both intervals: gspo2x, trust. Train "
                            "with gspo2x (the smallest mean shortfall of them).")


def test_without_a_safe_arm_the_smallest_worst_shortfall_is_named_as_a_point_estimate():
    wide = _vs(-0.04, 0.01, -0.05, 0.02)
    s = _summary({"a": {"naive": (0.80, None), "trust": (0.78, wide), "gspo2x": (0.70, _vs(-0.2, -0.05, -0.2, -0.04))},
                  "b": {"gspo2x": (0.60, None), "trust": (0.57, wide), "naive": (0.20, _vs(-0.5, -0.3, -0.5, -0.3))}},
                 algorithms=("hacpo", "naive", "gspo2x", "trust@trust_budget=true"))
    out = advice(s)
    # worst shortfalls: naive 0.40 (b), gspo2x 0.10 (a), trust 0.03 (b)
    assert out[2] == ("No arm is within 0.01 of the best for every agent by both intervals. The smallest worst "
                      "shortfall is trust's, 0.030 below the best for b (point estimates); more seeds decide the "
                      "undecided readings.")
    assert len(out) == 3  # hacpo is compared: nothing more to name


def test_fewer_than_three_seeds_recommend_nothing_and_a_comparison_without_the_default_names_it():
    s = _summary({"a": {"naive": (0.80, None), "gspo2x": (0.80, _vs(-0.001, 0.001, -0.001, 0.001))},
                  "b": {"naive": (0.60, None), "gspo2x": (0.60, _vs(-0.001, 0.001, -0.001, 0.001))}},
                 seeds=(0, 1), algorithms=("naive", "gspo2x"))
    out = advice(s)
    assert out[2] == "With fewer than 3 seeds every reading is indicative: run more seeds before choosing."
    assert out[3] == ("`hacpo`, the method hacrl recommends for a pair it has not measured (docs/results-trust.md), "
                      "is not in this comparison: add it to --algos to see it on this pair.")
    assert not any("Train with" in line for line in out)
    assert advice({"algorithms": ["gspo"], "choice": {"margin": 0.01, "agents": {}}}) == []
