"""Errors that mean "the user's input is wrong" (the CLI prints their one-line message and exits 2), and
``DiskFull``: a write that found no room (also one line and exit 2, with the command that continues the run)."""


class InputError(ValueError):
    """Bad user input (config, data, model path); the message names the field and the fix."""


class TrainingDiverged(InputError):
    """A loss, gradient, weight or log-probability became non-finite; the message names the agent, the step
    and the phase (rollout, update or eval). Usually a learning rate that is too high: a config fix."""


class DamagedCheckpoint(InputError):
    """A checkpoint file that cannot be read; the message names the file."""


class DiskFull(Exception):
    """A write that found its filesystem full (ENOSPC) or the user's disk quota used up (EDQUOT). The
    message names the path, the bytes the write needed when known and the space free there, then the fix;
    the write left nothing half-done behind (``hacrl.run.files``). Not an ``InputError``: the input is
    fine, the run continues with ``--resume`` once there is room."""

    FIX = "free space, then run the command again (a run continues with: hacrl train --output RUN --resume)"

    def __init__(self, path: object, *, needed: int | None = None, free: int | None = None,
                 quota: bool = False, estimated: bool = False) -> None:
        self.path, self.needed, self.free, self.quota, self.estimated = str(path), needed, free, quota, estimated
        super().__init__(str(path))

    def __str__(self) -> str:
        return f"{self.describe()}; {self.FIX}"

    def describe(self) -> str:
        """What failed, without the fix: ``disk full writing PATH (needs 15.1 MiB; 0 bytes free)``.

        >>> DiskFull("run/metrics.jsonl", needed=300, free=0).describe()
        'disk full writing run/metrics.jsonl (needs 300 bytes; 0 bytes free there)'
        """
        what = "disk quota exceeded" if self.quota else "disk full"
        about = "about " if self.estimated else ""
        sizes = [f"needs {about}{size_text(self.needed)}"] if self.needed is not None else []
        sizes += [f"{size_text(self.free)} free there"] if self.free is not None else []
        return f"{what} writing {self.path}" + (f" ({'; '.join(sizes)})" if sizes else "")


def size_text(n: int) -> str:
    """Bytes for people, in powers of 1024.

    >>> size_text(512), size_text(15_848_035), size_text(3 * 2**30)
    ('512 bytes', '15.1 MiB', '3.0 GiB')
    """
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
