"""The statistics of ``hacrl compare``: paired differences over seeds, and mean ± sd.

Pure functions over plain floats; scipy (optional) only gives the paired t-test's p-value.
:func:`paired_difference` is tested on a hand-made example in tests/report/test_compare.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


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
    out["mean"] = mean
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
