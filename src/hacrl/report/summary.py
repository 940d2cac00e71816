"""The summary of ``hacrl compare``: every number of the report.

:func:`summarize` turns the runs' metrics and evaluations into per-agent accuracy tables (with paired
differences against the baselines: the t-test over seeds and, where the runs wrote per-problem records, the
paired bootstrap interval over seeds × problems), learning curves (against steps and answers generated),
costs and collaboration diagnostics, then adds the reading of them (:mod:`hacrl.report.reading`: the
opening table of every algorithm against every baseline, and the plain-language paragraphs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import yaml

from hacrl.config import Config
from hacrl.learner.algorithms import adaptive_window
from hacrl.report.answers import answer_quality
from hacrl.report.pace import pace_summary
from hacrl.report.provenance import provenance_summary
from hacrl.report.reading import (
    CHOICE_MARGIN,
    advice,
    algorithm_of,
    answer_rows,
    automatic_reading,
    is_baseline,
    within_margin,
)
from hacrl.report.runs import RunData, RunOutcome, outputs_data
from hacrl.report.stats import (
    BOOTSTRAP_B,
    BOOTSTRAP_LEVEL,
    BOOTSTRAP_SEED,
    SEED_LEVEL,
    mean_sd,
    paired_bootstrap,
    paired_difference,
    seed_t_interval,
)
from hacrl.run.records import run_text
from hacrl.run.sinks import phase_times
from hacrl.trainer.reward_checks import outside_unit

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

    summary: dict[str, Any] = {
        **meta,
        "task": cfg.task.name,
        "agents": {a.id: a.model for a in cfg.agents},
        "steps": steps, "batch_size": t.batch_size, "rollouts_per_prompt": cfg.rollout.rollouts_per_prompt,
        "eval_size": t.eval_size, "eval_every": t.eval_every, "eval_k": t.eval_k, "baselines": baselines,
        "delta": cfg.algorithm.delta, "delta_step": cfg.algorithm.delta_step,
        "runs": [_run_row(d, outcome_of[d.algo, d.seed], agent_ids, steps) for d in data],
        "results": {}, "cost": {}, "diagnostics": {}, "windows": {},
    }
    for algo in algos:
        summary["cost"][algo] = _cost_of([r for r in summary["runs"] if r["algorithm"] == algo])
    for agent in agent_ids:
        summary["results"][agent] = _results_of(agent, cfg, by_algo, baselines, seeds)
    summary["interval_method"] = INTERVAL_METHOD
    summary["seed_interval_method"] = SEED_INTERVAL_METHOD
    summary["runs_with_problem_records"] = sum(bool(d.problems) for d in data)
    summary["rewards_outside_unit"] = any(_rewards_outside_unit(d) for d in data)  # the report then says "reward"
    summary["answer"] = answer_rows(summary)
    summary["answer_quality"] = answer_quality(outcomes, agent_ids, algos, baselines, seeds, steps, t.eval_budget)
    summary["pace"] = pace_summary(by_algo, agent_ids)  # idle share, updates/hour, staleness, answers used
    for algo in algos:
        if algorithm_of(algo).shares_pool:
            summary["diagnostics"][algo] = {agent: _diagnostics_of(agent, by_algo[algo], agent_ids)
                                            for agent in agent_ids}
            summary["windows"][algo] = _window_of(algo, outcome_of, seeds, cfg)
    summary["provenance"] = provenance_summary(outcomes)  # commits, libraries, devices; who differs
    summary["reading"] = automatic_reading(summary)
    summary["choice"] = _choice(agent_ids, by_algo, seeds, steps)
    summary["advice"] = advice(summary)
    return summary


def _rewards_outside_unit(d: RunData) -> bool:
    """Whether a held-out reward of the run (a problem's greedy reward or mean sampled one; without per-problem
    records, an evaluation's mean) falls outside [0, 1]."""
    per_problem = (v for rec in d.problems.values() for part in rec.values() for v in part.values())
    return outside_unit(per_problem) or outside_unit(d.evals.values())


def _run_row(d: RunData, o: RunOutcome, agent_ids: list[str], steps: int) -> dict[str, Any]:
    """One run's line of the summary: its status, start and final accuracy per agent, wall and phase seconds.
    ``wall_short``: the recorded wall time is below the phases' sum, so it misses an invocation (one killed
    before compare.json was written after every step): the cost then counts the phases."""
    phases = sum(_phase_seconds(m) for m in d.metrics.values())
    return {
        "algorithm": d.algo, "seed": d.seed, "dir": str(o.run_dir), "status": o.status,
        "start": {a: d.evals.get((0, a)) for a in agent_ids},
        "final": {a: d.evals.get((steps, a)) for a in agent_ids},
        "wall_s": o.wall_s, "phase_s": phases, "wall_short": o.wall_s is not None and o.wall_s < phases,
        "rollout_s": sum(m.get("timing/rollout", 0.0) for m in d.metrics.values()),
        "update_s": sum(_update_seconds(m) for m in d.metrics.values()),
    }


def _cost_of(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """An algorithm's cost over its runs (mean, sd); a run without a whole measured wall time (none recorded,
    or ``wall_short``) counts its phases."""
    measured = [r["wall_s"] is not None and not r["wall_short"] for r in rs]
    walls = [r["wall_s"] if m else r["phase_s"] for r, m in zip(rs, measured, strict=True)]
    return {
        "wall_s": mean_sd(walls), "phase_s": mean_sd([r["phase_s"] for r in rs]),
        "rollout_s": mean_sd([r["rollout_s"] for r in rs]),
        "update_s": mean_sd([r["update_s"] for r in rs]),
        "wall_measured": all(measured), "walls_measured": sum(measured), "runs": len(rs),
    }


def _results_of(agent: str, cfg: Config, by_algo: dict[str, list[RunData]], baselines: list[str],
                seeds: list[int]) -> dict[str, Any]:
    """One agent's accuracy per algorithm: start, final over seeds, paired differences against each baseline
    (t-test over seeds, bootstrap interval over seeds × problems), cost in rollouts and updates, the curve."""
    steps, t = cfg.trainer.steps, cfg.trainer
    finals = {algo: {d.seed: d.evals.get((steps, agent)) for d in runs} for algo, runs in by_algo.items()}
    per_algo: dict[str, Any] = {}
    for algo, runs in by_algo.items():
        a = algorithm_of(algo)
        vals = [v for v in finals[algo].values() if v is not None]
        mean, sd = mean_sd(vals)
        start_mean, start_sd = mean_sd([d.evals.get((0, agent)) for d in runs])
        updates = [sum(_metric(d, s, f"agent/{agent}/optimizer_steps") or 0 for s in d.metrics) for d in runs]
        vs = {b: _paired(algo, b, finals, by_algo, seeds, steps, agent) for b in baselines if b != algo}
        per_step = t.batch_size * cfg.rollout.rollouts_per_prompt * a.rollout_multiplier
        per_algo[algo] = {
            "start": start_mean, "start_sd": start_sd,
            "final": {"mean": mean, "sd": sd, "min": min(vals) if vals else None,
                      "max": max(vals) if vals else None, "by_seed": finals[algo]},
            "vs": vs,
            "rollouts": steps * per_step,
            "optimizer_updates": mean_sd(updates)[0],
            "curve": _with_answers(_series(runs, lambda d, s: d.evals.get((s, agent))), per_step),
        }
        sampled = _sampled_of(agent, algo, by_algo, baselines, seeds, steps)
        if sampled is not None:
            per_algo[algo]["sampled"] = sampled
    return per_algo


def _paired(algo: str, b: str, finals: dict[str, dict[int, float | None]], by_algo: dict[str, list[RunData]],
            seeds: list[int], steps: int, agent: str) -> dict[str, Any]:
    """``algo`` − ``b`` on ``agent``'s final greedy accuracy over the seeds both finished: the mean and t-test over
    seeds, the paired bootstrap over seeds × problems (:func:`_interval`) and the seed-level t-interval."""
    common = [s for s in seeds if finals[algo].get(s) is not None and finals[b].get(s) is not None]
    mine, theirs = [finals[algo][s] for s in common], [finals[b][s] for s in common]
    return {**paired_difference(mine, theirs), "seeds": common,
            **_interval(algo, b, by_algo, common, steps, agent, "greedy"),
            "seed_interval": seed_t_interval(mine, theirs)}


def _choice(agent_ids: list[str], by_algo: dict[str, list[RunData]], seeds: list[int], steps: int
            ) -> dict[str, Any]:
    """Which arm to train with, per agent (``summary["choice"]``, read by :func:`hacrl.report.reading.advice`):
    over the seeds every arm finished, the arm with the highest mean final greedy accuracy (``best``), and every
    other arm's paired difference to it with both intervals and its reading against :data:`CHOICE_MARGIN`
    (:func:`hacrl.report.reading.within_margin`: ``within``, ``behind`` or ``undecided``)."""
    out: dict[str, Any] = {"margin": CHOICE_MARGIN, "agents": {}}
    for agent in agent_ids:
        finals = {algo: {d.seed: d.evals.get((steps, agent)) for d in runs} for algo, runs in by_algo.items()}
        common = [s for s in seeds if all(finals[a].get(s) is not None for a in by_algo)]
        if not common or len(by_algo) < 2:
            continue
        means = {a: sum(finals[a][s] for s in common) / len(common) for a in by_algo}
        best = max(by_algo, key=lambda a: means[a])  # a tie goes to the arm listed first
        arms = {}
        for algo in by_algo:
            if algo == best:
                arms[algo] = {"mean": means[algo], "reading": "best"}
                continue
            vs = _paired(algo, best, {algo: finals[algo], best: finals[best]}, by_algo, common, steps, agent)
            arms[algo] = {"mean": means[algo], "vs_best": vs, "reading": within_margin(vs, CHOICE_MARGIN)}
        out["agents"][agent] = {"best": best, "seeds": common, "arms": arms}
    return out


def _diagnostics_of(agent: str, runs: list[RunData], agent_ids: list[str]) -> dict[str, Any]:
    """How ``agent`` learned from the others' answers under a pool-sharing algorithm, mean over steps and
    seeds: the cross ratio and the window's shares, ω towards each other agent (with its curve), the
    adaptive window's lower bound (None for a fixed window)."""
    def avg(key: str) -> float | None:
        return mean_sd([_mean_over_steps(d, f"agent/{agent}/{key}") for d in runs])[0]

    omega = {}
    for other in agent_ids:
        if other != agent:
            curve = _agent_series(runs, agent, f"agent/{agent}/omega/{other}")
            omega[other] = {"mean": avg(f"omega/{other}"),
                            "final": curve["mean"][-1] if curve["mean"] else None, "curve": curve}
    return {
        "cross_ratio_mean": avg("cross/ratio_mean"), "in_window_frac": avg("cross/in_window_frac"),
        "below_window_frac": avg("cross/clip_low_frac"),
        "above_window_frac": avg("cross/clip_high_frac"),
        "cross_answers": avg("count/cross"),
        "in_window_curve": _agent_series(runs, agent, f"agent/{agent}/cross/in_window_frac"),
        "omega": omega,
        "window_lower": mean_sd([avg(f"window_lower/{o}") for o in agent_ids if o != agent])[0],
    }


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
        mine, theirs = [final_avg[s] for s in common], [other[s] for s in common]
        vs[b] = {**paired_difference(mine, theirs), "seeds": common,
                 **_interval(algo, b, by_algo, common, steps, agent, "sampled"),
                 "seed_interval": seed_t_interval(mine, theirs)}
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
# beside it (summary key "seed_interval" of every paired difference): see stats.seed_t_interval
SEED_INTERVAL_METHOD = {
    "name": "paired t-interval over seeds",
    "statistic": "per-seed difference d_s of the final values (a run's accuracy, or its mean over problems)",
    "interval": "mean(d) ± t_{(1+level)/2, n−1} · sd(d)/√n (scipy.stats.t.ppf); none with fewer than 2 seeds",
    "level": SEED_LEVEL,
    "claim": "a gain or a loss is claimed only where both this and the bootstrap interval exclude 0, and with 3 "
             "or more seeds (fewer: indicative only)",
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


def _window_of(algo: str, outcome_of: dict, seeds: list[int], cfg: Config) -> dict[str, Any]:
    """δ and whether the window adapts, as the algorithm's runs were configured (a variant may set its own)."""
    section = cfg.algorithm.model_dump()
    for s in seeds:
        o = outcome_of.get((algo, s))
        saved = run_text(o.run_dir / "config.yaml") if o is not None else None
        if saved is not None:
            section = {**section, **((yaml.safe_load(saved) or {}).get("algorithm") or {})}
            break
    adaptive = adaptive_window(algorithm_of(algo), str(section.get("cross_window", "fixed")))
    return {"delta": section.get("delta"), "adaptive": adaptive}


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
