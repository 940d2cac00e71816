"""report.md of ``hacrl compare``: the summary (see :mod:`hacrl.report.summary`) as Markdown tables.

The report opens with the answer (every algorithm against every baseline: Δ, its 95% paired interval and what
it supports), then the details: configuration, learning curves and accuracy tables, cost, diagnostics."""

from __future__ import annotations

import math
from typing import Any

from hacrl.report.answers import render_answer_quality
from hacrl.report.pace import render_pace
from hacrl.report.plots import finished_seeds
from hacrl.report.provenance import provenance_warning, render_provenance


def _f(v: float | None, fmt: str = ".3f") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float) and math.isinf(v):
        return "+inf" if v > 0 else "−inf"
    return format(v, fmt)


def _pm(mean: float | None, sd: float | None, fmt: str = ".3f") -> str:
    if mean is None:
        return "n/a"
    return f"{_f(mean, fmt)} ± {_f(sd, fmt)}" if sd is not None else _f(mean, fmt)


def _delta_cells(st: dict[str, Any] | None) -> tuple[str, str]:
    if st is None:
        return "—", "—"
    if st["mean"] is None:
        return "n/a", "n/a"
    if st["se"] is None:
        return f"{st['mean']:+.3f}", f"n/a ({st['n']} seed{'s' if st['n'] != 1 else ''})"
    p = "n/a (no scipy)" if st["p"] is None else f"{st['p']:.3g}"
    return f"{st['mean']:+.3f} ± {st['se']:.3f}", p


def _interval_cell(st: dict[str, Any] | None) -> str:
    """``[lo, hi]`` of a Δ's paired interval, with ≈ where it includes 0; "—" where there is none."""
    iv = (st or {}).get("interval")
    if not iv:
        return "—"
    return f"[{iv['lo']:+.3f}, {iv['hi']:+.3f}]" + (" ≈" if iv["includes_zero"] else "")


def _has_intervals(s: dict[str, Any]) -> bool:
    return any(row["lo"] is not None for row in s.get("answer", []))


MARKS = {"gain": "**gain**", "loss": "**loss**", "≈": "≈ interval includes 0", "no interval": "no interval"}


def _answer_section(s: dict[str, Any]) -> list[str]:
    """The answer first: one row per agent × algorithm × baseline (× measure), then how to read it and which
    test the intervals use."""
    rows = s.get("answer", [])
    if not rows:
        return []
    n = len(s["seeds"])
    lines = ["## Answer", "",
             (f"Final held-out accuracy at step {s['steps']}, each algorithm minus each baseline, paired by seed"
              f"{' and problem' if _has_intervals(s) else ''} over {n} seed{'s' if n != 1 else ''}:"), "",
             ("| agent | algorithm | vs | measure | Δ | 95% interval | reading | t-test p (seeds) "
              "| pairs (seeds × problems) |"),
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        interval = "—" if r["lo"] is None else f"[{r['lo']:+.3f}, {r['hi']:+.3f}]"
        pairs = "—" if r["pairs"] is None else f"{r['pairs']} ({r['seeds']} × {r['problems']})"
        p_t = "n/a" if r["p_t"] is None else f"{r['p_t']:.3g}"
        lines.append(f"| {r['agent']} | {r['algorithm']} | {r['baseline']} | {r['measure']} | {r['delta']:+.3f} "
                     f"| {interval} | {MARKS[r['mark']]} | {p_t} | {pairs} |")
    lines.append("")
    if not _has_intervals(s):
        return [*lines, ("No interval: these runs have no per-problem records (eval_problems.jsonl, written "
                         "by every evaluation since they were introduced), so Δ is the mean over seeds and only "
                         "the t-test over seeds below tests it."), ""]
    notes: dict[str, list[str]] = {}
    for r in rows:
        if r["note"]:
            notes.setdefault(r["note"], []).append(f"{r['algorithm']} vs {r['baseline']} ({r['agent']}, "
                                                   f"{r['measure']})")
    lines += [f"- {', '.join(which)}: {note}" for note, which in notes.items()] + ([""] if notes else [])
    m = s.get("interval_method", {})
    lines += [
        ("*Δ*: the mean over every paired (seed, problem) of this algorithm's reward minus the baseline's (for "
         "avg@k, each problem's mean over its k samples); where there is no interval, the mean over seeds of "
         "the final accuracies. *gain* / *loss*: the 95% interval excludes 0; *≈*: it includes 0, so the runs "
         "do not show a difference either way (which is not evidence of no difference). *pairs*: the (seed, "
         "problem) cells paired by problem id (a problem evaluated in only one of the two runs is left out)."),
        "",
        (f"*The interval*: a paired bootstrap over seeds and problems ({m.get('n_boot', 'n/a')} replicates, "
         f"RNG seed {m.get('rng_seed', 'n/a')}; every resample enumerated when there are fewer): each replicate "
         "draws the seeds with replacement and, once for all seeds, the held-out problems with replacement, and "
         "takes the mean paired difference; the interval is the 2.5th–97.5th percentile of the replicates. "
         "Why: a claim should hold on other held-out problems as well as under other seeds, so both are "
         "resampled; pairing each problem with itself (same seed, same id) removes the problems' own "
         "difficulty from the comparison, and no normal approximation is needed for 0/1 rewards. A t-test over "
         "3–5 seeds uses only the seeds' totals; it stays beside the interval in the tables below. With few "
         "seeds the seed level is resampled coarsely, so read a narrow interval with the number of seeds in "
         "mind. summary.json also carries the bootstrap p and an exact McNemar test on the pooled discordant "
         "pairs (which treats every (seed, problem) as independent)."),
        "",
    ]
    return lines


def _every(e: int) -> str:
    return "at the start" if not e else "every step" if e == 1 else f"every {e} steps"


def _sampled_table(per_algo: dict[str, Any], baselines: list[str], intervals: bool) -> list[str]:
    """The sampled evaluation of one agent (avg@k and pass@k, start and final), when the runs made one."""
    sampled = {algo: r["sampled"] for algo, r in per_algo.items() if r.get("sampled")}
    if not sampled:
        return []
    ks = {v["k"] for v in sampled.values()}
    k = str(ks.pop()) if len(ks) == 1 and None not in ks else "k"
    head = ["algorithm", f"start avg@{k}", f"final avg@{k} (mean ± sd)"]
    for b in baselines:
        head += [f"Δ avg@{k} vs {b} (± se)", f"p vs {b}"] + ([f"95% interval vs {b}"] if intervals else [])
    head += [f"start pass@{k}", f"final pass@{k} (mean ± sd)"]
    lines = [f"Sampled at the rollout temperature, {k} answers per held-out problem:", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for algo, v in sampled.items():
        row = [algo, _pm(*v["start_avg"]), _pm(*v["final_avg"]["mean_sd"])]
        for b in baselines:
            row += list(_delta_cells(v["vs"].get(b))) + ([_interval_cell(v["vs"].get(b))] if intervals else [])
        row += [_pm(*v["start_pass"]), _pm(*v["final_pass"]["mean_sd"])]
        lines.append("| " + " | ".join(row) + " |")
    return [*lines, ""]


def _budget(s: dict[str, Any]) -> str:
    budget = (s.get("answer_quality") or {}).get("budget")
    return f"; again with a {budget}-token answer budget before training and at the end" if budget else ""


def _config_section(s: dict[str, Any]) -> list[str]:
    sampled = f" and {s['eval_k']} sampled answers per problem" if s.get("eval_k") else ""
    src = f"preset `{s['preset']}`" if s["preset"] else f"config `{s['config_path']}`"
    walls = [r["wall_s"] for r in s["runs"] if r["wall_s"] is not None]
    statuses = {st: sum(r["status"] == st for r in s["runs"])
                for st in ("trained", "resumed", "restarted", "reused")}
    return [
        "## Command and configuration", "",
        "| setting | value |", "|---|---|",
        f"| source | {src} |",
        f"| overrides | {', '.join(f'`{o}`' for o in s['overrides']) or '(none)'} |",
        f"| task | `{s['task']}` |",
        f"| agents | {', '.join(f'`{a}` ({m})' for a, m in s['agents'].items())} |",
        f"| algorithms | {', '.join(s['algorithms'])} |",
        f"| seeds | {', '.join(map(str, s['seeds']))} (run.seed; same seed = same prompts and start) |",
        (f"| steps | {s['steps']} (batch {s['batch_size']} prompts × {s['rollouts_per_prompt']} answers "
        f"per agent) |"),
        (f"| evaluation | greedy{sampled}, {s['eval_size']} held-out problems, "
        f"{_every(s['eval_every'])} and at the end{_budget(s)} |"),
        f"| runs this time | {', '.join(f'{n} {st}' for st, n in statuses.items() if n)} |",
        f"| wall time | {s['wall_s']:.1f} s this invocation; {sum(walls):.1f} s measured over all runs |",
        f"| created | {s['created']} |",
        "",
    ]


def _accuracy_table(s: dict[str, Any], per_algo: dict[str, Any], intervals: bool) -> list[str]:
    head = ["algorithm", "start", "final (mean ± sd)"]
    for b in s["baselines"]:
        head += [f"Δ vs {b} (± se)", f"p vs {b}"] + ([f"95% interval vs {b}"] if intervals else [])
    head += ["rollouts / run", "optimizer updates / run", "wall s / run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for algo, r in per_algo.items():
        cost = s["cost"][algo]["wall_s"]
        row = [algo, _pm(r["start"], r["start_sd"] or None),
               _pm(r["final"]["mean"], r["final"]["sd"]) + _seeds_mark(r["final"]["by_seed"], len(s["seeds"]))]
        for b in s["baselines"]:
            row += list(_delta_cells(r["vs"].get(b))) + ([_interval_cell(r["vs"].get(b))] if intervals else [])
        row += [str(r["rollouts"]), _f(r["optimizer_updates"], ".0f"), _pm(cost[0], cost[1], ".1f")]
        lines.append("| " + " | ".join(row) + " |")
    return [*lines, ""]


def _seeds_mark(by_seed: dict[Any, float | None], n: int) -> str:
    """The mark " (k of n seeds)" when fewer of an algorithm's runs reached the final evaluation than the
    comparison has seeds (a --report-only report while some still train), else nothing.

    >>> _seeds_mark({"0": 0.5, "1": None}, 4), _seeds_mark({"0": 0.5, "1": 0.6}, 2)
    (' (1 of 4 seeds)', '')
    """
    k = finished_seeds(by_seed)
    return f" ({k} of {n} seed{'s' if n != 1 else ''})" if k < n else ""


def _accuracy_section(s: dict[str, Any]) -> list[str]:
    intervals = _has_intervals(s)
    plots = set(s.get("plots", []))
    n = len(s["seeds"])
    lines = ["## Held-out accuracy", ""]
    for agent, per_algo in s["results"].items():
        lines += [f"### {agent}", ""]
        if f"plots/curve-{agent}.png" in plots:
            lines += [f"![{agent} learning curves](plots/curve-{agent}.png)", "",
                      (f"Held-out greedy accuracy at every evaluation, mean over {n} seed{'s' if n != 1 else ''}"
                       f"{' (band: ± sd over seeds)' if n > 1 else ''}, against the training step (left) and "
                       f"against the answers {agent} generated in training (right: step × batch × G × the "
                       f"algorithm's rollout multiplier). Numbers: summary.json, "
                       f"`results.{agent}.<algo>.curve`."), ""]
        lines += _accuracy_table(s, per_algo, intervals)
        lines += _sampled_table(per_algo, s["baselines"], intervals)
    lines += [
        (f"*start*: accuracy before training (step 0). *final*: at step {s['steps']}, mean ± sd over {n} "
        f"seed{'s' if n != 1 else ''}. *Δ vs b*: mean over seeds of (final − final of b with the same seed) "
        "± its standard error; *p*: two-sided paired t-test over seeds (n/a with fewer than 2 seeds)"
        + ("; *95% interval*: the paired bootstrap over seeds and problems of the answer above, ≈ where it "
           "includes 0. " if intervals else ". ") +
        "*rollouts*: answers this agent generated in training (steps × batch × G × the algorithm's rollout "
        "multiplier). *optimizer updates*: this agent's optimizer steps. *wall*: the whole run (all agents), "
        "measured."),
        "",
    ]
    return lines


def _cost_section(s: dict[str, Any]) -> list[str]:
    lines = ["## Cost per run", "",
             "| algorithm | wall s | training phases s | rollout s | updates s | other s |",
             "|---|---|---|---|---|---|"]
    for algo, c in s["cost"].items():
        measured = c["wall_measured"] and c["wall_s"][0] is not None
        other = c["wall_s"][0] - c["phase_s"][0] if measured else None
        cells = [algo, _pm(*c["wall_s"], ".1f") + _wall_mark(c),
                 _pm(*c["phase_s"], ".1f"), _pm(*c["rollout_s"], ".1f"), _pm(*c["update_s"], ".1f"),
                 _f(other, ".1f")]
        if (s.get("pace") or {}).get(algo, {}).get("mode", "lockstep") != "lockstep":
            cells[2:] = ["— (async: see Pace)"] * 4  # the agents' phases overlap: no phase wall times
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, "", ("*training phases*: the sum of the trainer's `timing/*` over steps; *other*: wall − "
                         "phases (model loading, evaluation, checkpoints)."), ""]


def _wall_mark(c: dict[str, Any]) -> str:
    """Which runs' wall time is their phases' sum (no whole record of it): all, some, or none."""
    if c["wall_measured"]:
        return ""
    some = c.get("walls_measured", 0)  # summaries from before this count say only "not all"
    return " (phases only)" if not some else f" ({c['runs'] - some} of {c['runs']} runs: phases)"


def _diagnostics_section(s: dict[str, Any]) -> list[str]:
    lines = ["## Collaboration diagnostics", ""]
    if not s["diagnostics"]:
        return [*lines, ("No algorithm in this comparison shares the answer pool (hacpo, naive or a hacpo-* "
                         "ablation), so there is nothing to diagnose."), ""]
    others = {a: [o for o in s["agents"] if o != a] for a in s["agents"]}
    head = ["algorithm", "learner", "mean cross ratio", "inside window", "below", "above",
            "ω (mean, final)"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for algo, diag in s["diagnostics"].items():
        for agent, d in diag.items():
            om = "; ".join(f"→{o} {_f(d['omega'][o]['mean'], '.2f')}, {_f(d['omega'][o]['final'], '.2f')}"
                           for o in others[agent])
            pct = [("n/a" if v is None else f"{v:.0%}") for v in
                   (d["in_window_frac"], d["below_window_frac"], d["above_window_frac"])]
            ratio = "not logged" if d["cross_ratio_mean"] is None else _f(d["cross_ratio_mean"], ".3f")
            lines.append(f"| {algo} | {agent} | {ratio} | {pct[0]} | {pct[1]} | {pct[2]} | {om} |")
    lines += ["", ("*cross ratio*: the learner's sequence probability of another agent's answer over "
              "its author's at rollout time (exp of the difference of mean token log-probs); *inside "
              "window*: share of cross answers whose ratio lay in the stepwise clip window [ℓ_m, 1] and "
              "so gave gradient; *below* / *above*: clipped at the lower / upper bound. All are means "
              "over steps and seeds. *ω*, in learner k's row under →j: ω(k→j) = ω^(k,j) = P̂_k / P̂_j, "
              "the capability of the learner k over that of the source j (clamped to [0.1, 10]); k's "
              "baseline weighs j's rewards by it, k's update weighs j's answers by its inverse ω(j→k)."),
              ""]
    plots = set(s.get("plots", []))
    for name, title in (("omega.png", "ω over time"),
                        ("cross-window.png", "cross answers inside the window")):
        if f"plots/{name}" in plots:
            lines += [f"![{title}](plots/{name})", ""]
    return lines


def _runs_section(s: dict[str, Any]) -> list[str]:
    finals = " | ".join(f"final {a}" for a in s["agents"])
    lines = ["## Runs", "", f"| algorithm | seed | this time | {finals} | wall s | directory |",
             "|" + "---|" * (5 + len(s["agents"]))]
    for r in s["runs"]:
        lines.append(f"| {r['algorithm']} | {r['seed']} | {r['status']} | "
                     + " | ".join(_f(r["final"][a]) for a in s["agents"])
                     + f" | {_f(r['wall_s'], '.1f')}{' (part)' if r.get('wall_short') else ''} | `{r['dir']}` |")
    lines.append("")
    listed = {(r["algorithm"], r["seed"]) for r in s["runs"]}
    absent = {a: [seed for seed in s["seeds"] if (a, seed) not in listed] for a in s["algorithms"]}
    if any(absent.values()):
        lines += ["Not in this report (not finished when it was written; the same command without "
                  "`--report-only` trains them): "
                  + "; ".join(f"{a} seed{'s' if len(m) > 1 else ''} {', '.join(map(str, m))}"
                              for a, m in absent.items() if m) + ".", ""]
    if any(r.get("wall_short") for r in s["runs"]):
        lines += [("*(part)*: the recorded wall time is below the run's phase times, so its record misses an "
                   "invocation (one killed before compare.json was written after every step); the cost table "
                   "counts this run's phases instead."), ""]
    return lines


def render_report(summary: dict[str, Any]) -> str:
    """The comparison's report.md from its summary.json, section by section."""
    s = summary
    lines = ["# hacrl comparison", "", "```", s["command"], "```", ""]
    lines += provenance_warning(s.get("provenance"))
    lines += _answer_section(s)
    lines += _config_section(s)
    lines += _accuracy_section(s)
    lines += render_answer_quality(s.get("answer_quality"), s["baselines"])
    lines += _cost_section(s)
    lines += render_pace(s.get("pace"))
    lines += _diagnostics_section(s)
    lines += ["## Reading", ""]
    for p in s["reading"] or ["(nothing to say)"]:
        lines += [p, ""]
    lines += render_provenance(s.get("provenance"))
    lines += _runs_section(s)
    return "\n".join(lines)
