"""The statistics of ``hacrl compare``: paired differences over seeds, per-problem paired intervals pooled
over seeds, and mean ± sd.

Pure functions over plain floats and numpy arrays; scipy (optional) gives the paired t-test's p-value and the
t quantile of :func:`seed_t_interval` (the paired t-interval over seeds, beside the bootstrap).
:func:`paired_difference` (the t-test over seeds) and :func:`paired_bootstrap` (the interval over seeds ×
problems, with :func:`mcnemar_exact` beside it) are tested on hand-made examples in tests/report/.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np


def paired_difference(a: Sequence[float], b: Sequence[float]) -> dict[str, float | int | None]:
    """Paired comparison of ``a`` and ``b`` (same seeds, same order): statistics of d_i = a_i − b_i.

    Returns ``{mean, sd, se, t, p, n}``: mean of d, its sample standard deviation (n − 1), the standard
    error sd/√n, the paired t statistic mean/se and its two-sided p-value with n − 1 degrees of freedom
    (``scipy.stats.ttest_rel``; None when scipy is not installed). With fewer than 2 pairs only ``mean``
    and ``n`` are set. When every difference is the same (sd = 0) the t statistic degenerates: t = 0 and
    p = 1 if they are all 0 (no difference at all), t = ±inf and p = 0 otherwise.
    """
    if len(a) != len(b):
        raise ValueError(f"paired_difference: {len(a)} values against {len(b)}; pair them by seed")
    d = [float(x) - float(y) for x, y in zip(a, b, strict=True)]
    n = len(d)
    out: dict[str, float | int | None] = {"mean": None, "sd": None, "se": None, "t": None, "p": None, "n": n}
    if n == 0:
        return out
    mean = sum(d) / n
    mean = 0.0 if abs(mean) < 1e-12 else mean  # float noise of equal values, e.g. 0.3 − 0.1 − 0.2
    # reported at the bootstrap's 12 digits, so the report prints one number for the two means of the same
    # pairs: −0.01749999… here and −0.0175 there would read −0.017 in one table and −0.018 in the next
    out["mean"] = round(mean, 12) + 0.0
    if n < 2:
        return out
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    se = sd / math.sqrt(n)
    out.update(sd=sd, se=se)
    if sd <= 1e-12 * max(1.0, abs(mean)):
        out.update(sd=0.0, se=0.0, t=0.0 if mean == 0 else math.copysign(math.inf, mean),
                   p=1.0 if mean == 0 else 0.0)
        return out
    out["t"] = mean / se
    try:
        from scipy.stats import ttest_rel
    except ImportError:
        return out
    out["p"] = float(ttest_rel(list(map(float, a)), list(map(float, b))).pvalue)
    return out


SEED_LEVEL = 0.95  # the seed-level t-interval's level (the bootstrap's is BOOTSTRAP_LEVEL)


def seed_t_interval(a: Sequence[float], b: Sequence[float], *, level: float = SEED_LEVEL
                    ) -> dict[str, Any] | None:
    """Paired t-interval over seeds of a − b (same seeds, same order): with d_i = a_i − b_i over n seeds,

        mean(d) ± t_{(1+level)/2, n−1} · sd(d) / √n

    (sd with n − 1; the t quantile from ``scipy.stats.t.ppf``). Returns ``{mean, lo, hi, half_width, sd, n,
    df, t_quantile, level, includes_zero}``, or None with fewer than 2 seeds or without scipy. When every
    difference is the same (sd = 0) the interval is the point [mean, mean].

    >>> st = seed_t_interval([0.6, 0.7, 0.8], [0.5, 0.5, 0.5])  # d = [0.1, 0.2, 0.3]: sd 0.1, t = 4.302653
    >>> round(st["half_width"], 6), round(st["lo"], 6), round(st["hi"], 6), st["includes_zero"]
    (0.248414, -0.048414, 0.448414, True)
    """
    pd = paired_difference(a, b)
    n = int(pd["n"] or 0)
    if n < 2:
        return None
    try:
        from scipy.stats import t as student_t
    except ImportError:
        return None
    q = float(student_t.ppf((1 + level) / 2, n - 1))
    mean, sd, se = float(pd["mean"]), float(pd["sd"]), float(pd["se"])
    half = q * se
    lo, hi = round(mean - half, 12) + 0.0, round(mean + half, 12) + 0.0
    return {"mean": mean, "lo": lo, "hi": hi, "half_width": half, "sd": sd, "n": n, "df": n - 1,
            "t_quantile": q, "level": level, "includes_zero": bool(lo <= 0 <= hi)}


def seed_means(pp: PairedProblems) -> tuple[list[float], list[float]]:
    """Each seed's mean of a and of b over its paired problems (seeds without a pair left out): the per-seed
    values a seed-level interval pairs, for a measure that exists only per problem."""
    a, b = [], []
    for s in range(pp.mask_SP.shape[0]):
        m = pp.mask_SP[s]
        if m.sum():
            a.append(float((pp.a_SP[s] * m).sum() / m.sum()))
            b.append(float((pp.b_SP[s] * m).sum() / m.sum()))
    return a, b


def mean_sd(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample sd (n − 1) of the finite values (sd None with one value; (None, None) with none)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return None, None
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None
    if sd is not None and sd < 1e-12 * max(1.0, abs(mean)):
        sd = 0.0
    return mean, sd


# ---- per-problem paired intervals ------------------------------------------------------------------------

BOOTSTRAP_B = 10_000  # replicates of the paired bootstrap
BOOTSTRAP_SEED = 0  # its RNG seed (numpy's default_rng): the same records always give the same interval
BOOTSTRAP_LEVEL = 0.95
_CHUNK = 1_000  # replicates drawn and reduced at a time (bounds memory at chunk × problems)


@dataclass
class PairedProblems:
    """Two algorithms' per-problem results paired by (seed, problem id): ``d_SP[s, p]`` = a − b where
    ``mask_SP[s, p]`` is 1 (problem ``ids[p]`` was evaluated in both runs of seed ``s``), else 0."""

    ids: list[str]  # the problems paired in at least one seed, sorted (so input order never matters)
    d_SP: np.ndarray
    mask_SP: np.ndarray
    a_SP: np.ndarray  # a's values where paired (0 elsewhere), for McNemar
    b_SP: np.ndarray
    pairs_by_seed: list[int]
    unpaired: int  # ids present in only one of a seed's two runs (left out)

    @property
    def pairs(self) -> int:
        return int(self.mask_SP.sum())


def pair_problems(a: Sequence[Mapping[str, float]], b: Sequence[Mapping[str, float]]) -> PairedProblems:
    """Pair ``a[s]`` with ``b[s]`` (problem id → value, one mapping per seed, seeds in the same order) by id:
    only ids present in both runs of a seed count; the rest are counted in ``unpaired``."""
    if len(a) != len(b):
        raise ValueError(f"pair_problems: {len(a)} seeds against {len(b)}; pair them by seed")
    common = [sorted(set(x) & set(y)) for x, y in zip(a, b, strict=True)]
    ids = sorted(set().union(*common)) if common else []
    col = {pid: j for j, pid in enumerate(ids)}
    shape = (len(a), len(ids))
    a_SP, b_SP, mask_SP = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    for s, (x, y, both) in enumerate(zip(a, b, common, strict=True)):
        for pid in both:
            a_SP[s, col[pid]], b_SP[s, col[pid]], mask_SP[s, col[pid]] = float(x[pid]), float(y[pid]), 1.0
    unpaired = sum(len(set(x) ^ set(y)) for x, y in zip(a, b, strict=True))
    return PairedProblems(ids, a_SP - b_SP, mask_SP, a_SP, b_SP, [len(c) for c in common], unpaired)


def _draw_counts(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """``size`` draws of n indices from range(n) with replacement, as counts: shape (size, n)."""
    idx_RN = rng.integers(0, n, size=(size, n)) + n * np.arange(size)[:, None]
    return np.bincount(idx_RN.ravel(), minlength=size * n).reshape(size, n).astype(float)


def _all_counts(n: int) -> np.ndarray:
    """Every ordered draw of n indices from range(n) with replacement (n^n of them), as counts."""
    return np.array([np.bincount(draw, minlength=n) for draw in itertools.product(range(n), repeat=n)],
                    dtype=float)


def _replicate_means(pp: PairedProblems, seeds_RS: np.ndarray, probs_RP: np.ndarray) -> np.ndarray:
    """Mean paired difference of each replicate: Σ_sp w_s c_p m_sp d_sp / Σ_sp w_s c_p m_sp, with w the
    seed counts and c the problem counts of the replicate (nan where it drew no paired cell)."""
    num_R = ((seeds_RS @ pp.d_SP) * probs_RP).sum(axis=1)  # d is 0 where unpaired
    den_R = ((seeds_RS @ pp.mask_SP) * probs_RP).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den_R > 0, num_R / den_R, np.nan)


def bootstrap_replicates(pp: PairedProblems, *, n_boot: int = BOOTSTRAP_B, seed: int = BOOTSTRAP_SEED,
                         exact: bool | None = None) -> tuple[np.ndarray, bool]:
    """The replicates of the two-level paired bootstrap, and whether they are the exact enumeration.

    One replicate draws S seeds with replacement and, independently, P problems with replacement (one draw
    shared by every seed: the seeds are evaluated on the same held-out problems) and takes the mean paired
    difference over the drawn (seed, problem) cells (Owen's "pigeonhole" bootstrap for a crossed design).
    ``exact`` (None: when S^S · P^P ≤ n_boot) enumerates every ordered pair of draws instead, each once: the
    bootstrap distribution itself, with no Monte Carlo error. Replicates that drew no paired cell (possible
    only when some ids are missing from some seed) are dropped.
    """
    n_s, n_p = pp.mask_SP.shape
    if exact is None:
        exact = n_s ** n_s * n_p ** n_p <= n_boot
    if exact:
        seeds, probs = _all_counts(n_s), _all_counts(n_p)
        stats_R = _replicate_means(pp, np.repeat(seeds, len(probs), axis=0), np.tile(probs, (len(seeds), 1)))
    else:
        rng = np.random.default_rng(seed)
        parts = []
        for start in range(0, n_boot, _CHUNK):
            size = min(_CHUNK, n_boot - start)
            parts.append(_replicate_means(pp, _draw_counts(rng, n_s, size), _draw_counts(rng, n_p, size)))
        stats_R = np.concatenate(parts)
    stats_R = np.round(stats_R[np.isfinite(stats_R)], 12)  # float noise of equal values would read as ≠ 0
    return stats_R + 0.0, bool(exact)  # + 0.0: no −0.0


def paired_bootstrap(a: Sequence[Mapping[str, float]], b: Sequence[Mapping[str, float]], *,
                     n_boot: int = BOOTSTRAP_B, seed: int = BOOTSTRAP_SEED, level: float = BOOTSTRAP_LEVEL,
                     exact: bool | None = None) -> dict[str, Any]:
    """Per-problem paired interval of a − b, pooled over seeds: ``a[s]``, ``b[s]`` map problem id → value
    (a reward, or a problem's mean over k samples) for seed s, the seeds in the same order.

    Returns ``{mean, lo, hi, level, includes_zero, share_le0, p, pairs, pairs_by_seed, problems, unpaired,
    n_boot, replicates, exact, rng_seed, mcnemar}``: ``mean`` the mean paired difference over every paired (seed,
    problem) cell; ``[lo, hi]`` the percentile interval of :func:`bootstrap_replicates` at ``level``
    (``numpy.quantile(..., method="inverted_cdf")``: the smallest replicate value whose empirical CDF reaches
    (1 − level)/2, and likewise (1 + level)/2); ``share_le0`` the share of replicates ≤ 0; ``p`` the
    two-sided bootstrap p = min(1, 2·min(share ≤ 0, share ≥ 0)); ``mcnemar`` see :func:`mcnemar_exact`.
    With no paired cell everything but the counts is None.

    >>> st = paired_bootstrap([{"x": 1.0, "y": 0.0, "z": 0.0}], [{"x": 0.0, "y": 0.0, "z": 0.0}])
    >>> st["mean"], st["lo"], st["hi"], st["exact"], st["pairs"]
    (0.333333333333, 0.0, 1.0, True, 3)
    """
    pp = pair_problems(a, b)
    out: dict[str, Any] = {
        "mean": None, "lo": None, "hi": None, "level": level, "includes_zero": None, "share_le0": None,
        "p": None, "pairs": pp.pairs, "pairs_by_seed": pp.pairs_by_seed, "problems": len(pp.ids),
        "unpaired": pp.unpaired, "n_boot": n_boot, "replicates": 0, "exact": None, "rng_seed": seed, "mcnemar": None,
    }
    if not pp.pairs:
        return out
    stats_R, exact = bootstrap_replicates(pp, n_boot=n_boot, seed=seed, exact=exact)
    lo, hi = np.quantile(stats_R, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
    le0, ge0 = float(np.mean(stats_R <= 0)), float(np.mean(stats_R >= 0))
    mean = round(float(pp.d_SP.sum() / pp.mask_SP.sum()), 12) + 0.0
    out.update(mean=mean, lo=float(lo), hi=float(hi), includes_zero=bool(lo <= 0 <= hi), share_le0=le0,
               p=min(1.0, 2 * min(le0, ge0)), exact=exact, replicates=len(stats_R), mcnemar=mcnemar_exact(pp))
    return out


def mcnemar_exact(pp: PairedProblems) -> dict[str, Any] | None:
    """Exact McNemar test on the pooled discordant pairs (a secondary check): over every paired (seed,
    problem) cell, ``a_only`` = a right and b wrong, ``b_only`` the reverse; p = two-sided binomial test of
    a_only against Binomial(a_only + b_only, ½) = min(1, 2·P(X ≤ min)). It treats the cells as independent,
    which the same problem under several seeds is not (the bootstrap does not assume it). None unless every
    paired value is 0 or 1.

    >>> pp = pair_problems([{"1": 1, "2": 1, "3": 1, "4": 0}], [{"1": 0, "2": 0, "3": 0, "4": 0}])
    >>> mcnemar_exact(pp)  # 3 discordant pairs, all one way: p = 2 · (1/2)³
    {'a_only': 3, 'b_only': 0, 'p': 0.25}
    """
    paired = pp.mask_SP > 0
    a, b = pp.a_SP[paired], pp.b_SP[paired]
    if not np.all(np.isin(a, (0.0, 1.0))) or not np.all(np.isin(b, (0.0, 1.0))):
        return None
    a_only, b_only = int(np.sum((a == 1) & (b == 0))), int(np.sum((a == 0) & (b == 1)))
    n, k = a_only + b_only, min(a_only, b_only)
    tail = Fraction(sum(math.comb(n, i) for i in range(k + 1)), 2 ** n)
    return {"a_only": a_only, "b_only": b_only, "p": float(min(Fraction(1), 2 * tail))}
