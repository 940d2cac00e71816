"""The summary of ``hacrl compare``: every number of the report, and the automatic reading of them.

:func:`summarize` turns the runs' metrics and evaluations into per-agent accuracy tables (with paired
differences against the baselines: the t-test over seeds and, where the runs wrote per-problem records, the
paired bootstrap interval over seeds × problems), learning curves (against steps and answers generated),
costs and collaboration diagnostics; :func:`answer_rows` gives the report's opening table (every algorithm
against every baseline, with its interval and mark); :func:`automatic_reading` writes the plain-language
paragraphs of the report's "Reading" section from that summary, claiming a gain or a loss only where the
interval excludes 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import yaml

from hacrl.config import Config
from hacrl.learner.algorithms import ALGORITHMS, Algorithm, adaptive_window
from hacrl.report.answers import answer_quality
from hacrl.report.pace import pace_summary
from hacrl.report.runs import RunData, RunOutcome, outputs_data
from hacrl.report.stats import (
    BOOTSTRAP_B,
    BOOTSTRAP_LEVEL,
    BOOTSTRAP_SEED,
    mean_sd,
    paired_bootstrap,
    paired_difference,
)
from hacrl.trainer.sinks import phase_times


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


# ---- per-step values over runs ----------------------------------------------------------------------

def _series(data: list[RunData], key: Callable[[RunData, int], float | None], steps: list[int] | None = None,
            ) -> dict[str, list[float | None]]:
    """Mean, sd, min, max and count over runs, for every step (of ``steps``, default: every logged or evaluated
    step) where at least one run has a value."""
    if steps is None:
        steps = sorted({s for d in data for s in d.metrics} | {s for d in data for s, _ in d.evals})
    rows = {"steps": [], "mean": [], "sd": [], "min": [], "max": [], "n": []}
    for s in steps:
        vals = [v for d in data if (v := key(d, s)) is not None and math.isfinite(v)]
        if not vals:
            continue
        mean, sd = mean_sd(vals)
        for name, value in (("steps", s), ("mean", mean), ("sd", sd), ("min", min(vals)), ("max", max(vals)),
                            ("n", len(vals))):
            rows[name].append(value)
    return rows


def _metric(d: RunData, step: int, key: str) -> float | None:
    v = d.metrics.get(step, {}).get(key)
    return float(v) if isinstance(v, int | float) else None


def _agent_metric(d: RunData, step: int, agent: str, key: str) -> float | None:
    """``agent``'s metric ``key`` at its own step: a lock-step run's line at ``step``, an asynchronous run's at
    the agent's update number ``step`` (its version), where its own diagnostics were logged."""
    if d.mode != "async":
        return _metric(d, step, key)
    v = d.agent_updates.get(agent, {}).get(step, {}).get(key)
    return float(v) if isinstance(v, int | float) else None


def _agent_series(data: list[RunData], agent: str, key: str) -> dict[str, list[float | None]]:
    """Mean, sd, min, max and count over runs of ``agent``'s metric ``key`` against its own step (>= 1)."""
    steps = sorted({s for d in data for s in (d.agent_updates.get(agent, {}) if d.mode == "async" else d.metrics)
                    if s > 0})
    return _series(data, lambda d, s: _agent_metric(d, s, agent, key), steps)


def _mean_over_steps(d: RunData, key: str) -> float | None:
    vals = [v for s in d.metrics if s > 0 and (v := _metric(d, s, key)) is not None and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else None


# ---- the summary --------------------------------------------------------------------------------------

def summarize(cfg: Config, meta: dict[str, Any], outcomes: list[RunOutcome],
              data: list[RunData] | None = None) -> dict[str, Any]:
    """Every number of the report, from the run directories (``data``: already read with outputs_data)."""
    data = outputs_data(outcomes, cfg) if data is None else data
    algos, seeds = meta["algorithms"], meta["seeds"]
    agent_ids = [a.id for a in cfg.agents]
    steps, t = cfg.trainer.steps, cfg.trainer
    by_algo = {a: [d for d in data if d.algo == a] for a in algos}
    outcome_of = {(o.algo, o.seed): o for o in outcomes}
    baselines = meta.get("baselines") or [b for b in algos if is_baseline(b)]

    def final_of(d: RunData, agent: str) -> float | None:
        return d.evals.get((steps, agent))

    summary: dict[str, Any] = {
        **meta,
        "task": cfg.task.name,
        "agents": {a.id: a.model for a in cfg.agents},
        "steps": steps, "batch_size": t.batch_size, "rollouts_per_prompt": cfg.rollout.rollouts_per_prompt,
        "eval_size": t.eval_size, "eval_every": t.eval_every, "eval_k": t.eval_k, "baselines": baselines,
        "delta": cfg.algorithm.delta, "delta_step": cfg.algorithm.delta_step,
        "runs": [], "results": {}, "cost": {}, "diagnostics": {}, "windows": {},
    }
    for d in data:
        o = outcome_of[d.algo, d.seed]
        phases = sum(_phase_seconds(m) for m in d.metrics.values())
        summary["runs"].append({
            "algorithm": d.algo, "seed": d.seed, "dir": str(o.run_dir), "status": o.status,
            "start": {a: d.evals.get((0, a)) for a in agent_ids},
            "final": {a: final_of(d, a) for a in agent_ids},
            "wall_s": o.wall_s, "phase_s": phases,
            "rollout_s": sum(m.get("timing/rollout", 0.0) for m in d.metrics.values()),
            "update_s": sum(_update_seconds(m) for m in d.metrics.values()),
        })
    runs_of = {a: [r for r in summary["runs"] if r["algorithm"] == a] for a in algos}

    for algo in algos:
        rs = runs_of[algo]
        walls = [r["wall_s"] if r["wall_s"] is not None else r["phase_s"] for r in rs]
        summary["cost"][algo] = {
            "wall_s": mean_sd(walls), "phase_s": mean_sd([r["phase_s"] for r in rs]),
            "rollout_s": mean_sd([r["rollout_s"] for r in rs]),
            "update_s": mean_sd([r["update_s"] for r in rs]),
            "wall_measured": all(r["wall_s"] is not None for r in rs),
        }

    for agent in agent_ids:
        per_algo: dict[str, Any] = {}
        finals = {algo: {d.seed: final_of(d, agent) for d in by_algo[algo]} for algo in algos}
        for algo in algos:
            runs = by_algo[algo]
            a = algorithm_of(algo)
            vals = [v for v in finals[algo].values() if v is not None]
            mean, sd = mean_sd(vals)
            start_mean, start_sd = mean_sd([d.evals.get((0, agent)) for d in runs])
            updates = [sum(_metric(d, s, f"agent/{agent}/optimizer_steps") or 0 for s in d.metrics)
                       for d in runs]
            vs = {}
            for b in baselines:
                if b == algo:
                    continue
                common = [s for s in seeds
                          if finals[algo].get(s) is not None and finals[b].get(s) is not None]
                vs[b] = {**paired_difference([finals[algo][s] for s in common],
                                             [finals[b][s] for s in common]), "seeds": common,
                         **_interval(algo, b, by_algo, common, steps, agent, "greedy")}
            per_algo[algo] = {
                "start": start_mean, "start_sd": start_sd,
                "final": {"mean": mean, "sd": sd, "min": min(vals) if vals else None,
                          "max": max(vals) if vals else None, "by_seed": finals[algo]},
                "vs": vs,
                "rollouts": steps * t.batch_size * cfg.rollout.rollouts_per_prompt * a.rollout_multiplier,
                "optimizer_updates": mean_sd(updates)[0],
                "curve": _with_answers(_series(runs, lambda d, s, agent=agent: d.evals.get((s, agent))),
                                       t.batch_size * cfg.rollout.rollouts_per_prompt * a.rollout_multiplier),
            }
            sampled = _sampled_of(agent, algo, by_algo, baselines, seeds, steps)
            if sampled is not None:
                per_algo[algo]["sampled"] = sampled
        summary["results"][agent] = per_algo
    summary["interval_method"] = INTERVAL_METHOD
    summary["runs_with_problem_records"] = sum(bool(d.problems) for d in data)
    summary["answer"] = answer_rows(summary)
    summary["answer_quality"] = answer_quality(outcomes, agent_ids, algos, baselines, seeds, steps, t.eval_budget)
    summary["pace"] = pace_summary(by_algo, agent_ids)  # idle share, updates/hour, staleness, answers used

    for algo in algos:
        if not algorithm_of(algo).shares_pool:
            continue
        runs = by_algo[algo]
        diag: dict[str, Any] = {}
        for agent in agent_ids:
            def avg(key: str, agent: str = agent, runs: list[RunData] = runs) -> float | None:
                return mean_sd([_mean_over_steps(d, f"agent/{agent}/{key}") for d in runs])[0]

            omega = {}
            for other in agent_ids:
                if other == agent:
                    continue
                key = f"agent/{agent}/omega/{other}"
                curve = _agent_series(runs, agent, key)
                omega[other] = {"mean": avg(f"omega/{other}"),
                                "final": curve["mean"][-1] if curve["mean"] else None, "curve": curve}
            diag[agent] = {
                "cross_ratio_mean": avg("cross/ratio_mean"), "in_window_frac": avg("cross/in_window_frac"),
                "below_window_frac": avg("cross/clip_low_frac"),
                "above_window_frac": avg("cross/clip_high_frac"),
                "cross_answers": avg("count/cross"),
                "in_window_curve": _agent_series(runs, agent, f"agent/{agent}/cross/in_window_frac"),
                "omega": omega,
                # the adaptive window's ℓ_0 (None for a fixed window)
                "window_lower": mean_sd([avg(f"window_lower/{o}") for o in agent_ids if o != agent])[0],
            }
        summary["diagnostics"][algo] = diag
        summary["windows"][algo] = _window_of(algo, outcome_of, seeds, cfg)
    summary["reading"] = automatic_reading(summary)
    return summary


def _sampled_of(agent: str, algo: str, by_algo: dict[str, list[RunData]], baselines: list[str],
                seeds: list[int], steps: int) -> dict[str, Any] | None:
    """The sampled evaluation (avg@k, pass@k) of ``agent`` under ``algo``, start and final over seeds, with
    avg@k paired against each baseline like the greedy accuracy; None when no run evaluated by sampling."""
    def at(a: str, step: int, key: str) -> dict[int, float]:
        return {d.seed: d.sampled[step, agent][key] for d in by_algo[a] if (step, agent) in d.sampled}

    final_avg, final_pass = at(algo, steps, "avg"), at(algo, steps, "pass")
    if not final_avg and not at(algo, 0, "avg"):
        return None
    ks = {d.sampled[key]["k"] for d in by_algo[algo] for key in d.sampled if key[1] == agent}
    vs = {}
    for b in baselines:
        if b == algo:
            continue
        other = at(b, steps, "avg")
        common = [s for s in seeds if s in final_avg and s in other]
        vs[b] = {**paired_difference([final_avg[s] for s in common], [other[s] for s in common]), "seeds": common,
                 **_interval(algo, b, by_algo, common, steps, agent, "sampled")}
    return {
        "k": sorted(ks)[0] if len(ks) == 1 else None,
        "start_avg": mean_sd(list(at(algo, 0, "avg").values())),
        "start_pass": mean_sd(list(at(algo, 0, "pass").values())),
        "final_avg": {"mean_sd": mean_sd(list(final_avg.values())), "by_seed": final_avg},
        "final_pass": {"mean_sd": mean_sd(list(final_pass.values())), "by_seed": final_pass},
        "vs": vs,
    }


INTERVAL_METHOD = {
    "name": "paired bootstrap over seeds and problems",
    "resampled": "seeds with replacement and, independently, problems with replacement (one draw shared by "
                 "every seed); statistic: mean paired difference over the drawn (seed, problem) cells",
    "pairing": "by (seed, problem id): only ids evaluated in both runs of a seed count",
    "interval": "percentile (numpy.quantile, method inverted_cdf)", "level": BOOTSTRAP_LEVEL,
    "n_boot": BOOTSTRAP_B, "rng_seed": BOOTSTRAP_SEED,
    "exact": "every ordered resample enumerated instead when seeds^seeds × problems^problems ≤ n_boot",
    "p": "two-sided bootstrap p = min(1, 2·min(share of replicates ≤ 0, share ≥ 0))",
    "secondary": "exact McNemar test on the pooled discordant pairs (0/1 rewards only)",
}


def _interval(algo: str, b: str, by_algo: dict[str, list[RunData]], seeds: list[int], step: int, agent: str,
              measure: str) -> dict[str, Any]:
    """``{"interval": paired_bootstrap(...) or None, "interval_note": None or one line}`` for ``algo`` − ``b``
    on ``agent`` at ``step``, from the per-problem records (``measure`` "greedy": the rewards, "sampled": each
    problem's mean over its k samples) of the seeds in ``seeds``. No interval (and a note saying why) unless
    every run of those seeds has the records: an interval over a subset of the seeds the t-test uses would
    answer another question."""
    runs = {(d.algo, d.seed): d for name in (algo, b) for d in by_algo[name]}
    if not seeds:
        return {"interval": None, "interval_note": None}
    lacking = [f"{name} seed {s}" for s in seeds for name in (algo, b)
               if measure not in runs[name, s].problems.get((step, agent), {})]
    if len(lacking) == 2 * len(seeds):
        return {"interval": None, "interval_note": "no interval: these runs have no per-problem records "
                                                   "(eval_problems.jsonl)"}
    if lacking:
        return {"interval": None, "interval_note": f"no interval: {', '.join(lacking)} "
                                                   f"{'has' if len(lacking) == 1 else 'have'} no per-problem "
                                                   f"records at step {step}"}
    st = paired_bootstrap([runs[algo, s].problems[step, agent][measure] for s in seeds],
                          [runs[b, s].problems[step, agent][measure] for s in seeds])
    note = None if st["pairs"] else "no interval: no problem id was evaluated in both runs of any seed"
    return {"interval": st if st["pairs"] else None, "interval_note": note}


def _with_answers(curve: dict[str, list], per_step: int) -> dict[str, Any]:
    """A learning curve with its cost axis: answers this agent had generated in training by each evaluated
    step (step × batch_size × rollouts_per_prompt × the algorithm's rollout multiplier = step × per_step)."""
    return {**curve, "answers": [s * per_step for s in curve["steps"]], "answers_per_step": per_step}


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


def _window_of(algo: str, outcome_of: dict, seeds: list[int], cfg: Config) -> dict[str, Any]:
    """δ and whether the window adapts, as the algorithm's runs were configured (a variant may set its own)."""
    section = cfg.algorithm.model_dump()
    for s in seeds:
        o = outcome_of.get((algo, s))
        path = o.run_dir / "config.yaml" if o is not None else None
        if path is not None and path.is_file():
            section = {**section, **((yaml.safe_load(path.read_text()) or {}).get("algorithm") or {})}
            break
    adaptive = adaptive_window(algorithm_of(algo), str(section.get("cross_window", "fixed")))
    return {"delta": section.get("delta"), "adaptive": adaptive}


# ---- the automatic reading ------------------------------------------------------------------------------

def automatic_reading(summary: dict[str, Any]) -> list[str]:
    """One paragraph per pool-sharing algorithm, plus one on the accuracy differences."""
    paragraphs = []
    for algo, diag in summary["diagnostics"].items():
        window_of = summary.get("windows", {}).get(algo, {})
        delta = window_of.get("delta", summary.get("delta"))
        fracs = {a: d["in_window_frac"] for a, d in diag.items() if d["in_window_frac"] is not None}
        sentences = []
        if not fracs:
            sentences.append(f"{algo} shares the pool but its loss does not log cross-answer ratios, so "
                             f"how much the other agents' answers counted cannot be read from the metrics.")
        else:
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
                sentences.append(f"No cross answer fell inside {window}: {algo} acted like GSPO (answers "
                                 f"outside the window are clipped and give no gradient).")
            elif overall < 0.1:
                sentences.append(f"Only {overall:.0%} of cross answers fell inside {window}: {algo} acted "
                                 f"almost like GSPO (answers outside the window are clipped and give no "
                                 f"gradient).")
            elif overall < 0.5:
                sentences.append(f"{overall:.0%} of cross answers fell inside {window}: the shared pool "
                                 f"contributed part of {algo}'s updates.")
            else:
                sentences.append(f"Most cross answers ({overall:.0%}) fell inside {window}: {algo}'s "
                                 f"learners did learn from each other's answers.")
            for agent, d in diag.items():
                inside, below, above = d["in_window_frac"], d["below_window_frac"], d["above_window_frac"]
                ratio = d["cross_ratio_mean"]
                if None in (inside, below, above, ratio) or max(below, above) <= 0.05:
                    continue
                side = ("below it (the learner finds the others' answers less likely than their authors "
                        "did)" if below >= above else "above it (the learner finds the others' answers more "
                        "likely than their authors did)")
                sentences.append(f"{agent}: {inside:.0%} inside, {below:.0%} below, {above:.0%} above the "
                                 f"window, mean cross ratio {ratio:.2f}; the clipped ones were mostly "
                                 f"{side}.")
        algorithm = algorithm_of(algo)
        in_baseline = algorithm.advantage == "hacpo" and algorithm.capability_aware
        in_update = algorithm.loss == "hacpo" and algorithm.use_omega
        omegas = [(a, o, v["mean"]) for a, d in diag.items() for o, v in d["omega"].items()
                  if v["mean"] is not None]
        if omegas:
            a, o, w = max(omegas, key=lambda x: abs(math.log(max(x[2], 1e-12))))
            if not (in_baseline or in_update):
                sentences.append(f"ω is logged but {algo} does not use it.")
            elif abs(math.log(max(w, 1e-12))) < math.log(1.1):
                sentences.append("ω stayed near 1: the agents were judged equally capable, so the capability "
                                 "weighting changed little.")
            else:
                ahead, behind, factor = (a, o, w) if w > 1 else (o, a, 1 / w)
                effects = ((f"weighted {ahead}'s answers up by about that factor in its update", in_update),
                           (f"scaled {ahead}'s rewards down by it in its baseline", in_baseline))
                uses = " and ".join(text for text, on in effects if on)
                sentences.append(f"ω({a}→{o}) averaged {w:.2f} over the steps: {ahead} was judged about "
                                 f"{factor:.1f}× as capable as {behind}, so {behind} {uses}.")
        paragraphs.append(" ".join(sentences))

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
                if iv:
                    cells.append(f"{iv['mean']:+.3f} vs {b} (95% interval [{iv['lo']:+.3f}, {iv['hi']:+.3f}]"
                                 f"{', includes 0' if iv['includes_zero'] else ''}; t-test {p})")
                else:
                    cells.append(f"{st['mean']:+.3f} vs {b} ({p})")
                claims[mark(st)].append(f"{what} ({(iv or st)['mean']:+.3f})")
                if st["p"] is not None and st["p"] < 0.05:
                    significant[what] = f"{what} ({st['mean']:+.3f})"
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


def _phase_seconds(metrics: dict) -> float:
    """The step's phase times (``phase_times``: ``timing/<phase>`` totals only, not the per-agent times
    logged beside them, nor the ``*_overlap`` ratios)."""
    phases = phase_times(metrics)
    if "update" not in phases:  # runs from before the worker split logged update time per agent only
        phases["update"] = _update_seconds(metrics)
    return sum(phases.values())


def _update_seconds(metrics: dict) -> float:
    if "timing/update" in metrics:
        return metrics["timing/update"]
    return sum(v for k, v in metrics.items() if k.startswith("timing/update/"))
