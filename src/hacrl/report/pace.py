"""Each agent's pace in a comparison's runs (issue #25, docs/async.md): the share of the run its worker sat
idle, its updates per hour, how stale the answers it trained on were, and how many answers it used per source.

Asynchronous runs (``trainer.mode=async``) log these with every update (:mod:`hacrl.trainer.async_loop`):
``agent/<id>/async/idle_frac`` and ``updates_per_hour`` (since the loop began, so the run's last line holds the
run's value), ``agent/<id>/staleness/mean`` and ``max`` over the take, ``agent/<id>/async/used/<source>``.
Lock-step runs log none of these; their timings give the idle share with the same definition — 1 − the agent's
worker busy seconds (``timing/rollout/<id>`` + ``timing/update/<id>``) over the run's wall seconds (the sum of
every step's ``timing/<phase>`` totals, evaluations and checkpoints included, as the asynchronous clock
includes them) — and nothing else: their staleness is 0 by construction, and "—" stands for what they do not
log. Pure functions of :class:`~hacrl.report.runs.RunData`; tests: tests/report/test_pace.py.
"""

from __future__ import annotations

import math
from typing import Any

from hacrl.report.runs import RunData
from hacrl.report.stats import mean_sd
from hacrl.run.sinks import phase_times


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def lockstep_idle(metrics: dict[int, dict[str, Any]], agent: str) -> float | None:
    """1 − Σ the agent's busy seconds / Σ the steps' phase seconds, over the steps that log both (None: none
    does, e.g. a run from before per-agent timings)."""
    busy = wall = 0.0
    for line in metrics.values():
        rollout, update = _num(line.get(f"timing/rollout/{agent}")), _num(line.get(f"timing/update/{agent}"))
        if rollout is None or update is None:
            continue
        busy += rollout + update
        wall += sum(phase_times(line).values())
    return max(0.0, 1.0 - busy / wall) if wall > 0 else None


def async_pace(metrics: dict[int, dict[str, Any]], agent: str, sources: list[str]) -> dict[str, Any]:
    """One asynchronous run's pace for ``agent``: idle share and updates per hour as its last update line logs
    them, the staleness mean over every answer it trained on (each take's mean weighted by the answers it
    used), the largest staleness, and the answers used per source (summed over its updates)."""
    a = f"agent/{agent}"
    lines = [m for _, m in sorted(metrics.items()) if _num(m.get(f"{a}/async/idle_frac")) is not None]
    used = {j: sum(_num(m.get(f"{a}/async/used/{j}")) or 0.0 for m in lines) for j in sources}
    weighted = n = 0.0
    for m in lines:
        count = sum(_num(m.get(f"{a}/async/used/{j}")) or 0.0 for j in sources)
        mean = _num(m.get(f"{a}/staleness/mean"))
        if mean is not None and count:
            weighted, n = weighted + mean * count, n + count
    maxes = [v for m in lines if (v := _num(m.get(f"{a}/staleness/max"))) is not None]
    last = lines[-1] if lines else {}
    return {"idle": _num(last.get(f"{a}/async/idle_frac")),
            "updates_per_hour": _num(last.get(f"{a}/async/updates_per_hour")),
            "staleness_mean": weighted / n if n else None, "staleness_max": max(maxes) if maxes else None,
            "used": used if lines else None, "updates": len(lines)}


def run_pace(d: RunData, agent: str, agent_ids: list[str]) -> dict[str, Any]:
    """The pace of ``agent`` in one run: :func:`async_pace` for an asynchronous run, the idle share alone (the
    rest None) for a lock-step one."""
    if d.mode == "async":
        return async_pace(d.metrics, agent, agent_ids)
    return {"idle": lockstep_idle(d.metrics, agent), "updates_per_hour": None, "staleness_mean": None,
            "staleness_max": None, "used": None, "updates": None}


def pace_summary(by_algo: dict[str, list[RunData]], agent_ids: list[str]) -> dict[str, Any]:
    """algorithm → its runs' mode (``async``, ``lockstep`` or ``mixed``) and per agent the mean over seeds of
    each pace number (the idle share as mean and sd; the staleness maximum as the maximum over seeds)."""
    out: dict[str, Any] = {}
    for algo, runs in by_algo.items():
        modes = {d.mode for d in runs}
        agents = {}
        for agent in agent_ids:
            per_run = [run_pace(d, agent, agent_ids) for d in runs]

            def mean(key: str, rows: list[dict[str, Any]] = per_run) -> float | None:
                return mean_sd([r[key] for r in rows if r[key] is not None])[0]

            maxes = [r["staleness_max"] for r in per_run if r["staleness_max"] is not None]
            used = [r["used"] for r in per_run if r["used"] is not None]
            agents[agent] = {
                "idle": mean_sd([r["idle"] for r in per_run if r["idle"] is not None]),
                "updates_per_hour": mean("updates_per_hour"), "staleness_mean": mean("staleness_mean"),
                "staleness_max": max(maxes) if maxes else None,
                "used": {j: sum(u[j] for u in used) / len(used) for j in agent_ids} if used else None,
                "by_seed": {d.seed: r for d, r in zip(runs, per_run, strict=True)},
            }
        out[algo] = {"mode": modes.pop() if len(modes) == 1 else "mixed", "agents": agents}
    return out


def _cell(v: float | None, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


def render_pace(pace: dict[str, Any] | None) -> list[str]:
    """report.md's pace section: one row per algorithm × agent."""
    if not pace:
        return []
    agent_ids = list(next(iter(pace.values()))["agents"])
    lines = ["## Pace: idle share, updates, staleness", "",
             ("| algorithm | mode | agent | idle share (mean ± sd) | updates / hour | staleness mean | staleness max "
              "| answers used " + " / ".join(f"from {j}" for j in agent_ids) + " |"),
             "|---|---|---|---|---|---|---|---|"]
    for algo, p in pace.items():
        mode = {"async": "async", "lockstep": "lock-step"}.get(p["mode"], p["mode"])
        for agent, r in p["agents"].items():
            mean, sd = r["idle"]
            idle = "—" if mean is None else f"{mean:.0%}" + ("" if sd is None else f" ± {sd:.0%}")
            used = "—" if r["used"] is None else " / ".join(f"{r['used'][j]:.0f}" for j in agent_ids)
            lines.append(f"| {algo} | {mode} | {agent} | {idle} | {_cell(r['updates_per_hour'], '.0f')} "
                         f"| {_cell(r['staleness_mean'], '.2f')} | {_cell(r['staleness_max'], '.0f')} | {used} |")
    lines += ["", ("*idle share*: 1 − the agent's worker busy seconds (its rollouts and updates) over the run's "
                   "wall time (asynchronous runs: since the loop began, as `agent/<id>/async/idle_frac` logs it; "
                   "lock-step runs: over the sum of the steps' `timing/*` phases, evaluations included), mean over "
                   "seeds. *updates / hour*, *staleness* (in the learner's versions: how far it had moved since it "
                   "could first use an answer; mean over the answers it took, max over them and the seeds) and "
                   "*answers used*: taken from the pool per source, mean over seeds of the run's total (an algorithm "
                   "that does not share trains on its own only) are logged by asynchronous runs only: — in "
                   "lock-step, where every answer is used in its own step (staleness 0)."), ""]
    return lines
