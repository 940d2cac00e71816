"""The report's reading of a comparison's summary: the algorithm a label names and whether it is a default
baseline, the claim a paired difference supports (:func:`mark`), the opening table of every algorithm against
every baseline (:func:`answer_rows`), and the plain-language paragraphs of the report's "Reading" section
(:func:`automatic_reading`), which claim a gain or a loss only where the interval excludes 0.
"""

from __future__ import annotations

import math
from typing import Any

from hacrl.learner.algorithms import ALGORITHMS, Algorithm


def algorithm_of(label: str) -> Algorithm:
    """The algorithm a comparison's label names (``hacpo@delta=0.6`` → hacpo)."""
    return ALGORITHMS.get(label.split("@")[0])


def is_baseline(label: str) -> bool:
    """The report's default Δ columns: GSPO on private answers at any rollout multiple (gspo, gspo2x,
    gspo-x<N>) and the imitation baseline (the same shared rollouts as hacpo, the partners' verified answers
    imitated), as registered (no per-variant settings: give a variant such as ``gspo@task.fewshot=3`` with
    ``--baselines``)."""
    a = algorithm_of(label)
    return "@" not in label and ((not a.shares_pool and a.loss == "gspo") or a.loss == "imitation")


# ---- the answer table ---------------------------------------------------------------------------------

def mark(st: dict[str, Any] | None) -> str:
    """The claim a Δ supports: "gain" / "loss" when its interval excludes 0, "≈" when the interval includes
    0, "no interval" when there is none (no per-problem records)."""
    iv = (st or {}).get("interval")
    if not iv or iv.get("mean") is None:
        return "no interval"
    return "≈" if iv["includes_zero"] else "gain" if iv["lo"] > 0 else "loss"


def answer_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's opening table: per agent, every algorithm against every baseline (two baselines once, the
    later against the earlier), on the final greedy accuracy and, where evaluated, avg@k. Δ is the interval's
    mean paired difference over (seed, problem) cells where there is one, else the mean over seeds."""
    baselines, rows = summary["baselines"], []
    for agent, per_algo in summary["results"].items():
        for algo, r in per_algo.items():
            for b in baselines:
                if b == algo or (algo in baselines and baselines.index(b) > baselines.index(algo)):
                    continue
                k = (r.get("sampled") or {}).get("k")
                for measure, st in (("greedy", r["vs"].get(b)),
                                    (f"avg@{k or 'k'}", (r.get("sampled") or {}).get("vs", {}).get(b))):
                    if st is None or st["mean"] is None:
                        continue
                    iv = st.get("interval")
                    rows.append({
                        "agent": agent, "algorithm": algo, "baseline": b, "measure": measure,
                        "delta": iv["mean"] if iv else st["mean"], "lo": iv["lo"] if iv else None,
                        "hi": iv["hi"] if iv else None, "mark": mark(st), "pairs": iv["pairs"] if iv else None,
                        "problems": iv["problems"] if iv else None, "seeds": len(st["seeds"]),
                        "p_boot": iv["p"] if iv else None, "p_t": st["p"], "note": st.get("interval_note"),
                    })
    return rows


# ---- the automatic reading ----------------------------------------------------------------------------

def automatic_reading(summary: dict[str, Any]) -> list[str]:
    """One paragraph per pool-sharing algorithm, plus one on the accuracy differences."""
    paragraphs = []
    for algo, diag in summary["diagnostics"].items():
        window_of = summary.get("windows", {}).get(algo, {})
        sentences = _window_reading(algo, diag, window_of, window_of.get("delta", summary.get("delta")))
        paragraphs.append(" ".join(sentences + _omega_reading(algo, diag)))

    baselines = summary.get("baselines", [])
    results = summary["results"]
    all_same = all(len({round(r["final"]["mean"], 9) for r in per_algo.values()
                        if r["final"]["mean"] is not None}) <= 1 for per_algo in results.values())
    if all_same and len(summary["algorithms"]) > 1:
        paragraphs.append("Every algorithm ended at the same held-out accuracy for every agent: the runs "
                          "were too short (or the evaluation too small) to tell the algorithms apart.")
    elif baselines:
        paragraphs.append(_accuracy_reading(summary))
    elif len(summary["algorithms"]) > 1:
        paragraphs.append("Neither gspo nor gspo2x is in the comparison, so no paired differences were "
                          "computed.")
    return [p for p in paragraphs if p]


def _window_reading(algo: str, diag: dict[str, Any], window_of: dict[str, Any], delta: float | None) -> list[str]:
    """How much the other agents' answers counted: the share inside the cross window, and per learner where
    more than 5% were clipped, on which side."""
    fracs = {a: d["in_window_frac"] for a, d in diag.items() if d["in_window_frac"] is not None}
    if not fracs:
        return [(f"{algo} shares the pool but its loss does not log cross-answer ratios, so "
                f"how much the other agents' answers counted cannot be read from the metrics.")]
    overall = sum(fracs.values()) / len(fracs)
    lowers = [d.get("window_lower") for d in diag.values() if d.get("window_lower") is not None]
    if window_of.get("adaptive") and lowers:
        window = (f"the adaptive clip window [ℓ_m, 1] (ℓ_0 between {min(lowers):.2f} and {max(lowers):.2f} "
                  f"on average, at most {1 - delta:g})")
    elif delta is not None:
        window = f"the clip window [ℓ_m, 1] (ℓ_0 = {1 - delta:g})"
    else:
        window = "the clip window"
    if overall < 0.005:
        sentences = [(f"No cross answer fell inside {window}: {algo} acted like GSPO (answers "
                     f"outside the window are clipped and give no gradient).")]
    elif overall < 0.1:
        sentences = [(f"Only {overall:.0%} of cross answers fell inside {window}: {algo} acted "
                     f"almost like GSPO (answers outside the window are clipped and give no gradient).")]
    elif overall < 0.5:
        sentences = [(f"{overall:.0%} of cross answers fell inside {window}: the shared pool "
                     f"contributed part of {algo}'s updates.")]
    else:
        sentences = [(f"Most cross answers ({overall:.0%}) fell inside {window}: {algo}'s "
                     f"learners did learn from each other's answers.")]
    for agent, d in diag.items():
        inside, below, above = d["in_window_frac"], d["below_window_frac"], d["above_window_frac"]
        ratio = d["cross_ratio_mean"]
        if None in (inside, below, above, ratio) or max(below, above) <= 0.05:
            continue
        side = ("below it (the learner finds the others' answers less likely than their authors "
                "did)" if below >= above else "above it (the learner finds the others' answers more "
                "likely than their authors did)")
        sentences.append(f"{agent}: {inside:.0%} inside, {below:.0%} below, {above:.0%} above the "
                         f"window, mean cross ratio {ratio:.2f}; the clipped ones were mostly {side}.")
    return sentences


def _omega_reading(algo: str, diag: dict[str, Any]) -> list[str]:
    """What the capability ratio ω did: unused, near 1, or the largest one and where the algorithm uses it."""
    algorithm = algorithm_of(algo)
    in_baseline = algorithm.advantage == "hacpo" and algorithm.capability_aware
    in_update = algorithm.loss == "hacpo" and algorithm.use_omega
    omegas = [(a, o, v["mean"]) for a, d in diag.items() for o, v in d["omega"].items() if v["mean"] is not None]
    if not omegas:
        return []
    a, o, w = max(omegas, key=lambda x: abs(math.log(max(x[2], 1e-12))))
    if not (in_baseline or in_update):
        return [f"ω is logged but {algo} does not use it."]
    if abs(math.log(max(w, 1e-12))) < math.log(1.1):
        return [("ω stayed near 1: the agents were judged equally capable, so the capability "
                "weighting changed little.")]
    ahead, behind, factor = (a, o, w) if w > 1 else (o, a, 1 / w)
    effects = ((f"weighted {ahead}'s answers up by about that factor in its update", in_update),
               (f"scaled {ahead}'s rewards down by it in its baseline", in_baseline))
    uses = " and ".join(text for text, on in effects if on)
    return [(f"ω({a}→{o}) averaged {w:.2f} over the steps: {ahead} was judged about "
            f"{factor:.1f}× as capable as {behind}, so {behind} {uses}.")]


def _accuracy_reading(summary: dict[str, Any]) -> str:
    """The paragraph on the final accuracy differences: every Δ with its interval (or only its t-test where
    the runs have no per-problem records); a gain or a loss is stated only where the interval excludes 0."""
    baselines, n = summary["baselines"], len(summary["seeds"])
    clauses, tested = [], False
    claims: dict[str, list[str]] = {"gain": [], "loss": [], "≈": [], "no interval": []}
    significant: dict[str, str] = {}  # t-test p < 0.05: name → the claim as written
    for algo in summary["algorithms"]:
        if algo in baselines:
            continue
        per_agent = []
        for agent, per_algo in summary["results"].items():
            cells = []
            for b, st in per_algo[algo]["vs"].items():
                if st["mean"] is None:
                    continue
                p = f"p = {st['p']:.2g}" if st["p"] is not None else "no test"
                tested |= st["p"] is not None
                iv, what = st.get("interval"), f"{algo} vs {b} on {agent}"
                k = len(st.get("seeds") or [])  # a pair finished on fewer seeds than the comparison says so
                seeds = f"{k} of {n} seeds" if 0 < k < n else ""
                if iv:
                    cells.append(f"{iv['mean']:+.3f} vs {b} (95% interval [{iv['lo']:+.3f}, {iv['hi']:+.3f}]"
                                 f"{', includes 0' if iv['includes_zero'] else ''}; t-test {p}"
                                 f"{'; ' + seeds if seeds else ''})")
                else:
                    cells.append(f"{st['mean']:+.3f} vs {b} ({p}{'; ' + seeds if seeds else ''})")
                claims[mark(st)].append(f"{what} ({(iv or st)['mean']:+.3f}{', ' + seeds if seeds else ''})")
                if st["p"] is not None and st["p"] < 0.05:
                    significant[what] = f"{what} ({st['mean']:+.3f}{', ' + seeds if seeds else ''})"
                    if mark(st) == "≈":
                        significant[what] += " *"  # significant by the t-test, interval includes 0
            if cells:
                per_agent.append(f"{agent} " + ", ".join(cells))
        if per_agent:
            clauses.append(f"{algo}: " + "; ".join(per_agent))
    if not clauses:
        return ""
    intervals = bool(claims["gain"] or claims["loss"] or claims["≈"])
    text = (f"Final accuracy against {' and '.join(baselines)}, paired by seed"
            f"{' and problem' if intervals else ''} over {n} seed{'s' if n != 1 else ''}. "
            + ". ".join(clauses) + ". ")
    if not summary.get("runs_with_problem_records"):  # runs from before per-problem records: as they were
        if n < 2:
            text += "With one seed there is no test: run more seeds before reading anything into these."
        elif not tested:
            text += "No p-values: scipy is not installed."
        elif significant:
            text += "Significant at 5%: " + ", ".join(significant.values()) + "."
        else:
            text += f"None of these differences is significant at 5% with {n} seeds."
        return text + " (No per-problem records, so no paired interval.)"
    tail = [f"{word} (95% interval excludes 0): {', '.join(claims[key])}." for key, word in
            (("gain", "Gains"), ("loss", "Losses")) if claims[key]]
    if tail and claims["≈"]:
        tail.append(f"Not shown either way (interval includes 0): {', '.join(claims['≈'])}.")
    elif intervals and not tail:
        tail.append("Every 95% interval includes 0: no gain or loss is shown.")
    unclaimed = [c.removesuffix(" *") for c in significant.values() if c.endswith(" *")]
    if unclaimed:
        tail.append(f"The t-test over seeds alone gives p < 0.05 for {', '.join(unclaimed)}, but the interval "
                    f"over seeds and problems includes 0, so it is not claimed.")
    if claims["no interval"]:
        tail.append(f"No interval (some runs have no per-problem records), so not claimed either way: "
                    f"{', '.join(claims['no interval'])}.")
    return (text + " ".join(tail)).rstrip()
