"""Writes that either complete or leave the file as it was, and a full disk as one line.

Every file a run and ``hacrl compare`` write goes through here; a checkpoint, written by the agents'
own savers into a temporary directory, uses ``disk_full`` on its own failure (``checkpoint.py``).

- ``append_lines`` / ``append_bytes``: a batch of JSON lines (metrics.jsonl, eval.jsonl,
  eval_problems.jsonl) in one ``os.write`` loop; if it fails part-way (a full disk writes what fits, then
  raises ENOSPC), the file is truncated back to its size before the batch, so a line is never half-written.
- ``write_atomic``: the whole file into ``<name>.tmp``, fsync, rename over the old one (samples,
  config.yaml, trackers.json, compare.json, summary.json, report.md, plots); on failure the temporary is
  removed and the previous file, if any, is unchanged.
- ``guard(path)``: ENOSPC or EDQUOT raised inside becomes ``DiskFull`` naming ``path``, the bytes needed
  when known and the space free there (``shutil.disk_usage``).

A library that writes for us may report a full disk in its own words (safetensors: "No space left on
device (os error 28)"); ``is_disk_full`` reads those too.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hacrl.errors import DiskFull

NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
# a full disk in the words of a library that does not raise OSError (safetensors, Rust's io::Error)
_NO_SPACE_TEXT = ("no space left on device", "disk quota exceeded", "os error 28)", "os error 122)")


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception it was raised from, says the disk or the quota is full.

    >>> is_disk_full(OSError(errno.ENOSPC, "No space left on device")), is_disk_full(OSError(errno.EIO, "I/O"))
    (True, False)
    >>> is_disk_full(RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"))
    True
    """
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in NO_SPACE:
            return True
        if any(t in str(cur).lower() for t in _NO_SPACE_TEXT):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def _is_quota(exc: BaseException) -> bool:
    return (isinstance(exc, OSError) and exc.errno == errno.EDQUOT) or "quota" in str(exc).lower()


def free_bytes(path: Path) -> int | None:
    """Bytes free to this user on the filesystem holding ``path`` (or its nearest existing parent)."""
    path = Path(path)
    while not path.exists() and path.parent != path:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def disk_full(exc: BaseException, path: Path, needed: int | None = None, *, estimated: bool = False) -> DiskFull:
    """The one-line error for ``exc`` (a full disk or quota) while writing ``path``; the free space is the
    filesystem's, so it is left out for a quota, which it does not show."""
    quota = _is_quota(exc)
    return DiskFull(path, needed=needed, free=None if quota else free_bytes(path), quota=quota, estimated=estimated)


def as_disk_full(exc: BaseException, where: Path) -> DiskFull | None:
    """``exc`` as a ``DiskFull`` (the OSError of a write not made through this module names its own file,
    else ``where``), or None when it is something else."""
    if isinstance(exc, DiskFull):
        return exc
    if isinstance(exc, OSError) and is_disk_full(exc):
        return disk_full(exc, Path(os.fsdecode(exc.filename)) if exc.filename else where)
    return None


@contextlib.contextmanager
def guard(path: Path, needed: int | None = None) -> Iterator[None]:
    """Turn ENOSPC / EDQUOT raised inside into ``DiskFull`` naming ``path``; other errors pass unchanged."""
    try:
        yield
    except DiskFull:
        raise
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        raise disk_full(exc, path, needed) from None


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is out: a nearly full disk writes what fits, then raises ENOSPC."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def append_bytes(fd: int, path: Path, data: bytes, *, sync: bool = True) -> None:
    """Append ``data`` to the file open (``O_APPEND``) as ``fd``, all of it or none: on any failure the file
    is truncated back to its size before (a full disk is ``DiskFull`` naming ``path``)."""
    start = os.fstat(fd).st_size
    try:
        _write_all(fd, data)
        if sync:
            os.fsync(fd)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)  # shrinking needs no space; the part that fitted goes
        if isinstance(exc, OSError) and is_disk_full(exc):
            raise disk_full(exc, path, len(data)) from None
        raise


def open_append(path: Path) -> int:
    """A descriptor for appending to ``path`` (created if missing)."""
    with guard(path):
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def append_lines(path: Path, records: list[dict[str, Any]]) -> None:
    """Append one JSON line per record in one write, then fsync: a kill or a full disk leaves the file with
    all of them or none (readers also skip a line cut short by a power loss)."""
    if not records:
        return
    data = "".join(json.dumps(rec) + "\n" for rec in records).encode("utf-8")
    fd = open_append(path)
    try:
        append_bytes(fd, path, data)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: str | bytes) -> None:
    """Replace ``path`` by ``data`` whole: ``<name>.tmp`` written and fsynced, then renamed over ``path``.
    On failure the temporary is removed and ``path`` is as it was (a full disk is ``DiskFull``)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, raw)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError) and is_disk_full(exc):
            raise disk_full(exc, path, len(raw)) from None
        raise
