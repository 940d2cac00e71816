"""The report's reading of a comparison's summary: the algorithm a label names (``NAME@key=value...``,
:func:`parse_variant`; composed as the trainer composes it, :func:`algorithm_of`) and whether it is a default
baseline, the claim a paired difference supports (:func:`mark`), the opening table of every algorithm against
every baseline (:func:`answer_rows`), and the plain-language paragraphs of the report's "Reading" section
(:func:`automatic_reading`), which claim a gain or a loss only where the interval excludes 0.
"""

from __future__ import annotations

import math
from typing import Any

from hacrl.config import AlgorithmConfig, ConfigError, apply_override
from hacrl.learner.algorithms import ALGORITHMS, INGREDIENTS, Algorithm, resolve


def parse_variant(label: str) -> tuple[str, list[str]]:
    """``"hacpo@delta=0.6@window_target=0.5"`` → ("hacpo", ["algorithm.delta=0.6", "algorithm.window_target=0.5"]).

    >>> parse_variant("hacpo@delta=0.6@trainer.lr=1e-4")
    ('hacpo', ['algorithm.delta=0.6', 'trainer.lr=1e-4'])
    """
    name, *settings = label.split("@")
    if name not in ALGORITHMS:
        raise ConfigError(f"--algos: unknown algorithm {name!r}; valid: {', '.join(ALGORITHMS.listing())}")
    overrides = []
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ConfigError(f"--algos {label!r}: {item!r} is not key=value; write e.g. {name}@delta=0.6")
        key = key.strip() if "." in key else f"algorithm.{key.strip()}"
        if key in ("algorithm.name", "run.seed"):
            raise ConfigError(f"--algos {label!r}: {key} is set by compare; list another algorithm or seed instead")
        overrides.append(f"{key}={value.strip()}")
    return name, overrides


def algorithm_of(label: str) -> Algorithm:
    """The algorithm a comparison's label runs: its name's, composed with the ingredients the label sets, as the
    trainer resolves it (``hacpo@delta=0.6`` → hacpo; ``hacpo@partner_weight=ratio`` → hacpo with GSPO's loss).
    Settings given to every run (``--set``) are not in the label. Raises ConfigError (a label ``parse_variant``
    refuses: an unknown name) or ValueError (ingredients that do not fit the algorithm)."""
    name, overrides = parse_variant(label)
    tree: dict[str, Any] = {}
    for assignment in overrides:
        apply_override(tree, assignment)
    section = tree.get("algorithm", {})
    return resolve(AlgorithmConfig(name=name, **{k: v for k, v in section.items() if k in INGREDIENTS}))


def is_baseline(label: str) -> bool:
    """The report's default Δ columns: GSPO on private answers at any rollout multiple (gspo, gspo2x,
    gspo-x<N>) and the imitation baseline (the same shared rollouts as hacpo, the partners' verified answers
    imitated), as registered (no per-variant settings: give a variant such as ``gspo@task.fewshot=3`` with
    ``--baselines``)."""
    a = algorithm_of(label)
    return "@" not in label and ((not a.shares_pool and a.loss == "gspo") or a.loss == "imitation")


# ---- the answer table ---------------------------------------------------------------------------------

def mark(st: dict[str, Any] | None) -> str:
    """The claim a Δ's bootstrap interval alone supports: "gain" / "loss" when it excludes 0, "≈" when it
    includes 0, "no interval" when there is none (no per-problem records). Kept as it was in summary.json's
    ``answer[].mark``; what the report states is :func:`claim`."""
    iv = (st or {}).get("interval")
    if not iv or iv.get("mean") is None:
        return "no interval"
    return "≈" if iv["includes_zero"] else "gain" if iv["lo"] > 0 else "loss"


def seed_mark(st: dict[str, Any] | None) -> str:
    """The same for the seed-level t-interval (``seed_interval``; none with fewer than 2 seeds)."""
    si = (st or {}).get("seed_interval")
    if not si:
        return "no interval"
    return "≈" if si["includes_zero"] else "gain" if si["lo"] > 0 else "loss"


MIN_SEEDS = 3  # fewer seeds than this: every difference is indicative only, nothing is claimed


def claim(st: dict[str, Any] | None) -> str:
    """What the report states for a Δ: "gain" / "loss" only where the bootstrap over seeds × problems and the
    t-interval over seeds both exclude 0 on that side; "≈" where the bootstrap includes 0 and the t-interval
    does too (or there is none); "problems only" where only the bootstrap excludes 0, "seeds only" where only
    the t-interval does; "no interval" without the bootstrap (no per-problem records)."""
    boot, seeds = mark(st), seed_mark(st)
    if boot == "no interval":
        return "no interval"
    if boot in ("gain", "loss"):
        return boot if seeds == boot else "problems only"
    return "seeds only" if seeds in ("gain", "loss") else "≈"


def indicative(st: dict[str, Any] | None) -> bool:
    """Fewer than :data:`MIN_SEEDS` seeds paired: the difference is indicative only."""
    return len((st or {}).get("seeds") or []) < MIN_SEEDS


CHOICE_MARGIN = 0.01  # "within 0.01 of the best arm": the trust study's margin (docs/results-trust.md, rule 1)
# the way of sharing the README, examples/my-pair.yaml and the GSM8K hub preset recommend for an unmeasured pair:
# the smallest worst shortfall within the pooled budget over the trust study's finished cells (README, verdict)
DEFAULT_ARM = "hacpo"


def within_margin(vs: dict[str, Any] | None, margin: float = CHOICE_MARGIN) -> str:
    """An arm's paired difference to the best arm (``summary.json``'s ``vs`` entry, arm − best) read against
    ``margin``: ``within`` when the lower end of both the bootstrap and the seed-level interval is ≥ −margin
    (non-inferiority), ``behind`` when both upper ends are below −margin, else ``undecided`` (also without either
    interval: fewer than 2 seeds, or no per-problem records).

    >>> within_margin({"interval": {"lo": -0.008, "hi": 0.01}, "seed_interval": {"lo": -0.009, "hi": 0.012}})
    'within'
    >>> within_margin({"interval": {"lo": -0.05, "hi": -0.02}, "seed_interval": {"lo": -0.06, "hi": -0.015}})
    'behind'
    >>> within_margin({"interval": {"lo": -0.02, "hi": 0.01}, "seed_interval": {"lo": -0.009, "hi": 0.012}})
    'undecided'
    """
    if not vs or not vs.get("interval") or not vs.get("seed_interval"):
        return "undecided"
    boot, seed = vs["interval"], vs["seed_interval"]
    if boot["lo"] >= -margin and seed["lo"] >= -margin:
        return "within"
    if boot["hi"] < -margin and seed["hi"] < -margin:
        return "behind"
    return "undecided"


def advice(summary: dict[str, Any]) -> list[str]:
    """The report's "Which to train with" paragraphs, from ``summary["choice"]``: per agent the best arm and every
    other arm's reading against it (:func:`within_margin`); then the arm within the margin of the best for every
    agent, by both intervals (the one with the smallest mean shortfall first), or, where none is, the arm with
    the smallest worst shortfall as a point estimate, said as undecided. With fewer than :data:`MIN_SEEDS` seeds
    nothing is recommended. Names :data:`DEFAULT_ARM` where a comparison lacks it."""
    choice = summary.get("choice") or {}
    agents, margin = choice.get("agents") or {}, choice.get("margin", CHOICE_MARGIN)
    if not agents:
        return []
    out = []
    for agent, c in agents.items():
        arms, best, n = c["arms"], c["best"], len(c["seeds"])
        text = f"{agent}: {best} ended highest ({arms[best]['mean']:.3f}, mean of {n} seed{'s' if n != 1 else ''})."
        for reading, words in (("within", f"within {margin:g} of it by both intervals"), ("undecided", "undecided"),
                               ("behind", f"behind it by more than {margin:g} by both intervals")):
            named = [f"{a} ({_delta(r['vs_best']):+.3f})" for a, r in arms.items() if r["reading"] == reading]
            if named:
                text += f" {words[0].upper() + words[1:]}: {', '.join(named)}."
        out.append(text)
    shortfall = {a: [c["arms"][c["best"]]["mean"] - c["arms"][a]["mean"] for c in agents.values()]
                 for a in next(iter(agents.values()))["arms"]}
    if min(len(c["seeds"]) for c in agents.values()) < MIN_SEEDS:
        out.append(f"With fewer than {MIN_SEEDS} seeds every reading is indicative: run more seeds before choosing.")
    else:
        safe = sorted((a for a in shortfall if all(c["arms"][a]["reading"] in ("best", "within")
                                                   for c in agents.values())),
                      key=lambda a: sum(shortfall[a]) / len(shortfall[a]))
        if safe:
            out.append(f"Within {margin:g} of the best arm for every agent by both intervals: {', '.join(safe)}. "
                       f"Train with {safe[0]}" + (" (the smallest mean shortfall of them)." if len(safe) > 1 else "."))
        else:
            arm = min(shortfall, key=lambda a: max(shortfall[a]))
            worst_agent = list(agents)[shortfall[arm].index(max(shortfall[arm]))]
            out.append(f"No arm is within {margin:g} of the best for every agent by both intervals. The smallest "
                       f"worst shortfall is {arm}'s, {max(shortfall[arm]):.3f} below the best for {worst_agent} "
                       f"(point estimates); more seeds decide the undecided readings.")
    if DEFAULT_ARM not in {parse_variant(a)[0] for a in summary.get("algorithms", [])} and len(agents) > 1:
        out.append(f"`{DEFAULT_ARM}`, the method hacrl recommends for a pair it has not measured "
                   "(docs/results-trust.md), is not in this comparison: add it to --algos to see it on this pair.")
    return out


def _delta(st: dict[str, Any]) -> float:
    """A paired difference's point estimate: the bootstrap's mean over (seed, problem) cells where there is one,
    else the mean over seeds (as the answer table shows it)."""
    return (st.get("interval") or st)["mean"]


def missing_baselines(summary: dict[str, Any]) -> list[str]:
    """The baselines a comparison of a pool-sharing algorithm should have and lacks, each with why: the
    compute-matched GSPO (gspo2x for 2 agents, gspo-x<N> for N: as many answers and updates per agent as the
    shared pool gives) and ``imitation`` (the same shared answers, imitated)."""
    known = {}
    for label in summary.get("algorithms", []):
        try:
            known[label] = algorithm_of(label)
        except ValueError:  # a label no registered algorithm answers to (a hand-made summary): no baseline
            continue
    if not any(a.shares_pool for a in known.values()):
        return []
    n = len(summary.get("agents") or {})
    out = []
    matched = [label for label, a in known.items() if "@" not in label and not a.shares_pool
               and a.loss == "gspo" and a.rollout_multiplier == n]
    if not matched and n > 1:
        name = "gspo2x" if n == 2 else f"gspo-x{n}"
        out.append(f"{name} (GSPO with {n}× the rollouts: as many answers and updates per agent as the shared pool "
                   f"of {n} agents gives), so a gain over gspo may come from the extra answers alone")
    if not any(a.loss == "imitation" for a in known.values()):
        out.append("imitation (the same shared answers, the partners' verified ones imitated), so a gain "
                   "cannot be told apart from imitating the partners")
    return out


def answer_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's opening table: per agent, every algorithm against every baseline (two baselines once, the
    later against the earlier), on the final greedy accuracy and, where evaluated, avg@k. Δ is the interval's
    mean paired difference over (seed, problem) cells where there is one, else the mean over seeds. ``mark``
    is the bootstrap's alone (as before the seed-level interval); ``claim`` both intervals' (:func:`claim`)."""
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
                    iv, si = st.get("interval"), st.get("seed_interval")
                    rows.append({
                        "agent": agent, "algorithm": algo, "baseline": b, "measure": measure,
                        "delta": iv["mean"] if iv else st["mean"], "lo": iv["lo"] if iv else None,
                        "hi": iv["hi"] if iv else None, "mark": mark(st), "pairs": iv["pairs"] if iv else None,
                        "problems": iv["problems"] if iv else None, "seeds": len(st["seeds"]),
                        "p_boot": iv["p"] if iv else None, "p_t": st["p"], "note": st.get("interval_note"),
                        "seed_mean": st["mean"], "seed_lo": si["lo"] if si else None,
                        "seed_hi": si["hi"] if si else None, "claim": claim(st), "indicative": indicative(st),
                    })
    return rows


# ---- the automatic reading ----------------------------------------------------------------------------

def partner_starts(summary: dict[str, Any], agent: str) -> dict[str, float]:
    """The other agents' accuracy at step 0 (the first algorithm's start: every run of a comparison starts from
    the same agents), by agent: the reference an agent's curve is drawn against."""
    results = summary.get("results", {})
    first = (summary.get("algorithms") or [None])[0]
    return {other: start for other in summary.get("agents", results) if other != agent
            if (start := results.get(other, {}).get(first, {}).get("start")) is not None}


def below_partner_start(summary: dict[str, Any]) -> list[str]:
    """Where an agent ended below a partner's step-0 accuracy, per algorithm, with the seeds that did: what 30
    steps of collaboration left an agent short of (a partner fine-tuned beforehand can start higher).

    >>> r = {"a": {"hacpo": {"start": 0.1, "final": {"mean": 0.4, "by_seed": {"0": 0.45, "1": 0.35}}}},
    ...      "b": {"hacpo": {"start": 0.5, "final": {"mean": 0.6, "by_seed": {"0": 0.6, "1": 0.6}}}}}
    >>> below_partner_start({"algorithms": ["hacpo"], "agents": ["a", "b"], "results": r})
    ["a under hacpo ended at 0.400, below b's start 0.500 (2 of 2 seeds)"]
    """
    out = []
    results = summary.get("results", {})
    for agent in summary.get("agents", results):
        for other, start in partner_starts(summary, agent).items():
            for algo in summary.get("algorithms", []):
                final = results.get(agent, {}).get(algo, {}).get("final") or {}
                seeds = {s: v for s, v in (final.get("by_seed") or {}).items() if v is not None}
                if final.get("mean") is not None and final["mean"] < start:
                    n_below = sum(v < start for v in seeds.values())
                    out.append(f"{agent} under {algo} ended at {final['mean']:.3f}, below {other}'s start "
                               f"{start:.3f} ({n_below} of {len(seeds)} seeds)")
    return out


def automatic_reading(summary: dict[str, Any]) -> list[str]:
    """One paragraph per pool-sharing algorithm, plus one on the accuracy differences."""
    paragraphs = []
    for algo, diag in summary["diagnostics"].items():
        window_of = summary.get("windows", {}).get(algo, {})
        sentences = _window_reading(algo, diag, window_of, window_of.get("delta", summary.get("delta")))
        paragraphs.append(" ".join(sentences + _omega_reading(algo, diag)))

    missing = missing_baselines(summary)  # said before the differences it qualifies
    if missing:
        paragraphs.append("Missing baseline" + ("s" if len(missing) > 1 else "") + ": " + "; ".join(missing)
                          + ".")
    below = below_partner_start(summary)
    if below:
        paragraphs.append("Below the partner's start: " + "; ".join(below) + ".")
    baselines = summary.get("baselines", [])
    results = summary["results"]
    all_same = all(len({round(r["final"]["mean"], 9) for r in per_algo.values()
                        if r["final"]["mean"] is not None}) <= 1 for per_algo in results.values())
    if all_same and len(summary["algorithms"]) > 1:
        paragraphs.append(f"Every algorithm ended at the same held-out {held_out_measure(summary)} for every agent: "
                          "the runs were too short (or the evaluation too small) to tell the algorithms apart.")
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
    in_baseline = algorithm.advantage in ("hacpo", "hacpo_capped") and algorithm.capability_aware
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


def held_out_measure(summary: dict[str, Any], accuracy: str = "accuracy") -> str:
    """The held-out number's name in the report: ``accuracy`` (or the phrase given), or "mean greedy reward" when
    the runs' held-out rewards fell outside [0, 1] (``rewards_outside_unit``): a mean of them is no accuracy.

    >>> held_out_measure({}), held_out_measure({"rewards_outside_unit": True}, "greedy accuracy")
    ('accuracy', 'mean greedy reward')
    """
    return "mean greedy reward" if summary.get("rewards_outside_unit") else accuracy


def _accuracy_reading(summary: dict[str, Any]) -> str:
    """The paragraph on the final accuracy differences: every Δ with its intervals (or only its t-test where
    the runs have no per-problem records); a gain or a loss is stated only where both the bootstrap and the
    seed-level t-interval exclude 0 (:func:`claim`), over 3 or more seeds."""
    baselines, n = summary["baselines"], len(summary["seeds"])
    clauses, tested = [], False
    claims: dict[str, list[str]] = {key: [] for key in
                                    ("gain", "loss", "≈", "problems only", "seeds only", "no interval", "indicative")}
    significant: dict[str, str] = {}  # t-test p < 0.05: name → the claim as written (runs without records)
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
                iv, si, what = st.get("interval"), st.get("seed_interval"), f"{algo} vs {b} on {agent}"
                k = len(st.get("seeds") or [])  # a pair finished on fewer seeds than the comparison says so
                seeds = f"{k} of {n} seeds" if 0 < k < n else ""
                if iv:
                    t_iv = f"; seed t-interval [{si['lo']:+.3f}, {si['hi']:+.3f}]" if si else ""
                    cells.append(f"{iv['mean']:+.3f} vs {b} (95% interval [{iv['lo']:+.3f}, {iv['hi']:+.3f}]"
                                 f"{', includes 0' if iv['includes_zero'] else ''}{t_iv}; t-test {p}"
                                 f"{'; ' + seeds if seeds else ''})")
                else:
                    cells.append(f"{st['mean']:+.3f} vs {b} ({p}{'; ' + seeds if seeds else ''})")
                key = claim(st)
                if key in ("gain", "loss") and indicative(st):
                    key = "indicative"
                claims[key].append(f"{what} ({(iv or st)['mean']:+.3f}{', ' + seeds if seeds else ''})")
                if st["p"] is not None and st["p"] < 0.05:
                    significant[what] = f"{what} ({st['mean']:+.3f}{', ' + seeds if seeds else ''})"
            if cells:
                per_agent.append(f"{agent} " + ", ".join(cells))
        if per_agent:
            clauses.append(f"{algo}: " + "; ".join(per_agent))
    if not clauses:
        return ""
    intervals = any(claims[key] for key in ("gain", "loss", "≈", "problems only", "seeds only", "indicative"))
    text = (f"Final {held_out_measure(summary)} against {' and '.join(baselines)}, paired by seed"
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
    tail = [f"{word} (both 95% intervals, over seeds × problems and over seeds, exclude 0): "
            f"{', '.join(claims[key])}." for key, word in (("gain", "Gains"), ("loss", "Losses")) if claims[key]]
    if claims["indicative"]:
        tail.append(f"Indicative only (fewer than {MIN_SEEDS} seeds, so not claimed; both intervals exclude 0): "
                    f"{', '.join(claims['indicative'])}.")
    if claims["problems only"]:
        tail.append(f"The intervals disagree, so not claimed: the bootstrap over seeds and problems excludes 0 "
                    f"but the t-interval over seeds does not for {', '.join(claims['problems only'])}.")
    if claims["seeds only"]:
        tail.append(f"The intervals disagree, so not claimed: the t-interval over seeds excludes 0 but the "
                    f"bootstrap over seeds and problems does not for {', '.join(claims['seeds only'])}.")
    if tail and claims["≈"]:
        tail.append(f"Not shown either way (both intervals include 0): {', '.join(claims['≈'])}.")
    elif intervals and not tail:
        tail.append("Every 95% interval includes 0: no gain or loss is shown.")
    if claims["no interval"]:
        tail.append(f"No interval (some runs have no per-problem records), so not claimed either way: "
                    f"{', '.join(claims['no interval'])}.")
    return (text + " ".join(tail)).rstrip()
