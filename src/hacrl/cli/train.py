"""``hacrl train``: a run directory, its config, resume, the lock, and the summary printed at the end."""

from __future__ import annotations

import argparse
import functools
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hacrl.config import Config, ConfigError, load_config
from hacrl.errors import DiskFull
from hacrl.run.files import as_disk_full
from hacrl.run.rundir import RunLock, check_output, has_content, refuse_foreign, remove_run


def add_train_parser(sub: Any) -> None:
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
    t.add_argument("-q", "--quiet", action="store_true", help="nothing per step: no progress bar on a terminal, no "
                   "step lines elsewhere (the lines at start and end stay)")
    t.add_argument("--check", action="store_true", help="list every problem the run would meet (config, extras, "
                   "devices, models, Ray resources, data and reward) in one pass, load nothing, and exit")


def _run_dir(args: argparse.Namespace, cfg: Config) -> Path:
    if args.output:
        return Path(args.output)
    name = cfg.run.name or (f"{Path(args.config).stem if args.config else args.preset or 'tiny-model'}-"
                            f"{cfg.algorithm.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    return Path(cfg.run.output_dir) / name


def _resume_run_dir(args: argparse.Namespace) -> argparse.Namespace:
    """``--resume RUN`` names a run directory, not a checkpoint: the same as ``--output RUN --resume``."""
    from hacrl.run.checkpoint import MANIFEST

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
    from hacrl.run.rundir import is_run_directory

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


def _resolve_resume(args: Launch, run_dir: Path) -> Path | None:
    """The checkpoint to resume from: the one given, or the newest intact one (a damaged newer one is
    passed over with a warning); none usable is one line naming the command that starts over."""
    from hacrl.run.checkpoint import MANIFEST, passed_over, unusable_why, usable_checkpoint, verify_checkpoint

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
        why = unusable_why(damaged, "no complete checkpoint (the run stopped before its first)")
        raise ConfigError(f"--resume: {run_dir} has {why}; start over with: {args.command(run_dir, '--overwrite')}")
    for line in passed_over(damaged, found, "resuming from"):
        print(line, file=sys.stderr)
    return found


def cmd_train(args: argparse.Namespace) -> int:
    if args.resume and args.overwrite:
        raise ConfigError("--resume and --overwrite contradict each other; pick one")
    args = _resume_run_dir(args)
    if getattr(args, "check", False):
        from hacrl.cli.check import cmd_check

        return cmd_check(args, lambda: _train_config(args))
    cfg = _train_config(args)
    launch = Launch(resume=args.resume, overwrite=args.overwrite, quiet=args.quiet,
                    command=functools.partial(_command, args))
    return run_training(cfg, _run_dir(args, cfg), launch).code


@dataclass
class Launch:
    """How a training starts: ``resume`` (None, ``"latest"`` or a checkpoint directory), ``overwrite``,
    ``quiet`` (no progress bar), and ``command(run_dir, flag, extra_sets)``: the command that continues
    (``--resume``) or restarts (``--overwrite``) the run, for messages (the CLI's or the Python API's)."""

    resume: str | None = None
    overwrite: bool = False
    quiet: bool = False
    command: Callable[[Path, str | None, list[str] | None], str] = lambda run_dir, flag, extra=None: (
        f"hacrl train --output {shlex.quote(str(run_dir))}" + (f" {flag}" if flag else ""))


@dataclass
class TrainOutcome:
    """What :func:`run_training` did: the exit code (0 trained or already finished, 2 bad input or a full
    disk or diverged, 3 an agent failed, 130 stopped), the run directory, and after a training, the trainer
    and ``Trainer.train()``'s result (``first``/``last`` evaluations, ``checkpoint``)."""

    code: int
    run_dir: Path
    trainer: Any = None
    result: dict[str, Any] | None = None


def run_training(cfg: Config, run_dir: Path, launch: Launch) -> TrainOutcome:
    """Prepare ``run_dir`` and train ``cfg`` in it: the path checked, a directory that is not a run refused,
    the run's lock held, resume or overwrite resolved, ``Trainer(cfg, run_dir).train()`` with a progress bar,
    failures reported with the command that continues, the summary printed; bad input leaves nothing behind.
    ``hacrl train`` and :func:`hacrl.api.train` both start runs here."""
    if launch.resume and launch.overwrite:
        raise ConfigError("resume and overwrite contradict each other; pick one")
    check_output(run_dir)
    if has_content(run_dir):
        refuse_foreign(run_dir)  # before the lock: not even a lock file goes into a directory that is not a run
    made = _missing_ancestors(run_dir)  # the run directory and any parents (runs/) this command would create
    lock = RunLock(run_dir)  # one writer per run directory, held until the run ends
    try:
        lock.acquire()
        return _train_locked(launch, cfg, run_dir, bool(made))
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


def _train_locked(args: Launch, cfg: Config, run_dir: Path, created: bool) -> TrainOutcome:
    from hacrl.backends import AgentFailure
    from hacrl.errors import TrainingDiverged
    from hacrl.run.checkpoint import latest_checkpoint
    from hacrl.trainer.trainer import Trainer

    resume_from = _resolve_resume(args, run_dir)
    if resume_from is not None and _already_finished(args, cfg, run_dir, resume_from):
        return TrainOutcome(0, run_dir)
    fresh = created  # this invocation owns everything in the directory
    if resume_from is None and has_content(run_dir):
        if not args.overwrite:
            refuse_foreign(run_dir)
            if latest_checkpoint(run_dir / "checkpoints") is None:
                raise ConfigError(f"run directory {run_dir} holds a run that stopped before its first checkpoint; "
                                  f"start over with: {args.command(run_dir, '--overwrite')}")
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
        return TrainOutcome(_disk_full(full, args, run_dir, fresh), run_dir)
    print(f"hacrl: run directory {run_dir}")
    _print_agents(trainer)
    try:
        with _Progress(trainer, enabled=not args.quiet) as progress:
            result = trainer.train(progress=progress.update, phase_progress=progress.phase)
    except (AgentFailure, TrainingDiverged) as exc:
        last = latest_checkpoint(run_dir / "checkpoints")
        if last is None and fresh:
            remove_run(run_dir)
        if isinstance(exc, TrainingDiverged):
            kept = f"the last complete checkpoint {last} is intact; " if last else ""
            print(f"hacrl: error: {exc}\nhacrl: {kept}start over with: {args.command(run_dir, '--overwrite')}",
                  file=sys.stderr)
            return TrainOutcome(2, run_dir)
        where = f"the last complete checkpoint is {last}; resume with: {args.command(run_dir, '--resume')}" \
            if last else "no checkpoint was written yet (set trainer.checkpoint_every); start the run again"
        step = trainer.step_idx + (getattr(exc, "method", None) != "save")  # a save follows its step
        print(f"hacrl: error: step {step}: {exc}; {where}", file=sys.stderr)
        return TrainOutcome(3, run_dir)
    except BaseException as exc:
        if fresh and latest_checkpoint(run_dir / "checkpoints") is None:
            remove_run(run_dir)  # a failed run with nothing to resume: the retry needs no --overwrite
        full = as_disk_full(exc, run_dir)
        if full is None:
            raise
        return TrainOutcome(_disk_full(full, args, run_dir, fresh), run_dir)
    if result["stopped"]:
        print(f"hacrl: stopped at step {trainer.step_idx}; resume with: {args.command(run_dir, '--resume')}",
              file=sys.stderr)
        return TrainOutcome(130, run_dir, trainer, result)
    _print_summary(trainer, result, run_dir)
    return TrainOutcome(0, run_dir, trainer, result)


def _disk_full(exc: DiskFull, args: Launch, run_dir: Path, fresh: bool) -> int:
    """One line: what could not be written, the space it needed and the space free, and the command that
    continues the run from its last complete checkpoint (or starts it again: a fresh run that wrote none
    was removed)."""
    from hacrl.run.checkpoint import latest_checkpoint

    if latest_checkpoint(run_dir / "checkpoints") is not None:
        then = f"continue with: {args.command(run_dir, '--resume')}"
    else:
        then = f"start again with: {args.command(run_dir, '--overwrite' if not fresh else None)}"
    print(f"hacrl: error: {exc.describe()}; free space, then {then}", file=sys.stderr)
    return 2


def _already_finished(args: Launch, cfg: Config, run_dir: Path, checkpoint: Path) -> bool:
    """Resuming a run whose checkpoint is at or past ``trainer.steps``: say so, with its evaluations, and
    how to train further; nothing is loaded or written."""
    from hacrl.run.checkpoint import read_manifest
    from hacrl.run.sinks import read_evals

    manifest = read_manifest(checkpoint)
    step = manifest.get("step")
    # the asynchronous mode's step counts every agent's updates; the run ends when the slowest has made trainer.steps
    done = min(manifest.get("versions") or [0]) if manifest.get("mode") == "async" else step
    if not isinstance(done, int) or done < cfg.trainer.steps:
        return False
    print(f"hacrl: {run_dir} already finished at step {step} (trainer.steps={cfg.trainer.steps}); nothing to train")
    evals = read_evals(run_dir)
    for agent_id in (a.id for a in cfg.agents):
        before, after = evals.get((0, agent_id)), evals.get((step, agent_id))
        if before is not None or after is not None:
            print(f"  {agent_id:<20} before {_acc(before)}  after {_acc(after)}")
    print(f"hacrl: to train further: {_further(args, cfg, run_dir, done)}")
    return True


def _further(args: Launch, cfg: Config, run_dir: Path, done: int) -> str:
    """How to train a finished run further: resume with twice its steps, unless an agent's learning-rate
    schedule (planned over the run's steps, :mod:`hacrl.agents.lr_schedule`) would refuse another count."""
    scheduled = [f"agents.{a.id}.lr_schedule={a.lr_schedule}" for a in cfg.agents if a.lr_schedule != "constant"]
    if not scheduled:
        return args.command(run_dir, "--resume", [f"trainer.steps={2 * done}"])
    span = f"span{'s' if len(scheduled) == 1 else ''} this run's {done} step{'s' if done != 1 else ''}"
    return (f"not by resuming with more steps ({', '.join(scheduled)} {span}, and a schedule cannot stretch "
            f"mid-run); export the models (hacrl export {run_dir}) and train them in a new run "
            f"(agents.<id>.model=<the exported folder>)")


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
    from hacrl.run.sinks import eval_key

    first, last = result.get("first"), result.get("last")
    steps = trainer.step_idx
    print(f"hacrl: finished {steps} step{'' if steps == 1 else 's'} of {trainer.cfg.algorithm.name}; "
          f"held-out {_measure(trainer, run_dir)} on {len(trainer.eval_problems)} {trainer.task.name} problems:")
    for agent_id in trainer.agent_ids:
        key = eval_key(agent_id)
        print(f"  {agent_id:<20} before {_acc(first.get(key) if first else None)}  "
              f"after {_acc(last.get(key) if last else None)}")
    print(f"hacrl: metrics in {run_dir / 'metrics.jsonl'}, checkpoint {result['checkpoint']}")


#: a phase (rollout, reward, update, eval, ...) that takes this long gets a line of its own as it ends, so a long
#: step shows where it is; quicker ones print nothing (a tiny CPU run's phases take well under a second: its output
#: is the step lines alone, as before)
PHASE_LINE_S = 30.0


def _measure(trainer: Any, run_dir: Path) -> str:
    """What the held-out number is: "mean greedy reward" when rewards fell outside [0, 1] (in training, or in the
    held-out evaluations: a mean of them is no accuracy), else "greedy accuracy"."""
    from hacrl.run.sinks import is_task_record, read_problem_evals
    from hacrl.trainer.reward_checks import outside_unit

    rewards = trainer.phases.warnings.saw_outside_unit or any(
        outside_unit(r.get("reward") or []) for r in read_problem_evals(run_dir) if is_task_record(r))
    return "mean greedy reward" if rewards else "greedy accuracy"


class _Progress:
    """A rich progress bar: step, per-agent reward, ETA. Plain log lines when not on a terminal. A phase of
    ``PHASE_LINE_S`` seconds or more: a line as it ends (above the bar on a terminal). Nothing with ``-q``."""

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
            from hacrl.run.sinks import phase_times

            step_time = sum(phase_times(metrics).values())
            print(f"step {step}/{self.trainer.cfg.trainer.steps}  reward {rewards}  ({step_time:.1f}s)",
                  file=sys.stderr, flush=True)

    def phase(self, step: int, name: str, seconds: float) -> None:
        """``  step 12: rollout 41.3 s`` for a phase of step ``step`` (0: the evaluation before the first) that
        took ``PHASE_LINE_S`` or more."""
        if not self.enabled or seconds < PHASE_LINE_S:
            return
        line = f"  step {step}: {name} {seconds:.1f} s"
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=sys.stderr, flush=True)

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.stop()
