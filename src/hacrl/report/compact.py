"""``hacrl compare --compact DIR``: a finished comparison's per-run records moved into one compressed file.

Every finished run's ``metrics.jsonl``, ``eval.jsonl`` and ``eval_problems.jsonl`` go into
``DIR/records.parquet`` (:mod:`hacrl.run.records`: one row per line, one column per key). The file is written
beside the old one, read back and compared with every original line before anything is removed; then each
run's compare.json names the files it holds (``compacted``), and the run keeps only its small files:
config.yaml, compare.json, provenance.jsonl, eval.jsonl when under 64 KiB (it is in the records file too), and,
in the lowest seed of each algorithm, the first and last step of ``samples/`` as an excerpt. The rest of
``samples/`` (logged answers no report reads) and ``tensorboard/`` (the metrics again, as event files) go.

A run not finished, holding ``checkpoints/`` (a resume would write past its records) or being trained is left
as it is and named. Run it again after adding seeds or algorithms: the new runs join the file. Readers
(:func:`hacrl.run.sinks.read_jsonl`) read a run's file where it exists and the records file where compare.json
says its lines went, so a comparison may hold both layouts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hacrl.errors import InputError
from hacrl.report.runs import RUN_RECORD, pruned_run_steps, read_record
from hacrl.run.files import guard, write_atomic
from hacrl.run.records import (
    COMPACTED,
    RECORDS_FILE,
    SOURCES,
    Line,
    Records,
    RunKey,
    read_lines,
    run_key,
    same_lines,
    to_table,
    write_table,
)
from hacrl.run.rundir import RunDirectoryBusy, RunLock

EVAL_KEEP_BYTES = 64 * 1024  # an eval.jsonl up to this size stays beside the records file, readable as it was
FILES = tuple(f"{s}.jsonl" for s in SOURCES)


@dataclass
class Compaction:
    """What one compaction did (or, dry, would do)."""

    directory: Path
    compacted: list[RunKey] = field(default_factory=list)  # runs whose records went into the file now
    kept: list[RunKey] = field(default_factory=list)  # runs the file held already
    left: dict[RunKey, str] = field(default_factory=dict)  # run → why it was left as it is
    removed: list[Path] = field(default_factory=list)  # files and folders removed (dry: to be removed)
    removed_bytes: int = 0
    records_bytes: int = 0
    before_bytes: int = 0
    after_bytes: int = 0


def tree_bytes(path: Path) -> int:
    """The bytes of every file under ``path`` (``path`` itself when it is a file)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def run_dirs(directory: Path) -> dict[RunKey, Path]:
    """(algo, seed) → run directory, for every ``runs/<algo>/seed-<s>/`` of a comparison."""
    found = {run_key(d): d for d in sorted(directory.glob("runs/*/seed-*")) if d.is_dir()}
    return {k: d for k, d in found.items() if k is not None}


def _why_not(run_dir: Path) -> str | None:
    """Why a run cannot be compacted now (None: it can)."""
    if (run_dir / "checkpoints").exists():
        return ("holds checkpoints/ (a resume would write past its compacted records): rerun its hacrl compare "
                "command with --keep-checkpoints none, or delete checkpoints/")
    if not (run_dir / RUN_RECORD).is_file() or pruned_run_steps(run_dir) is None:
        return "not finished (compare.json does not show its last step)"
    return None


def _run_lines(run_dir: Path, key: RunKey, old: Records | None) -> dict[str, list[Line]]:
    """A run's lines per source: from its files, and from ``old`` for the files compare.json says went there
    (a file still present must hold the same lines: a compaction stopped before its removals)."""
    moved = read_record(run_dir).get(COMPACTED) or []
    out: dict[str, list[Line]] = {}
    for source, name in zip(SOURCES, FILES, strict=True):
        stored = old.lines(*key, source) if old is not None and name in moved else None
        if name in moved and stored is None:
            raise InputError(f"{run_dir}: compare.json says its {name} is in {RECORDS_FILE}, which is missing")
        if (run_dir / name).is_file():
            lines = read_lines(run_dir / name)
            if stored is not None and not same_lines(lines, stored):
                raise InputError(f"{run_dir / name} differs from its lines in {RECORDS_FILE}")
            out[source] = lines
        elif stored is not None:
            out[source] = stored
    return {s: lines for s, lines in out.items() if lines}  # an empty file holds nothing to keep


def _write_verified(directory: Path, runs: dict[RunKey, dict[str, list[Line]]]) -> int:
    """Write ``runs`` to the records file through a temporary one, read back and compared line for line with
    ``runs`` first; the old file stays as it was on any failure. Returns the file's size."""
    path, tmp = directory / RECORDS_FILE, directory / (RECORDS_FILE + ".tmp")
    try:
        with guard(tmp):
            write_table(to_table(runs), tmp)
        back = Records(tmp)
        bad = [f"{a}/seed-{s}" for (a, s), lines in runs.items() if back.run(a, s).keys() != lines.keys()
               or not all(same_lines(back.lines(a, s, src), got) for src, got in lines.items())]
        if bad or set(back.runs()) != {k for k, v in runs.items() if v}:
            raise InputError(f"{tmp}: read back, it differs from the originals (runs {', '.join(bad[:3]) or '?'}); "
                             f"nothing was removed: report this as a bug")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path.stat().st_size


def _done(run_dir: Path) -> bool:
    """A run compacted before, all its removals made (the record files go last: see :func:`_to_remove`)."""
    return bool(read_record(run_dir).get(COMPACTED)) and not any(
        (run_dir / n).exists() for n in ("metrics.jsonl", "eval_problems.jsonl", "tensorboard"))


def _excerpt(todo: list[RunKey], done: list[RunKey], dirs: dict[RunKey, Path]) -> set[Path]:
    """The sample files kept: the first and last step of the lowest seed with samples of each algorithm,
    unless a run of it compacted before keeps some already."""
    keep: set[Path] = set()
    for algo in dict.fromkeys(a for a, _ in todo):
        if any(any((dirs[k] / "samples").glob("*.jsonl")) for k in done if k[0] == algo):
            continue
        for seed in sorted(s for a, s in todo if a == algo):
            steps = sorted((dirs[algo, seed] / "samples").glob("*.jsonl"))
            if steps:
                keep |= {steps[0], steps[-1]}
                break
    return keep


def _to_remove(run_dir: Path, keep: set[Path]) -> list[Path]:
    """What a compacted run no longer needs, in the order it goes: its samples but the excerpt, its event
    files, a large eval.jsonl, then its per-problem and metrics files (so a run without them has lost the rest)."""
    out: list[Path] = []
    samples = run_dir / "samples"
    if samples.is_dir():
        entries = sorted(samples.iterdir())
        rest = [p for p in entries if p not in keep]
        out += [samples] if len(rest) == len(entries) else rest
    ev = run_dir / "eval.jsonl"
    big = ev.is_file() and ev.stat().st_size > EVAL_KEEP_BYTES
    names = ("tensorboard", *(["eval.jsonl"] if big else []), "eval_problems.jsonl", "metrics.jsonl")
    return out + [run_dir / n for n in names if (run_dir / n).exists()]


def _finish_run(run_dir: Path, sources: list[str], remove: list[Path]) -> None:
    """Name the moved files in compare.json (first: a stop in between leaves files the records file holds too,
    which readers read first), then remove what the run no longer needs."""
    record = read_record(run_dir)
    record[COMPACTED] = [f"{s}.jsonl" for s in sources]
    write_atomic(run_dir / RUN_RECORD, json.dumps(record, indent=2))
    for p in remove:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def _plan(dirs: dict[RunKey, Path], locks: contextlib.ExitStack, result: Compaction) -> list[RunKey]:
    """The runs to compact now, each locked for the rest of the compaction; fills ``result.kept`` (compacted
    before) and ``result.left`` (not to be compacted, and why)."""
    todo = []
    for key, d in dirs.items():
        if _done(d):
            result.kept.append(key)
            continue
        why = _why_not(d)
        if why is None:
            try:
                locks.enter_context(RunLock(d))
            except RunDirectoryBusy as exc:
                why = str(exc)
        if why is None:
            todo.append(key)
        else:
            result.left[key] = why
    return todo


def compact(directory: Path, log: Callable[[str], None] = print, dry_run: bool = False) -> Compaction:
    """Compact the finished runs of the comparison in ``directory`` (see the module docstring); ``dry_run``:
    say what would be done and change nothing."""
    if not (directory / "runs").is_dir():
        raise InputError(f"{directory}: no runs/ here; give a comparison directory (the --output of hacrl compare)")
    result = Compaction(directory, before_bytes=tree_bytes(directory))
    with contextlib.ExitStack() as locks:
        locks.enter_context(RunLock(directory))  # one compaction at a time writes the records file
        dirs = run_dirs(directory)
        old_path = directory / RECORDS_FILE
        old = Records(old_path) if old_path.is_file() else None
        todo = result.compacted = _plan(dirs, locks, result)
        lost = [f"{a}/seed-{s}" for a, s in result.kept if old is None or (a, s) not in old.runs()]
        if lost:
            raise InputError(f"{directory}: compare.json of {', '.join(lost[:3])} says its records are in "
                             f"{RECORDS_FILE}, which lacks them; restore that file (version control, a backup)")
        keep = _excerpt(todo, result.kept, dirs)
        removals = {k: _to_remove(dirs[k], keep) for k in todo}
        result.removed = [p for k in todo for p in removals[k]]
        result.removed_bytes = sum(tree_bytes(p) for p in result.removed)
        if todo and not dry_run:
            runs = {k: old.run(*k) for k in old.runs()} if old is not None else {}
            runs.update({k: _run_lines(dirs[k], k, old) for k in todo})
            result.records_bytes = _write_verified(directory, runs)
            for k in todo:
                _finish_run(dirs[k], list(runs[k]), removals[k])
        elif old is not None:
            result.records_bytes = old_path.stat().st_size
    result.after_bytes = tree_bytes(directory)
    log(describe(result, dry_run))
    return result


def describe(result: Compaction, dry_run: bool = False) -> str:
    """The lines ``hacrl compare --compact`` prints."""
    def mb(n: int) -> str:
        return f"{n / 1e6:.1f} MB"

    verb = "would compact" if dry_run else "compacted"
    head = f"{result.directory}: {verb} {len(result.compacted)} runs into {RECORDS_FILE}"
    if result.records_bytes:
        head += f" ({mb(result.records_bytes)})"
    if result.kept:
        head += f"; {len(result.kept)} were in it already"
    lines = [head]
    if result.removed:
        lines.append(f"  {'would remove' if dry_run else 'removed'} {len(result.removed)} files and folders "
                     f"({mb(result.removed_bytes)}): metrics.jsonl, eval_problems.jsonl, eval.jsonl over "
                     f"{EVAL_KEEP_BYTES // 1024} KiB, tensorboard/, samples/ but one seed's first and last step")
    lines += [f"  left as it is: {a}/seed-{s}: {why}" for (a, s), why in result.left.items()]
    if not dry_run:
        lines.append(f"  {mb(result.before_bytes)} before, {mb(result.after_bytes)} now")
    return "\n".join(lines)
