"""``hacrl compare --compact DIR``: a finished comparison's per-run records moved into one compressed file.

Every finished run's files go into ``DIR/records.parquet`` (:mod:`hacrl.run.records`): the lines of
``metrics.jsonl``, ``eval.jsonl`` and ``eval_problems.jsonl`` (one row per line, one column per key) and the
whole texts of ``config.yaml``, ``provenance.jsonl`` and ``compare.json``. The file is written beside the old
one, read back and compared with every original line and text before anything is removed; then each run's
compare.json names the files it holds (``compacted``) and is written there and into the records file, and the
run's files go, compare.json last. A run directory is left only where it keeps the samples excerpt (in the
lowest seed of each algorithm, the first and last step of ``samples/``); the rest of ``samples/`` (logged answers
no report reads) and ``tensorboard/`` (the metrics again, as event files) go.

A run not finished, holding ``checkpoints/`` (a resume would write past its records) or being trained is left
as it is and named. Run it again after adding seeds or algorithms: the new runs join the file, and runs
compacted by an older hacrl (their compare.json, config.yaml and provenance.jsonl still files) are folded in.
Readers (:func:`hacrl.run.records.run_text`, :func:`hacrl.run.sinks.read_jsonl`) read a run's file where it
exists and the records file where compare.json says it went, so a comparison may hold both layouts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hacrl.errors import InputError
from hacrl.report.runs import pruned_run_steps, read_record, record_text
from hacrl.run.files import guard, write_atomic
from hacrl.run.records import (
    COMPACTED,
    RECORDS_FILE,
    RUN_RECORD,
    SOURCES,
    TEXTS,
    Line,
    Records,
    RunKey,
    read_lines,
    run_key,
    same_lines,
    to_table,
    write_table,
)
from hacrl.run.rundir import LOCK_FILE, RunDirectoryBusy, RunLock

LINE_FILES = tuple(f"{s}.jsonl" for s in SOURCES)
# the whole texts compare.json names as moved (compare.json itself: its copy in the records is the run's record)
FOLDED = tuple(t for t in TEXTS if t != RUN_RECORD)
MOVED = (*zip(SOURCES, LINE_FILES, strict=True), *((t, t) for t in FOLDED))  # (records source, the run's file)


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


def run_dirs(directory: Path, old: Records | None = None) -> dict[RunKey, Path]:
    """(algo, seed) → run directory, for every ``runs/<algo>/seed-<s>/`` of a comparison and every run its
    records file ``old`` holds (whose directory may be gone)."""
    found = {run_key(d): d for d in sorted(directory.glob("runs/*/seed-*")) if d.is_dir()}
    out = {k: d for k, d in found.items() if k is not None}
    for algo, seed in old.runs() if old is not None else []:
        out.setdefault((algo, seed), directory / "runs" / algo / f"seed-{seed}")
    return dict(sorted(out.items()))


def _why_not(run_dir: Path) -> str | None:
    """Why a run cannot be compacted now (None: it can)."""
    if (run_dir / "checkpoints").exists():
        return ("holds checkpoints/ (a resume would write past its compacted records): rerun its hacrl compare "
                "command with --keep-checkpoints none, or delete checkpoints/")
    if not read_record(run_dir) or pruned_run_steps(run_dir) is None:
        return "not finished (compare.json does not show its last step)"
    return None


def _read_file(path: Path, source: str) -> list[Line]:
    """A run file as records lines: a line file's lines, a whole text as one line."""
    return read_lines(path) if source in SOURCES else [path.read_text(encoding="utf-8")]


def _run_lines(run_dir: Path, key: RunKey, old: Records | None) -> dict[str, list[Line]]:
    """A run's lines per source (a whole text's as one line): from its files, and from ``old`` for the files
    compare.json says went there (a file still present must hold the same: a compaction stopped before its
    removals); compare.json itself, a file while the run is not done, is read from it and gets ``compacted``:
    every file the records now hold."""
    record = read_record(run_dir)
    moved = record.get(COMPACTED) or []
    held = old.run(*key) if old is not None else {}
    out: dict[str, list[Line]] = {}
    for source, name in MOVED:
        stored = held.get(source)
        if name in moved and stored is None:
            raise InputError(f"{run_dir}: compare.json says its {name} is in {RECORDS_FILE}, which lacks it")
        if (run_dir / name).is_file():
            lines = _read_file(run_dir / name, source)
            if stored is not None and not same_lines(lines, stored):
                raise InputError(f"{run_dir / name} differs from its copy in {RECORDS_FILE}")
            out[source] = lines
        elif stored is not None:
            out[source] = stored
    out = {s: lines for s, lines in out.items() if lines and lines != [""]}  # an empty file holds nothing
    record[COMPACTED] = [name for source, name in MOVED if source in out]
    out[RUN_RECORD] = [record_text(record)]
    return out


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


def _done(run_dir: Path, key: RunKey, old: Records | None) -> bool:
    """A run compacted before, all its removals made: its compare.json (removed last) is only in the records."""
    return (old is not None and not (run_dir / RUN_RECORD).exists()
            and old.text(*key, RUN_RECORD) is not None)


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
    files, its line files and its whole texts; compare.json goes after them (:func:`_finish_run`)."""
    out: list[Path] = []
    samples = run_dir / "samples"
    if samples.is_dir():
        entries = sorted(samples.iterdir())
        rest = [p for p in entries if p not in keep]
        out += [samples] if len(rest) == len(entries) else rest
    names = ("tensorboard", *LINE_FILES, *FOLDED)
    return out + [run_dir / n for n in names if (run_dir / n).exists()]


def _finish_run(run_dir: Path, record: str, remove: list[Path]) -> None:
    """Write compare.json naming the moved files (first: a stop in between leaves files the records file holds
    too, which readers read first), remove what the run no longer needs, then compare.json (its copy in the
    records file is the run's record from then on)."""
    write_atomic(run_dir / RUN_RECORD, record)
    for p in remove:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    (run_dir / RUN_RECORD).unlink()


def _prune_dirs(dirs: list[Path]) -> None:
    """Remove the run directories left empty (but for a lock file) and their algorithm directories."""
    for d in dirs:
        if d.is_dir() and all(p.name == LOCK_FILE for p in d.iterdir()):
            (d / LOCK_FILE).unlink(missing_ok=True)
            d.rmdir()
            with contextlib.suppress(OSError):
                d.parent.rmdir()  # only when empty


def _plan(dirs: dict[RunKey, Path], old: Records | None, locks: contextlib.ExitStack,
          result: Compaction) -> list[RunKey]:
    """The runs to compact now, each locked for the rest of the compaction; fills ``result.kept`` (compacted
    before) and ``result.left`` (not to be compacted, and why)."""
    todo = []
    for key, d in dirs.items():
        if _done(d, key, old):
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
    old_path = directory / RECORDS_FILE
    if not (directory / "runs").is_dir() and not old_path.is_file():
        raise InputError(f"{directory}: no runs/ here; give a comparison directory (the --output of hacrl compare)")
    result = Compaction(directory, before_bytes=tree_bytes(directory))
    with contextlib.ExitStack() as locks:
        locks.enter_context(RunLock(directory))  # one compaction at a time writes the records file
        old = Records(old_path) if old_path.is_file() else None
        dirs = run_dirs(directory, old)
        todo = result.compacted = _plan(dirs, old, locks, result)
        lost = [f"{a}/seed-{s}" for a, s in result.kept if old is None or (a, s) not in old.runs()]
        if lost:
            raise InputError(f"{directory}: compare.json of {', '.join(lost[:3])} says its records are in "
                             f"{RECORDS_FILE}, which lacks them; restore that file (version control, a backup)")
        keep = _excerpt(todo, result.kept, dirs)
        removals = {k: [*_to_remove(dirs[k], keep), dirs[k] / RUN_RECORD] for k in todo}
        result.removed = [p for k in todo for p in removals[k]]
        result.removed_bytes = sum(tree_bytes(p) for p in result.removed if p.exists())
        if todo and not dry_run:
            runs = {k: old.run(*k) for k in old.runs()} if old is not None else {}
            runs.update({k: _run_lines(dirs[k], k, old) for k in todo})
            result.records_bytes = _write_verified(directory, runs)
            for k in todo:
                record = runs[k][RUN_RECORD][0]
                assert isinstance(record, str)
                _finish_run(dirs[k], record, removals[k][:-1])
        elif old is not None:
            result.records_bytes = old_path.stat().st_size
    if todo and not dry_run:
        _prune_dirs([dirs[k] for k in todo])
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
                     f"({mb(result.removed_bytes)}): the runs' files (now in {RECORDS_FILE}), tensorboard/, and "
                     f"samples/ but the first and last step of each algorithm's lowest seed")
    lines += [f"  left as it is: {a}/seed-{s}: {why}" for (a, s), why in result.left.items()]
    if not dry_run:
        lines.append(f"  {mb(result.before_bytes)} before, {mb(result.after_bytes)} now")
    return "\n".join(lines)
