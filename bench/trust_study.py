"""The ``trust`` study's analysis (docs/results-trust.md, issue #56): each cell's ``hacrl compare`` directory read back
(no training), ``trust`` held against the best fixed method of each agent and against GSPO×2 by the page's
pre-registered rules, with what trust decided and what it cost.

Per cell and agent:

- ``best``: of the fixed arms (``FIXED``: hacpo, naive, imitation, gspo2x) the one with the highest mean final
  held-out accuracy, and that mean;
- ``trust``: trust's mean final accuracy;
- ``trust − best`` and ``trust − gspo2x``: the paired difference with the report's bootstrap interval (seeds ×
  problems) and the seed-level t-interval, and the rule's reading: ``within`` (both lower ends ≥ −0.01),
  ``regret`` (both upper ends < −0.01) or ``undecided``;
- ``harm checks``: mean number per run of the checks that cut this learner's trust (``val/harm``), and ``τ < 1``:
  the mean share of its updates at less than full trust;
- ``answers/step``: the answers a step generates for this agent's learning, both agents' sampled training
  answers plus trust's greedy validation answers (averaged over the steps), against the pooled methods';
  ``wall``: mean seconds per run of trust against naive, as each run's record measured it.

    python bench/trust_study.py results/trust/*/ [--plot docs/img/trust/regret.png] [--json FILE]

Stage 2 (the page's second section) reads another arm in trust's place and its paired difference to a named arm:
``--method 'trust@trust_budget=true' --vs trust --threshold -0.01`` adds, per cell and agent, method − trust with
both intervals and the reading against the threshold: ``at or above`` (both lower ends ≥ it), ``below`` (both
upper ends under it) or ``undecided``. With a budget the table also gives each agent's mean answers per prompt.

Stage 6's exploratory signal (``--signals``): per cell and agent, how foreign the partner's answers look to the
learner early in its trust runs, r̄ (the mean of ``agent/<a>/cross/ratio_mean``, the partner answers' ratio s to
their author, over each run's first ``SIGNAL_STEPS`` steps, then over the runs), beside the share the ratio floor
kept and the gap GSPO×2 − the best sharing arm (of hacpo, naive, imitation; point estimates). The page's
prediction: r̄ < ``FOREIGN`` foretells that 2G alone is not beaten by sharing (gap ≥ −0.01), r̄ ≥ it that
sharing beats 2G alone by more than 0.01.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import yaml

from hacrl.report.reading import within_margin
from hacrl.run.records import run_text
from hacrl.run.sinks import read_jsonl

FIXED = ("hacpo", "naive", "imitation", "gspo2x")
METHOD = "trust"
MARGIN = 0.01  # the rules' margin: within 0.01 of the best fixed method
SHARING = ("hacpo", "naive", "imitation")  # the fixed arms that learn from the partner
SIGNAL_STEPS = 10  # stage 6: the early steps the foreignness r̄ is read over
FOREIGN = 0.5  # stage 6: r̄ below this predicts that sharing does not beat 2G alone


def read_summary(cell: Path) -> dict[str, Any]:
    path = cell / "summary.json"
    if not path.is_file():
        raise SystemExit(f"{cell}: no summary.json (its comparison has not finished)")
    return json.loads(path.read_text())


def verdict(vs: dict[str, Any] | None, margin: float = MARGIN) -> str:
    """The page's rule on one paired difference (``summary.json``'s ``vs`` entry): ``within`` when the lower end of
    both intervals is ≥ −margin, ``regret`` when both upper ends are below −margin, else ``undecided``.

    >>> verdict({"interval": {"lo": -0.008, "hi": 0.01}, "seed_interval": {"lo": -0.009, "hi": 0.012}})
    'within'
    >>> verdict({"interval": {"lo": -0.05, "hi": -0.02}, "seed_interval": {"lo": -0.06, "hi": -0.015}})
    'regret'
    >>> verdict({"interval": {"lo": -0.02, "hi": 0.01}, "seed_interval": {"lo": -0.009, "hi": 0.012}})
    'undecided'
    """
    reading = within_margin(vs, margin)  # the rule compare's "Which to train with" reads too
    return "regret" if reading == "behind" else reading


def side(vs: dict[str, Any] | None, threshold: float) -> str:
    """Where a paired difference lies against ``threshold``: ``at or above`` (both lower ends ≥ it), ``below`` (both
    upper ends < it), else ``undecided``.

    >>> side({"interval": {"lo": 0.01, "hi": 0.05}, "seed_interval": {"lo": 0.002, "hi": 0.06}}, 0.0)
    'at or above'
    >>> side({"interval": {"lo": -0.03, "hi": -0.02}, "seed_interval": {"lo": -0.04, "hi": -0.011}}, -0.01)
    'below'
    """
    if not vs or not vs.get("interval") or not vs.get("seed_interval"):
        return "undecided"
    boot, seed = vs["interval"], vs["seed_interval"]
    if boot["lo"] >= threshold and seed["lo"] >= threshold:
        return "at or above"
    if boot["hi"] < threshold and seed["hi"] < threshold:
        return "below"
    return "undecided"


def _run_dirs(cell: Path, summary: dict[str, Any], algorithm: str) -> list[Path]:
    """The run directories of ``algorithm`` in ``cell``, wherever the comparison was written from (its summary
    names them from the invocation's working directory: the last three parts, runs/<algorithm>/seed-<s>)."""
    return [cell.joinpath(*Path(r["dir"]).parts[-3:]) for r in summary["runs"] if r["algorithm"] == algorithm]


def decisions(run_dir: Path, agent: str, partner: str) -> tuple[float, float, float | None]:
    """(harm checks, share of updates at τ < 1, mean answers per prompt it wrote or None without a budget) of
    ``agent`` in one trust run. An update after a switch (``algorithm.trust_cut_to``: it logs
    ``trust_switch/<partner>`` 1 and no τ) counts at τ 0, the cut partner's τ."""
    lines = read_jsonl(run_dir / "metrics.jsonl")
    harm = sum(line.get(f"agent/{agent}/val/harm", 0.0) for line in lines)
    tau_key, switch_key = f"agent/{agent}/trust/{partner}", f"agent/{agent}/trust_switch/{partner}"
    taus = [line[tau_key] if tau_key in line else 0.0 for line in lines
            if tau_key in line or line.get(switch_key) == 1.0]
    split = [line[f"agent/{agent}/rollouts"] for line in lines if f"agent/{agent}/rollouts" in line]
    return (float(harm), (sum(t < 1.0 for t in taus) / len(taus) if taus else 0.0),
            statistics.fmean(split) if split else None)


def answers_per_step(run_dir: Path, agents: int) -> tuple[float, float]:
    """(pooled answers per step, trust's validation answers per step) of a trust run, from its config.yaml."""
    cfg = yaml.safe_load(run_text(run_dir / "config.yaml") or "")
    pooled = agents * cfg["trainer"]["batch_size"] * cfg["rollout"]["rollouts_per_prompt"]
    a, steps = cfg["algorithm"], cfg["trainer"]["steps"]
    checks = len(range(0, steps, a["trust_every"]))
    return float(pooled), agents * a["trust_val_size"] * checks / steps


def cell_rows(cell: Path, method: str = METHOD, vs_arm: str | None = None, threshold: float = -MARGIN
              ) -> list[dict[str, Any]]:
    summary = read_summary(cell)
    agents = list(summary["agents"])
    trust_dirs = _run_dirs(cell, summary, method)
    if not trust_dirs:
        raise SystemExit(f"{cell}: no run of {method!r}")
    rows = []
    for agent in agents:
        partner = next(a for a in agents if a != agent)
        res = summary["results"][agent]
        finals = {a: res[a]["final"]["mean"] for a in FIXED if a in res and res[a].get("final")}
        best = max(finals, key=lambda a: finals[a])
        vs = res[method]["vs"]
        per_run = [decisions(d, agent, partner) for d in trust_dirs]
        splits = [s for _, _, s in per_run if s is not None]
        pooled, validation = answers_per_step(trust_dirs[0], len(agents))
        cost = summary.get("cost", {})
        rows.append({
            "cell": cell.name, "agent": agent, "best": best, "best_acc": finals[best],
            "method": method, "trust_acc": res[method]["final"]["mean"],
            "seeds": len(res[method]["final"]["by_seed"]),
            "finals": finals,
            "vs_best": _diff(vs.get(best)), "rule1": verdict(vs.get(best)),
            "vs_gspo2x": _diff(vs.get("gspo2x")), "rule2": verdict(vs.get("gspo2x")),
            "harm_checks": statistics.fmean(h for h, _, _ in per_run),
            "distrust_share": statistics.fmean(s for _, s, _ in per_run),
            "rollouts": statistics.fmean(splits) if splits else None,
            "vs_arm": vs_arm, "vs_other": _diff(vs.get(vs_arm)) if vs_arm else None,
            "side": side(vs.get(vs_arm), threshold) if vs_arm else None, "threshold": threshold,
            "answers_pooled": pooled, "answers_validation": validation,
            "wall_trust": cost.get(method, {}).get("wall_s", [None])[0],
            "wall_naive": cost.get("naive", {}).get("wall_s", [None])[0],
        })
    return rows


def _diff(vs: dict[str, Any] | None) -> dict[str, float] | None:
    if not vs or not vs.get("interval"):
        return None
    return {"mean": vs["mean"], "lo": vs["interval"]["lo"], "hi": vs["interval"]["hi"],
            "seed_lo": vs["seed_interval"]["lo"], "seed_hi": vs["seed_interval"]["hi"]}


def _fmt(d: dict[str, float] | None) -> str:
    if d is None:
        return "—"
    return f"{d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] (seeds [{d['seed_lo']:+.3f}, {d['seed_hi']:+.3f}])"


def table(rows: list[dict[str, Any]]) -> str:
    name = _short(rows[0]["method"]) if rows else "trust"
    split = any(r["rollouts"] is not None for r in rows)
    other = rows[0]["vs_arm"] if rows else None
    head = (f"| cell | agent | best fixed (acc) | {name} (acc) | {name} − best [boot] (seeds) | rule 1 | "
            f"{name} − gspo2x [boot] (seeds) | rule 2 | "
            + (f"{name} − {other} [boot] (seeds) | against {rows[0]['threshold']:+.2f} | " if other else "")
            + "harm checks / run | updates at τ < 1 | " + ("answers / prompt written | " if split else "")
            + f"answers / step (+ checks) | wall s, {name} / naive |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        wall = (f"{r['wall_trust']:.0f} / {r['wall_naive']:.0f}" if r["wall_trust"] and r["wall_naive"] else "—")
        out.append(
            f"| {r['cell']} | {r['agent']} | {r['best']} ({r['best_acc']:.3f}) | {r['trust_acc']:.3f} | "
            f"{_fmt(r['vs_best'])} | {r['rule1']} | {_fmt(r['vs_gspo2x'])} | {r['rule2']} | "
            + (f"{_fmt(r['vs_other'])} | {r['side']} | " if other else "")
            + f"{r['harm_checks']:.2f} | {r['distrust_share']:.0%} | "
            + ((f"{r['rollouts']:.1f} | " if r["rollouts"] is not None else "— | ") if split else "")
            + f"{r['answers_pooled']:.0f} (+{r['answers_validation']:.0f}) | {wall} |")
    return "\n".join(out)


def _short(method: str) -> str:
    """A table's name for an arm: ``trust@trust_budget=true`` → ``trust+budget_true``-like labels stay readable.

    >>> _short("trust"), _short("trust@trust_budget=true"), _short("trust@trust_floor=1e-9")
    ('trust', 'trust@budget=true', 'trust@floor=1e-9')
    """
    return method.replace("@trust_", "@")


def overall(rows: list[dict[str, Any]]) -> str:
    """Rule 3: no regret only if rules 1 and 2 hold everywhere; else the worst cell and agent."""
    if rows and all(r["rule1"] == "within" and r["rule2"] == "within" for r in rows):
        return f"no regret: within {MARGIN} of the best fixed method and of GSPO×2 in all {len(rows)} cells and agents"
    worst = min(rows, key=lambda r: r["vs_best"]["mean"] if r["vs_best"] else 0.0)
    failing = sum(not (r["rule1"] == "within" and r["rule2"] == "within") for r in rows)
    return (f"not shown: {failing} of {len(rows)} cells and agents miss rule 1 or 2; the worst is {worst['cell']} "
            f"{worst['agent']}: {_short(worst['method'])} − {worst['best']} {_fmt(worst['vs_best'])}")


def arm_regrets(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per arm (trust and each fixed one), its shortfall against the best fixed arm of each cell and agent (point
    estimates of the final means): the worst, the mean, and in how many cells and agents it exceeds ``MARGIN``.

    >>> rows = [{"finals": {"naive": 0.6, "gspo2x": 0.5}, "trust_acc": 0.598},
    ...         {"finals": {"naive": 0.1, "gspo2x": 0.7}, "trust_acc": 0.65}]
    >>> {k: {m: round(x, 3) for m, x in v.items()} for k, v in arm_regrets(rows).items()}["trust"]
    {'worst': 0.05, 'mean': 0.026, 'above_margin': 1.0}
    """
    out = {}
    method = rows[0].get("method", METHOD) if rows else METHOD
    for arm in (method, *FIXED):
        shortfalls = []
        for r in rows:
            finals = {**r["finals"], method: r["trust_acc"]}
            if arm in finals:
                shortfalls.append(max(v for k, v in r["finals"].items()) - finals[arm])
        if shortfalls:
            out[arm] = {"worst": max(shortfalls), "mean": statistics.fmean(shortfalls),
                        "above_margin": float(sum(x > MARGIN for x in shortfalls))}
    return out


def foreignness(run_dirs: list[Path], agent: str, steps: int = SIGNAL_STEPS) -> tuple[float, float]:
    """(r̄, kept): the mean of ``agent``'s ``cross/ratio_mean`` and of its ``cross/kept_frac`` over each run's first
    ``steps`` steps that log them, averaged over the runs."""
    ratios, kept = [], []
    for run_dir in run_dirs:
        lines = [x for x in read_jsonl(run_dir / "metrics.jsonl") if f"agent/{agent}/cross/ratio_mean" in x][:steps]
        if not lines:
            raise SystemExit(f"{run_dir}: no agent/{agent}/cross/ratio_mean in its metrics")
        ratios.append(statistics.fmean(x[f"agent/{agent}/cross/ratio_mean"] for x in lines))
        kept.append(statistics.fmean(x.get(f"agent/{agent}/cross/kept_frac", 1.0) for x in lines))
    return statistics.fmean(ratios), statistics.fmean(kept)


def cut_share(run_dirs: list[Path], agent: str) -> float | None:
    """The share of runs in which ``agent`` cut a partner for good (``algorithm.trust_cut``: its last metrics line
    logs ``trust_cut/<partner>`` 1); None where the runs log no cut (the cut was off)."""
    shares = []
    for run_dir in run_dirs:
        lines = read_jsonl(run_dir / "metrics.jsonl")
        cuts = [v for k, v in (lines[-1] if lines else {}).items() if k.startswith(f"agent/{agent}/trust_cut/")]
        if cuts:
            shares.append(float(max(cuts) >= 1.0))
    return statistics.fmean(shares) if shares else None


def predicts(foreign: float, gap: float, cut: float = FOREIGN, margin: float = MARGIN) -> tuple[str, str, bool]:
    """Stage 6's prediction from r̄ and what the arms' finals show: (predicted, observed, hit), each side named
    ``2G not beaten`` (GSPO×2 − best sharing ≥ −margin) or ``sharing wins`` (below it).

    >>> predicts(0.03, 0.050)
    ('2G not beaten', '2G not beaten', True)
    >>> predicts(0.66, -0.006)
    ('sharing wins', '2G not beaten', False)
    >>> predicts(0.80, -0.056)[2], predicts(0.36, -0.011)[1]
    (True, 'sharing wins')
    """
    predicted = "2G not beaten" if foreign < cut else "sharing wins"
    observed = "2G not beaten" if gap >= -margin else "sharing wins"
    return predicted, observed, predicted == observed


def signal_rows(cell: Path, method: str = METHOD) -> list[dict[str, Any]]:
    """Stage 6's exploratory signal of each agent of ``cell``, read from its ``method`` runs."""
    summary = read_summary(cell)
    dirs = _run_dirs(cell, summary, method)
    if not dirs:
        raise SystemExit(f"{cell}: no run of {method!r}")
    rows = []
    for agent in summary["agents"]:
        res = summary["results"][agent]
        missing = [a for a in (*SHARING, "gspo2x") if not res.get(a, {}).get("final")]
        if missing:
            raise SystemExit(f"{cell}: no finished {', '.join(missing)} for {agent}")
        share = max(SHARING, key=lambda a: res[a]["final"]["mean"])
        gap = res["gspo2x"]["final"]["mean"] - res[share]["final"]["mean"]
        foreign, kept = foreignness(dirs, agent)
        predicted, observed, hit = predicts(foreign, gap)
        rows.append({"cell": cell.name, "agent": agent, "foreign": foreign, "kept": kept, "best_sharing": share,
                     "gap": gap, "predicted": predicted, "observed": observed, "hit": hit,
                     "cut": cut_share(dirs, agent)})
    return rows


def signal_table(rows: list[dict[str, Any]]) -> str:
    """The signal's table; with a column for the share of runs that cut their partner where the runs log a cut."""
    cuts = any(r.get("cut") is not None for r in rows)
    head = (f"| cell | agent | r̄ (first {SIGNAL_STEPS} steps) | kept by the floor | best sharing arm | "
            f"GSPO×2 − it | predicted | observed | hit |{' runs that cut |' if cuts else ''}")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    out += [f"| {r['cell']} | {r['agent']} | {r['foreign']:.2f} | {r['kept']:.2f} | {r['best_sharing']} | "
            f"{r['gap']:+.3f} | {r['predicted']} | {r['observed']} | {'yes' if r['hit'] else 'no'} |"
            + (f" {'–' if r.get('cut') is None else format(r['cut'], '.0%')} |" if cuts else "") for r in rows]
    hits = sum(r["hit"] for r in rows)
    return "\n".join(out) + f"\n\n{hits} of {len(rows)} agents as predicted (r̄ < {FOREIGN}: 2G not beaten)"


def same_start(cell: Path, method: str, other: str, steps: int = SIGNAL_STEPS) -> tuple[int, int, list[str]]:
    """Stage 9's pairing check: of the seeds both ``method`` and ``other`` ran in ``cell``, how many logged the same
    rewards for every agent over their first ``steps`` steps (an arm that departs from ``other`` only later, on
    the same agents, must); returns (same, seeds compared, the runs that differ)."""
    summary = read_summary(cell)
    agents = list(summary["agents"])

    def rewards(run_dir: Path) -> list[list[Any]]:
        lines = [x for x in read_jsonl(run_dir / "metrics.jsonl") if 1 <= int(x["step"]) <= steps]
        return [[x.get(f"agent/{a}/reward") for a in agents] for x in lines]

    mine = {d.name: d for d in _run_dirs(cell, summary, method)}
    theirs = {d.name: d for d in _run_dirs(cell, summary, other)}
    seeds = sorted(set(mine) & set(theirs))
    differ = [f"{cell.name}/{seed}" for seed in seeds
              if (r := rewards(mine[seed])) != rewards(theirs[seed]) or len(r) != steps]
    return len(seeds) - len(differ), len(seeds), differ


def plot(rows: list[dict[str, Any]], out: Path) -> None:
    """Regret (best fixed − trust) per cell and agent, with the bootstrap interval; the ±0.01 band shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hacrl.report.plots import write_png

    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(rows)), 3.6))
    xs = list(range(len(rows)))
    means = [-r["vs_best"]["mean"] for r in rows]
    err = [[r["vs_best"]["mean"] - r["vs_best"]["lo"] for r in rows],
           [r["vs_best"]["hi"] - r["vs_best"]["mean"] for r in rows]]
    ax.axhspan(-MARGIN, MARGIN, color="0.9", zorder=0, label=f"±{MARGIN}")
    ax.axhline(0, color="0.5", lw=0.8)
    ax.errorbar(xs, means, yerr=[err[1], err[0]], fmt="o", color="tab:blue", capsize=3,
                label=f"best fixed − {_short(rows[0]['method'])}, 95% paired bootstrap")
    ax.set_xticks(xs, [f"{r['cell']}\n{r['agent']}\n(best: {r['best']})" for r in rows], fontsize=7)
    ax.set_ylabel("regret (held-out accuracy)")
    ax.set_title(f"{_short(rows[0]['method'])} against the best fixed way of sharing, per cell and agent")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    write_png(fig, out, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cells", nargs="+", type=Path, help="comparison directories (results/trust/<cell>)")
    parser.add_argument("--plot", type=Path, help="write the regret picture here (PNG)")
    parser.add_argument("--json", type=Path, help="write the rows as JSON here")
    parser.add_argument("--method", default=METHOD, help="the arm read in trust's place (default: trust)")
    parser.add_argument("--vs", help="also read method − this arm (it must be a baseline of the comparison)")
    parser.add_argument("--threshold", type=float, default=-MARGIN, help="--vs's reading against this (default "
                        f"{-MARGIN})")
    parser.add_argument("--signals", action="store_true", help="stage 6: the foreignness r̄ of the partner's answers "
                        "early in each agent's runs of --method, and the prediction it makes, instead of the rules")
    parser.add_argument("--same-start", metavar="ARM", help="stage 9's pairing check instead of the rules: whether "
                        f"each run of --method logged the same rewards as ARM's run of its seed over the first "
                        f"{SIGNAL_STEPS} steps")
    args = parser.parse_args(argv)
    if args.same_start:
        for cell in args.cells:
            same, n, differ = same_start(cell, args.method, args.same_start)
            print(f"{cell.name}: {same} of {n} seeds of {args.method} start as {args.same_start}'s (first "
                  f"{SIGNAL_STEPS} steps' rewards){'; differ: ' + ', '.join(differ) if differ else ''}")
        return
    if args.signals:
        print(signal_table([row for cell in args.cells for row in signal_rows(cell, args.method)]))
        return
    rows = [row for cell in args.cells for row in cell_rows(cell, args.method, args.vs, args.threshold)]
    print(table(rows))
    print()
    print(overall(rows))
    print()
    for arm, r in arm_regrets(rows).items():
        print(f"{arm}: shortfall to the best fixed arm, worst {r['worst']:.3f}, mean {r['mean']:.3f}, above {MARGIN} "
              f"in {r['above_margin']:.0f} of {len(rows)}")
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
