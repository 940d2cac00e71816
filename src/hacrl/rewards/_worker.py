"""The reward worker process started by :class:`hacrl.rewards.scorer.RewardScorer`.

Protocol on two pipes (file descriptors passed on the command line):

- parent -> worker: ``("init", wire, sys_path)`` (``wire``: ``{"rewards": [(spec, pickled function or None,
  contract)], "weights": [...]}``), then lists of ``(index, completion, sample)`` chunks, then ``None`` (or
  EOF) to exit;
- worker -> parent: ``("ready", pid)`` or ``("init_error", message)``, then one
  ``(index, kind, value, message, parts)`` per answer, in order (a batched reward set: after one call per chunk;
  ``parts``: each function's own value when there are several, else ``()``).

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
        _, wire, sys_path = rx.recv()
    except EOFError:
        return
    sys.path[:] = list(sys_path) + [p for p in sys.path if p not in sys_path]

    import pickle

    from hacrl.rewards.base import get_reward
    from hacrl.rewards.contract import Reward, RewardSet

    rewards = []
    for spec, pickled, contract in wire["rewards"]:
        try:
            fn = pickle.loads(pickled) if pickled is not None else get_reward(spec)
        except Exception as exc:  # noqa: BLE001 - user code failing to load, any way: told to the parent
            tx.send(("init_error", str(exc) if pickled is None else f"{spec}: cannot unpickle it here: {exc!r}"))
            return
        warmup = getattr(fn, "warmup", None)
        if callable(warmup):
            try:
                warmup()
            except Exception as exc:  # noqa: BLE001 - a failed warm-up only costs time later
                print(f"hacrl reward worker: warm-up of {spec!r} failed: {exc!r}", file=sys.stderr)
        rewards.append(Reward(fn, contract, spec))
    reward_set = RewardSet(rewards, list(wire["weights"]))
    tx.send(("ready", os.getpid()))
    while True:
        try:
            chunk = rx.recv()
        except EOFError:
            return
        if chunk is None:
            return
        if reward_set.batched:
            scored = reward_set.score_each([c for _, c, _ in chunk], [s for _, _, s in chunk])
            for (index, _, _), (outcome, parts) in zip(chunk, scored):
                tx.send((index, *outcome, parts))
        else:
            for index, completion, sample in chunk:
                outcome, parts = reward_set.score_each([completion], [sample])[0]
                tx.send((index, *outcome, parts))
