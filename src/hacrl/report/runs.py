"""One run directory of ``hacrl compare``: plan it (reuse, resume, restart, train), run it, read it back.

:func:`plan_run` decides from the directory's latest complete checkpoint and its saved config (a changed
trajectory-relevant value is refused); :func:`execute_run` trains or resumes through the ordinary
:class:`~hacrl.trainer.trainer.Trainer` and keeps the measured wall time in ``compare.json``;
:func:`outputs_data` reads metrics.jsonl, eval.jsonl and (where the run wrote one) eval_problems.jsonl back
for the summary.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hacrl.config import Config, ConfigError, resume_conflict
from hacrl.run.files import write_atomic
from hacrl.run.records import RUN_RECORD, run_text
from hacrl.run.rundir import RunLock, has_content, remove_run
from hacrl.run.sinks import is_task_record, read_evals, read_jsonl, read_problem_evals, read_sampled_evals

logger = logging.getLogger(__name__)

PROBLEM_RECORDS = "eval_problems.jsonl"  # per-problem evaluation records (runs before them have none)


# ---- planning and running -----------------------------------------------------------------------------

@dataclass
class RunOutcome:
    algo: str
    seed: int
    run_dir: Path
    status: str  # trained | resumed | restarted | reused
    wall_s: float | None  # measured, over all invocations that trained it (None: not recorded)
    final: dict[str, float] = field(default_factory=dict)


def _config_mismatch(run_dir: Path, cfg: Config) -> str | None:
    """How the run's saved config differs from ``cfg`` in a training setting (None: it may continue under
    ``cfg``); the rule is ``hacrl.config.resume_conflict``, the one ``hacrl train --resume`` applies."""
    saved = run_text(run_dir / "config.yaml")
    if saved is None:
        return None
    return resume_conflict(yaml.safe_load(saved) or {}, cfg.model_dump(mode="json"))


def checkpoint_step(path: Path) -> int:
    """How far a checkpoint's run got, in ``trainer.steps`` units: its step, or for an asynchronous run (its
    step counts every agent's updates) the slowest agent's version, from the manifest."""
    step = int(path.name.split("-")[1])
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError):
        return step
    versions = manifest.get("versions") if manifest.get("mode") == "async" else None
    return min(int(v) for v in versions) if versions else step


def read_record(run_dir: Path) -> dict[str, Any]:
    """The run's compare.json (from its comparison's records file where compaction moved it); {} without one."""
    try:
        record = json.loads(run_text(run_dir / RUN_RECORD) or "{}")
    except (OSError, json.JSONDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def record_text(record: dict[str, Any]) -> str:
    """compare.json's text (also its copy in a compacted comparison's records file)."""
    return json.dumps(record, indent=2)


def _write_record(run_dir: Path, record: dict[str, Any]) -> None:
    write_atomic(run_dir / RUN_RECORD, record_text(record))  # via compare.json.tmp


def mark_stopped(run_dir: Path, since: float) -> bool:
    """A run its lane was killed in (``--jobs``, a second Ctrl-C): its record's last invocation, written after
    ``since`` (a time stamp) and still ``cut short``, becomes ``stopped``, as a run stopped in a serial
    comparison reads. False when there is no such record (killed before its first step)."""
    path = run_dir / RUN_RECORD
    try:
        if path.stat().st_mtime < since:
            return False
    except OSError:
        return False
    record = read_record(run_dir)
    invocations = record.get("invocations") or []
    if not invocations or invocations[-1].get("status") != "cut short":
        return False
    invocations[-1]["status"] = "stopped"
    _write_record(run_dir, record)
    return True


FINISHED = ("trained", "resumed", "restarted")  # an invocation's status once its trainer reached trainer.steps


def pruned_run_steps(run_dir: Path) -> int | None:
    """The steps a finished run reached whose checkpoints are gone (its metrics.jsonl holds that step); None for
    any other directory. Gone by ``remove_checkpoints`` (its record says so), or by hand: a record whose last
    invocation finished is a finished run, never one to wipe and train again."""
    record = read_record(run_dir)
    invocations = record.get("invocations") or [{}]
    if not record.get("checkpoints_removed") and invocations[-1].get("status") not in FINISHED:
        return None
    reached = max(int(inv.get("to_step") or 0) for inv in invocations)
    if not any(int(r.get("step", -1)) == reached for r in read_jsonl(run_dir / "metrics.jsonl")):
        return None
    progress = async_progress(run_dir)
    return reached if progress is None else progress.get(reached)


def remove_checkpoints(run_dir: Path) -> bool:
    """Delete a finished run's ``checkpoints/`` and note it in ``compare.json`` (the note first: a crash in
    between leaves a finished record, which is reusable with or without the checkpoints)."""
    ckpt = run_dir / "checkpoints"
    if not ckpt.exists():
        return False
    record = read_record(run_dir)
    record["checkpoints_removed"] = True
    _write_record(run_dir, record)
    shutil.rmtree(ckpt)
    return True


def _final_accuracies(run_dir: Path, step: int) -> dict[str, float]:
    return {agent: acc for (s, agent), acc in _by_progress(run_dir, read_evals(run_dir)).items() if s == step}


# ---- asynchronous runs: logged steps count every agent's updates ----------------------------------------

def _saved_config(run_dir: Path) -> dict[str, Any]:
    try:
        return yaml.safe_load(run_text(run_dir / "config.yaml") or "") or {}
    except (OSError, yaml.YAMLError):
        return {}


def run_mode(run_dir: Path) -> str:
    """``trainer.mode`` of the run as its config.yaml saved it (``lockstep`` without one)."""
    return str((_saved_config(run_dir).get("trainer") or {}).get("mode") or "lockstep")


def async_progress(run_dir: Path) -> dict[int, int] | None:
    """An asynchronous run's logged step (the run's total updates) → its progress in ``trainer.steps`` units
    (the slowest agent's version), at every step where a metrics line names every agent's version (the
    evaluation lines; an update line names its own agent's) and at 0; None for a lock-step run, whose steps
    are its progress."""
    saved = _saved_config(run_dir)
    if str((saved.get("trainer") or {}).get("mode")) != "async":
        return None
    keys = [f"agent/{a.get('id')}/version" for a in saved.get("agents") or []]
    out = {0: 0}
    for r in read_jsonl(run_dir / "metrics.jsonl"):
        if keys and all(isinstance(r.get(k), int | float) for k in keys):
            out[int(r["step"])] = int(min(r[k] for k in keys))
    return out


def _by_progress(run_dir: Path, records: dict[tuple[int, str], Any]) -> dict[tuple[int, str], Any]:
    """(logged step, agent) → value re-keyed by the run's progress (asynchronous runs; others unchanged); a step
    without a known progress is left out."""
    progress = async_progress(run_dir)
    if progress is None:
        return records
    return {(progress[s], agent): v for (s, agent), v in records.items() if s in progress}


@dataclass
class RunPlan:
    algo: str
    seed: int
    cfg: Config
    run_dir: Path
    action: str  # reuse | resume | restart | train
    checkpoint: Path | None  # the latest complete checkpoint (resume; reuse when it was kept)


def plan_run(cfg: Config, run_dir: Path, label: str | None = None) -> RunPlan:
    """What to do with one run directory; raises ConfigError when it cannot be reused or resumed safely.
    ``label``: the algorithm as the comparison names it (``hacpo@delta=0.6``; default the config's name)."""
    from hacrl.run.checkpoint import usable_checkpoint

    algo, seed, steps = label or cfg.algorithm.name, cfg.run.seed, cfg.trainer.steps
    latest, damaged = usable_checkpoint(run_dir / "checkpoints")  # a damaged newest one is passed over
    for path, problem in damaged:
        logger.warning("checkpoint %s is damaged (%s); passing over it", path, problem)
    pruned = pruned_run_steps(run_dir) if latest is None else None  # finished, checkpoints removed
    if latest is None and pruned is None:
        return RunPlan(algo, seed, cfg, run_dir, "restart" if has_content(run_dir) else "train", None)
    compacted = not (run_dir / RUN_RECORD).is_file()  # its record is in the comparison's records.parquet
    other = ("use another --output (the run is compacted into its comparison's records.parquet)" if compacted
             else "use another --output or delete that run directory")
    mismatch = _config_mismatch(run_dir, cfg)
    if mismatch:
        raise ConfigError(f"{run_dir} was trained with {mismatch}; {other}")
    if pruned is not None:
        if pruned != steps:  # nothing to resume from, and a restart would delete a finished run
            raise ConfigError(f"{run_dir} finished at step {pruned} and its checkpoints were removed "
                              f"(--keep-checkpoints none), so it cannot be trained to trainer.steps={steps}; "
                              f"set trainer.steps={pruned} or {other}")
        return RunPlan(algo, seed, cfg, run_dir, "reuse", None)
    done = checkpoint_step(latest)
    if done > steps:
        raise ConfigError(f"{run_dir} already has {done} steps, more than trainer.steps={steps}; use "
                          f"another --output or set trainer.steps={done}")
    return RunPlan(algo, seed, cfg, run_dir, "reuse" if done == steps else "resume", latest)


def execute_run(plan: RunPlan, label: str, log: Callable[[str], None], log_steps: bool) -> RunOutcome:
    """Carry out ``plan`` (reuse, resume, restart or train), logging one line per run (and per step with
    ``log_steps``); raises KeyboardInterrupt when the trainer was stopped before the last step."""
    algo, seed, run_dir, steps = plan.algo, plan.seed, plan.run_dir, plan.cfg.trainer.steps
    if plan.action == "reuse":
        outcome = RunOutcome(algo, seed, run_dir, "reused", read_record(run_dir).get("wall_s"),
                             _final_accuracies(run_dir, steps))
        log(f"{label}: reused (finished run in {run_dir}); final greedy acc {_fmt_accs(outcome.final)}")
        return outcome
    created = not run_dir.exists()
    with RunLock(run_dir):  # no other process writes this run meanwhile (a second `hacrl compare`)
        try:
            return _train_run(plan, label, log, log_steps, created)
        finally:
            if created and not has_content(run_dir):
                shutil.rmtree(run_dir, ignore_errors=True)  # a run that never started leaves no directory


def _train_run(plan: RunPlan, label: str, log: Callable[[str], None], log_steps: bool,
               created: bool) -> RunOutcome:
    from hacrl.trainer.trainer import Trainer

    algo, seed, run_dir, steps = plan.algo, plan.seed, plan.run_dir, plan.cfg.trainer.steps
    record, resume_from = {}, None
    if plan.action == "resume":
        record, resume_from = read_record(run_dir), plan.checkpoint
        log(f"{label}: resuming from step {checkpoint_step(resume_from)} of {steps}")
    elif plan.action == "restart":
        remove_run(run_dir)  # only what a run wrote: a directory holding anything else is refused
        log(f"{label}: no complete checkpoint in {run_dir}; restarting it from scratch")
    else:
        log(f"{label}: training {steps} steps")
    status = {"resume": "resumed", "restart": "restarted", "train": "trained"}[plan.action]
    from_step = checkpoint_step(resume_from) if resume_from else 0
    start = time.perf_counter()
    try:
        trainer = Trainer(plan.cfg, run_dir, resume_from=resume_from)
    except Exception:
        if created or plan.action == "restart":  # a run that never started leaves nothing behind
            remove_run(run_dir)
        raise

    def save(how: str) -> dict[str, Any]:
        """compare.json with this invocation's time so far added to the earlier ones'."""
        wall = time.perf_counter() - start
        this_time = {"status": how, "from_step": from_step, "to_step": trainer.step_idx, "wall_s": wall}
        saved = {"wall_s": (record.get("wall_s") or 0.0) + wall, "algorithm": algo, "seed": seed,
                 "invocations": [*record.get("invocations", []), this_time]}
        _write_record(run_dir, saved)
        return saved

    def on_step(step: int, metrics: dict[str, float]) -> None:
        # after every step, so that a process killed from outside (no chance to write) has its time counted
        # up to its last step; "cut short" stays only if this invocation never ends
        save("cut short")
        if log_steps:  # an asynchronous run logs one agent's update per line: only the agents the line has
            ids = [a for a in trainer.agent_ids if f"agent/{a}/reward" in metrics] or trainer.agent_ids
            rewards = "  ".join(f"{a} {metrics.get(f'agent/{a}/reward', float('nan')):.2f}" for a in ids)
            log(f"    step {step}/{steps}  reward {rewards}")

    result = trainer.train(progress=on_step)
    record = save("stopped" if result["stopped"] else status)  # stopped: Ctrl-C or SIGTERM, resumable
    wall = record["invocations"][-1]["wall_s"]
    if result["stopped"]:
        log(f"{label}: stopped at step {trainer.step_idx}; run the same command again to resume")
        raise KeyboardInterrupt
    outcome = RunOutcome(algo, seed, run_dir, status, record["wall_s"], _final_accuracies(run_dir, steps))
    log(f"{label}: {status} in {wall:.1f} s; final greedy acc {_fmt_accs(outcome.final)}")
    return outcome


def _fmt_accs(accs: dict[str, float]) -> str:
    return ", ".join(f"{a} {v:.3f}" for a, v in accs.items()) or "(no final evaluation found)"


# ---- reading a run back --------------------------------------------------------------------------------

def _read_metrics(run_dir: Path, merge: bool = False) -> dict[int, dict[str, Any]]:
    """step → metrics (the last line of a step wins; ``merge``: the lines of a step are merged, as an
    asynchronous run logs an update and an evaluation at the same step)."""
    out: dict[int, dict[str, Any]] = {}
    for r in read_jsonl(run_dir / "metrics.jsonl"):
        step = int(r["step"])
        out[step] = {**out.get(step, {}), **r} if merge else r
    return out


@dataclass
class RunData:
    algo: str
    seed: int
    metrics: dict[int, dict[str, Any]]  # by logged step: an asynchronous run's count every agent's updates
    evals: dict[tuple[int, str], float]  # greedy accuracy
    sampled: dict[tuple[int, str], dict[str, float]] = field(default_factory=dict)  # avg@k, pass@k, k
    problems: dict[tuple[int, str], dict[str, dict[str, float]]] = field(default_factory=dict)  # see below
    mode: str = "lockstep"  # trainer.mode; evaluations are keyed by progress in trainer.steps units either way
    # asynchronous runs: agent → its version (its own update count) → the metrics line of that update; an
    # agent's own curves (ω, the cross window) are read against it, as a lock-step run's against its steps
    agent_updates: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)


def outputs_data(outcomes: list[RunOutcome], cfg: Config) -> list[RunData]:
    steps = cfg.trainer.steps
    out = []
    for o in outcomes:
        progress = async_progress(o.run_dir)
        # an asynchronous run's lines up to the step where its slowest agent reached trainer.steps
        last = steps if progress is None else max((s for s, p in progress.items() if p <= steps), default=0)
        metrics = {s: m for s, m in _read_metrics(o.run_dir, merge=progress is not None).items() if s <= last}
        evals = {k: v for k, v in _by_progress(o.run_dir, read_evals(o.run_dir)).items() if k[0] <= steps}
        sampled = {k: v for k, v in _by_progress(o.run_dir, read_sampled_evals(o.run_dir)).items()
                   if k[0] <= steps}
        problems = {k: v for k, v in _by_progress(o.run_dir, read_problem_records(o.run_dir)).items()
                    if k[0] <= steps}
        out.append(RunData(o.algo, o.seed, metrics, evals, sampled, problems,
                           "lockstep" if progress is None else "async",
                           {} if progress is None else agent_updates(metrics, [a.id for a in cfg.agents])))
    return out


def agent_updates(metrics: dict[int, dict[str, Any]], agents: list[str]) -> dict[str, dict[int, dict[str, Any]]]:
    """An asynchronous run's metrics lines by agent and version: the line where ``agent/<id>/version`` first
    reaches each value is that agent's update (an evaluation line repeats every agent's version after it).

    >>> lines = {1: {"agent/a/version": 1, "agent/a/omega/b": 0.5}, 2: {"agent/b/version": 1},
    ...          3: {"agent/a/version": 1, "agent/b/version": 1, "eval/a/greedy_acc": 0.2},
    ...          4: {"agent/a/version": 2, "agent/a/omega/b": 0.7}}
    >>> {v: line.get("agent/a/omega/b") for v, line in agent_updates(lines, ["a", "b"])["a"].items()}
    {1: 0.5, 2: 0.7}
    """
    out: dict[str, dict[int, dict[str, Any]]] = {a: {} for a in agents}
    for step in sorted(metrics):
        for a in agents:
            v = metrics[step].get(f"agent/{a}/version")
            if isinstance(v, int | float) and int(v) not in out[a]:
                out[a][int(v)] = metrics[step]
    return out


def read_problem_records(run_dir: Path) -> dict[tuple[int, str], dict[str, dict[str, float]]]:
    """(step, agent) → ``{"greedy": {problem id: reward}, "sampled": {problem id: mean of its k sampled
    rewards}}`` on the task's held-out split, from eval_problems.jsonl ("sampled" only where the run sampled;
    benchmark records are left out). Empty for a run without the file (one from before per-problem records).
    A record whose lists disagree in length is skipped with a warning; a repeated id keeps its last value."""
    out: dict[tuple[int, str], dict[str, dict[str, float]]] = {}
    path = run_dir / PROBLEM_RECORDS
    for r in read_problem_evals(run_dir):
        if not is_task_record(r) or not isinstance(r.get("ids"), list):
            continue
        ids, reward, sampled = [str(i) for i in r["ids"]], r.get("reward"), r.get("sampled")
        if not isinstance(reward, list) or len(reward) != len(ids) or (
                sampled is not None and (not isinstance(sampled, list) or len(sampled) != len(ids))):
            logger.warning("%s: step %s, agent %s: ids, reward and sampled differ in length; record skipped",
                           path, r["step"], r["agent"])
            continue
        rec = {"greedy": {i: float(v) for i, v in zip(ids, reward, strict=True)}}
        if sampled is not None:
            rec["sampled"] = {i: sum(map(float, v)) / len(v) for i, v in zip(ids, sampled, strict=True) if v}
        out[int(r["step"]), str(r["agent"])] = rec
    return out
