"""The reward worker process started by :class:`hacrl.rewards.scorer.RewardScorer`.

Protocol on two pipes (file descriptors passed on the command line):

- parent -> worker: ``("init", spec, sys_path)``, then lists of ``(index, completion, sample)``
  chunks, then ``None`` (or EOF) to exit;
- worker -> parent: ``("ready", pid)`` or ``("init_error", message)``, then one
  ``(index, kind, value, message)`` per answer, in order.

The worker ignores SIGINT (the parent owns Ctrl-C and kills it), and exits when its parent is gone.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection


def _exit_when_orphaned(parent: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)


def main(task_fd: int, result_fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
    rx, tx = Connection(task_fd, writable=False), Connection(result_fd, readable=False)
    try:
        _, spec, sys_path = rx.recv()
    except EOFError:
        return
    sys.path[:] = list(sys_path) + [p for p in sys.path if p not in sys_path]

    from hacrl.rewards.base import get_reward
    from hacrl.rewards.scorer import call_reward

    try:
        fn = get_reward(spec)
    except Exception as exc:  # noqa: BLE001 - user code failing to load, any way: told to the parent
        tx.send(("init_error", str(exc)))
        return
    warmup = getattr(fn, "warmup", None)
    if callable(warmup):
        try:
            warmup()
        except Exception as exc:  # noqa: BLE001 - a failed warm-up only costs time later
            print(f"hacrl reward worker: warm-up of {spec!r} failed: {exc!r}", file=sys.stderr)
    tx.send(("ready", os.getpid()))
    while True:
        try:
            chunk = rx.recv()
        except EOFError:
            return
        if chunk is None:
            return
        for index, completion, sample in chunk:
            tx.send((index, *call_reward(fn, completion, sample)))
