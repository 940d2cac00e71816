"""``hacrl compare``: argument parsing and printing for :mod:`hacrl.report.compare` (wiring only).

    hacrl compare [--preset NAME | --config FILE] [--algos trust,hacpo,gspo,gspo2x] [--seeds 3]
                  [--set key=value ...] [--output DIR] [--keep-checkpoints all|none] [--jobs N [--jobs-backend local|ray]]
                  [--dry-run | --report-only] [-q]
    hacrl compare --compact DIR [DIR ...] [--dry-run]

Wired into ``hacrl.cli`` with ``add_compare_parser(sub)`` and a dispatch on ``args.command == "compare"``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

DEFAULT_ALGOS = "trust,hacpo,gspo,gspo2x"
DEFAULT_SEEDS = "3"
COMPARE_FIX = ("free space, then run the same command again (finished runs are reused, the others continue "
               "from their last checkpoint)")


def add_compare_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    c = subparsers.add_parser(
        "compare", help="train several algorithms × seeds on one config and write a comparison report",
        description="Train every algorithm × seed (finished runs are reused, interrupted ones resumed), then "
                    "write DIR/report.md, DIR/summary.json and DIR/plots/*.png.")
    c.add_argument("--preset", help="a named preset (see `hacrl presets`); default tiny-model")
    c.add_argument("--config", help="a YAML config file")
    c.add_argument("--algos", default=DEFAULT_ALGOS,
                   help="comma-separated algorithms (hacpo, gspo, gspo2x, gspo-x<N>, naive, grpo, hacpo-*), "
                        f"each optionally NAME@key=value[@key=value...]; default {DEFAULT_ALGOS}")
    c.add_argument("--baselines", help="comma-separated algorithms of --algos to pair every other one against "
                                       "(default: the GSPO baselines listed: gspo, gspo2x, gspo-x<N>)")
    c.add_argument("--seeds", default=DEFAULT_SEEDS,
                   help="number of seeds N (run.seed = 0..N-1), or a list of seeds and ranges such as 0,3,7 or "
                        "4-6 (one seed: 3-3); default 3")
    c.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value for every run, e.g. trainer.steps=20 (repeatable)")
    c.add_argument("--output", help="comparison directory (default: runs/compare-<preset or config name>)")
    c.add_argument("--keep-checkpoints", choices=("all", "none"), default="all",
                   help="none: delete each run's checkpoints once it is finished (metrics, evaluations and the "
                        "run record stay; the run is still reused); default all")
    c.add_argument("--jobs", type=_positive, default=1, metavar="N",
                   help="train N runs at a time, each in its own process at trainer.threads = cores // N (unless "
                        "--set trainer.threads= says otherwise), into the same output and records; default 1")
    c.add_argument("--jobs-backend", choices=("local", "ray"), default="local",
                   help="ray: each run a Ray task reserving its CPUs (trainer.threads) and its agents' GPUs, on the "
                        "cluster at backend.address (a local Ray instance without one); default local processes")
    c.add_argument("--dry-run", action="store_true",
                   help="say what each run would do (reuse, resume, train) and the time left; train nothing")
    c.add_argument("--report-only", action="store_true",
                   help="write the report from the finished runs among those selected and train nothing (the "
                        "others are named and left out: a report while other runs of the comparison train)")
    c.add_argument("-q", "--quiet", action="store_true", help="no per-step lines, only one line per run")
    c.add_argument("--compact", nargs="+", type=Path, metavar="DIR",
                   help="instead of training: move the finished runs' metrics and evaluation records of each "
                        "comparison DIR into DIR/records.parquet (verified before anything is removed) and keep "
                        "only their small files and a samples excerpt; with --dry-run, say what would go")
    return c


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of runs at a time, 1 or more")
    return value


def cmd_compare(args: argparse.Namespace) -> int:
    from hacrl.errors import DiskFull
    from hacrl.report.compare import parse_algos, parse_seeds, run_comparison
    from hacrl.run.files import as_disk_full

    if args.compact:
        return _compact(args.compact, args.dry_run, args.report_only)
    algos = parse_algos(args.algos)
    seeds = parse_seeds(args.seeds)
    name = args.preset or (Path(args.config).stem if args.config else "tiny-model")
    output = Path(args.output) if args.output else Path("runs") / f"compare-{name}"
    from hacrl.run.rundir import check_output

    check_output(output)  # a file, under a file, not writable: one line before any run starts
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover
        pass
    # the command that makes the runs (a report-only invocation's report names the one that trains them)
    made_by = [a for a in sys.argv[2:] if a != "--report-only"]
    command = shlex.join(["hacrl", "compare", *made_by]) if sys.argv[1:2] == ["compare"] else None
    source = args.preset  # None: tiny-model, or the --config file alone; with both the file layers on the preset
    try:
        report = run_comparison(source, algos, seeds, args.overrides, output,
                                log=lambda line: print(line, flush=True), log_steps=not args.quiet,
                                command=command, baselines=args.baselines,
                                keep_checkpoints=args.keep_checkpoints, dry_run=args.dry_run,
                                report_only=args.report_only,
                                config_path=args.config, jobs=args.jobs, jobs_backend=args.jobs_backend)
    except KeyboardInterrupt:
        print("hacrl: interrupted; run the same command again to resume (finished runs are reused)",
              file=sys.stderr)
        return 130
    except OSError as exc:  # ENOSPC from a write not made through hacrl.run.files (a mkdir)
        full = as_disk_full(exc, output)
        if full is None:
            raise
        print(f"hacrl: error: {full.describe()}; {COMPARE_FIX}", file=sys.stderr)
        return 2
    except DiskFull as exc:
        print(f"hacrl: error: {exc.describe()}; {COMPARE_FIX}", file=sys.stderr)
        return 2
    if report is not None:
        _print_answer(report.parent / "summary.json")
        print(f"hacrl: report in {report}")
    return 0


def _compact(dirs: list[Path], dry_run: bool, report_only: bool) -> int:
    """``--compact DIR ...``: each comparison's records into its records.parquet (hacrl.report.compact)."""
    from hacrl.errors import DiskFull, InputError
    from hacrl.report.compact import compact

    if report_only:
        raise InputError("--compact and --report-only: give one (a compacted comparison still reports: run "
                         "--report-only before or after --compact)")
    for d in dirs:
        try:
            compact(d, log=lambda text: print(text, flush=True), dry_run=dry_run)
        except DiskFull as exc:
            print(f"hacrl: error: {exc.describe()}; free space, then run the same command again (nothing of "
                  f"{d} was removed)", file=sys.stderr)
            return 2
    return 0


def _print_answer(summary_path: Path) -> None:
    """The report's Answer table on the terminal (nothing when the comparison has no paired difference), then which
    arm to train with (the report's "Which to train with")."""
    import json

    from hacrl.report.render import answer_table

    try:
        summary = json.loads(summary_path.read_text())
        lines = answer_table(summary)
    except (OSError, ValueError):
        return
    if lines:
        print("\n".join(["", *lines, ""]))
    if summary.get("advice"):
        print(f"Which to train with (within {summary['choice']['margin']:g} of the best arm):")
        print("\n".join(f"  {line}" for line in summary["advice"]))
