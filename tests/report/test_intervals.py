"""The per-problem paired interval of ``hacrl compare`` (``hacrl.report.stats.paired_bootstrap``) on
hand-made records: exact bootstrap distributions enumerated by hand and by a loop-based reference, the Monte
Carlo path against them, degenerate cases, pairing by problem id, and the exact McNemar check."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from hacrl.report.stats import (
    BOOTSTRAP_B,
    bootstrap_replicates,
    mcnemar_exact,
    pair_problems,
    paired_bootstrap,
)


def _runs(*rows: list[float]) -> list[dict[str, float]]:
    """One run per seed: problem "p<j>" → rows[seed][j] (None: not evaluated)."""
    return [{f"p{j}": v for j, v in enumerate(row) if v is not None} for row in rows]


def _reference(a, b) -> list[float]:
    """Loop reference: the mean paired difference of every ordered resample (seeds with replacement, one
    problem draw for all seeds), each once; resamples that drew no paired cell left out."""
    seeds = range(len(a))
    ids = sorted(set().union(*(set(x) & set(y) for x, y in zip(a, b, strict=True))))
    out = []
    for seed_draw in itertools.product(seeds, repeat=len(a)):
        for prob_draw in itertools.product(ids, repeat=len(ids)):
            cells = [a[s][p] - b[s][p] for s in seed_draw for p in prob_draw if p in a[s] and p in b[s]]
            if cells:
                out.append(sum(cells) / len(cells))
    return sorted(out)


def test_one_seed_three_problems_enumerated_by_hand():
    a, b = _runs([1.0, 0.0, 0.0]), _runs([0.0, 0.0, 0.0])
    st = paired_bootstrap(a, b)
    # d = [1, 0, 0]; a resample of 3 problems holds k copies of the first, k ~ Binomial(3, 1/3), mean k/3:
    # P(k = 0) = 8/27, P(1) = 12/27, P(2) = 6/27, P(3) = 1/27; CDF 8/27 = .296, 20/27 = .741, 26/27 = .963, 1.
    # 2.5% quantile: the first value whose CDF ≥ .025 → k = 0 → 0; 97.5%: CDF(2/3) = .963 < .975 → 1.
    assert st["exact"] is True and st["replicates"] == 27  # 1^1 · 3^3 ≤ B: every resample once
    assert (st["mean"], st["lo"], st["hi"]) == (0.333333333333, 0.0, 1.0)
    assert st["includes_zero"] is True
    assert st["share_le0"] == pytest.approx(8 / 27)
    assert st["p"] == pytest.approx(16 / 27)  # 2 · min(8/27, share ≥ 0 = 1)
    assert (st["pairs"], st["pairs_by_seed"], st["problems"], st["unpaired"]) == (3, [3], 3, 0)


def test_two_seeds_two_problems_enumerated_by_hand():
    # seed 0: d = [1, 0]; seed 1: d = [1, 1]; point estimate 3/4
    a, b = _runs([1.0, 1.0], [1.0, 1.0]), _runs([0.0, 1.0], [0.0, 0.0])
    stats_R, exact = bootstrap_replicates(pair_problems(a, b))
    # seed draws (0,0) → seed 0 only; (0,1), (1,0) → both; (1,1) → seed 1 only. Problem draws (p0,p0),
    # (p0,p1), (p1,p0), (p1,p1). Seed 0 only: 1, ½, ½, 0; both (column means [1, ½]): 1, ¾, ¾, ½ (twice);
    # seed 1 only: 1, 1, 1, 1. The 16 atoms: 0 once, ½ four times, ¾ four times, 1 seven times.
    assert exact and sorted(stats_R.tolist()) == [0.0] + [0.5] * 4 + [0.75] * 4 + [1.0] * 7
    st = paired_bootstrap(a, b)
    # each atom weighs 1/16 > 2.5%: the interval is [min, max] = [0, 1]; share ≤ 0 = 1/16, p = 2/16
    assert (st["mean"], st["lo"], st["hi"], st["includes_zero"]) == (0.75, 0.0, 1.0, True)
    assert (st["share_le0"], st["p"]) == (1 / 16, 2 / 16)


def test_one_seed_four_problems_interval_inside_the_range():
    st = paired_bootstrap(_runs([1.0, 0.0, 0.0, 0.0]), _runs([0.0] * 4))
    # k ~ Binomial(4, 1/4), mean k/4: P = 81, 108, 54, 12, 1 (/256); CDF .316, .738, .949, .996, 1.
    # 97.5%: the first CDF ≥ .975 is at k = 3 → 0.75 (below the largest resample, 1)
    assert st["exact"] and st["replicates"] == 256
    assert (st["lo"], st["hi"]) == (0.0, 0.75)
    assert st["share_le0"] == pytest.approx(81 / 256)


@pytest.mark.parametrize("rows", [
    ([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]], [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]),
    ([[1.0, 0.5, None], [0.0, 1.0, 1.0]], [[0.0, 1.0, 0.0], [0.0, None, 0.25]]),
])
def test_exact_enumeration_matches_the_loop_reference(rows):
    a, b = _runs(*rows[0]), _runs(*rows[1])
    stats_R, exact = bootstrap_replicates(pair_problems(a, b), exact=True)
    assert exact
    np.testing.assert_allclose(sorted(stats_R.tolist()), _reference(a, b), atol=1e-12)


def test_missing_cells_are_left_out_and_empty_resamples_dropped():
    # seed 0: d = [1, 0]; seed 1: d = [1, −] (p1 not evaluated in seed 1's run of b)
    a, b = _runs([1.0, 0.0], [1.0, 1.0]), _runs([0.0, 0.0], [0.0, None])
    st = paired_bootstrap(a, b)
    # point estimate over the 3 paired cells: (1 + 0 + 1) / 3. Of the 16 resamples, seed 1 only × (p1, p1)
    # holds no paired cell: 15 remain. Seed 0 only: 1, ½, ½, 0; both: 1, ⅔, ⅔, 0 (twice: 0 from (p1, p1), only
    # seed 0 has it); seed 1 only: 1, 1, 1. Zeros: 1 + 2 = 3 of 15.
    assert (st["mean"], st["pairs"], st["pairs_by_seed"], st["unpaired"]) == (0.666666666667, 3, [2, 1], 1)
    assert st["replicates"] == 15 and st["share_le0"] == pytest.approx(3 / 15)
    assert (st["lo"], st["hi"]) == (0.0, 1.0)


def test_identical_runs_give_zero_and_a_constant_shift_a_point():
    rng = random.Random(0)
    b = [{f"p{j}": float(rng.random() < 0.4) for j in range(50)} for _ in range(3)]  # 3^3 · 50^50: Monte Carlo
    same = paired_bootstrap(b, [dict(x) for x in b])
    assert same["exact"] is False and same["replicates"] == BOOTSTRAP_B
    assert (same["mean"], same["lo"], same["hi"], same["includes_zero"], same["p"]) == (0.0, 0.0, 0.0, True, 1.0)
    assert same["mcnemar"] == {"a_only": 0, "b_only": 0, "p": 1.0}
    half = [{p: v / 2 for p, v in x.items()} for x in b]
    shifted = paired_bootstrap([{p: v + 0.25 for p, v in x.items()} for x in half], half)
    assert (shifted["mean"], shifted["lo"], shifted["hi"]) == (0.25, 0.25, 0.25)
    assert (shifted["includes_zero"], shifted["share_le0"], shifted["p"]) == (False, 0.0, 0.0)
    assert shifted["mcnemar"] is None  # not 0/1 rewards
    # a shift of 0.1 is not exact in binary: (0.7 + 0.1) − 0.7 = 0.10000000000000009; the replicates are
    # rounded to 12 decimals, so the interval is still one point
    tenth = [{p: 0.2 + v / 2 for p, v in x.items()} for x in b]
    point = paired_bootstrap([{p: v + 0.1 for p, v in x.items()} for x in tenth], tenth)
    assert (point["mean"], point["lo"], point["hi"]) == (0.1, 0.1, 0.1)
    down = paired_bootstrap(half, [{p: v + 0.25 for p, v in x.items()} for x in half])
    assert (down["lo"], down["hi"], down["includes_zero"], down["p"]) == (-0.25, -0.25, False, 0.0)


def test_monte_carlo_agrees_with_the_exact_distribution():
    for a, b, interval in ((_runs([1.0, 0.0, 0.0]), _runs([0.0] * 3), (0.0, 1.0)),
                           (_runs([1.0, 0.0, 0.0, 0.0]), _runs([0.0] * 4), (0.0, 0.75))):
        exact, mc = paired_bootstrap(a, b, exact=True), paired_bootstrap(a, b, exact=False)
        assert mc["exact"] is False and mc["replicates"] == BOOTSTRAP_B
        assert (mc["lo"], mc["hi"]) == (exact["lo"], exact["hi"]) == interval
        assert mc["share_le0"] == pytest.approx(exact["share_le0"], abs=0.015)
    a, b = _runs([1.0, 1.0], [1.0, 1.0]), _runs([0.0, 1.0], [0.0, 0.0])
    mc_R, _ = bootstrap_replicates(pair_problems(a, b), exact=False)
    assert np.mean(mc_R == 0.0) == pytest.approx(1 / 16, abs=0.01) and np.mean(mc_R) == pytest.approx(0.75, abs=0.01)


def test_one_problem_draw_is_shared_by_every_seed():
    # three identical seeds, 5 of 20 problems won: with one problem draw for all seeds a replicate is the mean
    # of one resample of 20 problems, sd = sqrt(¼ · ¾ / 20) = 0.0968; independent draws per seed would give
    # sd / √3 = 0.0559
    row = [1.0] * 5 + [0.0] * 15
    stats_R, exact = bootstrap_replicates(pair_problems(_runs(row, row, row), _runs([0.0] * 20, [0.0] * 20,
                                                                                    [0.0] * 20)))
    assert not exact
    assert np.std(stats_R) == pytest.approx(np.sqrt(0.25 * 0.75 / 20), rel=0.05)


def test_reproducible_and_independent_of_the_order_of_problems():
    rng = random.Random(1)
    ids = [f"add2/test/{i}" for i in range(30)]
    a = [{i: float(rng.random() < 0.6) for i in ids} for _ in range(3)]
    b = [{i: float(rng.random() < 0.4) for i in ids} for _ in range(3)]
    first = paired_bootstrap(a, b)
    assert first["exact"] is False and first["lo"] < first["mean"] < first["hi"]
    assert paired_bootstrap(a, b) == first
    shuffled = [dict(sorted(x.items(), key=lambda _: rng.random())) for x in a]
    assert list(shuffled[0]) != list(a[0]) and paired_bootstrap(shuffled, b) == first


def test_pairing_by_id_leaves_out_problems_of_only_one_run():
    a = [{"x": 1.0, "y": 0.0, "z": 1.0}, {"x": 1.0, "y": 1.0}]
    b = [{"y": 0.0, "x": 0.0}, {"x": 0.0, "y": 1.0, "w": 0.0}]
    st = paired_bootstrap(a, b)
    # seed 0 pairs x, y (z only in a); seed 1 pairs x, y (w only in b)
    assert (st["pairs"], st["pairs_by_seed"], st["problems"], st["unpaired"]) == (4, [2, 2], 2, 2)
    assert st == {**paired_bootstrap([{"x": 1.0, "y": 0.0}, {"x": 1.0, "y": 1.0}],
                                     [{"x": 0.0, "y": 0.0}, {"x": 0.0, "y": 1.0}]), "unpaired": 2}
    # d: seed 0 [1, 0], seed 1 [1, 0]: mean ½
    assert st["mean"] == 0.5
    nothing = paired_bootstrap([{"x": 1.0}], [{"y": 1.0}])
    assert (nothing["mean"], nothing["lo"], nothing["pairs"], nothing["unpaired"]) == (None, None, 0, 2)
    with pytest.raises(ValueError, match="pair them by seed"):
        paired_bootstrap([{"x": 1.0}], [])


def test_mcnemar_on_pooled_discordant_pairs():
    # seed 0: a right / b wrong on p0, p1; b right / a wrong on p3. seed 1: a only on p0, p1, p2.
    a = _runs([1, 1, 1, 0, 0, 1], [1, 1, 1, 0])
    b = _runs([0, 0, 1, 1, 0, 1], [0, 0, 0, 0])
    st = paired_bootstrap(a, b)
    # pooled: a_only = 2 + 3 = 5, b_only = 1; n = 6: P(X ≤ 1) = (1 + 6) / 64, p = 2 · 7/64 = 0.21875
    assert st["mcnemar"] == {"a_only": 5, "b_only": 1, "p": 0.21875}
    one_way = mcnemar_exact(pair_problems(_runs([1, 1, 1, 1, 1]), _runs([0, 0, 0, 0, 0])))
    assert one_way == {"a_only": 5, "b_only": 0, "p": 0.0625}  # 2 · (1/2)^5
