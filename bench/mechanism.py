"""The mechanism study's analysis (issue #45, the project's shared notes, ``mechanism-study.md`` §5-§6): what the report does not
measure, read back from finished ``hacrl compare`` directories (no training).

Per cell (a comparison directory), agent and arm, means over seeds at the last evaluation:

- ``acc``: held-out greedy accuracy (eval_problems.jsonl; the report's number);
- ``acc +`` / ``acc -``: the same per operator on ``mixed``, the operator read from the problem id
  (``mixed/85-07``: "-"), and each arm's per-operator Δ against gspo2x (paired by seed);
- ``consistent``: on ``add2-trace``, the share of the kept greedy texts (``trainer.eval_texts``; the first N
  held-out problems) whose trace is arithmetically right throughout (:func:`hacrl.data.tasks.trace_consistent`:
  operands are the prompt's digits, each column sum and carry right, the number after ">" the trace's result),
  and ``right, inconsistent``: the share whose final answer is right but whose trace is not; on reasoning-gym
  ``basic_arithmetic`` (E4's SmolLM2 runs) the same two shares for the answer's first equation
  (:func:`equation_measures`);
- ``rescue@1``: the agent's rescue share before training, ``agent/<a>/rescue/<b>`` at step 1 in metrics.jsonl
  (the share of step 1's prompts where it wrote no correct answer and its partner wrote one), mean over the arm's
  runs; ``pair rescue``: its mean over the arms that share answers (at step 1 they hold the same models), the x of
  the rescue picture;
- ``in window``: the mean over steps of ``agent/<a>/cross/in_window_frac`` (its cross answers inside the window);
- ``cross ratio``: the mean over steps of ``agent/<a>/cross/ratio_mean``, the cross ratio s of HACPO's partner
  answers (how likely the learner finds them against their author; the arms that log it);
- ``Δ gspo2x``: the final accuracy minus gspo2x's, with its 95% interval, from the comparison's summary.json.

Two pictures (``--plots DIR``): ``delta_vs_rescue.png``, each agent's Δ vs gspo2x against its rescue share, one
colour per arm, over every directory given (filled circles) and every ``--also`` directory (hollow triangles:
the committed pairs, drawn but not tabled), its y axis linear within ±0.05 and logarithmic beyond;
``delta_vs_rho.png``, for cells named ``<pair>-rho<ρ>`` (E2:
``p1-rho0``, ``p1-rho1``), Δ vs gspo2x against ρ per arm and agent, above the arms' in-window share.

    python bench/mechanism.py results/mechanism/sym-1.0 results/mechanism/asym ... [--plots DIR] [--json FILE] \
        [--also results/tiny-model-evidence ...]
    python bench/mechanism.py --rules results/mechanism/*/      # the decision rules of docs/results/mechanism.md
    python bench/mechanism.py --curves results/mechanism/p1-rho1  # learning curves: means over seeds per step
    python bench/mechanism.py --tally hacpo naive results/mechanism/*/  # where hacpo is ahead of / behind naive
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hacrl.data.tasks import final_number, trace_consistent
from hacrl.run.records import has_run
from hacrl.run.sinks import is_task_record, read_jsonl, read_problem_evals

BASELINE = "gspo2x"
_KEY = re.compile(r"^(\d+)([+\-*])(\d+)$")


def _mean(values: Iterable[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return statistics.fmean(vs) if vs else None


def parse_key(problem_id: str) -> tuple[int, str, int] | None:
    """``"mixed/85-07"`` → (85, "-", 7); None for an id that is not a binary arithmetic problem.

    >>> parse_key("mixed/85-07"), parse_key("add2-trace/07+85"), parse_key("gsm8k/12")
    ((85, '-', 7), (7, '+', 85), None)
    """
    m = _KEY.match(problem_id.rsplit("/", 1)[-1])
    return (int(m.group(1)), m.group(2), int(m.group(3))) if m else None


def accuracy_by_operator(record: dict[str, Any]) -> dict[str, float]:
    """Greedy accuracy per operator of one eval_problems.jsonl record (``ids``, ``reward``).

    >>> accuracy_by_operator({"ids": ["mixed/85-07", "mixed/10+02", "mixed/07-85"], "reward": [1.0, 1.0, 0.0]})
    {'+': 1.0, '-': 0.5}
    """
    hits: dict[str, list[float]] = {}
    for pid, r in zip(record["ids"], record["reward"]):
        key = parse_key(pid)
        if key is not None:
            hits.setdefault(key[1], []).append(float(r))
    return {op: sum(v) / len(v) for op, v in sorted(hits.items())}


def trace_measures(record: dict[str, Any]) -> dict[str, float] | None:
    """On a traced task, over the record's kept greedy texts (the first ``len(texts)`` ids): ``consistent``, the
    share right throughout, and ``right_inconsistent``, the share with the right sum after ">" but a wrong
    trace; None without texts.

    >>> trace_measures({"ids": ["add2-trace/07+85", "add2-trace/31+42"], "reward": [1.0, 1.0],
    ...                 "texts": ["7+5=12,0+8+1=9>92", "9+9=11,0+0+0=0>73"]})
    {'consistent': 0.5, 'right_inconsistent': 0.5, 'n': 2}
    """
    texts = record.get("texts") or []
    if texts and all(pid.startswith("basic_arithmetic/") for pid in record["ids"][: len(texts)]):
        return equation_measures(record)
    if not texts or not all(pid.startswith("add2-trace/") for pid in record["ids"][: len(texts)]):
        return None
    consistent = right_bad = 0
    for pid, text in zip(record["ids"], texts):
        a, _, b = parse_key(pid)  # type: ignore[misc]
        ok = trace_consistent(text, a, b)
        consistent += ok
        right_bad += (not ok) and final_number(text) == str(a + b)
    return {"consistent": consistent / len(texts), "right_inconsistent": right_bad / len(texts), "n": len(texts)}


_EQUATION = re.compile(r"(-?\d+)\s*([+\-])\s*(-?\d+)\s*=\s*(-?\d+)")


def equation_measures(record: dict[str, Any]) -> dict[str, float]:
    """E4's reading of reasoning-gym ``basic_arithmetic`` answers ("32 + 59 = 91. The answer is \\boxed{91}."),
    over the record's kept greedy texts: ``consistent``, the share whose first equation ``a ± b = v`` is
    arithmetically right (v = a ± b); ``right_inconsistent``, the share scored right whose first equation is
    wrong (the unfaithful partner's pattern, "28 + 47 = 78. The answer is \\boxed{75}."); the rest wrote no
    equation or a wrong one with a wrong answer. The equation's operands are read from the text, not checked
    against the question (the record holds problem ids, not questions).

    >>> equation_measures({"ids": ["basic_arithmetic/test/0", "basic_arithmetic/test/1", "basic_arithmetic/test/2"],
    ...                    "reward": [1.0, 1.0, 0.0], "texts": ["28 + 47 = 75. The answer is \\boxed{75}.",
    ...                    "67 - 74 = -2. The answer is \\boxed{-7}.", "To add 3 and 4, we count."]})
    {'consistent': 0.333..., 'right_inconsistent': 0.333..., 'n': 3}
    """
    texts = record.get("texts") or []
    consistent = right_bad = 0
    for reward, text in zip(record["reward"], texts):
        m = _EQUATION.search(text)
        if m is None:
            continue
        a, op, b, v = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
        ok = v == (a + b if op == "+" else a - b)
        consistent += ok
        right_bad += (not ok) and reward > 0
    return {"consistent": consistent / len(texts), "right_inconsistent": right_bad / len(texts), "n": len(texts)}


def run_measures(run_dir: Path) -> dict[str, dict[str, Any]]:
    """agent → its measures in one run: ``start`` and ``final`` (each ``acc``, ``by_op``, ``trace`` from the
    first and last task evaluation), ``rescue`` (step 1), ``in_window`` and ``cross_ratio`` (means over steps)."""
    records = [r for r in read_problem_evals(run_dir) if is_task_record(r)]
    out: dict[str, dict[str, Any]] = {}
    for agent in dict.fromkeys(r["agent"] for r in records):
        mine = sorted((r for r in records if r["agent"] == agent), key=lambda r: r["step"])
        m: dict[str, Any] = {}
        m["curve"] = {rec["step"]: (sum(rec["reward"]) / max(len(rec["reward"]), 1), trace_measures(rec))
                      for rec in mine}  # step -> (accuracy, trace measures): every evaluation, once
        for label, rec in (("start", mine[0]), ("final", mine[-1])):
            acc, trace = m["curve"][rec["step"]]
            m[label] = {"step": rec["step"], "acc": acc, "by_op": accuracy_by_operator(rec), "trace": trace}
        out[agent] = m
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "step" in r]
    for agent, m in out.items():
        first = next((r for r in rows if r["step"] == 1), {})
        m["rescue"] = _mean(v for k, v in first.items() if k.startswith(f"agent/{agent}/rescue/"))
        m["in_window"] = _mean(r.get(f"agent/{agent}/cross/in_window_frac") for r in rows)
        m["cross_ratio"] = _mean(r.get(f"agent/{agent}/cross/ratio_mean") for r in rows)
    return out


def read_summary(comparison: Path) -> dict[str, Any]:
    """A comparison directory's summary.json; a directory without one is a one-line error naming the fix."""
    try:
        return json.loads((comparison / "summary.json").read_text())
    except FileNotFoundError:
        raise SystemExit(f"{comparison}: no summary.json (not a finished comparison); write it with the directory's "
                         f"hacrl compare command and --report-only, or leave the directory out") from None


def _run_dir(comparison: Path, run: dict[str, Any]) -> Path:
    """A run's directory: ``<comparison>/runs/<algo>/seed-<n>`` (where compare writes it), else summary's path."""
    local = comparison / "runs" / run["algorithm"] / f"seed-{run['seed']}"
    return local if has_run(local) else Path(run["dir"])


def cell_rows(comparison: Path) -> list[dict[str, Any]]:
    """One row per (agent, arm) of a comparison directory: means over seeds, and Δ against gspo2x."""
    summary = read_summary(comparison)
    runs: dict[str, dict[int, dict]] = {}
    for run in summary["runs"]:
        d = _run_dir(comparison, run)
        if has_run(d):
            runs.setdefault(run["algorithm"], {})[int(run["seed"])] = run_measures(d)
    rows = []
    for agent in summary["agents"]:
        for algo in summary["algorithms"]:
            by_seed = {s: m[agent] for s, m in runs.get(algo, {}).items() if agent in m}
            if not by_seed:
                continue
            base = {s: m[agent] for s, m in runs.get(BASELINE, {}).items() if agent in m}
            final = [m["final"] for m in by_seed.values()]
            ops = sorted({op for f in final for op in f["by_op"]})
            row: dict[str, Any] = {
                "cell": comparison.name, "agent": agent, "algorithm": algo, "seeds": len(by_seed),
                "start": _mean(m["start"]["acc"] for m in by_seed.values()),
                "acc": _mean(f["acc"] for f in final),
                "by_op": {op: _mean(f["by_op"].get(op) for f in final) for op in ops} if len(ops) > 1 else None,
                "rescue": _mean(m["rescue"] for m in by_seed.values()),
                "in_window": _mean(m["in_window"] for m in by_seed.values()),
                "cross_ratio": _mean(m["cross_ratio"] for m in by_seed.values()),
            }
            traces = [f["trace"] for f in final if f["trace"]]
            if traces:
                row["consistent"] = _mean(t["consistent"] for t in traces)
                row["right_inconsistent"] = _mean(t["right_inconsistent"] for t in traces)
            paired = sorted(set(by_seed) & set(base))
            if algo != BASELINE and paired and len(ops) > 1:
                mine = {op: [by_seed[s]["final"]["by_op"].get(op, 0.0) for s in paired] for op in ops}
                theirs = {op: [base[s]["final"]["by_op"].get(op, 0.0) for s in paired] for op in ops}
                row["by_op_delta"] = {op: _mean(a - b for a, b in zip(mine[op], theirs[op])) for op in ops}
                row["by_op_delta_seed"] = {op: _seed_interval(mine[op], theirs[op]) for op in ops}
            if algo != BASELINE and paired and traces \
                    and all(base[s]["final"]["trace"] and by_seed[s]["final"]["trace"] for s in paired):
                mine_c = [by_seed[s]["final"]["trace"]["consistent"] for s in paired]
                theirs_c = [base[s]["final"]["trace"]["consistent"] for s in paired]
                row["consistent_delta"] = _mean(a - b for a, b in zip(mine_c, theirs_c))
                row["consistent_delta_seed"] = _seed_interval(mine_c, theirs_c)
            vs = summary.get("results", {}).get(agent, {}).get(algo, {}).get("vs", {}).get(BASELINE)
            if vs:
                interval = vs.get("interval") or {}
                row["delta"] = vs["mean"]
                row["delta_lo"], row["delta_hi"] = interval.get("lo"), interval.get("hi")
            rows.append(row)
    for agent in summary["agents"]:  # the pair's rescue: step 1 of the arms that share answers (the same models)
        mine = [r for r in rows if r["agent"] == agent and r["rescue"] is not None]
        shared = [r for r in mine if _shares(r["algorithm"])] or mine
        pair = _mean(r["rescue"] for r in shared)
        for r in mine:
            r["pair_rescue"] = pair
    return rows


def curve_rows(comparison: Path) -> list[dict[str, Any]]:
    """One row per (agent, arm) of a comparison directory: the mean over seeds of the held-out greedy accuracy at
    every evaluated step (``acc``: step → mean), and on a traced or equation task the same for ``consistent`` and
    ``right_inconsistent``; a step counts only the seeds that evaluated it (``seeds``: step → how many)."""
    summary = read_summary(comparison)
    curves: dict[tuple[str, str], list[dict[int, Any]]] = {}
    for run in summary["runs"]:
        d = _run_dir(comparison, run)
        if has_run(d):
            for agent, m in run_measures(d).items():
                curves.setdefault((agent, run["algorithm"]), []).append(m["curve"])
    rows = []
    for agent in summary["agents"]:
        for algo in summary["algorithms"]:
            runs = curves.get((agent, algo))
            if not runs:
                continue
            steps = sorted({step for c in runs for step in c})
            row: dict[str, Any] = {"cell": comparison.name, "agent": agent, "algorithm": algo,
                                   "seeds": {t: sum(t in c for c in runs) for t in steps},
                                   "acc": {t: _mean(c[t][0] for c in runs if t in c) for t in steps}}
            for key in ("consistent", "right_inconsistent"):
                values = {t: _mean(c[t][1][key] for c in runs if t in c and c[t][1]) for t in steps}
                if any(v is not None for v in values.values()):
                    row[key] = values
            rows.append(row)
    return rows


def curves_table(rows: list[dict[str, Any]]) -> str:
    """The curves as a table: each measure's means at the evaluated steps, in step order."""
    lines = ["| cell | agent | arm | seeds | steps | acc | consistent | right, inconsistent |", "|" + "---|" * 8]
    for r in rows:
        steps = list(r["acc"])
        seeds = sorted(set(r["seeds"].values()))
        cols = [" ".join(_fmt(r[k][t]) for t in steps) if k in r else "–"
                for k in ("acc", "consistent", "right_inconsistent")]
        lines.append(f"| {r['cell']} | {r['agent']} | {r['algorithm']} | {'/'.join(map(str, seeds))} | "
                     f"{' '.join(map(str, steps))} | " + " | ".join(cols) + " |")
    return "\n".join(lines)


def _seed_interval(a: list[float], b: list[float]) -> tuple[float, float] | None:
    """The seed-level 95% t-interval of a − b, paired by seed (None with fewer than 2 seeds)."""
    from hacrl.report.stats import seed_t_interval

    st = seed_t_interval(a, b)
    return (st["lo"], st["hi"]) if st else None


def _shares(algorithm: str) -> bool:
    """Whether an arm's learners see the partner's answers (an arm not registered here counts as sharing)."""
    from hacrl.learner.algorithms import ALGORITHMS

    try:
        return ALGORITHMS.get(algorithm.split("@")[0]).shares_pool
    except KeyError:
        return True


def rho_of(cell: str) -> tuple[str, float] | None:
    """``"p1-rho0.5"`` → ("p1", 0.5): an E2 cell's pair and ρ, from its directory name; None otherwise.

    >>> rho_of("p1-rho1"), rho_of("p2-rho0.5"), rho_of("sym-1.0")
    (('p1', 1.0), ('p2', 0.5), None)
    """
    m = re.fullmatch(r"(.+)-rho(\d+(?:\.\d+)?)", cell)
    return (m.group(1), float(m.group(2))) if m else None


def _or(v: float | None, default: float) -> float:
    return default if v is None else v


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_fmt(x)}" for k, x in v.items()) or "–"
    return f"{v:+.3f}" if isinstance(v, float) and v < 0 else (f"{v:.3f}" if isinstance(v, float) else str(v))


def _with_seed_interval(delta: Any, seed: Any) -> Any:
    """A Δ (a number, or one per operator) as text with its seed-level interval: ``-0.010 [-0.030, +0.010]``.

    >>> _with_seed_interval({"+": 0.02, "-": -0.01}, {"+": (0.01, 0.03), "-": None})
    {'+': '0.020 [0.010, 0.030]', '-': '-0.010'}
    """
    if delta is None:
        return None
    if isinstance(delta, dict):
        return {k: _with_seed_interval(v, (seed or {}).get(k)) for k, v in delta.items()}
    text = f"{delta:+.3f}" if delta < 0 else f"{delta:.3f}"
    return f"{text} [{_fmt(float(seed[0]))}, {_fmt(float(seed[1]))}]" if seed else text


def table(rows: list[dict[str, Any]]) -> str:
    cols = [("cell", "cell"), ("agent", "agent"), ("arm", "algorithm"), ("seeds", "seeds"), ("start", "start"),
            ("acc", "acc"), ("acc by op", "by_op"), ("Δ by op vs gspo2x [seed-level 95%]", "by_op_delta"),
            ("consistent", "consistent"), ("right, inconsistent", "right_inconsistent"),
            ("Δ consistent [seed-level 95%]", "consistent_delta"), ("rescue@1", "rescue"), ("pair rescue", "pair_rescue"),
            ("in window", "in_window"), ("cross ratio", "cross_ratio"),
            ("Δ gspo2x", "delta"), ("95% interval", None)]
    lines = ["| " + " | ".join(c for c, _ in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        r = {**r, "by_op_delta": _with_seed_interval(r.get("by_op_delta"), r.get("by_op_delta_seed")),
             "consistent_delta": _with_seed_interval(r.get("consistent_delta"), r.get("consistent_delta_seed"))}
        cells = [_fmt(r.get(k)) if k else (f"[{_fmt(r.get('delta_lo'))}, {_fmt(r.get('delta_hi'))}]"
                                           if r.get("delta_lo") is not None else "–") for _, k in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], out: Path, others: list[dict[str, Any]] | None = None) -> list[Path]:
    """The two pictures; returns the files written (the ρ picture only when some cell is named ``*-rho<ρ>``).

    ``others``: rows of further comparisons (the committed pairs) drawn in the rescue picture as hollow
    triangles beside the study's cells (filled circles). Its y axis is linear within ±0.05 and logarithmic
    beyond (a collapse of −0.7 and gains of ±0.02 in one picture); the grey band is the rules' ±0.02."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from hacrl.learner.algorithms import method_colours
    from hacrl.report.plots import write_png

    out.mkdir(parents=True, exist_ok=True)
    others = others or []
    # only the arms that learn from a partner: GSPO's Δ against GSPO×2 (and a few-shot prompt's) is no partner effect
    algos = list(dict.fromkeys(r["algorithm"] for r in [*rows, *others] if "delta" in r and _shares(r["algorithm"])))
    colour = method_colours(algos)  # each arm's colour from the method registry (its display slot)
    written = []
    fig, ax = plt.subplots(figsize=(10.5, 6))
    ax.axhspan(-MARGIN, MARGIN, color="0.9", zorder=0)

    def drawn(group: list[dict[str, Any]]) -> list[dict[str, Any]]:  # the rows that make a point
        return [r for r in group
                if r["algorithm"] in colour and r.get("delta") is not None and r.get("pair_rescue") is not None]

    study, pairs = drawn(rows), drawn(others)
    for group, marker, filled in ((study, "o", True), (pairs, "^", False)):
        for a in algos:
            pts = [r for r in group if r["algorithm"] == a]
            if not pts:
                continue
            ax.scatter([r["pair_rescue"] for r in pts], [r["delta"] for r in pts], marker=marker, s=26,
                       color=colour[a] if filled else "none", edgecolors=colour[a])
            for r in pts:
                if r.get("delta_lo") is not None:
                    ax.plot([r["pair_rescue"]] * 2, [r["delta_lo"], r["delta_hi"]], color=colour[a], lw=0.8,
                            alpha=0.6)
    for group, tone in ((study, "black"), (pairs, "0.45")):
        labelled: dict[tuple[str, str], tuple[float, float]] = {}  # one label per (cell, agent), at its top
        for r in group:
            key = (r["cell"], r["agent"])
            labelled[key] = max(labelled.get(key, (r["pair_rescue"], r["delta"])),
                                (r["pair_rescue"], r["delta"]), key=lambda p: p[1])
        for (cell, agent), (x, y) in labelled.items():
            ax.annotate(f"{cell}: {agent}", (x, y), textcoords="offset points", xytext=(3, 5), fontsize=6,
                        rotation=30, color=tone)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_yscale("symlog", linthresh=0.05, linscale=1.5)
    ends = [v for r in [*study, *pairs] for v in (r["delta"], r.get("delta_lo"), r.get("delta_hi")) if v is not None]
    if ends:  # symlog's autoscale cuts the far points off
        lo, hi = min(min(ends) * 1.15, -0.05), max(max(ends) * 1.15, 0.05)
        ax.set_ylim(lo, hi)
        ax.set_yticks([t for t in (-0.5, -0.2, -0.1, -0.05, -0.02, 0, 0.02, 0.05, 0.1, 0.2, 0.5) if lo <= t <= hi])
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%+.2f"))
        ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set(xlabel="rescue share before training (agent/<a>/rescue/<b>, step 1; mean over the sharing arms)",
           ylabel="Δ final accuracy vs gspo2x (95% interval)",
           title="Who gains: Δ vs gspo2x against rescue (circles: study cells; triangles: committed pairs)")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker="s", color=colour[a], label=a) for a in algos]
    handles += [Line2D([], [], ls="", marker="o", color="k", label="study cell"),
                Line2D([], [], ls="", marker="^", mfc="none", color="k", label="committed pair")]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    written.append(out / "delta_vs_rescue.png")
    write_png(fig, written[-1], dpi=120)

    e2 = [(rho_of(r["cell"]), r) for r in rows if rho_of(r["cell"]) and r.get("delta") is not None]
    if e2:
        pairs = sorted({(p, r["agent"]) for (p, _), r in e2})
        fig, axes = plt.subplots(2, len(pairs), figsize=(4 * len(pairs), 6), sharex=True, squeeze=False)
        for j, (pair, agent) in enumerate(pairs):
            for a in algos:
                pts = sorted((rho, r) for (p, rho), r in e2 if p == pair and r["agent"] == agent and r["algorithm"] == a)
                if not pts:
                    continue
                axes[0][j].errorbar([x for x, _ in pts], [r["delta"] for _, r in pts], fmt="o-", color=colour[a],
                                    label=a, capsize=2, lw=1,
                                    yerr=[[r["delta"] - _or(r.get("delta_lo"), r["delta"]) for _, r in pts],
                                          [_or(r.get("delta_hi"), r["delta"]) - r["delta"] for _, r in pts]])
                win = [(x, r["in_window"]) for x, r in pts if r.get("in_window") is not None]
                if win:
                    axes[1][j].plot(*zip(*win), "o-", color=colour[a], label=a)
            axes[0][j].axhline(0, color="grey", lw=0.8)
            axes[0][j].set(title=f"{pair}: {agent}", ylabel="Δ vs gspo2x")
            axes[1][j].set(xlabel="ρ (partner's trace corruption)", ylabel="in-window share of cross answers")
        drawn = {h.get_label(): h for ax_ in axes[0] for h in ax_.get_legend_handles_labels()[0]}
        fig.legend(list(drawn.values()), list(drawn), fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 0.95))
        fig.tight_layout()
        written.append(out / "delta_vs_rho.png")
        write_png(fig, written[-1], dpi=120, bbox_inches="tight")
    return written


# ---- the decision rules of docs/results/mechanism.md, applied to summary.json (no training, no new statistics) ----

MARGIN = 0.02  # the smallest difference the rules call a gain, a loss or a correction that matters
MIN_SEEDS = 8  # the study's floor


def verdict(vs: dict[str, Any] | None) -> str:
    """Rules 2 and 3 on one contrast of summary.json (``mean``, the bootstrap ``interval``, ``seed_interval``):

    - "gain" / "loss": |mean| ≥ 0.02 and the paired bootstrap interval excludes 0 on that side;
    - "gain < 0.02" / "loss < 0.02": the interval excludes 0 but the mean is smaller than the rule's size;
    - "null": the interval lies inside ±0.02; "undecided": it crosses 0 and reaches past ±0.02;
    - a gain or loss whose seed-level interval includes 0 says so; fewer than 8 seeds says so.

    >>> verdict({"mean": 0.03, "n": 10, "interval": {"lo": 0.01, "hi": 0.05}, "seed_interval": {"lo": 0.005, "hi": 0.05}})
    'gain'
    >>> verdict({"mean": 0.01, "n": 10, "interval": {"lo": -0.015, "hi": 0.019}})
    'null'
    >>> verdict({"mean": -0.01, "n": 10, "interval": {"lo": -0.03, "hi": 0.01}})
    'undecided'
    >>> verdict({"mean": 0.025, "n": 5, "interval": {"lo": 0.004, "hi": 0.046}, "seed_interval": {"lo": -0.001, "hi": 0.05}})
    "gain, seed-level interval includes 0 (5 seeds: below the study's 8)"
    """
    if not vs or (vs.get("interval") or {}).get("lo") is None:
        return "–"
    mean, lo, hi = vs["mean"], vs["interval"]["lo"], vs["interval"]["hi"]
    if lo > 0:
        word = "gain" if mean >= MARGIN else "gain < 0.02"
    elif hi < 0:
        word = "loss" if mean <= -MARGIN else "loss < 0.02"
    elif lo >= -MARGIN and hi <= MARGIN:
        word = "null"
    else:
        word = "undecided"
    seed = vs.get("seed_interval") or {}
    if word.startswith(("gain", "loss")) and seed and seed["lo"] <= 0 <= seed["hi"]:
        word += ", seed-level interval includes 0"
    n = vs.get("n") or len(vs.get("seeds") or ())
    if n and n < MIN_SEEDS:
        word += f" ({n} seeds: below the study's {MIN_SEEDS})"
    return word


def _interval(iv: dict[str, Any] | None) -> str:
    return f"[{_fmt(iv['lo'])}, {_fmt(iv['hi'])}]" if iv and iv.get("lo") is not None else "–"


def contrast_row(summary: dict[str, Any], cell: str, agent: str, algo: str, base: str) -> dict[str, Any] | None:
    """One contrast ``algo − base`` for ``agent`` as summary.json holds it (None when the comparison lacks it)."""
    vs = summary.get("results", {}).get(agent, {}).get(algo, {}).get("vs", {}).get(base)
    if not vs:
        return None
    return {"cell": cell, "agent": agent, "contrast": f"{algo} − {base}", "mean": vs["mean"],
            "interval": vs.get("interval"), "seed_interval": vs.get("seed_interval"),
            "n": vs.get("n"), "verdict": verdict(vs)}


def best_sharing_rival(summary: dict[str, Any], agent: str) -> str | None:
    """Of naive and imitation, the one with the higher mean final accuracy for ``agent`` (rule 1's max)."""
    res = summary.get("results", {}).get(agent, {})
    rivals = [a for a in ("naive", "imitation") if a in res and "final" in res[a]]
    return max(rivals, key=lambda a: res[a]["final"]["mean"]) if rivals else None


def corrections_row(summary: dict[str, Any], cell: str, agent: str) -> dict[str, Any] | None:
    """Rule 1 without the sister cell: HACPO − max(naive, imitation) ≥ +0.02 with the bootstrap interval and the
    seed-level interval both above 0 ("matter here"); the mirror image is "hurt here"; else "no"."""
    rival = best_sharing_rival(summary, agent)
    row = contrast_row(summary, cell, agent, "hacpo", rival) if rival else None
    if row is None:
        return None
    lo, seed = (row["interval"] or {}).get("lo"), row["seed_interval"] or {}
    hi = (row["interval"] or {}).get("hi")
    if row["mean"] >= MARGIN and lo is not None and lo > 0 and seed and seed["lo"] > 0:
        row["corrections"] = "matter here"
    elif row["mean"] <= -MARGIN and hi is not None and hi < 0 and seed and seed["hi"] < 0:
        row["corrections"] = "hurt here"
    else:
        row["corrections"] = "no"
    return row


def sister(cell: str, cells: Iterable[str] = ()) -> str | None:
    """E2's sister cell (P1 ↔ P2 at the same ρ): ``"p1-rho1"`` → ``"p2-rho1"``; None outside E2. P1 on the AVX2
    build (``p1-avx2-rho<ρ>``) has P2 (built there too) as its sister; P2's sister is ``p1-avx2-rho<ρ>`` when that is
    among ``cells`` (the same build), else ``p1-rho<ρ>``.

    >>> sister("p1-rho1"), sister("p2-rho0"), sister("asym"), sister("p1-avx2-rho0.5")
    ('p2-rho1', 'p1-rho0', None, 'p2-rho0.5')
    >>> sister("p2-rho1", ["p1-rho1", "p1-avx2-rho1"]), sister("p2-rho0", ["p1-rho0", "p1-avx2-rho1"])
    ('p1-avx2-rho1', 'p1-rho0')
    """
    pr = rho_of(cell)
    if not pr or pr[0] not in ("p1", "p1-avx2", "p2"):
        return None
    rho = cell.removeprefix(f"{pr[0]}-")
    if pr[0] != "p2":
        return f"p2-{rho}"
    return f"p1-avx2-{rho}" if f"p1-avx2-{rho}" in set(cells) else f"p1-{rho}"


def did_row(low: dict[str, Any], high: dict[str, Any], pair: str, agent: str, rival: str,
            rho: float = 1.0) -> dict[str, Any] | None:
    """E2's primary contrast: [HACPO − X](ρ) − [HACPO − X](ρ=0) for one agent, per seed from each summary's
    final accuracies (``final.by_seed``), with the seed-level t-interval over the seeds both cells share."""
    from hacrl.report.stats import seed_t_interval

    def diffs(summary: dict[str, Any]) -> dict[str, float] | None:
        res = summary.get("results", {}).get(agent, {})
        if "hacpo" not in res or rival not in res:
            return None
        a, b = res["hacpo"]["final"]["by_seed"], res[rival]["final"]["by_seed"]
        return {s: a[s] - b[s] for s in a if s in b}

    d0, d1 = diffs(low), diffs(high)
    if not d0 or not d1:
        return None
    seeds = sorted(set(d0) & set(d1), key=int)
    st = seed_t_interval([d1[s] for s in seeds], [d0[s] for s in seeds])
    return {"cell": pair, "agent": agent, "contrast": f"[hacpo − {rival}](ρ {rho:g}) − (ρ 0)",
            "mean": statistics.fmean(d1[s] - d0[s] for s in seeds), "interval": None, "seed_interval": st,
            "n": len(seeds), "verdict": "–" if st is None else ("excludes 0" if not st["includes_zero"] else
                                                                 "includes 0")}


ABLATIONS = ("hacpo-noomega", "hacpo-noadv")  # E3's: HACPO without ω, without the capability-aware advantage
# §12.12's: HACPO with ω ≤ 1 in its baseline, against HACPO and against the plain baseline
CAPPED = (("hacpo-capbase", "hacpo"), ("hacpo-capbase", "hacpo-noadv"))
E1_CONTRASTS = (("naive-recompute", "gspo"), ("naive", "gspo"), ("hacpo", "gspo"), ("naive-recompute", "naive"),
                ("hacpo", "naive"))


def rule_rows(dirs: list[Path]) -> list[dict[str, Any]]:
    """Every contrast the rules read, over the cells given: E1's (a cell without gspo2x), each sharing arm
    against gspo2x, rule 1 per agent with its sister cell's sign, and E2's difference-in-differences."""
    summaries = {d.name: read_summary(d) for d in dirs}
    rows: list[dict[str, Any]] = []
    for cell, summary in summaries.items():
        algos = summary.get("algorithms", [])
        for agent in summary.get("agents", {}):
            if BASELINE not in algos:
                pairs = [c for c in E1_CONTRASTS if c[0] in algos and c[1] in algos]
            else:  # each arm against gspo2x, and HACPO against its ablations where the summary pairs them
                pairs = [(a, BASELINE) for a in algos if a != BASELINE]
                pairs += [("hacpo", a) for a in ABLATIONS if a in algos and "hacpo" in algos]
                pairs += [(a, b) for a, b in CAPPED if a in algos and b in algos]
            rows += [r for a, b in pairs if (r := contrast_row(summary, cell, agent, a, b))]
            corr = corrections_row(summary, cell, agent)
            if corr:
                mate_cell = sister(cell, summaries) or ""
                other = summaries.get(mate_cell)
                mate = corrections_row(other, mate_cell, agent) if other else None
                if corr["corrections"] != "no":
                    if mate is None:
                        corr["corrections"] += "; no sister cell"
                    elif (mate["mean"] > 0) != (corr["mean"] > 0):
                        corr["corrections"] += "; sister cell's sign differs: not claimed"
                    else:
                        corr["corrections"] += "; same sign in the sister cell"
                corr["contrast"] = f"hacpo − max(naive, imitation) = hacpo − {corr['contrast'].split(' − ')[1]}"
                corr["verdict"] = corr.pop("corrections")
                rows.append(corr)
    for cell in summaries:
        pr = rho_of(cell)
        if pr and pr[1] > 0 and f"{pr[0]}-rho0" in summaries:
            low, high = summaries[f"{pr[0]}-rho0"], summaries[cell]
            for agent in high.get("agents", {}):
                rows += [r for x in ("imitation", "naive") if (r := did_row(low, high, pr[0], agent, x, pr[1]))]
    return rows


def rules_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| cell | agent | contrast | Δ | paired 95% (bootstrap) | seed-level 95% (t) | seeds | reading |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['cell']} | {r['agent']} | {r['contrast']} | {_fmt(float(r['mean']))} | "
                     f"{_interval(r['interval'])} | {_interval(r['seed_interval'])} | {r['n'] or '–'} | "
                     f"{r['verdict']} |")
    return "\n".join(lines)


def tally(dirs: list[Path], algo: str, base: str) -> dict[str, list[tuple[str, str, float]]]:
    """The agent-cells whose summary holds ``algo`` − ``base``, sorted by the reading of both intervals: ``ahead``
    (both lower ends above 0), ``behind`` (both upper ends below 0), ``neither``; each as (cell, agent, Δ). A
    directory without a summary.json (a pre-flight's) is left out."""
    out: dict[str, list[tuple[str, str, float]]] = {"ahead": [], "behind": [], "neither": []}
    for d in dirs:
        if not (d / "summary.json").is_file():  # a pre-flight folder, not a comparison
            continue
        for agent, res in read_summary(d)["results"].items():
            vs = res.get(algo, {}).get("vs", {}).get(base)
            if not vs or not vs.get("interval") or not vs.get("seed_interval"):
                continue
            boot, seed = vs["interval"], vs["seed_interval"]
            key = ("ahead" if boot["lo"] > 0 and seed["lo"] > 0 else
                   "behind" if boot["hi"] < 0 and seed["hi"] < 0 else "neither")
            out[key].append((d.name, agent, vs["mean"]))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dirs", nargs="+", type=Path, help="hacrl compare output directories (one per cell)")
    p.add_argument("--plots", type=Path, help="write delta_vs_rescue.png (and delta_vs_rho.png) here")
    p.add_argument("--json", type=Path, help="write the rows as JSON here")
    p.add_argument("--also", nargs="+", type=Path, default=[], metavar="DIR",
                   help="further comparisons (the committed pairs) drawn in the rescue picture only")
    p.add_argument("--rules", action="store_true",
                   help="print the decision rules' table (docs/results/mechanism.md) instead of the measures")
    p.add_argument("--curves", action="store_true",
                   help="print each arm's learning curves (means over seeds at every evaluated step) instead")
    p.add_argument("--tally", nargs=2, metavar=("ALGO", "BASE"),
                   help="count the agent-cells where ALGO − BASE is ahead or behind by both intervals, instead")
    a = p.parse_args(argv)
    if a.tally:
        counts = tally(a.dirs, *a.tally)
        print(f"{a.tally[0]} − {a.tally[1]} over {sum(map(len, counts.values()))} agent-cells: "
              + "; ".join(f"{k} {len(v)}" for k, v in counts.items()))
        for key in ("ahead", "behind"):
            for cell, agent, delta in counts[key]:
                print(f"  {key}: {cell} {agent} {delta:+.3f}")
        return
    if a.rules:
        print(rules_table(rule_rows(a.dirs)))
        return
    if a.curves:
        print(curves_table([r for d in a.dirs for r in curve_rows(d)]))
        return
    rows = [r for d in a.dirs for r in cell_rows(d)]
    print(table(rows))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")
    if a.plots:
        others = [r for d in a.also for r in cell_rows(d)]
        for f in plot(rows, a.plots, others):
            print(f"wrote {f}")


if __name__ == "__main__":
    main()
