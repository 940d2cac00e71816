"""report.md of ``hacrl compare``: the summary (see :mod:`hacrl.report.summary`) as Markdown tables."""

from __future__ import annotations

import math
from typing import Any


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


def _every(e: int) -> str:
    return "at the start" if not e else "every step" if e == 1 else f"every {e} steps"


def _sampled_table(per_algo: dict[str, Any], baselines: list[str]) -> list[str]:
    """The sampled evaluation of one agent (avg@k and pass@k, start and final), when the runs made one."""
    sampled = {algo: r["sampled"] for algo, r in per_algo.items() if r.get("sampled")}
    if not sampled:
        return []
    ks = {v["k"] for v in sampled.values()}
    k = str(ks.pop()) if len(ks) == 1 and None not in ks else "k"
    head = ["algorithm", f"start avg@{k}", f"final avg@{k} (mean ± sd)"]
    for b in baselines:
        head += [f"Δ avg@{k} vs {b} (± se)", f"p vs {b}"]
    head += [f"start pass@{k}", f"final pass@{k} (mean ± sd)"]
    lines = [f"Sampled at the rollout temperature, {k} answers per held-out problem:", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for algo, v in sampled.items():
        row = [algo, _pm(*v["start_avg"]), _pm(*v["final_avg"]["mean_sd"])]
        for b in baselines:
            row += list(_delta_cells(v["vs"].get(b)))
        row += [_pm(*v["start_pass"]), _pm(*v["final_pass"]["mean_sd"])]
        lines.append("| " + " | ".join(row) + " |")
    return [*lines, ""]


def render_report(summary: dict[str, Any]) -> str:
    s = summary
    lines = ["# hacrl comparison", ""]
    sampled = f" and {s['eval_k']} sampled answers per problem" if s.get("eval_k") else ""
    lines += ["## Command and configuration", "", "```", s["command"], "```", ""]
    src = f"preset `{s['preset']}`" if s["preset"] else f"config `{s['config_path']}`"
    walls = [r["wall_s"] for r in s["runs"] if r["wall_s"] is not None]
    statuses = {st: sum(r["status"] == st for r in s["runs"])
                for st in ("trained", "resumed", "restarted", "reused")}
    lines += [
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
        f"{_every(s['eval_every'])} and at the end |"),
        f"| runs this time | {', '.join(f'{n} {st}' for st, n in statuses.items() if n)} |",
        f"| wall time | {s['wall_s']:.1f} s this invocation; {sum(walls):.1f} s measured over all runs |",
        f"| created | {s['created']} |",
        "",
    ]

    lines += ["## Held-out accuracy", ""]
    plots = set(s.get("plots", []))
    for agent, per_algo in s["results"].items():
        lines += [f"### {agent}", ""]
        if f"plots/accuracy-{agent}.png" in plots:
            lines += [f"![{agent} accuracy](plots/accuracy-{agent}.png)", ""]
        head = ["algorithm", "start", "final (mean ± sd)"]
        for b in s["baselines"]:
            head += [f"Δ vs {b} (± se)", f"p vs {b}"]
        head += ["rollouts / run", "optimizer updates / run", "wall s / run"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for algo, r in per_algo.items():
            cost = s["cost"][algo]["wall_s"]
            row = [algo, _pm(r["start"], r["start_sd"] or None),
                   _pm(r["final"]["mean"], r["final"]["sd"])]
            for b in s["baselines"]:
                row += list(_delta_cells(r["vs"].get(b)))
            row += [str(r["rollouts"]), _f(r["optimizer_updates"], ".0f"), _pm(cost[0], cost[1], ".1f")]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        lines += _sampled_table(per_algo, s["baselines"])
    n = len(s["seeds"])
    lines += [
        (f"*start*: accuracy before training (step 0). *final*: at step {s['steps']}, mean ± sd over {n} "
        f"seed{'s' if n != 1 else ''}. *Δ vs b*: mean over seeds of (final − final of b with the same seed) "
        "± its standard error; *p*: two-sided paired t-test over seeds (n/a with fewer than 2 seeds). "
        "*rollouts*: answers this agent generated in training (steps × batch × G × the algorithm's rollout "
        "multiplier). *optimizer updates*: this agent's optimizer steps. *wall*: the whole run (all agents), "
        "measured."),
        "",
    ]

    lines += ["## Cost per run", "",
              "| algorithm | wall s | training phases s | rollout s | updates s | other s |",
              "|---|---|---|---|---|---|"]
    for algo, c in s["cost"].items():
        measured = c["wall_measured"] and c["wall_s"][0] is not None
        other = c["wall_s"][0] - c["phase_s"][0] if measured else None
        cells = [algo, _pm(*c["wall_s"], ".1f") + ("" if c["wall_measured"] else " (phases only)"),
                 _pm(*c["phase_s"], ".1f"), _pm(*c["rollout_s"], ".1f"), _pm(*c["update_s"], ".1f"),
                 _f(other, ".1f")]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", ("*training phases*: the sum of the trainer's `timing/*` over steps; *other*: wall − "
                   "phases (model loading, evaluation, checkpoints)."), ""]

    lines += ["## Collaboration diagnostics", ""]
    if not s["diagnostics"]:
        lines += [("No algorithm in this comparison shares the answer pool (hacpo, naive or a hacpo-* "
                  "ablation), so there is nothing to diagnose."), ""]
    else:
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
                  "over steps and seeds. *ω(k→j)*: capability of the learner k over that of the source j "
                  "(clamped to [0.1, 10])."), ""]
        for name, title in (("omega.png", "ω over time"),
                            ("cross-window.png", "cross answers inside the window")):
            if f"plots/{name}" in plots:
                lines += [f"![{title}](plots/{name})", ""]
    lines += ["## Reading", ""]
    for p in s["reading"] or ["(nothing to say)"]:
        lines += [p, ""]

    finals = " | ".join(f"final {a}" for a in s["agents"])
    lines += ["## Runs", "", f"| algorithm | seed | this time | {finals} | wall s | directory |",
              "|" + "---|" * (5 + len(s["agents"]))]
    for r in s["runs"]:
        lines.append(f"| {r['algorithm']} | {r['seed']} | {r['status']} | "
                     + " | ".join(_f(r["final"][a]) for a in s["agents"])
                     + f" | {_f(r['wall_s'], '.1f')} | `{r['dir']}` |")
    lines.append("")
    return "\n".join(lines)
