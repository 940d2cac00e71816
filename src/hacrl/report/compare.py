"""``hacrl compare``: train every algorithm × seed on one config, then write a comparison report::

    output_dir/
      runs/<algo>/seed-<s>/   ordinary run directories (see docs/architecture.md), plus compare.json
                              (the measured wall time of the run, over the invocations that trained it)
      report.md               the command and config, accuracy curves and tables, collaboration diagnostics
      summary.json            every number in the report, machine-readable
      plots/*.png             curve-<agent>.png (accuracy by step and answers), omega.png, cross-window.png

Runs are resumable: a run whose final checkpoint (step == trainer.steps) exists is reused, one with an
earlier checkpoint is resumed from it, and a run directory without any complete checkpoint is wiped and
trained from scratch, unless its record says it finished (checkpoints removed by ``--keep-checkpoints none``
or by hand): that one is reused from its records. Seed ``s`` sets ``run.seed=s`` and nothing else, so for a
given seed every algorithm starts from the same checkpoints and sees the same prompt stream.

The parts: :mod:`hacrl.report.runs` (one run directory: plan, train or resume, read back),
:mod:`hacrl.report.stats` (the paired statistics, :func:`~hacrl.report.stats.paired_difference`: pure, tested
on a hand-made example), :mod:`hacrl.report.summary` (the numbers and the automatic reading),
:mod:`hacrl.report.plots` and :mod:`hacrl.report.render` (report.md). This module checks the arguments and
runs them in order.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hacrl.config import Config, ConfigError, derive, load_config
from hacrl.errors import InputError
from hacrl.learner.algorithms import check_run, resolve
from hacrl.report.parallel import JOBS_BACKENDS, Job, lane_threads, lanes_line, run_jobs
from hacrl.report.plots import write_plots
from hacrl.report.reading import parse_variant
from hacrl.report.render import render_report
from hacrl.report.runs import (
    RunOutcome,
    RunPlan,
    checkpoint_step,
    execute_run,
    outputs_data,
    plan_run,
    read_record,
    remove_checkpoints,
)
from hacrl.report.summary import summarize
from hacrl.run.files import write_atomic
from hacrl.run.rundir import lock_holder

# ---- argument checks --------------------------------------------------------------------------------

KEEP_CHECKPOINTS = ("all", "none")  # what stays of a finished run's checkpoints/


def parse_algos(algos: str | Sequence[str]) -> list[str]:
    """``"hacpo,gspo"`` or a list → validated names, in order; raises ConfigError with one line.

    A name may carry its own settings, ``NAME@key=value[@key=value...]`` (a bare key is in the ``algorithm``
    section): ``hacpo,hacpo@delta=0.6`` compares two windows in one report."""
    names = [a.strip() for a in (algos.split(",") if isinstance(algos, str) else algos)]
    if not names or any(not a for a in names):
        raise ConfigError(f"--algos {','.join(names)!r}: give comma-separated names, e.g. hacpo,gspo,gspo2x")
    for a in names:
        parse_variant(a)
    dupes = sorted({a for a in names if names.count(a) > 1})
    if dupes:
        raise ConfigError(f"--algos: {dupes[0]!r} is listed twice; list each algorithm once")
    return names


def parse_baselines(baselines: str | Sequence[str], algos: Sequence[str]) -> list[str]:
    """``--baselines``: algorithms of the comparison that every other one is paired against in the report."""
    names = [b.strip() for b in (baselines.split(",") if isinstance(baselines, str) else baselines)]
    missing = [b for b in names if b not in algos]
    if not names or missing or any(not b for b in names):
        raise ConfigError(f"--baselines {','.join(names)!r}: give algorithms listed in --algos "
                          f"({','.join(algos)})")
    return names


def parse_seeds(seeds: int | str | Sequence[int]) -> list[int]:
    """A count N (seeds 0..N−1), or a list of seeds and inclusive ranges: ``"0,3,7"``, ``"3-5"``, ``"0,4-6"``;
    a single seed is a range of one (``"3-3"``) or a list with a trailing comma (``"3,"``). Raises
    ConfigError with one line."""
    if isinstance(seeds, str):
        text = seeds.strip()
        is_list = "," in text or "-" in text
        try:
            values: list[int] = []
            for part in (s.strip() for s in text.split(",")):
                if not part and text.endswith(","):
                    continue  # "3," is the list [3]
                first, dash, last = part.partition("-")
                if dash and int(last) < int(first):
                    raise ValueError(part)
                values += list(range(int(first), int(last) + 1)) if dash else [int(part)]
        except ValueError:
            raise ConfigError(f"--seeds {seeds!r}: give a number of seeds (e.g. 5) or a list of seeds and "
                              "ranges (e.g. 0,3,7 or 4-6; one seed: 3-3)") from None
        seeds = values if is_list else values[0]
    if isinstance(seeds, int):
        if seeds < 1:
            raise ConfigError(f"--seeds {seeds}: a bare number counts seeds, and at least 1 seed is needed (2 or more "
                              "for the paired tests); seed 0 alone is 0-0")
        return list(range(seeds))
    out = [int(s) for s in seeds]
    if not out:
        raise ConfigError("--seeds: at least 1 seed is needed (2 or more for the paired tests)")
    if any(s < 0 for s in out):
        raise ConfigError(f"--seeds {','.join(map(str, out))}: seeds must be ≥ 0")
    if len(set(out)) != len(out):
        raise ConfigError(f"--seeds {','.join(map(str, out))}: a seed is listed twice")
    return out


def _split_source(source: str | Path) -> tuple[str | None, Path | None]:
    """A preset name, or a YAML file (a Path, a name ending in .yaml/.yml or holding a slash, a file)."""
    if isinstance(source, Path) or source.endswith((".yaml", ".yml")) or os.sep in source \
            or Path(source).is_file():
        return None, Path(source)
    return source, None


# ---- running the comparison ------------------------------------------------------------------------

def default_command(preset: str | None, config_path: Path | None, algos: Sequence[str], seeds: Sequence[int],
                    overrides: Sequence[str], output_dir: Path, baselines: Sequence[str] | None = None) -> str:
    parts = ["hacrl", "compare"]
    parts += ["--preset", preset] if preset else []
    parts += ["--config", str(config_path)] if config_path else []
    parts += ["--algos", ",".join(algos)]
    counted = list(seeds) == list(range(len(seeds)))
    parts += ["--seeds", str(len(seeds)) if counted else ",".join(map(str, seeds))]
    for o in overrides:
        parts += ["--set", o]
    if baselines:
        parts += ["--baselines", ",".join(baselines)]
    parts += ["--output", str(output_dir)]
    return shlex.join(parts)


def run_comparison(
    source: str | Path | None,
    algos: str | Sequence[str],
    seeds: int | str | Sequence[int],
    overrides: Sequence[str] | None,
    output_dir: str | Path,
    *,
    log: Callable[[str], None] = print,
    log_steps: bool = False,
    command: str | None = None,
    baselines: str | Sequence[str] | None = None,
    keep_checkpoints: str = "all",
    dry_run: bool = False,
    report_only: bool = False,
    config_path: str | Path | None = None,
    jobs: int = 1,
    jobs_backend: str = "local",
) -> Path | None:
    """Train (or reuse) every algorithm × seed and write ``report.md``, ``summary.json`` and ``plots/``.

    ``source`` is a preset name or a YAML config path (None: the default preset, tiny-model, unless
    ``config_path`` is given); ``config_path`` is a YAML file layered on the preset ``source`` (later wins, as
    ``hacrl train --preset X --config Y``); seed ``s``
    adds the override ``run.seed=s`` and the algorithm ``algorithm.name=<algo>`` after ``overrides``.
    ``keep_checkpoints="none"`` deletes each run's checkpoints once it is finished (it stays reusable: see
    :mod:`hacrl.report.runs`). ``dry_run``: check everything and log what each run would do (with the time
    left, estimated from finished runs of the same algorithm), train nothing, write nothing, return None.
    ``report_only``: the report from the finished runs among those selected, training nothing; the others are
    logged as left out (each algorithm needs one finished run; the paired statistics use the seeds both sides of
    a pair finished).
    ``jobs``: the runs to train go ``jobs`` at a time, each in its own process (``jobs_backend="local"``) or
    Ray task (``"ray"``, on the cluster at ``backend.address``), into the same directories and records as one
    at a time (:mod:`hacrl.report.parallel`); each local lane gets ``trainer.threads`` = cores // jobs unless
    ``overrides`` set it.
    Returns the path of report.md. Raises ConfigError (one line) on bad input before any training.
    """
    if keep_checkpoints not in KEEP_CHECKPOINTS:
        raise ConfigError(f"--keep-checkpoints must be one of {', '.join(KEEP_CHECKPOINTS)}, "
                          f"got {keep_checkpoints!r}")
    algos = parse_algos(algos)
    seed_list = parse_seeds(seeds)
    paired_with = None if baselines is None else parse_baselines(baselines, algos)
    overrides = list(overrides or [])
    for o in overrides:
        key = o.split("=", 1)[0].strip()
        if key in ("algorithm.name", "run.seed"):
            raise ConfigError(f"--set {key}: compare sets it for every run; use --algos / --seeds instead")
    preset, path = _split_source(source) if source is not None else \
        (None if config_path is not None else "tiny-model", None)
    if config_path is not None and path is not None:
        raise ConfigError(f"compare: two config files ({path}, {config_path}); give one --config")
    config_path = Path(config_path) if config_path is not None else path
    output_dir = Path(output_dir)
    tasks: dict[tuple[str, int, int], Any] = {}  # built once per task, for the epoch counts
    base = _epochs_counted(load_config(preset, config_path, overrides), tasks)
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: give 1 or more runs to train at a time")
    if jobs_backend not in JOBS_BACKENDS:
        raise ConfigError(f"--jobs-backend must be one of {', '.join(JOBS_BACKENDS)}, got {jobs_backend!r}")
    threads = _lane_threads(overrides, jobs, jobs_backend)
    lane = [f"trainer.threads={threads}"] if threads else []  # the runs' own; not in the report's overrides
    configs = _run_configs(preset, config_path, [*overrides, *lane], algos, seed_list, tasks)
    if not report_only:  # a report from finished runs needs no model (one whose package is gone still reports)
        _check_models(base)
    command = command or default_command(preset, config_path, algos, seed_list, overrides, output_dir, paired_with)

    # every run directory is checked (config, step count) before anything trains
    # seed-major: a comparison stopped part-way leaves whole seeds (every algorithm, paired), not whole algorithms
    order = sorted(configs, key=lambda k: (seed_list.index(k[1]), algos.index(k[0])))
    plans = [plan_run(configs[algo, s], output_dir / "runs" / algo / f"seed-{s}", label=algo) for algo, s in order]
    counts = {a: sum(p.action == a for p in plans) for a in ("reuse", "resume", "restart", "train")}
    log(f"hacrl: comparing {', '.join(algos)} over {len(seed_list)} seed{'s' if len(seed_list) != 1 else ''} "
        f"in {output_dir}: {len(plans)} runs ({', '.join(f'{n} to {a}' for a, n in counts.items() if n)})")
    if dry_run and report_only:
        raise ConfigError("compare: --dry-run and --report-only together; give one")
    # a run another process is training (one compare per algorithm or seed, side by side): said before anything
    # trains, not hours later when this invocation reaches it
    busy = {(p.algo, p.seed): holder for p in plans if p.action != "reuse" and (holder := lock_holder(p.run_dir))}
    todo = sum(p.action != "reuse" for p in plans)
    if jobs > 1 and todo and not report_only:
        log(lanes_line(jobs, todo, threads or (plans[0].cfg.trainer.threads if plans else None), jobs_backend))
    if dry_run:
        for line in plan_lines(plans, busy):
            log(line)
        return None
    if busy and not report_only:
        (algo, seed), holder = next(iter(busy.items()))
        raise ConfigError(f"compare: {output_dir / 'runs' / algo / f'seed-{seed}'} is being trained by another "
                          f"hacrl process ({holder}); wait for it, or leave {algo} seed {seed} out of "
                          f"--algos/--seeds (--dry-run lists every run's state)")
    if report_only:
        plans = finished_only(plans, algos, output_dir, log)
    start = time.perf_counter()
    # --keep-checkpoints none: each run's go as it finishes (a reused one's at once), not when the comparison
    # ends, so that one stopped part-way keeps no finished run's checkpoints
    finished = (lambda plan: _remove_checkpoints(plan, log)) if keep_checkpoints == "none" else (lambda plan: None)
    if jobs > 1 and todo > 0 and not report_only:
        outcomes = _run_in_lanes(plans, jobs, jobs_backend, base.backend.address, log, log_steps, finished)
    else:
        outcomes = []
        for i, plan in enumerate(plans, 1):
            outcomes.append(execute_run(plan, f"[{i}/{len(plans)}] {plan.algo} seed {plan.seed}", log, log_steps))
            finished(plan)
    wall = time.perf_counter() - start
    meta = {
        "command": command, "preset": preset, "config_path": str(config_path) if config_path else None,
        "overrides": overrides, "algorithms": algos, "seeds": seed_list, "wall_s": wall,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if paired_with is not None:
        meta["baselines"] = paired_with
    return write_report(base, meta, outcomes, output_dir)


def _remove_checkpoints(plan: RunPlan, log: Callable[[str], None]) -> None:
    if remove_checkpoints(plan.run_dir):
        log(f"    removed the checkpoints of {plan.run_dir} (--keep-checkpoints none)")


def _lane_threads(overrides: Sequence[str], jobs: int, jobs_backend: str) -> int | None:
    """torch threads of each local lane: the cores // ``jobs`` (at least 1), unless ``--set trainer.threads``
    says otherwise (None: the runs keep their config's); Ray tasks keep their config's (they reserve it)."""
    if jobs == 1 or jobs_backend != "local" or any(o.split("=", 1)[0].strip() == "trainer.threads"
                                                   for o in overrides):
        return None
    return lane_threads(jobs)


def _run_in_lanes(plans: Sequence[RunPlan], jobs: int, backend: str, address: str | None,
                  log: Callable[[str], None], log_steps: bool,
                  finished: Callable[[RunPlan], None]) -> list[RunOutcome]:
    """The outcomes of ``plans`` in their order: the finished runs read here, the others trained ``jobs`` at a
    time (:func:`hacrl.report.parallel.run_jobs`); ``finished(plan)`` as each run is read or finishes."""
    labels = [f"[{i}/{len(plans)}] {p.algo} seed {p.seed}" for i, p in enumerate(plans, 1)]
    outcomes: dict[int, RunOutcome] = {}
    lanes = []
    for i, (plan, label) in enumerate(zip(plans, labels, strict=True)):
        if plan.action == "reuse":
            outcomes[i] = execute_run(plan, label, log, log_steps)
            finished(plan)
        else:
            lanes.append(Job(i, plan, label))
    outcomes.update(run_jobs(lanes, jobs, log, log_steps, backend, address, on_done=lambda job: finished(job.plan)))
    return [outcomes[i] for i in range(len(plans))]


def _run_configs(preset: str | None, config_path: Path | None, overrides: list[str], algos: list[str],
                 seeds: list[int], tasks: dict[tuple[str, int, int], Any]) -> dict[tuple[str, int], Config]:
    """Every run's config, algorithm × seed, each loaded, its epochs counted (:func:`_epochs_counted`) and
    derived, so that any bad combination fails before anything trains."""
    configs: dict[tuple[str, int], Config] = {}
    for algo in algos:
        name, own = parse_variant(algo)
        for s in seeds:
            cfg = load_config(preset, config_path, [*overrides, *own, f"algorithm.name={name}", f"run.seed={s}"])
            cfg = _epochs_counted(cfg, tasks)
            try:  # the algorithm as the trainer composes it; ingredients and settings that do not fit it refused
                a = resolve(cfg.algorithm)
                check_run(cfg, a)
            except ValueError as exc:
                raise ConfigError(f"--algos {algo!r}: {exc}") from None
            derive(cfg, shares_pool=a.shares_pool, rollout_multiplier=a.rollout_multiplier, needs_groups=True)
            configs[algo, s] = cfg
    return configs


def _epochs_counted(cfg: Config, tasks: dict[tuple[str, int, int], Any]) -> Config:
    """``cfg`` with ``trainer.steps`` counted from ``trainer.num_train_epochs`` as the trainer counts it
    (:func:`hacrl.data.factory.with_task_epochs`), so that runs are planned, resumed and reused at that count;
    each task is built once into ``tasks``. Raises ConfigError (a task without epochs, steps that disagree)."""
    from hacrl.data.factory import build_task, with_task_epochs

    if cfg.trainer.num_train_epochs is None:
        return cfg
    key = (cfg.task.model_dump_json(), cfg.run.seed, cfg.rollout.max_new_tokens)
    if key not in tasks:
        tasks[key] = build_task(cfg.task, seed=cfg.run.seed, max_new_tokens=cfg.rollout.max_new_tokens)
    return with_task_epochs(cfg, tasks[key])


def summary_text(summary: dict[str, Any]) -> str:
    """summary.json's text: one top-level key a line, each value without spaces (a third of the indented size,
    and a diff still names the keys that changed).

    >>> print(summary_text({"a": 1, "b": {"c": [1.5, None]}}))
    {
    "a": 1,
    "b": {"c":[1.5,null]}
    }
    """
    rows = [f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'), allow_nan=False)}" for k, v in summary.items()]
    return "{\n" + ",\n".join(rows) + "\n}\n"


def write_report(base: Config, meta: dict[str, Any], outcomes: list[RunOutcome], output_dir: Path) -> Path:
    """summary.json, plots/ and report.md of the finished ``outcomes``; returns the path of report.md."""
    summary = summarize(base, meta, outcomes, outputs_data(outcomes, base))
    plots = write_plots(summary, output_dir / "plots")
    summary["plots"] = [str(p.relative_to(output_dir)) for p in plots]
    output_dir.mkdir(parents=True, exist_ok=True)
    # each file whole or not at all (a full disk is one line, and the same command writes them again)
    write_atomic(output_dir / "summary.json", summary_text(_jsonable(summary)))
    report = output_dir / "report.md"
    write_atomic(report, render_report(summary))
    return report


def finished_only(plans: Sequence[RunPlan], algos: Sequence[str], output_dir: Path,
                  log: Callable[[str], None]) -> list[RunPlan]:
    """The finished runs of ``plans`` (``--report-only``), each other one logged as left out; one line when an
    algorithm has none."""
    for p in plans:
        if p.action != "reuse":
            log(f"    left out of the report: {p.algo} seed {p.seed} (not finished: {p.action})")
    kept = [p for p in plans if p.action == "reuse"]
    missing = [a for a in algos if not any(p.algo == a for p in kept)]
    if missing:
        raise ConfigError(f"--report-only: no finished run of {', '.join(missing)} in {output_dir}; "
                          "drop it from --algos, or train it (the same command without --report-only)")
    return kept


def seconds_per_step(record: dict[str, Any], steps: int) -> float | None:
    """A finished run's measured seconds per step, from its compare.json: the invocations' time over the steps
    they covered (a record that lost an invocation still gives the rate of the ones it kept), else its total
    over ``steps``; None without a measured time.

    >>> seconds_per_step({"wall_s": 3000.0, "invocations": [{"from_step": 20, "to_step": 30, "wall_s": 3000.0}]},
    ...                  30)
    300.0
    >>> seconds_per_step({"wall_s": 600.0}, 30)
    20.0
    >>> seconds_per_step({"wall_s": 600.0, "invocations": [{"from_step": 0, "to_step": 60, "wall_s": 600.0}]}, 30)
    20.0
    """
    kept = [i for i in record.get("invocations") or []
            if i.get("wall_s") and int(i.get("to_step") or 0) > int(i.get("from_step") or 0)]
    # an asynchronous run's to_step counts every agent's updates, not steps: its total over the steps then
    if kept and max(int(i["to_step"]) for i in kept) <= steps:
        return sum(float(i["wall_s"]) for i in kept) / sum(int(i["to_step"]) - int(i["from_step"]) for i in kept)
    wall = record.get("wall_s")
    return float(wall) / steps if wall and steps else None


def plan_lines(plans: Sequence[RunPlan], busy: dict[tuple[str, int], str] | None = None) -> list[str]:
    """One line per run saying what compare would do with it (``busy``: (algo, seed) → the process training it
    now), then the estimated time left: each unfinished run's remaining steps at the measured seconds per step
    of this algorithm's finished runs."""
    per_step: dict[str, list[float]] = {}
    for p in plans:
        rate = seconds_per_step(read_record(p.run_dir), p.cfg.trainer.steps) if p.action == "reuse" else None
        if rate:
            per_step.setdefault(p.algo, []).append(rate)
    lines, left, unknown = [], 0.0, []
    for i, p in enumerate(plans, 1):
        steps = p.cfg.trainer.steps
        done = checkpoint_step(p.checkpoint) if p.action == "resume" and p.checkpoint else 0
        what = {"reuse": "finished: reused", "resume": f"resume from step {done} of {steps}",
                "restart": f"restart from scratch ({steps} steps; no complete checkpoint)",
                "train": f"train {steps} steps"}[p.action]
        holder = (busy or {}).get((p.algo, p.seed))
        lines.append(f"[{i}/{len(plans)}] {p.algo} seed {p.seed}: {what}"
                     + (f" (being trained now by {holder})" if holder else ""))
        if p.action != "reuse":
            rates = per_step.get(p.algo)
            if rates:
                left += sum(rates) / len(rates) * (steps - done)
            else:
                unknown.append(p.algo)
    todo = sum(p.action != "reuse" for p in plans)
    span = f"{left:.0f} s" if left < 90 else f"{left / 60:.0f} min"
    estimate = f"about {span} at the finished runs' pace" if left else "no estimate"
    if unknown:
        estimate += f" (no finished run of {', '.join(dict.fromkeys(unknown))} to estimate from)"
    lines.append(f"dry run: {todo} of {len(plans)} runs to train; {estimate}; nothing trained or written")
    return lines


def _check_models(cfg: Config) -> None:
    """Every agent's model can be had, checked without making any: a pretrained builtin that is not in the
    cache yet is made by the first run that trains (never by a dry run, nor when every run is reused)."""
    from hacrl.agents.gguf import PRETRAINED, check_pretrained
    from hacrl.backends.resolve import resolve_model_path

    for spec in cfg.agents:
        name = spec.model.removeprefix("builtin:")
        if spec.model.startswith("builtin:") and name in PRETRAINED:
            try:
                check_pretrained(name)
            except InputError as exc:
                raise ConfigError(f"agents.{spec.id}.model: {exc}") from None
            continue
        try:
            path = resolve_model_path(spec.model)
        except FileNotFoundError as exc:
            raise ConfigError(f"agents.{spec.id}.model: {exc}") from None
        if not path.is_dir():
            raise ConfigError(f"agents.{spec.id}.model: {path} is not a directory; give a Hugging Face model "
                              f"directory")


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, Path):
        return str(x)
    return x
