"""The ``hacrl`` command: wiring only.

    hacrl train [--preset NAME] [--config FILE] [--set key=value ...] [--output RUN] [--resume [CKPT | RUN]]
                [--overwrite]
    hacrl eval  (--run DIR | --model DIR ...) [--task NAME] [--benchmark NAME=PATH ...] [--n 500] [--k 0]
                [--json-out PATH]
    hacrl presets [--show NAME] [--fields]

Bad input (config, paths, damaged model or checkpoint files, devices) exits with code 2 and at most three
lines naming the file or field and the fix, as does a run that diverges (a non-finite loss, gradient, weight
or logit: the agent, step and phase); an agent whose worker dies (Ray) exits with code 3, naming the agent
and the checkpoint to resume from. A full disk exits with code 2 and one line naming the path, the space it
needed and the command that continues the run (``hacrl.trainer.files``: nothing is left half-written).
``--overwrite`` deletes only a run directory (``trainer.rundir``), and a run directory has one writer at a
time (a file lock).
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from hacrl.config import Config, ConfigError, load_config, preset_names, preset_text
from hacrl.errors import DiskFull, InputError
from hacrl.plan import add_plan_parser, cmd_plan
from hacrl.report.compare_cli import add_compare_parser, cmd_compare
from hacrl.trainer.files import as_disk_full, write_atomic
from hacrl.trainer.rundir import RunLock, check_output, has_content, refuse_foreign, remove_run

logger = logging.getLogger("hacrl")
_PATH_ERRNOS = {errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.EROFS}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hacrl", description="Heterogeneous Agent Collaborative RL (HACPO).")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train N agents together (default: the embedded tiny-model preset)")
    t.add_argument("--preset", help="a named preset (see `hacrl presets`); default tiny-model, or with --config "
                   "none")
    t.add_argument("--config", help="a YAML config file, layered on --preset when both are given (the file wins; "
                   "--set wins over both)")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. trainer.steps=20 or agents.<id>.lr=1e-4 (repeatable)")
    t.add_argument("--output", help="run directory (default: <run.output_dir>/<run.name or preset-timestamp>)")
    t.add_argument("--resume", nargs="?", const="latest", help="resume the run directory's latest checkpoint "
                   "(without --preset/--config: with the run's own config.yaml), or the run directory or "
                   "checkpoints/step-* directory given")
    t.add_argument("--overwrite", action="store_true", help="delete an existing run directory first")
    t.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    e = sub.add_parser("eval", help="evaluate each agent alone on a task's held-out split and/or benchmarks")
    e.add_argument("--run", help="a run directory: evaluates its latest checkpoint's agents")
    e.add_argument("--model", action="append", default=[], help="a model directory or builtin:<name> (repeatable)")
    e.add_argument("--task", help="builtin task name (default without --benchmark: the run's task, or add2)")
    e.add_argument("--benchmark", action="append", default=[], metavar="NAME=PATH",
                   help="a local benchmark file or directory, NAME one of math500, math, gsm8k, aime2025, amc2023, "
                        "minerva, olympiadbench (repeatable); the paper's prompt, scored with the math reward")
    e.add_argument("--n", type=int, default=500, help="held-out task problems; at most this many per benchmark")
    e.add_argument("--k", type=int, default=0, help="also sample k answers per problem: avg@k and pass@k")
    e.add_argument("--max-new-tokens", type=int, default=None, help="default: the run's, or 64")
    e.add_argument("--reward-timeout", type=float, default=10.0, help="seconds per answer of the math reward")
    e.add_argument("--batch-size", type=int, default=64, help="sequences per generate call")
    e.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="for --model")
    e.add_argument("--device", default="cpu", help="for --model")
    e.add_argument("--chat-template-kwargs", help="for --model, JSON, e.g. '{\"enable_thinking\": false}'")
    e.add_argument("--json", action="store_true", help="print JSON records instead of tables")
    e.add_argument("--json-out", metavar="PATH", help="also write the records and tables as JSON to PATH")

    add_compare_parser(sub)
    add_plan_parser(sub)

    pr = sub.add_parser("presets", help="list the named presets")
    pr.add_argument("--show", metavar="NAME", help="print a preset's YAML")
    pr.add_argument("--fields", action="store_true", help="list every config field with its help text")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command in ("train", "eval"):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    try:
        if args.command == "compare":
            return cmd_compare(args)
        if args.command == "plan":
            return cmd_plan(args)
        if args.command == "train":
            return cmd_train(args)
        if args.command == "eval":
            return cmd_eval(args)
        return cmd_presets(args)
    except (InputError, DiskFull) as exc:
        print(f"hacrl: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        full = as_disk_full(exc, Path.cwd())  # a write not made through hacrl.trainer.files names its file
        if full is not None:
            print(f"hacrl: error: {full}", file=sys.stderr)
            return 2
        if exc.errno in _PATH_ERRNOS and exc.filename:  # a path the user gave that cannot be written or read
            print(f"hacrl: error: {exc.filename}: {exc.strerror}; check the path and its permissions", file=sys.stderr)
            return 2
        raise
    except KeyboardInterrupt:
        print("hacrl: interrupted", file=sys.stderr)
        return 130


# ---- train ----------------------------------------------------------------------------------------

def _run_dir(args: argparse.Namespace, cfg: Config) -> Path:
    if args.output:
        return Path(args.output)
    name = cfg.run.name or (f"{Path(args.config).stem if args.config else args.preset or 'tiny-model'}-"
                            f"{cfg.algorithm.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    return Path(cfg.run.output_dir) / name


def _resume_run_dir(args: argparse.Namespace) -> argparse.Namespace:
    """``--resume RUN`` names a run directory, not a checkpoint: the same as ``--output RUN --resume``."""
    from hacrl.trainer.checkpoint import MANIFEST

    given = Path(args.resume) if args.resume not in (None, "latest") else None
    if given is None or (given / MANIFEST).is_file() or not given.is_dir() \
            or not ((given / "checkpoints").is_dir() or (given / "config.yaml").is_file()):
        return args
    if args.output and Path(args.output).absolute() != given.absolute():
        raise ConfigError(f"--resume {given} is a run directory and --output {args.output} another; resume it "
                          f"with: hacrl train --output {shlex.quote(str(given))} --resume")
    return argparse.Namespace(**{**vars(args), "output": str(given), "resume": "latest"})


def _train_config(args: argparse.Namespace) -> Config:
    """The config to train with: --preset / --config / --set; resuming a run without --preset or --config,
    the run's own config.yaml with --set on top."""
    from hacrl.trainer.rundir import is_run_directory

    saved = Path(args.output) / "config.yaml" if args.output else None
    if not (args.resume and not args.preset and not args.config and saved and saved.is_file()
            and is_run_directory(saved.parent)):
        return load_config(args.preset, args.config, args.overrides)
    try:
        load_config(path=saved)
    except ConfigError as exc:
        raise ConfigError(f"--resume: {saved} is not a usable run config ({exc}); resume with the --preset or "
                          f"--config the run was started with") from None
    return load_config(path=saved, overrides=args.overrides)  # a bad --set is named as such


def _resolve_resume(args: argparse.Namespace, run_dir: Path) -> Path | None:
    """The checkpoint to resume from: the one given, or the newest intact one (a damaged newer one is
    passed over with a warning); none usable is one line naming the command that starts over."""
    from hacrl.trainer.checkpoint import MANIFEST, usable_checkpoint, verify_checkpoint

    if not args.resume:
        return None
    if args.resume != "latest":
        path = Path(args.resume)
        if not (path / MANIFEST).is_file():
            raise ConfigError(f"--resume {path}: neither a run directory nor a complete checkpoint (no {MANIFEST}); "
                              f"resume a run with: hacrl train --output RUN --resume (its latest checkpoint), or "
                              f"give a RUN/checkpoints/step-* directory")
        problem = verify_checkpoint(path)
        if problem:
            raise ConfigError(f"--resume {path}: the checkpoint is damaged: {problem}; give an earlier "
                              f"checkpoints/step-* directory, or --resume alone for the newest intact one")
        return path
    if not has_content(run_dir):
        raise ConfigError(f"--resume: {run_dir} holds no run; start it without --resume")
    found, damaged = usable_checkpoint(run_dir / "checkpoints")
    if found is None:
        refuse_foreign(run_dir)
        why = f"no intact checkpoint ({damaged[0][0].name}: {damaged[0][1]})" if damaged else \
            "no complete checkpoint (the run stopped before its first)"
        raise ConfigError(f"--resume: {run_dir} has {why}; start over with: {_command(args, run_dir, '--overwrite')}")
    for path, problem in damaged:
        print(f"hacrl: warning: checkpoint {path.name} is damaged ({problem}); resuming from {found.name}",
              file=sys.stderr)
    return found


def cmd_train(args: argparse.Namespace) -> int:
    if args.resume and args.overwrite:
        raise ConfigError("--resume and --overwrite contradict each other; pick one")
    args = _resume_run_dir(args)
    cfg = _train_config(args)
    run_dir = _run_dir(args, cfg)
    check_output(run_dir)
    if has_content(run_dir):
        refuse_foreign(run_dir)  # before the lock: not even a lock file goes into a directory that is not a run
    made = _missing_ancestors(run_dir)  # the run directory and any parents (runs/) this command would create
    lock = RunLock(run_dir)  # one writer per run directory, held until the run ends
    try:
        lock.acquire()
        return _train_locked(args, cfg, run_dir, bool(made))
    finally:
        lock.release()
        if made and run_dir.is_dir() and not has_content(run_dir):
            shutil.rmtree(run_dir, ignore_errors=True)  # bad input leaves nothing behind
            for parent in made[1:]:  # nor an empty runs/ made for it
                try:
                    parent.rmdir()
                except OSError:
                    break


def _missing_ancestors(path: Path) -> list[Path]:
    """``path`` and its parents that do not exist yet, deepest first."""
    missing = []
    while not path.exists() and path.parent != path:
        missing.append(path)
        path = path.parent
    return missing


def _train_locked(args: argparse.Namespace, cfg: Config, run_dir: Path, created: bool) -> int:
    from hacrl.backends import AgentFailure
    from hacrl.errors import TrainingDiverged
    from hacrl.trainer.checkpoint import latest_checkpoint
    from hacrl.trainer.trainer import Trainer

    resume_from = _resolve_resume(args, run_dir)
    if resume_from is not None and _already_finished(args, cfg, run_dir, resume_from):
        return 0
    fresh = created  # this invocation owns everything in the directory
    if resume_from is None and has_content(run_dir):
        if not args.overwrite:
            refuse_foreign(run_dir)
            if latest_checkpoint(run_dir / "checkpoints") is None:
                raise ConfigError(f"run directory {run_dir} holds a run that stopped before its first checkpoint; "
                                  f"start over with: {_command(args, run_dir, '--overwrite')}")
            raise ConfigError(f"run directory {run_dir} exists; pass --resume to continue it or --overwrite to "
                              f"replace it")
        remove_run(run_dir)  # only what a run wrote; anything else is refused before a file is deleted
        fresh = True
    try:
        trainer = Trainer(cfg, run_dir, resume_from=resume_from)
    except BaseException as exc:
        if fresh:  # nothing half-written: a run that never started leaves nothing behind
            remove_run(run_dir)
        full = as_disk_full(exc, run_dir)
        if full is None:
            raise
        return _disk_full(full, args, run_dir, fresh)
    print(f"hacrl: run directory {run_dir}")
    _print_agents(trainer)
    try:
        with _Progress(trainer, enabled=not args.quiet) as progress:
            result = trainer.train(progress=progress.update)
    except (AgentFailure, TrainingDiverged) as exc:
        last = latest_checkpoint(run_dir / "checkpoints")
        if last is None and fresh:
            remove_run(run_dir)
        if isinstance(exc, TrainingDiverged):
            kept = f"the last complete checkpoint {last} is intact; " if last else ""
            print(f"hacrl: error: {exc}\nhacrl: {kept}start over with: {_command(args, run_dir, '--overwrite')}",
                  file=sys.stderr)
            return 2
        where = f"the last complete checkpoint is {last}; resume with: {_command(args, run_dir, '--resume')}" \
            if last else "no checkpoint was written yet (set trainer.checkpoint_every); start the run again"
        step = trainer.step_idx + (getattr(exc, "method", None) != "save")  # a save follows its step
        print(f"hacrl: error: step {step}: {exc}; {where}", file=sys.stderr)
        return 3
    except BaseException as exc:
        if fresh and latest_checkpoint(run_dir / "checkpoints") is None:
            remove_run(run_dir)  # a failed run with nothing to resume: the retry needs no --overwrite
        full = as_disk_full(exc, run_dir)
        if full is None:
            raise
        return _disk_full(full, args, run_dir, fresh)
    if result["stopped"]:
        print(f"hacrl: stopped at step {trainer.step_idx}; resume with: {_command(args, run_dir, '--resume')}",
              file=sys.stderr)
        return 130
    _print_summary(trainer, result, run_dir)
    return 0


def _disk_full(exc: DiskFull, args: argparse.Namespace, run_dir: Path, fresh: bool) -> int:
    """One line: what could not be written, the space it needed and the space free, and the command that
    continues the run from its last complete checkpoint (or starts it again: a fresh run that wrote none
    was removed)."""
    from hacrl.trainer.checkpoint import latest_checkpoint

    if latest_checkpoint(run_dir / "checkpoints") is not None:
        then = f"continue with: {_command(args, run_dir, '--resume')}"
    else:
        then = f"start again with: {_command(args, run_dir, '--overwrite' if not fresh else None)}"
    print(f"hacrl: error: {exc.describe()}; free space, then {then}", file=sys.stderr)
    return 2


def _already_finished(args: argparse.Namespace, cfg: Config, run_dir: Path, checkpoint: Path) -> bool:
    """Resuming a run whose checkpoint is at or past ``trainer.steps``: say so, with its evaluations, and
    how to train further; nothing is loaded or written."""
    from hacrl.trainer.checkpoint import read_manifest
    from hacrl.trainer.sinks import read_evals

    step = read_manifest(checkpoint).get("step")
    if not isinstance(step, int) or step < cfg.trainer.steps:
        return False
    print(f"hacrl: {run_dir} already finished at step {step} (trainer.steps={cfg.trainer.steps}); nothing to train")
    evals = read_evals(run_dir)
    for agent_id in (a.id for a in cfg.agents):
        before, after = evals.get((0, agent_id)), evals.get((step, agent_id))
        if before is not None or after is not None:
            print(f"  {agent_id:<20} before {_acc(before)}  after {_acc(after)}")
    print(f"hacrl: to train further: {_command(args, run_dir, '--resume', [f'trainer.steps={2 * step}'])}")
    return True


def _acc(value: float | None) -> str:
    return "  -  " if value is None else f"{value:.3f}"


def _command(args: argparse.Namespace, run_dir: Path, flag: str | None, extra: list[str] | None = None) -> str:
    """The ``hacrl train`` command of this run with ``flag`` (--resume, --overwrite or none), ``extra`` --set
    last."""
    source = [*(["--preset", args.preset] if args.preset else []), *(["--config", args.config] if args.config else [])]
    sets = [o for o in args.overrides if o.split("=", 1)[0] not in {e.split("=", 1)[0] for e in extra or []}]
    overrides = [x for o in [*sets, *(extra or [])] for x in ("--set", o)]
    return shlex.join(["hacrl", "train", *source, *overrides, "--output", str(run_dir), *([flag] if flag else [])])


def _print_agents(trainer: Any) -> None:
    for a in trainer.agent_info:
        where = f" on {a['host']}:{a['device']} (pid {a['pid']})" if trainer.cfg.backend.name == "ray" else ""
        print(f"  agent {a['id']}: {a['model_class']}, {a['parameters'] / 1e6:.2f}M params, "
              f"vocab {a['vocab']}, from {a['source']}{where}")


def _print_summary(trainer: Any, result: dict[str, Any], run_dir: Path) -> None:
    from hacrl.trainer.sinks import eval_key

    first, last = result.get("first"), result.get("last")
    steps = trainer.step_idx
    print(f"hacrl: finished {steps} step{'' if steps == 1 else 's'} of {trainer.cfg.algorithm.name}; "
          f"held-out greedy accuracy on {len(trainer.eval_problems)} {trainer.task.name} problems:")
    for agent_id in trainer.agent_ids:
        key = eval_key(agent_id)
        print(f"  {agent_id:<20} before {_acc(first.get(key) if first else None)}  "
              f"after {_acc(last.get(key) if last else None)}")
    print(f"hacrl: metrics in {run_dir / 'metrics.jsonl'}, checkpoint {result['checkpoint']}")


class _Progress:
    """A rich progress bar: step, per-agent reward, ETA. Plain log lines when not on a terminal."""

    def __init__(self, trainer: Any, enabled: bool) -> None:
        self.trainer = trainer
        self.enabled = enabled
        self._bar: Any = None

    def __enter__(self) -> _Progress:
        if self.enabled and sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                                 TimeRemainingColumn(), TextColumn("{task.description}"), transient=False)
            self._bar.start()
            self._task = self._bar.add_task("", total=self.trainer.cfg.trainer.steps,
                                            completed=self.trainer.step_idx)
        return self

    def update(self, step: int, metrics: dict[str, float]) -> None:
        rewards = "  ".join(f"{a} {metrics.get(f'agent/{a}/reward', float('nan')):.2f}"
                            for a in self.trainer.agent_ids)
        if self._bar is not None:
            self._bar.update(self._task, completed=step, description=f"reward {rewards}")
        elif self.enabled:
            from hacrl.trainer.trainer import phase_times

            step_time = sum(phase_times(metrics).values())
            print(f"step {step}/{self.trainer.cfg.trainer.steps}  reward {rewards}  ({step_time:.1f}s)",
                  file=sys.stderr, flush=True)

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.stop()


# ---- eval -----------------------------------------------------------------------------------------

def cmd_eval(args: argparse.Namespace) -> int:
    """Each agent alone on a task's held-out split and/or local benchmark files: a markdown table per metric
    (agents x benchmarks, plus the mean over benchmarks), optionally JSON."""
    from hacrl.agents.agent import load_agent
    from hacrl.rollout import get_engine
    from hacrl.trainer.evaluation import METRICS, evaluate_agent, markdown_table, suite_tables

    if args.n < 1 or args.k < 0 or args.batch_size < 1 or args.reward_timeout <= 0:
        raise ConfigError("eval: --n and --batch-size must be >= 1, --k >= 0 and --reward-timeout > 0")
    json_out = Path(args.json_out) if args.json_out else None
    if json_out is not None and not json_out.parent.is_dir():
        raise ConfigError(f"--json-out {json_out}: directory {json_out.parent} does not exist")
    models, run_cfg = _eval_models(args)
    suites = _eval_suites(args, run_cfg)  # read every file before loading any model: bad input fails fast
    max_new = args.max_new_tokens or (run_cfg or {}).get("rollout", {}).get("max_new_tokens") or 64
    engine = get_engine("hf")
    records: list[dict[str, Any]] = []
    try:
        for i, (agent_id, path, kwargs) in enumerate(models):
            try:
                agent = load_agent(agent_id, i, path, **kwargs)
            except InputError as exc:
                if i < len(models) - len(args.model):
                    raise  # an agent of --run: agents.<id>.model names it
                raise InputError(str(exc).replace(f"agents.{agent_id}.model:", f"--model {args.model[i - len(models)]}:",
                                                  1)) from None
            for name, problems, scorer in suites:
                start = time.perf_counter()
                res = evaluate_agent(agent, problems, scorer.score_problems, engine, max_new_tokens=max_new, k=args.k,
                                     batch_size=args.batch_size)
                records.append({"benchmark": name, **res.as_dict()})
                print(f"eval: {agent_id} on {name}: greedy {res.greedy_acc:.3f} over {res.n} problems "
                      f"({time.perf_counter() - start:.0f}s)", file=sys.stderr, flush=True)
            del agent
    finally:
        for _, _, scorer in suites:
            scorer.close()
    names = [name for name, _, _ in suites]
    tables = suite_tables(records, names)
    if json_out is not None:
        write_atomic(json_out, json.dumps({
            "agents": [m[0] for m in models], "benchmarks": [{"name": n, "n": len(p)} for n, p, _ in suites],
            "k": args.k, "max_new_tokens": max_new, "results": records, "tables": tables}, indent=2) + "\n")
    if args.json:
        print(json.dumps(records, indent=2))
    else:
        print("\n\n".join(markdown_table(table, names, METRICS[m].format(k=args.k)) for m, table in tables.items()))
    return 0


def _eval_models(args: argparse.Namespace) -> tuple[list[tuple[str, Path, dict[str, Any]]], dict | None]:
    """(agent id, model directory, load_agent keyword arguments) per agent, and the run's config if any."""
    from hacrl.backends.worker import check_device
    from hacrl.trainer.checkpoint import read_manifest, usable_checkpoint
    from hacrl.trainer.trainer import resolve_model_path

    models: list[tuple[str, Path, dict[str, Any]]] = []
    run_cfg = None
    if args.run:
        run = Path(args.run)
        if not run.is_dir():
            raise ConfigError(f"--run {run}: no such directory; give a run directory (hacrl train --output)")
        found, damaged = usable_checkpoint(run / "checkpoints")
        if found is None:
            why = f"no intact checkpoint ({damaged[0][0].name}: {damaged[0][1]})" if damaged else "no complete checkpoint"
            raise ConfigError(f"--run {run}: {why} under {run / 'checkpoints'}; evaluate a run that saved one")
        for path, problem in damaged:
            print(f"hacrl: warning: checkpoint {path.name} is damaged ({problem}); evaluating {found.name}",
                  file=sys.stderr)
        run_cfg = _run_config(run)
        step, steps = read_manifest(found).get("step"), run_cfg["trainer"]["steps"]
        print(f"eval: --run {run}: the latest intact checkpoint, {found.name} (step {step} of {steps}"
              f"{', the end of training' if step == steps else ''})", file=sys.stderr)
        for a in run_cfg["agents"]:
            check_device(a.get("device", "cpu"), f"--run {run}: agents.{a['id']}.device")
        keep = ("dtype", "device", "template", "system_prompt", "chat_template_kwargs")
        # a LoRA agent's checkpoint directory loads as its merged copy
        models += [(a["id"], found / "agents" / a["id"], {k: a[k] for k in keep if k in a})
                   for a in run_cfg["agents"]]
    try:
        chat_kwargs = json.loads(args.chat_template_kwargs) if args.chat_template_kwargs else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--chat-template-kwargs: not valid JSON ({exc.msg}); "
                          f"e.g. '{{\"enable_thinking\": false}}'") from None
    if args.model:
        check_device(args.device, "--device")
    for spec in args.model:
        name = spec[8:] if spec.startswith("builtin:") else Path(spec).name
        try:
            path = resolve_model_path(spec)
        except FileNotFoundError as exc:
            raise ConfigError(f"--model {spec}: {exc}") from None
        models.append((name, path, {"dtype": args.dtype, "device": args.device, "chat_template_kwargs": chat_kwargs}))
    if not models:
        raise ConfigError("eval: give --run DIR or at least one --model")
    return models, run_cfg


def _run_config(run: Path) -> dict[str, Any]:
    """A run directory's config.yaml as a validated tree; one line naming the file when it is missing or broken."""
    from hacrl.config import load_config

    path = run / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"--run {run}: no config.yaml (not a run directory, or one killed before it started); "
                          f"evaluate its models with --model {run}/checkpoints/step-*/agents/<id>")
    try:
        cfg = load_config(path=path)
    except ConfigError as exc:
        raise ConfigError(f"--run {run}: config.yaml is not a usable run config ({exc}); restore it from the "
                          f"run's command, or evaluate with --model") from None
    return cfg.model_dump(mode="json")


def _eval_suites(args: argparse.Namespace, run_cfg: dict | None) -> list[tuple[str, list[Any], Any]]:
    """(name, problems, scorer) for the task (``--task``, or the run's task without ``--benchmark``) and each
    ``--benchmark NAME=PATH`` (the paper's prompt template, the math reward under a time limit)."""
    from dataclasses import replace

    from hacrl.data.benchmarks import canonical_name, load_benchmark
    from hacrl.data.datasets import PAPER_TEMPLATE
    from hacrl.rewards import RewardScorer

    suites: list[tuple[str, list[Any], Any]] = []
    if args.task or not args.benchmark:
        suites.append(_task_suite(args, run_cfg))
    if args.benchmark:  # graded by the math reward: say once if math-verify is missing
        from hacrl.config import TaskConfig
        from hacrl.rewards.math_reward import warn_if_no_math_verify

        warn_if_no_math_verify(TaskConfig(), benchmarks=True)
    for item in args.benchmark:
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ConfigError(f"--benchmark {item!r}: expected NAME=PATH, e.g. math500=data/math500.jsonl")
        key = canonical_name(name.strip())
        if any(key == s[0] for s in suites):
            raise ConfigError(f"--benchmark {item!r}: {key} is given twice")
        try:
            problems = load_benchmark(key, path.strip())[: args.n]
        except InputError as exc:
            raise ConfigError(f"--benchmark {item}: {exc}") from None
        problems = [replace(p, prompt=PAPER_TEMPLATE.replace("{question}", p.prompt)) for p in problems]
        suites.append((key, problems, RewardScorer("math", timeout_s=args.reward_timeout)))
    return suites


def _task_suite(args: argparse.Namespace, run_cfg: dict | None) -> tuple[str, list[Any], Any]:
    """The held-out split of ``--task`` (a builtin task) or of the run's task, scored as training scores it."""
    from hacrl.config import TaskConfig
    from hacrl.data.factory import build_task, task_scorer

    if args.task or run_cfg is None:
        task_cfg = TaskConfig(name=args.task or "add2")
        seed, max_new = 0, 64
    else:
        task_cfg = TaskConfig.model_validate(run_cfg["task"])
        seed, max_new = run_cfg["run"]["seed"], run_cfg["rollout"]["max_new_tokens"]
    task = build_task(task_cfg, seed=seed, max_new_tokens=max_new)
    problems = task.test_problems(args.n)
    if run_cfg is not None and not args.task:
        trained = len(task.test_problems(run_cfg["trainer"]["eval_size"]))
        if trained != len(problems):  # both are the first N of the same held-out list
            print(f"eval: {task.name}: the first {len(problems)} held-out problems (--n {args.n}); training's "
                  f"evaluations (eval.jsonl) used the first {trained} (trainer.eval_size), so the accuracies may "
                  f"differ; --n {trained} scores the same problems", file=sys.stderr)
    return task.name, problems, task_scorer(task, task_cfg)


# ---- presets --------------------------------------------------------------------------------------

def cmd_presets(args: argparse.Namespace) -> int:
    if args.show:
        print(preset_text(args.show), end="")
        return 0
    if args.fields:
        from hacrl.config import Config, config_fields

        for section, field in config_fields(Config).items():
            sub = getattr(field.annotation, "model_fields", None)
            if sub is None and section == "agents":
                from hacrl.config import AgentSpec

                sub, section = AgentSpec.model_fields, "agents.<id>"
            for name, f in (sub or {}).items():
                default = "" if f.is_required() else f" = {f.get_default(call_default_factory=True)!r}"
                extra = {("task", "name"): f"; builtin: {_names('task')}",
                         ("algorithm", "name"): f"; all: {_names('algorithm')}"}.get((section, name), "")
                print(f"{section}.{name}{default}  {f.description or ''}{extra}".rstrip())
        return 0
    import yaml

    for name in preset_names():
        tree = yaml.safe_load(preset_text(name))
        first_line = preset_text(name).splitlines()[0].lstrip("# ").strip()
        agents = ", ".join(a["id"] for a in tree.get("agents", []))
        print(f"{name:<16} {first_line}  [agents: {agents}]")
    print(f"\nbuiltin tasks (task.name): {_names('task')}\nalgorithms (algorithm.name): {_names('algorithm')}\n"
          f"every config key with its help: hacrl presets --fields")
    return 0


def _names(kind: str) -> str:
    """The registered builtin task or algorithm names, for listings."""
    from hacrl.data.tasks import TASKS
    from hacrl.learner.algorithms import ALGORITHMS

    return ", ".join((TASKS if kind == "task" else ALGORITHMS).listing())


if __name__ == "__main__":
    sys.exit(main())
