"""``hacrl compare``: train every algorithm × seed on one config, then write a comparison report.

    output_dir/
      runs/<algo>/seed-<s>/   ordinary run directories (see docs/architecture.md), plus compare.json
                              (the measured wall time of the run, over the invocations that trained it)
      report.md               the command and config, accuracy curves and tables, collaboration diagnostics
      summary.json            every number in the report, machine-readable
      plots/*.png             accuracy-<agent>.png, omega.png, cross-window.png

Runs are resumable: a run whose final checkpoint (step == trainer.steps) exists is reused, one with an
earlier checkpoint is resumed from it, and a run directory without any complete checkpoint is wiped and
trained from scratch. Seed ``s`` sets ``run.seed=s`` and nothing else, so for a given seed every algorithm
starts from the same checkpoints and sees the same prompt stream.

The paired statistics live in :func:`paired_difference` (pure, tested on a hand-made example).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hacrl.config import Config, ConfigError, derive, load_config
from hacrl.trainer.algorithms import ALGORITHMS

BASELINES = ("gspo", "gspo2x")  # the report's Δ columns, for those present in the comparison
RUN_RECORD = "compare.json"
# Config keys that do not change a run's trajectory: a finished run made with other values is still reused.
# trainer.steps may grow (a finished shorter run is resumed and extended), never shrink.
_NEUTRAL_KEYS = {
    "trainer.steps", "trainer.keep_last", "trainer.checkpoint_every", "trainer.log_samples",
    "trainer.threads", "trainer.eval_every", "trainer.micro_batch_size", "run.tensorboard", "run.name",
    "run.output_dir", "task.reward_timeout_s",
}


# ---- statistics -----------------------------------------------------------------------------------

def paired_difference(a: Sequence[float], b: Sequence[float]) -> dict[str, float | int | None]:
    """Paired comparison of ``a`` and ``b`` (same seeds, same order): statistics of d_i = a_i − b_i.

    Returns ``{mean, sd, se, t, p, n}``: mean of d, its sample standard deviation (n − 1), the standard
    error sd/√n, the paired t statistic mean/se and its two-sided p-value with n − 1 degrees of freedom
    (``scipy.stats.ttest_rel``; None when scipy is not installed). With fewer than 2 pairs only ``mean``
    and ``n`` are set. When every difference is the same (sd = 0) the t statistic degenerates: t = 0 and
    p = 1 if they are all 0 (no difference at all), t = ±inf and p = 0 otherwise.
    """
    if len(a) != len(b):
        raise ValueError(f"paired_difference: {len(a)} values against {len(b)}; pair them by seed")
    d = [float(x) - float(y) for x, y in zip(a, b, strict=True)]
    n = len(d)
    out: dict[str, float | int | None] = {"mean": None, "sd": None, "se": None, "t": None, "p": None, "n": n}
    if n == 0:
        return out
    mean = sum(d) / n
    mean = 0.0 if abs(mean) < 1e-12 else mean  # float noise of equal values, e.g. 0.3 − 0.1 − 0.2
    out["mean"] = mean
    if n < 2:
        return out
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    se = sd / math.sqrt(n)
    out.update(sd=sd, se=se)
    if sd <= 1e-12 * max(1.0, abs(mean)):
        out.update(sd=0.0, se=0.0, t=0.0 if mean == 0 else math.copysign(math.inf, mean),
                   p=1.0 if mean == 0 else 0.0)
        return out
    out["t"] = mean / se
    try:
        from scipy.stats import ttest_rel
    except ImportError:
        return out
    out["p"] = float(ttest_rel(list(map(float, a)), list(map(float, b))).pvalue)
    return out


def _mean_sd(values: Sequence[float]) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return None, None
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None
    if sd is not None and sd < 1e-12 * max(1.0, abs(mean)):
        sd = 0.0
    return mean, sd


# ---- argument checks --------------------------------------------------------------------------------

def parse_algos(algos: str | Sequence[str]) -> list[str]:
    """``"hacpo,gspo"`` or a list → validated names, in order; raises ConfigError with one line."""
    names = [a.strip() for a in (algos.split(",") if isinstance(algos, str) else algos)]
    if not names or any(not a for a in names):
        raise ConfigError(f"--algos {','.join(names)!r}: give comma-separated names, e.g. hacpo,gspo,gspo2x")
    for a in names:
        if a not in ALGORITHMS:
            raise ConfigError(f"--algos: unknown algorithm {a!r}; valid: {', '.join(ALGORITHMS.names())}")
    dupes = sorted({a for a in names if names.count(a) > 1})
    if dupes:
        raise ConfigError(f"--algos: {dupes[0]!r} is listed twice; list each algorithm once")
    return names


def parse_seeds(seeds: int | str | Sequence[int]) -> list[int]:
    """A count N (seeds 0..N−1) or an explicit list ``"0,3,7"``; raises ConfigError with one line."""
    if isinstance(seeds, str):
        parts = [s.strip() for s in seeds.split(",")]
        try:
            values = [int(s) for s in parts]
        except ValueError:
            raise ConfigError(f"--seeds {seeds!r}: give a number of seeds (e.g. 5) or a list (e.g. 0,3,7)"
                              ) from None
        seeds = values[0] if len(values) == 1 else values
    if isinstance(seeds, int):
        if seeds < 1:
            raise ConfigError(f"--seeds {seeds}: at least 1 seed is needed (2 or more for the paired tests)")
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


# ---- running ----------------------------------------------------------------------------------------

@dataclass
class RunOutcome:
    algo: str
    seed: int
    run_dir: Path
    status: str  # trained | resumed | restarted | reused
    wall_s: float | None  # measured, over all invocations that trained it (None: not recorded)
    final: dict[str, float] = field(default_factory=dict)


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for k, v in tree.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    if isinstance(tree, list) and tree and all(isinstance(x, dict) and "id" in x for x in tree):
        out = {}
        for x in tree:
            out.update(_flatten(x, f"{prefix}{x['id']}."))
        return out
    return {prefix[:-1]: tree}


def _config_mismatch(run_dir: Path, cfg: Config) -> str | None:
    """The first trajectory-relevant value where the run's saved config differs from ``cfg`` (None: same).

    Keys only one side has (a field added or removed between hacrl versions) are skipped; the agent list
    must match exactly.
    """
    saved_path = run_dir / "config.yaml"
    if not saved_path.is_file():
        return None
    saved = yaml.safe_load(saved_path.read_text()) or {}
    old_ids = [a.get("id") for a in saved.get("agents", []) if isinstance(a, dict)]
    new_ids = [a.id for a in cfg.agents]
    if old_ids != new_ids:
        return f"agents {old_ids}, now {new_ids}"
    old, new = _flatten(saved), _flatten(cfg.model_dump(mode="json"))
    for key in sorted(set(old) & set(new)):
        if key not in _NEUTRAL_KEYS and old[key] != new[key]:
            return f"{key}={old[key]!r}, now {new[key]!r}"
    return None


def _checkpoint_step(path: Path) -> int:
    return int(path.name.split("-")[1])


def _read_record(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((run_dir / RUN_RECORD).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _write_record(run_dir: Path, record: dict[str, Any]) -> None:
    tmp = run_dir / (RUN_RECORD + ".tmp")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(run_dir / RUN_RECORD)


def _final_accuracies(run_dir: Path, step: int) -> dict[str, float]:
    return {agent: acc for (s, agent), acc in _read_eval(run_dir).items() if s == step}


@dataclass
class RunPlan:
    algo: str
    seed: int
    cfg: Config
    run_dir: Path
    action: str  # reuse | resume | restart | train
    checkpoint: Path | None  # the latest complete checkpoint (reuse, resume)


def plan_run(cfg: Config, run_dir: Path) -> RunPlan:
    """What to do with one run directory; raises ConfigError when it cannot be reused or resumed safely."""
    from hacrl.trainer.checkpoint import latest_checkpoint

    algo, seed, steps = cfg.algorithm.name, cfg.run.seed, cfg.trainer.steps
    latest = latest_checkpoint(run_dir / "checkpoints")
    if latest is None:
        busy = run_dir.exists() and any(run_dir.iterdir())
        return RunPlan(algo, seed, cfg, run_dir, "restart" if busy else "train", None)
    mismatch = _config_mismatch(run_dir, cfg)
    if mismatch:
        raise ConfigError(f"{run_dir} was trained with {mismatch}; use another --output or delete that "
                          f"run directory")
    done = _checkpoint_step(latest)
    if done > steps:
        raise ConfigError(f"{run_dir} already has {done} steps, more than trainer.steps={steps}; use "
                          f"another --output or set trainer.steps={done}")
    return RunPlan(algo, seed, cfg, run_dir, "reuse" if done == steps else "resume", latest)


def _execute(plan: RunPlan, label: str, log: Callable[[str], None], log_steps: bool) -> RunOutcome:
    from hacrl.trainer.trainer import Trainer

    algo, seed, run_dir, steps = plan.algo, plan.seed, plan.run_dir, plan.cfg.trainer.steps
    if plan.action == "reuse":
        outcome = RunOutcome(algo, seed, run_dir, "reused", _read_record(run_dir).get("wall_s"),
                             _final_accuracies(run_dir, steps))
        log(f"{label}: reused (finished run in {run_dir}); final greedy acc {_fmt_accs(outcome.final)}")
        return outcome
    record, resume_from = {}, None
    if plan.action == "resume":
        record, resume_from = _read_record(run_dir), plan.checkpoint
        log(f"{label}: resuming from step {_checkpoint_step(resume_from)} of {steps}")
    elif plan.action == "restart":
        shutil.rmtree(run_dir)
        log(f"{label}: no complete checkpoint in {run_dir}; restarting it from scratch")
    else:
        log(f"{label}: training {steps} steps")
    status = {"resume": "resumed", "restart": "restarted", "train": "trained"}[plan.action]
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        trainer = Trainer(plan.cfg, run_dir, resume_from=resume_from)
    except Exception:
        if created:  # a run that never started leaves no directory
            shutil.rmtree(run_dir, ignore_errors=True)
        raise

    def on_step(step: int, metrics: dict[str, float]) -> None:
        rewards = "  ".join(f"{a.id} {metrics.get(f'agent/{a.id}/reward', float('nan')):.2f}"
                            for a in trainer.agents)
        log(f"    step {step}/{steps}  reward {rewards}")

    result = trainer.train(progress=on_step if log_steps else None)
    wall = time.perf_counter() - start
    this_time = {"status": status, "from_step": _checkpoint_step(resume_from) if resume_from else 0,
                 "to_step": trainer.step_idx, "wall_s": wall}
    record = {"wall_s": (record.get("wall_s") or 0.0) + wall, "algorithm": algo, "seed": seed,
              "invocations": [*record.get("invocations", []), this_time]}
    _write_record(run_dir, record)
    if result["stopped"]:
        log(f"{label}: stopped at step {trainer.step_idx}; run the same command again to resume")
        raise KeyboardInterrupt
    outcome = RunOutcome(algo, seed, run_dir, status, record["wall_s"], _final_accuracies(run_dir, steps))
    log(f"{label}: {status} in {wall:.1f} s; final greedy acc {_fmt_accs(outcome.final)}")
    return outcome


def _fmt_accs(accs: dict[str, float]) -> str:
    return ", ".join(f"{a} {v:.3f}" for a, v in accs.items()) or "(no final evaluation found)"


def default_command(preset: str | None, config_path: Path | None, algos: Sequence[str], seeds: Sequence[int],
                    overrides: Sequence[str], output_dir: Path) -> str:
    parts = ["hacrl", "compare"]
    parts += ["--preset", preset] if preset else ["--config", str(config_path)] if config_path else []
    parts += ["--algos", ",".join(algos)]
    counted = list(seeds) == list(range(len(seeds)))
    parts += ["--seeds", str(len(seeds)) if counted else ",".join(map(str, seeds))]
    for o in overrides:
        parts += ["--set", o]
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
) -> Path:
    """Train (or reuse) every algorithm × seed and write ``report.md``, ``summary.json`` and ``plots/``.

    ``source`` is a preset name or a YAML config path (None: the default preset, tiny-model); seed ``s``
    adds the override ``run.seed=s`` and the algorithm ``algorithm.name=<algo>`` after ``overrides``.
    Returns the path of report.md. Raises ConfigError (one line) on bad input before any training.
    """
    algos = parse_algos(algos)
    seed_list = parse_seeds(seeds)
    overrides = list(overrides or [])
    for o in overrides:
        key = o.split("=", 1)[0].strip()
        if key in ("algorithm.name", "run.seed"):
            raise ConfigError(f"--set {key}: compare sets it for every run; use --algos / --seeds instead")
    preset, config_path = _split_source(source) if source is not None else ("tiny-model", None)
    output_dir = Path(output_dir)
    base = load_config(preset, config_path, overrides)
    configs: dict[tuple[str, int], Config] = {}
    for algo in algos:  # every combination is checked before anything trains
        a = ALGORITHMS.get(algo)
        for s in seed_list:
            cfg = load_config(preset, config_path, [*overrides, f"algorithm.name={algo}", f"run.seed={s}"])
            derive(cfg, shares_pool=a.shares_pool, rollout_multiplier=a.rollout_multiplier, needs_groups=True)
            configs[algo, s] = cfg
    _check_models(base)
    command = command or default_command(preset, config_path, algos, seed_list, overrides, output_dir)

    # every run directory is checked (config, step count) before anything trains
    plans = [plan_run(cfg, output_dir / "runs" / algo / f"seed-{s}") for (algo, s), cfg in configs.items()]
    counts = {a: sum(p.action == a for p in plans) for a in ("reuse", "resume", "restart", "train")}
    log(f"hacrl: comparing {', '.join(algos)} over {len(seed_list)} seed{'s' if len(seed_list) != 1 else ''} "
        f"in {output_dir}: {len(plans)} runs ({', '.join(f'{n} to {a}' for a, n in counts.items() if n)})")
    start = time.perf_counter()
    outcomes = [_execute(plan, f"[{i}/{len(plans)}] {plan.algo} seed {plan.seed}", log, log_steps)
                for i, plan in enumerate(plans, 1)]
    wall = time.perf_counter() - start

    meta = {
        "command": command, "preset": preset, "config_path": str(config_path) if config_path else None,
        "overrides": overrides, "algorithms": algos, "seeds": seed_list, "wall_s": wall,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    data = outputs_data(outcomes, base)
    summary = summarize(base, meta, outcomes, data)
    plots = write_plots(summary, output_dir / "plots")
    summary["plots"] = [str(p.relative_to(output_dir)) for p in plots]
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "summary.json").write_text(json.dumps(_jsonable(summary), indent=2, allow_nan=False))
    report = output_dir / "report.md"
    report.write_text(render_report(summary))
    return report


def _check_models(cfg: Config) -> None:
    from hacrl.trainer.trainer import resolve_model_path

    for spec in cfg.agents:
        try:
            path = resolve_model_path(spec.model)
        except FileNotFoundError as exc:
            raise ConfigError(f"agents.{spec.id}.model: {exc}") from None
        if not path.is_dir():
            raise ConfigError(f"agents.{spec.id}.model: {path} is not a directory; give a Hugging Face model "
                              f"directory")


# ---- reading runs -----------------------------------------------------------------------------------

def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
        if isinstance(rec, dict) and "step" in rec:
            out.append(rec)
    return out


def _read_metrics(run_dir: Path) -> dict[int, dict[str, Any]]:
    """step → metrics (the last line of a step wins)."""
    return {int(r["step"]): r for r in _read_jsonl(run_dir / "metrics.jsonl")}


def _read_eval(run_dir: Path) -> dict[tuple[int, str], float]:
    """(step, agent) → held-out greedy accuracy, from eval.jsonl (metrics.jsonl's eval/* as a fallback)."""
    out: dict[tuple[int, str], float] = {}
    for r in _read_jsonl(run_dir / "eval.jsonl"):
        if "agent" in r and "benchmark" not in r and r.get("greedy_acc") is not None:
            out[int(r["step"]), r["agent"]] = float(r["greedy_acc"])
    if not out:
        for step, m in _read_metrics(run_dir).items():
            for k, v in m.items():
                if k.startswith("eval/") and k.count("/") == 2 and k.endswith("/greedy_acc") and v is not None:
                    out[step, k[5:-11]] = float(v)
    return out


@dataclass
class RunData:
    algo: str
    seed: int
    metrics: dict[int, dict[str, Any]]
    evals: dict[tuple[int, str], float]


def outputs_data(outcomes: list[RunOutcome], cfg: Config) -> list[RunData]:
    steps = cfg.trainer.steps
    out = []
    for o in outcomes:
        metrics = {s: m for s, m in _read_metrics(o.run_dir).items() if s <= steps}
        evals = {k: v for k, v in _read_eval(o.run_dir).items() if k[0] <= steps}
        out.append(RunData(o.algo, o.seed, metrics, evals))
    return out


def _series(data: list[RunData], key: Callable[[RunData, int], float | None],
            ) -> dict[str, list[float | None]]:
    """Mean, sd, min, max and count over runs, for every step where at least one run has a value."""
    steps = sorted({s for d in data for s in d.metrics} | {s for d in data for s, _ in d.evals})
    rows = {"steps": [], "mean": [], "sd": [], "min": [], "max": [], "n": []}
    for s in steps:
        vals = [v for d in data if (v := key(d, s)) is not None and math.isfinite(v)]
        if not vals:
            continue
        mean, sd = _mean_sd(vals)
        for name, value in (("steps", s), ("mean", mean), ("sd", sd), ("min", min(vals)), ("max", max(vals)),
                            ("n", len(vals))):
            rows[name].append(value)
    return rows


def _metric(d: RunData, step: int, key: str) -> float | None:
    v = d.metrics.get(step, {}).get(key)
    return float(v) if isinstance(v, int | float) else None


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
    baselines = [b for b in BASELINES if b in algos]

    def final_of(d: RunData, agent: str) -> float | None:
        return d.evals.get((steps, agent))

    summary: dict[str, Any] = {
        **meta,
        "task": cfg.task.name,
        "agents": {a.id: a.model for a in cfg.agents},
        "steps": steps, "batch_size": t.batch_size, "rollouts_per_prompt": cfg.rollout.rollouts_per_prompt,
        "eval_size": t.eval_size, "eval_every": t.eval_every, "baselines": baselines,
        "delta": cfg.algorithm.delta, "delta_step": cfg.algorithm.delta_step,
        "runs": [], "results": {}, "cost": {}, "diagnostics": {},
    }
    for d in data:
        o = outcome_of[d.algo, d.seed]
        phases = sum(v for s, m in d.metrics.items() for k, v in m.items()
                     if k.startswith("timing/") and isinstance(v, int | float))
        summary["runs"].append({
            "algorithm": d.algo, "seed": d.seed, "dir": str(o.run_dir), "status": o.status,
            "start": {a: d.evals.get((0, a)) for a in agent_ids},
            "final": {a: final_of(d, a) for a in agent_ids},
            "wall_s": o.wall_s, "phase_s": phases,
            "rollout_s": sum(m.get("timing/rollout", 0.0) for m in d.metrics.values()),
            "update_s": sum(v for m in d.metrics.values() for k, v in m.items()
                            if k.startswith("timing/update/")),
        })
    runs_of = {a: [r for r in summary["runs"] if r["algorithm"] == a] for a in algos}

    for algo in algos:
        rs = runs_of[algo]
        walls = [r["wall_s"] if r["wall_s"] is not None else r["phase_s"] for r in rs]
        summary["cost"][algo] = {
            "wall_s": _mean_sd(walls), "phase_s": _mean_sd([r["phase_s"] for r in rs]),
            "rollout_s": _mean_sd([r["rollout_s"] for r in rs]),
            "update_s": _mean_sd([r["update_s"] for r in rs]),
            "wall_measured": all(r["wall_s"] is not None for r in rs),
        }

    for agent in agent_ids:
        per_algo: dict[str, Any] = {}
        finals = {algo: {d.seed: final_of(d, agent) for d in by_algo[algo]} for algo in algos}
        for algo in algos:
            runs = by_algo[algo]
            a = ALGORITHMS.get(algo)
            vals = [v for v in finals[algo].values() if v is not None]
            mean, sd = _mean_sd(vals)
            start_mean, start_sd = _mean_sd([d.evals.get((0, agent)) for d in runs])
            updates = [sum(_metric(d, s, f"agent/{agent}/optimizer_steps") or 0 for s in d.metrics)
                       for d in runs]
            vs = {}
            for b in baselines:
                if b == algo:
                    continue
                common = [s for s in seeds
                          if finals[algo].get(s) is not None and finals[b].get(s) is not None]
                vs[b] = {**paired_difference([finals[algo][s] for s in common],
                                             [finals[b][s] for s in common]), "seeds": common}
            per_algo[algo] = {
                "start": start_mean, "start_sd": start_sd,
                "final": {"mean": mean, "sd": sd, "min": min(vals) if vals else None,
                          "max": max(vals) if vals else None, "by_seed": finals[algo]},
                "vs": vs,
                "rollouts": steps * t.batch_size * cfg.rollout.rollouts_per_prompt * a.rollout_multiplier,
                "optimizer_updates": _mean_sd(updates)[0],
                "curve": _series(runs, lambda d, s, agent=agent: d.evals.get((s, agent))),
            }
        summary["results"][agent] = per_algo

    for algo in algos:
        if not ALGORITHMS.get(algo).shares_pool:
            continue
        runs = by_algo[algo]
        diag: dict[str, Any] = {}
        for agent in agent_ids:
            def avg(key: str, agent: str = agent, runs: list[RunData] = runs) -> float | None:
                return _mean_sd([_mean_over_steps(d, f"agent/{agent}/{key}") for d in runs])[0]

            omega = {}
            for other in agent_ids:
                if other == agent:
                    continue
                key = f"agent/{agent}/omega/{other}"
                curve = _series(runs, lambda d, s, key=key: _metric(d, s, key) if s > 0 else None)
                omega[other] = {"mean": avg(f"omega/{other}"),
                                "final": curve["mean"][-1] if curve["mean"] else None, "curve": curve}
            diag[agent] = {
                "cross_ratio_mean": avg("cross/ratio_mean"), "in_window_frac": avg("cross/in_window_frac"),
                "below_window_frac": avg("cross/clip_low_frac"),
                "above_window_frac": avg("cross/clip_high_frac"),
                "cross_answers": avg("count/cross"),
                "in_window_curve": _series(runs, lambda d, s, agent=agent: _metric(
                    d, s, f"agent/{agent}/cross/in_window_frac") if s > 0 else None),
                "omega": omega,
            }
        summary["diagnostics"][algo] = diag
    summary["reading"] = automatic_reading(summary)
    return summary


# ---- the automatic reading ------------------------------------------------------------------------------

def automatic_reading(summary: dict[str, Any]) -> list[str]:
    """One paragraph per pool-sharing algorithm, plus one on the accuracy differences."""
    paragraphs = []
    delta = summary.get("delta")
    for algo, diag in summary["diagnostics"].items():
        fracs = {a: d["in_window_frac"] for a, d in diag.items() if d["in_window_frac"] is not None}
        sentences = []
        if not fracs:
            sentences.append(f"{algo} shares the pool but its loss does not log cross-answer ratios, so "
                             f"how much the other agents' answers counted cannot be read from the metrics.")
        else:
            overall = sum(fracs.values()) / len(fracs)
            window = (f"the clip window [ℓ_m, 1] (ℓ_0 = {1 - delta:g})" if delta is not None
                      else "the clip window")
            if overall < 0.005:
                sentences.append(f"No cross answer fell inside {window}: {algo} acted like GSPO (answers "
                                 f"outside the window are clipped and give no gradient).")
            elif overall < 0.1:
                sentences.append(f"Only {overall:.0%} of cross answers fell inside {window}: {algo} acted "
                                 f"almost like GSPO (answers outside the window are clipped and give no "
                                 f"gradient).")
            elif overall < 0.5:
                sentences.append(f"{overall:.0%} of cross answers fell inside {window}: the shared pool "
                                 f"contributed part of {algo}'s updates.")
            else:
                sentences.append(f"Most cross answers ({overall:.0%}) fell inside {window}: {algo}'s "
                                 f"learners did learn from each other's answers.")
            for agent, d in diag.items():
                inside, below, above = d["in_window_frac"], d["below_window_frac"], d["above_window_frac"]
                ratio = d["cross_ratio_mean"]
                if None in (inside, below, above, ratio) or max(below, above) <= 0.05:
                    continue
                side = ("below it (the learner finds the others' answers less likely than their authors "
                        "did)" if below >= above else "above it (the learner finds the others' answers more "
                        "likely than their authors did)")
                sentences.append(f"{agent}: {inside:.0%} inside, {below:.0%} below, {above:.0%} above the "
                                 f"window, mean cross ratio {ratio:.2f}; the clipped ones were mostly "
                                 f"{side}.")
        algorithm = ALGORITHMS.get(algo)
        in_baseline = algorithm.advantage == "hacpo" and algorithm.capability_aware
        in_update = algorithm.loss == "hacpo" and algorithm.use_omega
        omegas = [(a, o, v["mean"]) for a, d in diag.items() for o, v in d["omega"].items()
                  if v["mean"] is not None]
        if omegas:
            a, o, w = max(omegas, key=lambda x: abs(math.log(max(x[2], 1e-12))))
            if not (in_baseline or in_update):
                sentences.append(f"ω is logged but {algo} does not use it.")
            elif abs(math.log(max(w, 1e-12))) < math.log(1.1):
                sentences.append("ω stayed near 1: the agents were judged equally capable, so the capability "
                                 "weighting changed little.")
            else:
                ahead, behind, factor = (a, o, w) if w > 1 else (o, a, 1 / w)
                effects = ((f"weighted {ahead}'s answers up by about that factor in its update", in_update),
                           (f"scaled {ahead}'s rewards down by it in its baseline", in_baseline))
                uses = " and ".join(text for text, on in effects if on)
                sentences.append(f"ω({a}→{o}) averaged {w:.2f} over the steps: {ahead} was judged about "
                                 f"{factor:.1f}× as capable as {behind}, so {behind} {uses}.")
        paragraphs.append(" ".join(sentences))

    baselines = summary.get("baselines", [])
    results = summary["results"]
    all_same = all(len({round(r["final"]["mean"], 9) for r in per_algo.values()
                        if r["final"]["mean"] is not None}) <= 1 for per_algo in results.values())
    n = len(summary["seeds"])
    if all_same and len(summary["algorithms"]) > 1:
        paragraphs.append("Every algorithm ended at the same held-out accuracy for every agent: the runs "
                          "were too short (or the evaluation too small) to tell the algorithms apart.")
    elif baselines:
        clauses, significant, tested = [], [], False
        for algo in summary["algorithms"]:
            if algo in baselines:
                continue
            per_agent = []
            for agent, per_algo in results.items():
                cells = []
                for b, st in per_algo[algo]["vs"].items():
                    if st["mean"] is None:
                        continue
                    p = f"p = {st['p']:.2g}" if st["p"] is not None else "no test"
                    tested |= st["p"] is not None
                    cells.append(f"{st['mean']:+.3f} vs {b} ({p})")
                    if st["p"] is not None and st["p"] < 0.05:
                        significant.append(f"{algo} vs {b} on {agent} ({st['mean']:+.3f})")
                if cells:
                    per_agent.append(f"{agent} " + ", ".join(cells))
            if per_agent:
                clauses.append(f"{algo}: " + "; ".join(per_agent))
        if clauses:
            text = (f"Final accuracy against {' and '.join(baselines)}, paired by seed over {n} seed"
                    f"{'s' if n != 1 else ''}. " + ". ".join(clauses) + ". ")
            if n < 2:
                text += "With one seed there is no test: run more seeds before reading anything into these."
            elif not tested:
                text += "No p-values: scipy is not installed."
            elif significant:
                text += "Significant at 5%: " + ", ".join(significant) + "."
            else:
                text += f"None of these differences is significant at 5% with {n} seeds."
            paragraphs.append(text)
    elif len(summary["algorithms"]) > 1:
        paragraphs.append("Neither gspo nor gspo2x is in the comparison, so no paired differences were "
                          "computed.")
    return [p for p in paragraphs if p]


# ---- plots ----------------------------------------------------------------------------------------------

def write_plots(summary: dict[str, Any], plots_dir: Path) -> list[Path]:
    """accuracy-<agent>.png, omega.png, cross-window.png; [] when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    plots_dir.mkdir(parents=True, exist_ok=True)
    written = []
    algos = summary["algorithms"]
    colors = {a: f"C{i}" for i, a in enumerate(algos)}

    def band(ax: Any, curve: dict[str, list], label: str, color: str, lo: float | None = None,
             hi: float | None = None) -> None:
        if not curve["steps"]:
            return
        ax.plot(curve["steps"], curve["mean"], marker="o", ms=3, label=label, color=color)
        if any(sd is not None for sd in curve["sd"]):
            low = [m - (sd or 0.0) for m, sd in zip(curve["mean"], curve["sd"], strict=True)]
            high = [m + (sd or 0.0) for m, sd in zip(curve["mean"], curve["sd"], strict=True)]
            if lo is not None:
                low = [max(lo, v) for v in low]
            if hi is not None:
                high = [min(hi, v) for v in high]
            ax.fill_between(curve["steps"], low, high, alpha=0.2, color=color, linewidth=0)

    from matplotlib.ticker import FixedLocator, MaxNLocator, NullLocator, ScalarFormatter

    n_seeds = len(summary["seeds"])
    for agent, per_algo in summary["results"].items():
        fig, ax = plt.subplots(figsize=(6, 4))
        for algo in algos:
            band(ax, per_algo[algo]["curve"], algo, colors[algo], 0.0, 1.0)
        values = [v for algo in algos for v in per_algo[algo]["curve"]["mean"] if v is not None]
        if values and max(values) - min(values) < 1e-9:  # flat curves: show the whole [0, 1] range
            ax.set_ylim(-0.02, 1.02)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("training step")
        ax.set_ylabel("held-out greedy accuracy")
        ax.set_title(f"{agent}: mean over {n_seeds} seed{'s' if n_seeds != 1 else ''}"
                     + (" (band ± sd)" if n_seeds > 1 else ""))
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = plots_dir / f"accuracy-{agent}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)

    diag = summary["diagnostics"]
    if diag:
        pairs = [(a, o) for a in summary["agents"] for o in summary["agents"] if a != o]
        fig, axes = plt.subplots(1, len(pairs), figsize=(4.5 * len(pairs), 3.6), squeeze=False)
        for ax, (a, o) in zip(axes[0], pairs, strict=True):
            for algo, d in diag.items():
                band(ax, d[a]["omega"][o]["curve"], algo, colors[algo], 0.1, 10.0)
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
            ax.set_yscale("log")
            ax.set_ylim(0.09, 11)
            ax.yaxis.set_major_locator(FixedLocator([0.1, 0.2, 0.5, 1, 2, 5, 10]))
            ax.yaxis.set_major_formatter(ScalarFormatter())
            ax.yaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_title(f"ω({a}→{o})", fontsize=9)
            ax.set_xlabel("training step")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("ω = capability ratio")
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        path = plots_dir / "omega.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)

        logged = [(algo, d) for algo, d in diag.items()
                  if any(x["in_window_curve"]["steps"] for x in d.values())]
        if logged:
            agents = list(summary["agents"])
            fig, axes = plt.subplots(1, len(agents), figsize=(4.5 * len(agents), 3.6), squeeze=False)
            for ax, agent in zip(axes[0], agents, strict=True):
                for algo, d in logged:
                    band(ax, d[agent]["in_window_curve"], algo, colors[algo], 0.0, 1.0)
                ax.set_ylim(-0.02, 1.02)
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
                ax.set_title(f"{agent} learning from the others", fontsize=9)
                ax.set_xlabel("training step")
                ax.grid(alpha=0.3)
            axes[0][0].set_ylabel("cross answers inside the clip window")
            axes[0][0].legend(fontsize=8)
            fig.tight_layout()
            path = plots_dir / "cross-window.png"
            fig.savefig(path, dpi=100)
            plt.close(fig)
            written.append(path)
    return written


# ---- the report -----------------------------------------------------------------------------------------

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


def render_report(summary: dict[str, Any]) -> str:
    s = summary
    lines = ["# hacrl comparison", ""]
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
        f"| steps | {s['steps']} (batch {s['batch_size']} prompts × {s['rollouts_per_prompt']} answers "
        f"per agent) |",
        f"| evaluation | greedy, {s['eval_size']} held-out problems, "
        f"{_every(s['eval_every'])} and at the end |",
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
    n = len(s["seeds"])
    lines += [
        f"*start*: accuracy before training (step 0). *final*: at step {s['steps']}, mean ± sd over {n} "
        f"seed{'s' if n != 1 else ''}. *Δ vs b*: mean over seeds of (final − final of b with the same seed) "
        "± its standard error; *p*: two-sided paired t-test over seeds (n/a with fewer than 2 seeds). "
        "*rollouts*: answers this agent generated in training (steps × batch × G × the algorithm's rollout "
        "multiplier). *optimizer updates*: this agent's optimizer steps. *wall*: the whole run (all agents), "
        "measured.",
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
    lines += ["", "*training phases*: the sum of the trainer's `timing/*` over steps; *other*: wall − phases "
              "(model loading, evaluation, checkpoints).", ""]

    lines += ["## Collaboration diagnostics", ""]
    if not s["diagnostics"]:
        lines += ["No algorithm in this comparison shares the answer pool (hacpo, naive or a hacpo-* "
                  "ablation), so there is nothing to diagnose.", ""]
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
        lines += ["", "*cross ratio*: the learner's sequence probability of another agent's answer over "
                  "its author's at rollout time (exp of the difference of mean token log-probs); *inside "
                  "window*: share of cross answers whose ratio lay in the stepwise clip window [ℓ_m, 1] and "
                  "so gave gradient; *below* / *above*: clipped at the lower / upper bound. All are means "
                  "over steps and seeds. *ω(k→j)*: capability of the learner k over that of the source j "
                  "(clamped to [0.1, 10]).", ""]
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

