"""report.md of ``hacrl compare``: the summary (see :mod:`hacrl.report.summary`) as Markdown tables.

The report reads top-down: the answer (every algorithm against every baseline: Δ, its two 95% paired intervals
and what they support), the plots and the reading, then the details (configuration, accuracy tables, cost,
pace and diagnostics where they have something to show, provenance, runs). What the columns mean and how the
intervals are computed is in docs/compare.md, not repeated in every report."""

from __future__ import annotations

import math
from typing import Any

from hacrl.report.answers import render_answer_quality
from hacrl.report.pace import render_pace
from hacrl.report.plots import finished_seeds
from hacrl.report.provenance import provenance_warning, render_provenance
from hacrl.report.reading import MIN_SEEDS, held_out_measure, missing_baselines

METHOD_DOC = "docs/compare.md in the hacrl repository (“What it writes”)"  # where the method text lives


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


def _seed_cell(st: dict[str, Any] | None) -> str:
    """``[lo, hi]`` of a Δ's seed-level t-interval, with ≈ where it includes 0; "—" where there is none."""
    si = (st or {}).get("seed_interval")
    if not si:
        return "—"
    return f"[{si['lo']:+.3f}, {si['hi']:+.3f}]" + (" ≈" if si["includes_zero"] else "")


def _has_intervals(s: dict[str, Any]) -> bool:
    return any(row["lo"] is not None for row in s.get("answer", []))


CLAIMS = {"gain": "gain", "loss": "loss", "≈": "≈ both intervals include 0",
          "problems only": "not claimed: only the bootstrap excludes 0",
          "seeds only": "not claimed: only the t-interval excludes 0", "no interval": "no interval"}


def _claim_cell(r: dict[str, Any]) -> str:
    """The answer row's reading: **gain** / **loss** in bold only where both intervals exclude 0 over 3 or
    more seeds; with fewer seeds every reading is marked indicative only (and nothing is bold)."""
    key = r.get("claim", r["mark"])
    word = CLAIMS[key]
    if r.get("indicative"):
        return f"{word}, indicative only ({r['seeds']} seed{'s' if r['seeds'] != 1 else ''})"
    return f"**{word}**" if key in ("gain", "loss") else word


def answer_table(s: dict[str, Any]) -> list[str]:
    """The Answer table (its lead sentence, then one row per agent × algorithm × baseline × measure): the
    opening of report.md, and what ``hacrl compare`` prints when it ends. Empty without paired differences."""
    rows = s.get("answer", [])
    if not rows:
        return []
    n = len(s["seeds"])
    lines = [(f"Final held-out {held_out_measure(s)} at step {s['steps']}, each algorithm minus each baseline, "
              f"paired by seed"
              f"{' and problem' if _has_intervals(s) else ''} over {n} seed{'s' if n != 1 else ''}:"), "",
             ("| agent | algorithm | vs | measure | Δ | 95% interval (seeds × problems) | 95% t-interval (seeds) "
              "| reading | t-test p (seeds) | pairs (seeds × problems) |"),
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        interval = "—" if r["lo"] is None else f"[{r['lo']:+.3f}, {r['hi']:+.3f}]"
        seed_iv = "—" if r.get("seed_lo") is None else f"[{r['seed_lo']:+.3f}, {r['seed_hi']:+.3f}]"
        pairs = "—" if r["pairs"] is None else f"{r['pairs']} ({r['seeds']} × {r['problems']})"
        p_t = "n/a" if r["p_t"] is None else f"{r['p_t']:.3g}"
        lines.append(f"| {r['agent']} | {r['algorithm']} | {r['baseline']} | {r['measure']} | {r['delta']:+.3f} "
                     f"| {interval} | {seed_iv} | {_claim_cell(r)} | {p_t} | {pairs} |")
    return lines


def _answer_section(s: dict[str, Any]) -> list[str]:
    """The answer first: one row per agent × algorithm × baseline (× measure), then how to read it and which
    test the intervals use."""
    rows = s.get("answer", [])
    if not rows:
        return []
    lines = ["## Answer", "", *answer_table(s), ""]
    if not _has_intervals(s):
        lines += [("No interval over seeds × problems: these runs have no per-problem records "
                   "(eval_problems.jsonl), so Δ is the mean over seeds, with the t-interval and t-test over seeds "
                   "only."), ""]
    notes: dict[str, list[str]] = {}
    for r in rows:
        if r["note"] and _has_intervals(s):
            notes.setdefault(r["note"], []).append(f"{r['algorithm']} vs {r['baseline']} ({r['agent']}, "
                                                   f"{r['measure']})")
    lines += [f"- {', '.join(which)}: {note}" for note, which in notes.items()]
    lines += [f"- Missing baseline: {m}." for m in missing_baselines(s)]
    lines += [""] if lines[-1] else []
    lines += [("**gain** / **loss**: both 95% intervals exclude 0 (the paired bootstrap over seeds × problems "
               f"and the paired t-interval over seeds), over {MIN_SEEDS} or more seeds; with fewer seeds every "
               "reading is indicative only. What Δ, the intervals and every column are, and why: "
               f"{METHOD_DOC}."), ""]
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
        head += [f"Δ avg@{k} vs {b} (± se)", f"p vs {b}", f"t-interval vs {b}"] + (
            [f"95% interval vs {b}"] if intervals else [])
    head += [f"start pass@{k}", f"final pass@{k} (mean ± sd)"]
    lines = [f"Sampled at the rollout temperature, {k} answers per held-out problem:", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for algo, v in sampled.items():
        row = [algo, _pm(*v["start_avg"]), _pm(*v["final_avg"]["mean_sd"])]
        for b in baselines:
            row += [*_delta_cells(v["vs"].get(b)), _seed_cell(v["vs"].get(b))] + (
                [_interval_cell(v["vs"].get(b))] if intervals else [])
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
        head += [f"Δ vs {b} (± se)", f"p vs {b}", f"t-interval vs {b}"] + (
            [f"95% interval vs {b}"] if intervals else [])
    head += ["rollouts / run", "optimizer updates / run", "wall s / run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for algo, r in per_algo.items():
        cost = s["cost"][algo]["wall_s"]
        row = [algo, _pm(r["start"], r["start_sd"] or None),
               _pm(r["final"]["mean"], r["final"]["sd"]) + _seeds_mark(r["final"]["by_seed"], len(s["seeds"]))]
        for b in s["baselines"]:
            row += [*_delta_cells(r["vs"].get(b)), _seed_cell(r["vs"].get(b))] + (
                [_interval_cell(r["vs"].get(b))] if intervals else [])
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


def _plots_section(s: dict[str, Any]) -> list[str]:
    """The plots, right after the answer: each agent's learning curves, then ω and the cross window."""
    plots = set(s.get("plots", []))
    n = len(s["seeds"])
    lines = []
    for agent in s["results"]:
        if f"plots/curve-{agent}.png" in plots:
            lines += [f"![{agent} learning curves](plots/curve-{agent}.png)", "",
                      (f"{agent}: held-out {held_out_measure(s, 'greedy accuracy')}, mean over {n} "
                       f"seed{'s' if n != 1 else ''}"
                       f"{' (band: ± sd)' if n > 1 else ''}, against the training step (left) and against the "
                       f"answers {agent} generated in training (right)."), ""]
    for name, title in (("omega.png", "ω over time"),
                        ("cross-window.png", "cross answers inside the window")):
        if f"plots/{name}" in plots:
            lines += [f"![{title}](plots/{name})", ""]
    return ["## Plots", "", *lines] if lines else []


def _accuracy_section(s: dict[str, Any]) -> list[str]:
    intervals = _has_intervals(s)
    lines = [f"## Held-out {held_out_measure(s)}", ""]
    for agent, per_algo in s["results"].items():
        lines += [f"### {agent}", ""]
        lines += _accuracy_table(s, per_algo, intervals)
        lines += _sampled_table(per_algo, s["baselines"], intervals)
    lines += [(f"*start* / *final*: step 0 / step {s['steps']}, mean ± sd over seeds; *Δ* ± se and *p*: the paired "
               "t-test over seeds; *t-interval*: its 95% interval"
               + ("; *95% interval*: the paired bootstrap over seeds × problems" if intervals else "")
               + f". Every column: {METHOD_DOC}."), ""]
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
    if not s["diagnostics"]:  # no algorithm shares the answer pool: nothing to diagnose
        return []
    lines = ["## Collaboration diagnostics", ""]
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
    lines += ["", (f"Means over steps and seeds; ω(k→j) = P̂_k / P̂_j in learner k's row under →j. The columns: "
                   f"{METHOD_DOC}."), ""]
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
    lines += _plots_section(s)
    lines += ["## Reading", ""]
    for p in s["reading"] or ["(nothing to say)"]:
        lines += [p, ""]
    if s.get("advice"):
        lines += [f"## Which to train with (within {s['choice']['margin']:g} of the best arm)", ""]
        for p in s["advice"]:
            lines += [p, ""]
    lines += _config_section(s)
    lines += _accuracy_section(s)
    lines += render_answer_quality(s.get("answer_quality"), s["baselines"])
    lines += _cost_section(s)
    pace = s.get("pace") or {}
    if any(p.get("mode", "lockstep") != "lockstep" for p in pace.values()):  # lock-step runs: nothing to add
        lines += render_pace(pace)
    lines += _diagnostics_section(s)
    lines += render_provenance(s.get("provenance"))
    lines += _runs_section(s)
    return "\n".join(lines)
