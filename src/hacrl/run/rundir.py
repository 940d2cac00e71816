"""The run directory as a thing on disk: is a path usable as one, is it one hacrl wrote, who holds it.

- ``check_output(path)``: a path that is a file, lies under a file, or cannot be written is refused with
  one line before anything is created.
- ``is_run_directory(path)`` / ``foreign_entries(path)``: a run directory holds only what hacrl writes
  (``RUN_ENTRIES``) and its ``config.yaml``; ``remove_run(path)`` deletes those files and refuses a
  directory that holds anything else, so ``--overwrite`` never deletes a user's files or a folder of runs.
- ``RunLock(path)``: an advisory ``fcntl.flock`` on ``path/.hacrl.lock`` held while a run trains, so two
  processes never write one run directory. The kernel drops the lock when its holder dies (even
  ``kill -9``), so a lock left by a killed process is simply taken over; the file names the last holder.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import socket
from pathlib import Path

from hacrl.errors import InputError

logger = logging.getLogger(__name__)

LOCK_FILE = ".hacrl.lock"
# every top-level name a run writes (trainer, checkpoints, sinks, `hacrl compare`'s record, log rewrites,
# `hacrl export`'s default folder)
RUN_ENTRIES = frozenset({
    "config.yaml", "metrics.jsonl", "eval.jsonl", "eval_problems.jsonl", "samples", "tensorboard", "checkpoints",
    "export",
    "compare.json", "compare.json.tmp", "config.yaml.tmp", "metrics.jsonl.tmp", "eval.jsonl.tmp",
    "eval_problems.jsonl.tmp", "trackers.json", "trackers.json.tmp", "wandb", "provenance.jsonl", LOCK_FILE,
})


RESOLVED_SECTIONS = frozenset({"run", "task", "agents", "rollout", "algorithm", "trainer"})


class RunDirectoryBusy(InputError):
    """Another live process holds the run directory's lock."""


def check_output(path: Path) -> None:
    """Refuse, with one line, a run directory path that is a file, lies under a file or is not writable."""
    if path.exists() and not path.is_dir():
        raise InputError(f"--output {path}: is a file, not a directory; give a directory path")
    parent = path
    while not parent.exists():
        if parent.parent == parent:
            break
        parent = parent.parent
    if parent != path and not parent.is_dir():
        raise InputError(f"--output {path}: {parent} is a file, so no directory can be made under it; "
                         f"give another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"--output {path}: {parent} is not writable by this user; give a writable path")


def foreign_entries(path: Path) -> list[str]:
    """Names in ``path`` that hacrl does not write (sorted); empty for a run directory or a missing one.
    A ``config.yaml`` counts as hacrl's only when it is a resolved config (every section present)."""
    if not path.is_dir():
        return []
    foreign = [p for p in path.iterdir() if p.name not in RUN_ENTRIES
               or (p.name == "config.yaml" and not _is_resolved_config(p))]
    return sorted(p.name + ("/" if p.is_dir() else "") for p in foreign)


def _is_resolved_config(path: Path) -> bool:
    import yaml

    try:
        tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(tree, dict) and RESOLVED_SECTIONS <= set(tree)


def has_content(path: Path) -> bool:
    """Whether ``path`` holds anything besides the lock file."""
    return path.is_dir() and any(p.name != LOCK_FILE for p in path.iterdir())


def is_run_directory(path: Path) -> bool:
    """A directory that holds only what hacrl writes, with at least its config, metrics or checkpoints."""
    return (path.is_dir() and not foreign_entries(path)
            and any((path / n).exists() for n in ("config.yaml", "metrics.jsonl", "checkpoints")))


def refuse_foreign(path: Path) -> None:
    """One line naming what a directory holds that hacrl did not write, if anything."""
    foreign = foreign_entries(path)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise InputError(f"--output {path}: not a hacrl run directory (it holds {shown}); give another --output "
                         f"(--overwrite replaces only a run directory; nothing was deleted)")


def remove_run(path: Path) -> None:
    """Delete what a run wrote in ``path`` (not the lock file, not the directory); a directory holding
    anything else is refused with one line and left untouched."""
    if not path.is_dir():
        return
    refuse_foreign(path)
    for entry in path.iterdir():
        if entry.name == LOCK_FILE:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


class RunLock:
    """``with RunLock(run_dir):`` holds the run directory's lock (creating the directory if needed);
    raises ``RunDirectoryBusy`` naming the holder when another live process has it."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._fd: int | None = None
        self._created = False

    def acquire(self) -> RunLock:
        import fcntl

        self.run_dir.mkdir(parents=True, exist_ok=True)
        path = self.run_dir / LOCK_FILE
        self._created = not path.exists()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise RunDirectoryBusy(f"run directory {self.run_dir} is in use by another hacrl process "
                                   f"({holder or 'holder unknown'}); "
                                   f"wait for it to finish, or stop it first") from None
        except OSError as exc:  # a filesystem without flock (some NFS): train unprotected, say so
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                os.close(fd)
                raise
            logger.warning("run directory %s: no file locks on this filesystem (%s); make sure no other "
                           "hacrl process writes it", self.run_dir, exc.strerror)
            os.close(fd)
            return self
        previous = _read_holder(fd)
        if previous and not previous.startswith(f"pid {os.getpid()} "):
            logger.info("run directory %s: taking over the lock of %s (no longer running)", self.run_dir, previous)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)  # a holder named in the file is one that did not finish
            except OSError:
                pass
            if self._created and not is_run_directory(self.run_dir):  # nothing of a run came of it
                (self.run_dir / LOCK_FILE).unlink(missing_ok=True)
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_holder(run_dir: Path) -> str | None:
    """Who holds ``run_dir``'s lock now ("pid N on HOST"; "holder unknown" when the file names none), or None
    when no live process does (no lock file, a released one, one left by a process that died, a filesystem
    without file locks). Only reads: a probe that finds the lock free drops it at once."""
    import fcntl

    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_holder(fd) or "holder unknown"
    except OSError:
        return None
    finally:
        os.close(fd)  # closing the descriptor drops the probe's lock
    return None


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""
