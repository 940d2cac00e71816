"""Which knowledge moved, answer format or correctness: the part of ``hacrl compare``'s summary that reads
the per-problem greedy records (eval_problems.jsonl) for whether an answer finished (EOS inside the budget)
and whether it was right, at the training answer budget and at the longer ``trainer.eval_budget``.

A model can gain held-out accuracy by learning to stop inside the budget (a format a partner shows it)
without solving more problems. Three numbers tell the two apart, per agent × algorithm, at step 0 and at
the end:

- ``finished``: the share of greedy answers that ended with EOS inside the training budget;
- ``acc_finished``: accuracy among those finished answers (correctness where the format is not in the way);
- ``acc_budget``: accuracy with the longer budget, where a long-winded but right answer can finish too.

Where the format was all that was learned, ``finished`` rises while ``acc_finished`` and ``acc_budget`` do
not. ``acc_budget`` and ``solved`` (right *and* finished at the training budget) are paired per problem against
each baseline with the same two-level bootstrap as the report's main table; ``acc_finished`` is a ratio over
a different subset of problems in each run, so it gets mean ± sd over seeds only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hacrl.report.runs import RunOutcome, async_progress
from hacrl.report.stats import mean_sd, pair_problems, paired_bootstrap, seed_means, seed_t_interval
from hacrl.run.sinks import read_problem_evals

MEASURES = ("finished", "acc_finished", "solved", "acc_budget", "finished_budget", "tokens")
PAIRED = ("solved", "acc_budget")  # per-problem measures, paired against each baseline


def record_measures(short: dict[str, Any], long: dict[str, Any] | None) -> dict[str, Any]:
    """One run's measures for one agent at one step, from its eval_problems.jsonl records at the training
    budget (``short``) and at ``trainer.eval_budget`` (``long``, or None); with the per-problem values the
    paired intervals need (``per_problem``: measure → {problem id: value}).

    >>> short = {"ids": ["a", "b", "c", "d"], "reward": [1.0, 1.0, 0.0, 0.0],
    ...          "finished": [True, False, True, False], "tokens": [3, 8, 4, 8]}
    >>> long = {"ids": ["a", "b", "c", "d"], "reward": [1.0, 1.0, 0.0, 1.0], "finished": [True, True, True, False]}
    >>> m = record_measures(short, long)
    >>> m["finished"], m["acc_finished"], m["solved"], m["acc_budget"], m["finished_budget"], m["tokens"]
    (0.5, 0.5, 0.25, 0.75, 0.75, 5.75)
    >>> m["per_problem"]["solved"]
    {'a': 1.0, 'b': 0.0, 'c': 0.0, 'd': 0.0}
    """
    ids, reward, finished = [str(i) for i in short["ids"]], short["reward"], short["finished"]
    n, done = len(ids), sum(bool(f) for f in finished)
    solved = {i: float(r) * bool(f) for i, r, f in zip(ids, reward, finished, strict=True)}
    out: dict[str, Any] = {
        "n": n,
        "finished": done / n if n else None,
        # P(right | finished): a right answer the budget cut off (a lenient reward may still score it) is left out
        "acc_finished": sum(float(r) for r, f in zip(reward, finished, strict=True) if f) / done if done else None,
        "solved": sum(solved.values()) / n if n else None,
        "tokens": sum(short["tokens"]) / n if n and short.get("tokens") else None,
        "acc_budget": None, "finished_budget": None,
        "per_problem": {"solved": solved},
    }
    if long is not None and long.get("ids"):
        lids = [str(i) for i in long["ids"]]
        out["acc_budget"] = sum(map(float, long["reward"])) / len(lids)
        out["finished_budget"] = sum(bool(f) for f in long["finished"]) / len(lids)
        out["per_problem"]["acc_budget"] = {i: float(r) for i, r in zip(lids, long["reward"], strict=True)}
    return out


def run_measures(outcome: RunOutcome, steps: Sequence[int]) -> dict[tuple[int, str], dict[str, Any]]:
    """(step, agent) → :func:`record_measures` of one run at the given steps (those it has records for)."""
    short: dict[tuple[int, str], dict[str, Any]] = {}
    long: dict[tuple[int, str], dict[str, Any]] = {}
    progress = async_progress(outcome.run_dir)  # an asynchronous run's steps → the slowest agent's version
    for r in read_problem_evals(outcome.run_dir):
        step = int(r["step"]) if progress is None else progress.get(int(r["step"]), -1)
        key = (step, str(r["agent"]))
        if key[0] not in steps or "benchmark" in r or not _consistent(r):
            continue  # a record whose lists disagree was already reported (hacrl.report.runs) and is left out
        (long if "budget" in r else short)[key] = r
    return {key: record_measures(rec, long.get(key)) for key, rec in short.items()}


def _consistent(r: dict[str, Any]) -> bool:
    lists = [r.get(k) for k in ("ids", "reward", "finished")]
    return all(isinstance(v, list) for v in lists) and len({len(v) for v in lists}) == 1


def answer_quality(outcomes: Sequence[RunOutcome], agent_ids: Sequence[str], algos: Sequence[str],
                   baselines: Sequence[str], seeds: Sequence[int], steps: int, budget: int) -> dict[str, Any] | None:
    """``{"budget", "agents": {agent: {algo: {"start": {...}, "final": {...}, "vs": {baseline: {measure:
    paired_bootstrap}}}}}}``: each measure's mean (and ``<measure>_sd``) over seeds at step 0 and at
    ``steps``, and the paired intervals of :data:`PAIRED` against each baseline over the seeds both have.
    None when no run has per-problem records with EOS flags (runs made before them)."""
    per_run = {(o.algo, o.seed): run_measures(o, (0, steps)) for o in outcomes}
    if not any(per_run.values()):
        return None
    out: dict[str, Any] = {"budget": budget or None, "agents": {}}
    for agent in agent_ids:
        rows: dict[str, Any] = {}
        for algo in algos:
            at = {when: {s: m for s in seeds if (m := per_run.get((algo, s), {}).get((step, agent))) is not None}
                  for when, step in (("start", 0), ("final", steps))}
            row: dict[str, Any] = {when: _means(list(ms.values())) for when, ms in at.items()}
            row["vs"] = {}
            for b in baselines:
                if b == algo:
                    continue
                theirs = {s: m for s in seeds if (m := per_run.get((b, s), {}).get((steps, agent))) is not None}
                common = [s for s in seeds if s in at["final"] and s in theirs]
                row["vs"][b] = {"seeds": common, **{
                    measure: _paired([at["final"][s]["per_problem"][measure] for s in common],
                                     [theirs[s]["per_problem"][measure] for s in common])
                    for measure in PAIRED
                    if common and all(measure in m["per_problem"] for m in
                                      [*(at["final"][s] for s in common), *(theirs[s] for s in common)])}}
            rows[algo] = row
        out["agents"][agent] = rows
    return out


def _paired(a: list[dict[str, float]], b: list[dict[str, float]]) -> dict[str, Any]:
    """The bootstrap interval of a − b over (seed, problem), with the t-interval over the seeds' means of the
    same pairs beside it (``seed_interval``)."""
    return {**paired_bootstrap(a, b), "seed_interval": seed_t_interval(*seed_means(pair_problems(a, b)))}


def _means(measures: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and sd over seeds of every measure (None where no seed has it), and the number of seeds."""
    out: dict[str, Any] = {"seeds": len(measures)}
    for name in MEASURES:
        out[name], out[f"{name}_sd"] = mean_sd([m[name] for m in measures if m[name] is not None])
    return out


def render_answer_quality(q: dict[str, Any] | None, baselines: Sequence[str]) -> list[str]:
    """The report's "Format or correctness" section (Markdown lines); nothing when ``q`` is None."""
    if not q:
        return []
    budget = q["budget"]
    lines = ["## Format or correctness", "",
             ("Greedy answers at step 0 → the end, mean over seeds: **finished** the share that ended (EOS) inside "
              "the training budget; **right | finished** accuracy among those; **solved** right *and* finished"
              + (f"; **@{budget}** accuracy with a {budget}-token budget, where a long but right answer can "
                 "finish too" if budget else "")
              + ". A model that only learned to stop gains *finished* but not *right | finished*"
              + (f" nor *@{budget}*" if budget else "") + ". Δ: the final value minus each baseline's, "
              "paired by (seed, problem), with its 95% two-level bootstrap interval and, after *seeds*, the 95% "
              "t-interval over the seeds' means (≈: it includes 0)"
              + ("; *solved*'s is in summary.json" if budget else "") + "."), ""]
    for agent, rows in q["agents"].items():
        head = ["algorithm", "finished", "right \\| finished", "solved"] + ([f"@{budget}"] if budget else [])
        measure = "acc_budget" if budget else "solved"  # one Δ per baseline: the longer budget where there is one
        head += [f"Δ {f'@{budget}' if budget else 'solved'} vs {b}" for b in baselines]
        lines += [f"### {agent}", "", "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
        for algo, row in rows.items():
            cells = [algo] + [_arrow(row["start"].get(m), row["final"].get(m))
                              for m in ("finished", "acc_finished", "solved")]
            if budget:
                cells.append(_arrow(row["start"].get("acc_budget"), row["final"].get("acc_budget")))
            for b in baselines:
                st = row["vs"].get(b, {}).get(measure)
                si = (st or {}).get("seed_interval")
                cells.append("—" if b == algo or not st or st["mean"] is None else
                             f"{st['mean']:+.3f} [{st['lo']:+.3f}, {st['hi']:+.3f}]"
                             + (" ≈" if st["includes_zero"] else "")
                             + (f"; seeds [{si['lo']:+.3f}, {si['hi']:+.3f}]" + (" ≈" if si["includes_zero"] else "")
                                if si else ""))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += [("Numbers: summary.json, `answer_quality.agents.<agent>.<algo>` (start, final, and vs each "
               "baseline)."), ""]
    return lines


def _arrow(start: float | None, final: float | None) -> str:
    def f(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.3f}"
    return f"{f(start)} → {f(final)}"
