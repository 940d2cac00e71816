"""Bounded-time reward scoring: every answer gets a score, None, or a counted failure - never a hang.

``RewardScorer(fn, timeout_s=5.0, workers=1).score(completions, samples)`` returns a
:class:`ScoreResult`. ``fn`` may be a list of rewards with ``weights`` and any contract (hacrl's per-answer,
TRL's batched, verl's: :mod:`hacrl.rewards.contract`); a set with a batched reward is called once per chunk
of answers (one chunk per worker, at most 64 answers), whose limit is ``timeout_s`` times its answers, and a
chunk past it is timed out whole. ``check(sample)`` calls the rewards once on stand-in answers, where they
will run, and turns a broken contract into one line. An answer whose reward raises, returns None, returns NaN/inf or a non-number, or
runs past ``timeout_s`` scores None ("unscorable, skip") and is counted by kind; the other answers keep
their scores.

How the limit is enforced, and the trade-off:

- ``timeout_s=None`` scores **inline**, in the calling thread, with the same error/NaN handling. It adds
  about a microsecond per answer, but nothing bounds a reward that loops forever. Use it for cheap,
  trusted rewards (``exact``, ``numeric``, the built-in tasks' verifiers).
- ``timeout_s=x`` scores in ``workers`` **separate processes**. ``signal.alarm`` is not an option: it
  only works on the main thread of the main interpreter (math-verify's own limit fails off it), and
  rewards get scored from worker threads and processes (Ray actors, data loaders); a thread cannot be
  killed either. So each worker is a fresh interpreter (``subprocess``, not ``multiprocessing``: no
  ``__main__`` re-import, and it works inside daemonic processes, which ``multiprocessing`` refuses to
  give children). The parent sends chunks of answers through a pipe; the worker streams back one
  result per answer; each answer gets ``timeout_s`` from the moment the previous result (or the chunk)
  arrived. When that passes, the parent SIGKILLs the worker, scores the answer as a timeout, starts a
  replacement and re-queues the rest of the chunk. A call therefore returns within about ``timeout_s``
  x (timed-out answers) / ``workers``, plus one worker restart per timed-out answer, plus the normal
  scoring time. A reward that has never returned and runs past the limit on ``HANGS_AFTER`` answers in
  a row is taken to hang: the rest of that call, and of later calls from their first timeout on, is
  counted as timed out at once (a 2-step run with a hanging reward fails in seconds, not minutes).

  The price: ~10-15 microseconds of pipe and pickle traffic per answer; ~0.1 s to start a worker
  (lazily, at the first call, and again after each timeout or crash) plus the reward's optional
  ``warmup()`` (the ``math`` reward imports sympy there, ~1 s, before the worker reports ready, so it
  never counts against an answer's limit); and the reward must be nameable in a fresh process - a
  registry name, ``module:function`` or ``file.py:function`` spec, or a module-level function
  (lambdas and closures only work inline, unless registered as ``python:`` names with
  :func:`~hacrl.rewards.base.register_python`: those travel pickled with cloudpickle). POSIX only (the
  pipes are passed by descriptor).

Workers exit when the parent closes them (``close()``, ``with``, garbage collection, interpreter exit)
or when they notice the parent is gone. A scorer is safe to share between threads (calls are
serialised) and to use in a forked child (the child starts its own workers).
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from hacrl.rewards.base import PYTHON_PREFIX, RewardFn, check_value, spec_of
from hacrl.rewards.contract import CONTRACT_ERROR, RewardSet
from hacrl.types import Problem

logger = logging.getLogger(__name__)

KINDS = ("ok", "none", "error", "nan", "timeout")
_MAX_MESSAGE = 500
HANGS_AFTER = 6  # timeouts in a row, before the reward ever returned, that mark it as hanging
_BOOT = "import sys; from hacrl.rewards._worker import main; main(int(sys.argv[1]), int(sys.argv[2]))"


@dataclass
class ScoreResult:
    """Rewards in input order (None = unscorable) and how many answers ended each way.

    ``first_message`` holds, per non-ok kind, the message of the lowest-numbered answer of that kind
    (e.g. the exception), for logs. ``by_function``: with several reward functions, each one's own value per
    answer, in input order, by name (:attr:`~hacrl.rewards.contract.RewardSet.names`; None: that function did
    not score the answer, or the answer was never scored); empty with a single function.
    """

    rewards: list[float | None]
    ok: int = 0
    none: int = 0
    error: int = 0
    nan: int = 0
    timeout: int = 0
    first_message: dict[str, str] = field(default_factory=dict)
    elapsed_s: float = 0.0
    by_function: dict[str, list[float | None]] = field(default_factory=dict)
    _first_index: dict[str, int] = field(default_factory=dict, repr=False)

    def counts(self) -> dict[str, int]:
        return {kind: getattr(self, kind) for kind in KINDS}

    def record(self, index: int, kind: str, value: float | None, message: str | None,
               parts: Sequence[float | None] = ()) -> None:
        """Answer ``index`` ended as ``kind`` with ``value``; ``parts``: each function's own value, in order."""
        self.rewards[index] = value
        for values, part in zip(self.by_function.values(), parts):
            values[index] = part
        setattr(self, kind, getattr(self, kind) + 1)
        if message is not None and index < self._first_index.get(kind, len(self.rewards)):
            self._first_index[kind] = index
            self.first_message[kind] = f"answer {index}: {message}"[:_MAX_MESSAGE]


def call_reward(fn: RewardFn, completion: str, sample: dict) -> tuple[str, float | None, str | None]:
    """Run one reward call; exceptions and bad values become (kind, None, message)."""
    try:
        value = fn(completion, sample)
    except Exception as exc:  # noqa: BLE001 - whatever the reward raises counts as an error, not a crash
        return "error", None, f"{type(exc).__name__}: {exc}"[:_MAX_MESSAGE]
    return check_value(value)


class RewardScorer:
    """Scores completions with a reward function under a per-answer time limit (see module doc).

    >>> with RewardScorer("exact", timeout_s=None) as scorer:
    ...     res = scorer.score(["4", "5", "x"], [{"answer": "4"}, {"answer": "4"}, {}])
    >>> res.rewards, res.ok, res.none
    ([1.0, 0.0, None], 2, 1)
    """

    def __init__(self, fn: str | RewardFn | Sequence[str | RewardFn], *, weights: Sequence[float] | None = None,
                 contract: str = "auto", timeout_s: float | None = 5.0, workers: int = 1,
                 startup_timeout_s: float = 60.0) -> None:
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 or None (inline), got {timeout_s!r}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers!r}")
        items = [fn] if isinstance(fn, str) or callable(fn) else list(fn)
        self.rewards = RewardSet.build(items, weights=weights, contract=contract)
        self.fn: RewardFn = self.rewards.rewards[0].fn
        self.timeout_s, self.workers, self.startup_timeout_s = timeout_s, workers, startup_timeout_s
        specs = [item.strip() if isinstance(item, str) else spec_of(item) for item in items]
        self.spec = specs[0] if len(specs) == 1 else ", ".join(str(s) for s in specs)
        self._wire: dict[str, Any] | None = None
        if timeout_s is not None:
            self._wire = self._make_wire(specs)
        self._lock = threading.Lock()
        self._pool: list[_Worker] = []
        self._answered = False  # the reward has returned (or raised) at least once
        self._timeouts_in_row = 0
        self._owner_pid = os.getpid()
        self._finalizer = weakref.finalize(self, _shutdown, self._pool, self._owner_pid)

    def _make_wire(self, specs: list[str | None]) -> dict[str, Any] | None:
        """What a worker needs to rebuild the rewards: specs, and ``python:`` functions pickled."""
        entries = []
        for reward, spec in zip(self.rewards.rewards, specs):
            if spec is None:
                raise ValueError(
                    f"reward {reward.fn!r} cannot be sent to worker processes: define it at module level "
                    "and pass it (or its 'module:function' / 'file.py:function' spec), or score inline "
                    "with timeout_s=None")
            pickled = None
            if spec.startswith(PYTHON_PREFIX):
                pickled = _pickle_function(reward.fn)
                if pickled is None:
                    logger.warning("reward %s has no importable spec and cloudpickle is not installed: scored "
                                   "inline, in this process, without a time limit; fix: define it in a module or "
                                   "file, or pip install cloudpickle", spec)
                    self.timeout_s = None
                    return None
            entries.append((spec, pickled, reward.contract))
        return {"rewards": entries, "weights": self.rewards.weights}

    def score(self, completions: list[str], samples: list[dict]) -> ScoreResult:
        if len(completions) != len(samples):
            raise ValueError(f"{len(completions)} completions but {len(samples)} samples")
        n = len(completions)
        several = len(self.rewards.rewards) > 1
        result = ScoreResult(rewards=[None] * n, by_function={name: [None] * n for name in self.rewards.names}
                             if several else {})
        start = time.monotonic()
        if self.timeout_s is None:
            if self.rewards.batched:
                for i, (outcome, parts) in enumerate(self.rewards.score_each(list(completions), list(samples))):
                    result.record(i, *outcome, parts)
            else:
                for i, (completion, sample) in enumerate(zip(completions, samples)):
                    outcome, parts = self.rewards.score_each([completion], [sample])[0]
                    result.record(i, *outcome, parts)
        else:
            if os.getpid() != self._owner_pid:
                self._adopt_after_fork()
            with self._lock:
                try:
                    self._score_in_workers(completions, samples, result)
                except BaseException:  # leave no worker mid-chunk behind for the next call
                    _shutdown(self._pool, self._owner_pid)
                    raise
        result.elapsed_s = time.monotonic() - start
        return result

    def check(self, sample: dict[str, Any]) -> None:
        """Call the rewards once, where they will run, on ``sample`` (the first training problem's) with two
        stand-in answers (its ground truth, and an empty one): a broken contract (see
        :mod:`hacrl.rewards.contract`), or a field the rows lack, is a ValueError of one line naming the fix.
        A reward that raises anything else, returns None or runs past the limit here is left to training."""
        result = self.score([str(sample.get("answer", "")), ""], [sample, sample])
        message = result.first_message.get("error", "").split(": ", 1)[-1]
        if message.startswith(CONTRACT_ERROR):
            raise ValueError(message.removeprefix(CONTRACT_ERROR).strip())
        if message.startswith("KeyError:"):
            have = ", ".join(sorted(k for k in sample if k not in ("chat_prompt", "templated")))
            name = self.spec or ", ".join(r.name for r in self.rewards.rewards)
            raise ValueError(f"reward {name} raised {message} on the first training row, whose sample holds "
                             f"{have}; fix: read a field it has (a data set's columns all reach the reward)")

    def score_problems(self, completions: list[str], problems: Sequence[Problem]) -> ScoreResult:
        """``score`` against problems: each answer's sample is its problem's ``Problem.as_sample()``."""
        return self.score(completions, [p.as_sample() for p in problems])

    @property
    def pids(self) -> list[int]:
        """Process ids of the live workers (empty when inline or closed)."""
        return [w.proc.pid for w in self._pool]

    def close(self) -> None:
        with self._lock:
            _shutdown(self._pool, self._owner_pid)

    def __enter__(self) -> RewardScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- worker pool ----------------------------------------------------------------------------
    def _adopt_after_fork(self) -> None:
        """In a forked child the workers (and maybe a held lock) belong to the parent: start afresh."""
        self._lock = threading.Lock()
        self._pool = []
        self._owner_pid = os.getpid()
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _shutdown, self._pool, self._owner_pid)

    def _score_in_workers(self, completions: list[str], samples: list[dict], result: ScoreResult) -> None:
        assert self.timeout_s is not None and self._wire is not None
        n = len(completions)
        if n == 0:
            return
        # a batched reward: one call per worker's share (at most 64 answers); else chunks of about n / (4 workers)
        size = max(1, min(64, -(-n // (self.workers * (1 if self.rewards.batched else 4)))))
        order = list(range(n))
        if not self._answered:  # until the reward first returns, try answers spread over the batch (other
            stride = -(-n // HANGS_AFTER)  # prompts, other agents): HANGS_AFTER timeouts then mean it hangs
            order = [i for r in range(stride) for i in range(r, n, stride)]
        pending = deque(order[i : i + size] for i in range(0, n, size))
        for i, w in enumerate(self._pool):  # replace workers that died between calls
            if w.proc.poll() is not None:
                w.kill()
                self._pool[i] = self._start_worker()
        while len(self._pool) < self.workers:
            self._pool.append(self._start_worker())
        while pending or any(w.chunk for w in self._pool):
            now = time.monotonic()
            for w in self._pool:
                if w.ready and not w.chunk and pending:
                    chunk = pending.popleft()  # a batched reward answers a chunk at once: its whole budget
                    limit = self.timeout_s * (len(chunk) if self.rewards.batched else 1)
                    w.assign(chunk, completions, samples, result, now + limit)
            active = [w for w in self._pool if w.chunk or (not w.ready and pending)]
            if not active:
                continue
            wait_s = max(0.0, min(w.deadline for w in active) - time.monotonic())
            for conn in wait([w.rx for w in active], timeout=wait_s):
                self._drain(next(w for w in active if w.rx is conn), result, pending)
            now = time.monotonic()
            for w in active:
                if w.deadline <= now and w in self._pool:
                    if w.rx.poll(0):  # its answer arrived just in time
                        self._drain(w, result, pending)
                    else:
                        self._on_deadline(w, result, pending)
            if not self._answered and self._timeouts_in_row >= HANGS_AFTER:
                self._give_up(result, pending)

    def _give_up(self, result: ScoreResult, pending: deque) -> None:
        """A reward that has never returned and timed out HANGS_AFTER answers in a row hangs: the rest of
        the call is counted as timed out at once instead of costing the limit (and a worker restart) each."""
        msg = (f"not tried: the reward never returned and ran past the {self.timeout_s} s limit on "
               f"{self._timeouts_in_row} answers in a row")
        for w in list(self._pool):
            if w.chunk:
                for index in w.chunk[w.pos :]:
                    result.record(index, "timeout", None, msg)
                self._replace(w, start=False)  # mid-answer: its late result must not reach the next call
        while pending:
            for index in pending.popleft():
                result.record(index, "timeout", None, msg)

    def _drain(self, w: _Worker, result: ScoreResult, pending: deque) -> None:
        try:
            while True:
                msg = w.rx.recv()
                if msg[0] == "ready":
                    w.ready = True
                elif msg[0] == "init_error":
                    self._replace(w, start=False)
                    raise RuntimeError(f"reward worker could not load {self.spec!r}: {msg[1]}")
                else:
                    index, kind, value, message, parts = msg
                    result.record(index, kind, value, message, parts)
                    self._answered, self._timeouts_in_row = True, 0
                    w.pos += 1
                    if w.pos == len(w.chunk):
                        w.chunk, w.pos = [], 0
                w.deadline = time.monotonic() + self.timeout_s if w.chunk else math.inf
                if not w.rx.poll(0):
                    return
        except (EOFError, OSError):
            try:
                code: int | None = w.proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                code = None
            if not w.ready:
                self._replace(w, start=False)
                raise RuntimeError(f"reward worker for {self.spec!r} exited during start-up "
                                   f"(exit code {code}); see its stderr above") from None
            self._fail_current(w, result, pending, "error", f"reward worker died (exit code {code})")

    def _on_deadline(self, w: _Worker, result: ScoreResult, pending: deque) -> None:
        if not w.ready:
            self._replace(w, start=False)
            raise RuntimeError(f"reward worker for {self.spec!r} did not start within "
                               f"{self.startup_timeout_s} s")
        logger.debug("reward answer %d ran past %s s; restarting worker %d", w.chunk[w.pos],
                     self.timeout_s, w.proc.pid)
        self._timeouts_in_row += 1
        self._fail_current(w, result, pending, "timeout", f"ran past the {self.timeout_s} s limit")

    def _fail_current(self, w: _Worker, result: ScoreResult, pending: deque, kind: str, msg: str) -> None:
        if w.chunk and self.rewards.batched:  # one call scored the chunk: all of it ends this way
            for index in w.chunk[w.pos :]:
                result.record(index, kind, None, msg)
        elif w.chunk:
            result.record(w.chunk[w.pos], kind, None, msg)
            rest = w.chunk[w.pos + 1 :]
            if rest:
                pending.appendleft(rest)
        self._replace(w, start=True)

    def _replace(self, w: _Worker, *, start: bool) -> None:
        w.kill()
        index = self._pool.index(w)
        if start:
            self._pool[index] = self._start_worker()
        else:
            del self._pool[index]

    def _start_worker(self) -> _Worker:
        assert self._wire is not None
        wire = self._wire
        if len(wire["rewards"]) == 1 and wire["rewards"][0][1] is None:  # the spec as it stands now
            wire = {**wire, "rewards": [(self.spec, None, wire["rewards"][0][2])]}
        return _Worker(wire, time.monotonic() + self.startup_timeout_s)


class _Worker:
    """One worker process and its two pipes; ``chunk[pos]`` is the answer it is scoring now."""

    def __init__(self, wire: dict[str, Any], startup_deadline: float) -> None:
        task_r, task_w = os.pipe()
        result_r, result_w = os.pipe()
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # the directory that holds the hacrl package
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(task_r), str(result_w)],
                                         pass_fds=(task_r, result_w), stdin=subprocess.DEVNULL, env=env)
        except BaseException:
            os.close(task_w)
            os.close(result_r)
            raise
        finally:
            os.close(task_r)
            os.close(result_w)
        self.tx, self.rx = Connection(task_w, readable=False), Connection(result_r, writable=False)
        self.ready, self.chunk, self.pos, self.deadline = False, [], 0, startup_deadline
        sys_path = [os.getcwd() if p == "" else p for p in sys.path]
        try:
            self.tx.send(("init", wire, sys_path))
        except OSError:
            pass  # it died at once; the parent notices EOF on rx

    def assign(self, chunk: list[int], completions: list[str], samples: list[dict], result: ScoreResult,
               deadline: float) -> None:
        items = [(i, completions[i], samples[i]) for i in chunk]
        try:
            payload = pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - pickle raises many kinds; find the samples that cannot travel
            sendable = []
            for item in items:
                try:
                    pickle.dumps(item)
                    sendable.append(item)
                except Exception as exc:  # noqa: BLE001 - as above, for one sample
                    result.record(item[0], "error", None, f"sample cannot be sent to a worker: {exc!r}")
            items, payload = sendable, pickle.dumps(sendable, protocol=pickle.HIGHEST_PROTOCOL)
        if not items:
            return
        self.chunk, self.pos, self.deadline = [i for i, _, _ in items], 0, deadline
        try:
            self.tx.send_bytes(payload)
        except OSError:
            pass  # the worker died; EOF on rx reports it

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - a process stuck in the kernel
            logger.warning("reward worker %d did not exit after SIGKILL", self.proc.pid)
        for conn in (self.tx, self.rx):
            conn.close()


def _pickle_function(fn: Any) -> bytes | None:
    """``fn`` pickled by value with cloudpickle (or Ray's copy of it), or None when neither is installed."""
    try:
        import cloudpickle
    except ImportError:
        try:
            from ray import cloudpickle  # type: ignore[no-redef]
        except ImportError:
            return None
    return cloudpickle.dumps(fn)


def _shutdown(pool: list[_Worker], owner_pid: int) -> None:
    """Ask idle workers to exit, kill the rest, reap all. Runs on close(), GC and interpreter exit."""
    if os.getpid() != owner_pid:
        return
    for w in pool:
        try:
            w.tx.send(None)
        except OSError:
            pass
    deadline = time.monotonic() + 1.0
    for w in pool:
        try:
            w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        w.kill()
    pool.clear()
