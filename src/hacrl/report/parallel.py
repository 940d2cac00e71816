"""The runs of one comparison trained side by side: ``hacrl compare --jobs N``.

Every run that needs training (train, resume, restart) becomes one job; N jobs run at a time, each in its own
process (``multiprocessing``'s spawn: a fresh interpreter, its own torch threads and its own signal handlers)
or, with ``backend="ray"``, as one Ray task holding the run's CPUs and GPUs, so a sweep spreads over a
cluster's nodes. A job is :func:`hacrl.report.runs.execute_run`, the function a serial comparison calls: the
same run directory, lock, records and resume rules, so a run trained in a lane is the run a serial comparison
would have trained. The parent keeps the order of the outcomes and writes the report once, at the end.

Stopping (local processes): the first SIGINT or SIGTERM to the parent is passed on to every running job as
SIGTERM (a Ctrl-C in a terminal reaches them too); each finishes its current step, checkpoints, records
``stopped`` in its compare.json and ends; no further job starts, and the parent raises KeyboardInterrupt once
they all have, so the same command resumes them. A second signal kills the jobs at once (each keeps its last
complete checkpoint; its record is marked ``stopped`` by the parent). A job that fails stops the others the
same way, then its error is raised.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue as queue_mod
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from hacrl.config import ConfigError
from hacrl.report.runs import RunOutcome, RunPlan, execute_run, mark_stopped
from hacrl.run.signals import stop_signals_to

logger = logging.getLogger(__name__)

JOBS_BACKENDS = ("local", "ray")


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask; the machine's count where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS
        return os.cpu_count() or 1


def lane_threads(jobs: int, cores: int | None = None) -> int:
    """torch threads per lane: the cores shared evenly, at least 1.

    >>> lane_threads(2, 16), lane_threads(3, 16), lane_threads(4, 2), lane_threads(1, 8)
    (8, 5, 1, 8)
    """
    return max(1, (cores or usable_cores()) // jobs)


@dataclass
class Job:
    index: int  # position of the run in the comparison's order
    plan: RunPlan
    label: str  # "[i/n] algo seed s", as a serial comparison logs it


class JobFailed(RuntimeError):
    """A lane's run raised an error that could not be carried back as itself, or its process died."""


def lanes_line(jobs: int, todo: int, threads: int | None, backend: str) -> str:
    """What ``--jobs`` does with ``todo`` runs to train (``--dry-run`` and the first log line)."""
    where = "Ray tasks" if backend == "ray" else "processes"
    at = f" at {threads} torch thread{'s' if threads != 1 else ''} each" if threads else ""
    return (f"lanes: {min(jobs, todo)} of the {todo} runs to train at a time, in their own {where}{at} "
            f"(--jobs {jobs}; {usable_cores()} cores here)")


# ---- one job, in its own process --------------------------------------------------------------------------

def _quiet_libraries() -> None:
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover
        pass


def _interrupt_once(signum: int, _frame: Any) -> None:
    """A job's handler before (and after) its trainer's own: stop now, ignoring any further signal."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def _portable(exc: BaseException) -> tuple[bytes | None, str]:
    """``exc`` pickled (None when it cannot make the trip) and its traceback as text."""
    text = "".join(traceback.format_exception(exc))
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
    except Exception:  # noqa: BLE001 - any exception that does not survive pickling travels as text
        data = None
    return data, text


def _labelled(label: str, send: Callable[[str], None]) -> Callable[[str], None]:
    """A job's log: its per-step lines (indented in a serial comparison) name the run, as lanes interleave."""
    short = label.split("] ", 1)[-1]
    return lambda line: send(f"    [{short}] {line.strip()}" if line.startswith(" ") else line)


def run_job(job: Job, log_steps: bool, messages: Any) -> None:
    """A local lane's process: train one run and put ``(index, kind, payload)`` on ``messages``."""
    signal.signal(signal.SIGINT, _interrupt_once)
    signal.signal(signal.SIGTERM, _interrupt_once)
    _quiet_libraries()
    log = _labelled(job.label, lambda line: messages.put((job.index, "log", line)))
    try:
        messages.put((job.index, "done", execute_run(job.plan, job.label, log, log_steps)))
    except KeyboardInterrupt:
        messages.put((job.index, "stopped", None))
    except BaseException as exc:  # noqa: BLE001 - carried back to the parent, which raises it
        messages.put((job.index, "error", _portable(exc)))


def _raise_error(job: Job, payload: tuple[bytes | None, str]) -> None:
    data, text = payload
    if data is not None:
        raise pickle.loads(data)
    raise JobFailed(f"{job.label} failed in its lane:\n{text}")


# ---- the parent -------------------------------------------------------------------------------------------

class _Stops:
    """The parent's SIGINT/SIGTERM: the first asks every job to stop, the second kills them and aborts."""

    def __init__(self, on_first: Callable[[], None], on_second: Callable[[], None]) -> None:
        self.count = 0
        self._first, self._second = on_first, on_second

    def request(self, signum: int, _frame: Any) -> None:
        self.count += 1
        if self.count == 1:
            self._first()
        else:
            self._second()
            raise KeyboardInterrupt

    def installed(self) -> AbstractContextManager[None]:
        return stop_signals_to(self.request)


class _LocalLanes:
    """The parent's side of local lanes: start processes, take their messages, reap them."""

    def __init__(self, jobs: Sequence[Job], lanes: int, log: Callable[[str], None], log_steps: bool,
                 on_done: Callable[[Job], None] | None = None) -> None:
        import multiprocessing as mp

        self.ctx = mp.get_context("spawn")
        self.messages = self.ctx.Queue()
        self.waiting, self.lanes, self.log, self.log_steps = list(jobs), lanes, log, log_steps
        self.on_done = on_done
        self.by_index = {j.index: j for j in jobs}
        self.running: dict[int, Any] = {}  # index → process
        self.started: dict[int, float] = {}
        self.outcomes: dict[int, RunOutcome] = {}
        self.stopped: list[Job] = []
        self.failure: list[tuple[Job, tuple[bytes | None, str]]] = []
        self.killed: set[int] = set()
        self.stops = _Stops(self.stop_all, self.kill_all)

    def stop_all(self) -> None:
        """SIGTERM to every lane (from a signal handler too: no logging here)."""
        for proc in self.running.values():
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)

    def kill_all(self) -> None:
        for index, proc in self.running.items():
            if proc.is_alive():
                proc.kill()
                self.killed.add(index)

    def _fail(self, job: Job, payload: tuple[bytes | None, str]) -> None:
        if not self.failure and not self.stops.count:
            self.stop_all()  # the others stop resumably; the error is raised once they have
        self.failure.append((job, payload))

    def _handle(self, index: int, kind: str, payload: Any) -> None:
        if kind == "log":
            self.log(payload)
            return
        self.running.pop(index).join()  # first: a failed lane is not among those asked to stop
        if kind == "done":
            self.outcomes[index] = payload
            if self.on_done is not None:
                self.on_done(self.by_index[index])
        elif kind == "stopped":
            self.stopped.append(self.by_index[index])
        else:
            self._fail(self.by_index[index], payload)

    def _take(self, timeout: float) -> bool:
        try:
            self._handle(*self.messages.get(timeout=timeout))
        except queue_mod.Empty:
            return False
        return True

    def step(self) -> None:
        """Start jobs into free lanes, handle messages for up to half a second, reap lanes that died."""
        while self.waiting and len(self.running) < self.lanes and not self.stops.count and not self.failure:
            job = self.waiting.pop(0)
            proc = self.ctx.Process(target=run_job, args=(job, self.log_steps, self.messages),
                                    name=f"hacrl-lane-{job.index}")
            self.started[job.index] = time.time()
            proc.start()
            self.running[job.index] = proc
            if self.stops.count:  # a stop that came while it started
                os.kill(proc.pid, signal.SIGTERM)
        self._take(0.5)
        for index, proc in list(self.running.items()):
            if proc.exitcode is None or index not in self.running:
                continue
            while index in self.running and self._take(1.0):  # its last messages may still be on their way
                pass
            if index in self.running:
                self.running.pop(index)
                if self.stops.count:  # stopped before its handlers were in place: nothing of it to keep
                    self.stopped.append(self.by_index[index])
                elif index not in self.killed:
                    why = f"its process ended with exit code {proc.exitcode} without a result (killed, out of memory?)"
                    self._fail(self.by_index[index], (None, why))

    def run(self) -> dict[int, RunOutcome]:
        try:
            said = False
            with self.stops.installed():
                while self.running or (self.waiting and not self.stops.count and not self.failure):
                    self.step()
                    if self.stops.count and not said:
                        said = True
                        self.log("hacrl: stopping: every running run finishes its step and checkpoints, then "
                                 "the same command resumes them (again to abort at once)")
        finally:
            for index, proc in self.running.items():  # an abort (second signal) or an error in the parent
                if proc.is_alive():
                    proc.kill()
                    self.killed.add(index)
                proc.join()
            for index in self.killed:
                mark_stopped(self.by_index[index].plan.run_dir, since=self.started[index])
        if self.failure:
            _raise_error(*self.failure[0])
        if self.stopped or self.stops.count:
            raise KeyboardInterrupt
        return self.outcomes


def run_local(jobs: Sequence[Job], lanes: int, log: Callable[[str], None], log_steps: bool,
              on_done: Callable[[Job], None] | None = None) -> dict[int, RunOutcome]:
    """Train ``jobs`` ``lanes`` at a time, each in its own process; index → outcome of every finished job.
    ``on_done(job)`` is called in this process as each job finishes, while the others train.
    Raises KeyboardInterrupt when stopped (the finished ones stay finished), a job's error when one fails."""
    return _LocalLanes(jobs, lanes, log, log_steps, on_done).run()


# ---- Ray: one task per run --------------------------------------------------------------------------------

def run_resources(plan: RunPlan) -> tuple[float, float]:
    """(CPUs, GPUs) one run's Ray task reserves: its torch threads (1 when unset), and the GPUs of its agents
    on CUDA (``agents.<id>.num_gpus``, else ``backend.num_gpus_per_agent``, else 1 each). A run whose own
    backend is Ray reserves one CPU: its agents' actors reserve theirs."""
    cfg = plan.cfg
    if cfg.backend.name == "ray":  # its agents are Ray actors with their own resources; the task only drives
        return 1.0, 0.0
    cpus = float(cfg.trainer.threads or 1)
    gpus = 0.0
    for spec in cfg.agents:
        if spec.device.startswith("cuda"):
            gpus += spec.num_gpus if spec.num_gpus is not None else (cfg.backend.num_gpus_per_agent or 1.0)
    return cpus, gpus


def _ray_job(job: Job, log_steps: bool) -> tuple[str, Any]:
    """A Ray task: one run in the task's process (its agents there too, unless its own backend is Ray)."""
    signal.signal(signal.SIGTERM, _interrupt_once)
    _quiet_libraries()
    log = _labelled(job.label, lambda line: print(line, flush=True))
    try:
        return "done", execute_run(job.plan, job.label, log, log_steps)
    except KeyboardInterrupt:
        return "stopped", None
    except BaseException as exc:  # noqa: BLE001 - carried back to the driver, which raises it
        return "error", _portable(exc)


def run_ray(jobs: Sequence[Job], lanes: int, log: Callable[[str], None], log_steps: bool,
            address: str | None, on_done: Callable[[Job], None] | None = None) -> dict[int, RunOutcome]:
    """Train ``jobs`` as Ray tasks, at most ``lanes`` in flight, each reserving :func:`run_resources`. Joins
    the cluster at ``address`` (a local instance without one; the one already started in this process if
    any). The first SIGINT/SIGTERM cancels the tasks gently (Ray calls the task's SIGINT handler: a run in
    training finishes its step, checkpoints and records ``stopped``; one still loading stops at once), the
    second kills them (each keeps its last complete checkpoint, its record marked ``stopped``); then
    KeyboardInterrupt."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--jobs-backend ray needs Ray: pip install 'hacrl[ray]'") from None
    started_ray = False
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=True, configure_logging=False)
        started_ray = True
    task = ray.remote(_ray_job)
    waiting = list(jobs)
    refs: dict[Any, Job] = {}
    started: dict[int, float] = {}
    outcomes: dict[int, RunOutcome] = {}
    failure: tuple[Job, tuple[bytes | None, str]] | None = None
    cancelled = False

    def kill_all() -> None:
        for ref, job in refs.items():
            ray.cancel(ref, force=True)
            mark_stopped(job.plan.run_dir, since=started[job.index])

    stops = _Stops(lambda: None, kill_all)
    try:
        with stops.installed():
            while refs or (waiting and not stops.count and failure is None):
                while waiting and len(refs) < lanes and not stops.count and failure is None:
                    job = waiting.pop(0)
                    cpus, gpus = run_resources(job.plan)
                    log(f"{job.label}: a Ray task with {cpus:g} CPU{'s' if cpus != 1 else ''}"
                        + (f" and {gpus:g} GPU{'s' if gpus != 1 else ''}" if gpus else ""))
                    started[job.index] = time.time()
                    refs[task.options(num_cpus=cpus, num_gpus=gpus, max_retries=0).remote(job, log_steps)] = job
                if stops.count == 1 and not cancelled:
                    cancelled = True
                    log("hacrl: stopping: every run's task finishes its step and checkpoints, then the same "
                        "command resumes them (again to abort at once)")
                    for ref in refs:
                        ray.cancel(ref, force=False)  # the trainer's SIGINT handler: a stop at the step's end
                ready, _ = ray.wait(list(refs), num_returns=1, timeout=0.5)
                for ref in ready:
                    job = refs.pop(ref)
                    try:
                        kind, payload = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - cancelled, or its worker died
                        if stops.count or failure is not None:
                            mark_stopped(job.plan.run_dir, since=started[job.index])
                            continue
                        kind, payload = "error", (None, f"its Ray task failed: {exc}")
                    if kind == "done":
                        outcomes[job.index] = payload
                        if on_done is not None:
                            on_done(job)
                    elif kind == "error" and failure is None:
                        failure = (job, payload)
                        for other in refs:
                            ray.cancel(other, force=True)
    finally:
        if started_ray:
            ray.shutdown()
    if failure is not None:
        _raise_error(*failure)
    if stops.count:
        raise KeyboardInterrupt
    return outcomes


def run_jobs(jobs: Sequence[Job], lanes: int, log: Callable[[str], None], log_steps: bool,
             backend: str = "local", address: str | None = None,
             on_done: Callable[[Job], None] | None = None) -> dict[int, RunOutcome]:
    """Train ``jobs``, ``lanes`` at a time, in local processes or Ray tasks; index → outcome. ``on_done(job)``
    runs here as each job finishes (``--keep-checkpoints none`` removes its checkpoints then)."""
    if backend not in JOBS_BACKENDS:
        raise ConfigError(f"--jobs-backend must be one of {', '.join(JOBS_BACKENDS)}, got {backend!r}")
    if backend == "ray":
        return run_ray(jobs, lanes, log, log_steps, address, on_done)
    return run_local(jobs, lanes, log, log_steps, on_done)
