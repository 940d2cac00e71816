"""The asynchronous mode (``trainer.mode=async``, docs/async.md): every agent trains at its own pace and shares
its answers through a ``SharedPool``.

The driver keeps one chain of calls per agent going: rollout → scoring → pool → (group wait) → take → update →
rollout ... It waits on whichever call finishes first (``backend.wait_any``), never on all agents. The phases
are the lock-step trainer's own code: ``Trainer._sampling_params`` / ``_rollout_done`` around the worker's
``rollout``, ``Trainer._score`` on one agent's answers, ``Trainer._update_request`` / ``_update_done`` around the
worker's ``update``, ``Trainer._pool_metrics`` on the take. What this module adds: the ledger (which prompts
each agent answers next), the take from the pool under the staleness bound, ``RecentCapability`` for ω and P̂,
the per-agent metrics, and the quiescent cut for evaluations and checkpoints.

Each agent's ``version`` is its number of updates. The run ends when the slowest agent has made
``trainer.steps`` updates; faster agents go on training until then. metrics.jsonl gets one line per update
with ``step`` = the run's total number of updates (checkpoints and evaluations are named by it too); the
line names the agent's own version. With the local backend the calls run one at a time in a fixed order:
at ``async.bound=0`` without a group-wait limit this is the lock-step trainer's run, update for update.

Run it with ``hacrl train --set trainer.mode=async`` (tests: tests/integration/test_async.py).
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from hacrl.backends import Handle
from hacrl.config import dump_config
from hacrl.core import RecentCapability
from hacrl.pool.shared import PoolTake, SharedPool
from hacrl.run import checkpoint as ckpt
from hacrl.run.files import write_atomic
from hacrl.types import Problem

if TYPE_CHECKING:
    from hacrl.trainer.trainer import Trainer

logger = logging.getLogger(__name__)


@dataclass
class Round:
    """One agent's round: the prompts handed to it (ids in the training stream) and where it stands."""

    tag: int  # the agent's round number: the worker keeps its own answers under it
    prompts: list[int]
    problems: list[Problem]
    version: int  # the agent's version that answers them
    scored_at: float | None = None  # when its answers entered the pool (the group wait starts)
    metrics: dict[str, float] = field(default_factory=dict)  # rollout and scoring metrics, logged with the update


class AsyncLoop:
    """The driver's state in the asynchronous mode: versions, the ledger, the pool, capability and the calls
    in flight; one per ``Trainer.train`` call."""

    def __init__(self, trainer: Trainer) -> None:
        self.t = trainer
        cfg = trainer.cfg
        self.n = len(trainer.agent_ids)
        self.bound, self.group_wait = cfg.async_.bound, cfg.async_.group_wait_s
        self.pool = SharedPool(self.n)
        self.capability = RecentCapability(self.n, window=cfg.algorithm.capability_window * cfg.trainer.batch_size)
        self.versions = [0] * self.n
        self.tags = [0] * self.n  # rounds started per agent
        self.handed: dict[int, set[int]] = {}  # prompt id → agents it was handed to (while it may still be used)
        self.problems: dict[int, Problem] = {}  # prompt id → problem, for the same prompts
        self.own_keys: list[dict[int, tuple[int, int]]] = [{} for _ in range(self.n)]  # pool uid → worker key
        self.held: dict[int, Round] = {}  # agent → its scored round waiting for its take (group wait or a cut)
        self.inflight: dict[Handle, tuple[str, Any]] = {}  # handle → ("rollout", Round) or ("update", PoolTake, ...)
        self.busy = [0.0] * self.n  # seconds the agent's worker computed (its rollouts' and updates' busy_s)
        self.idle = [0.0] * self.n  # seconds the agent waited in group waits and cuts
        self.updates = [0] * self.n  # updates made since the loop began (this process)
        self.started = time.perf_counter()
        self._since: list[float | None] = [None] * self.n  # when the agent's current wait began

    # ---- the ledger ---------------------------------------------------------------------------------
    def _inflight_prompts(self, exclude: int) -> dict[int, int]:
        """Prompt id → the agent (other than ``exclude``) whose rollout of it is in flight."""
        return {p: r_agent for h, (kind, rnd) in self.inflight.items() if kind == "rollout"
                for r_agent in [h.agent] if r_agent != exclude for p in rnd.prompts}

    def _next_prompts(self, k: int) -> list[int]:
        """Agent k's next B prompts: those with partners' answers k can still use, then those in flight at a
        partner and not handed to k, oldest first; then fresh ones from the training stream."""
        b = self.t.cfg.trainer.batch_size
        chosen = [p for p in self.pool.waiting_prompts(k, self.bound) if p in self.problems][:b]
        for p in sorted(self._inflight_prompts(k)):
            if len(chosen) < b and p not in chosen and k not in self.handed.get(p, set()):
                chosen.append(p)
        while len(chosen) < b:
            problem = next(self.t._train_iter, None)
            if problem is None:
                raise RuntimeError(f"task {self.t.task.name!r} ran out of training problems")
            self.problems[self.t.data_pos] = problem
            chosen.append(self.t.data_pos)
            self.t.data_pos += 1
        for p in chosen:
            self.handed.setdefault(p, set()).add(k)
        return chosen

    def _prune(self) -> None:
        """Forget prompts no agent can be handed again: not in flight and without answers in the pool."""
        live = {a.prompt for k in range(self.n) for a in self.pool.pending(k)} | set(self._inflight_prompts(-1))
        live |= {p for rnd in self.held.values() for p in rnd.prompts}
        for p in [p for p in self.handed if p not in live]:
            del self.handed[p], self.problems[p]

    # ---- one agent's chain --------------------------------------------------------------------------
    def start_round(self, k: int) -> None:
        prompts = self._next_prompts(k)
        rnd = Round(self.tags[k], prompts, [self.problems[p] for p in prompts], self.versions[k])
        self.tags[k] += 1
        self._submit(k, "rollout", rnd, [self.problems[p].prompt for p in prompts], self.t._sampling_params(),
                     recompute=self.t._needs_recompute(), tag=rnd.tag)

    def _submit(self, k: int, kind: str, payload: Any, *args: Any, **kwargs: Any) -> None:
        self._wake(k)
        self.inflight[self.t.backend.submit(k, kind, *args, **kwargs)] = (kind, payload)

    def _wake(self, k: int) -> None:
        if self._since[k] is not None:
            self.idle[k] += time.perf_counter() - self._since[k]  # type: ignore[operator]
            self._since[k] = None

    def rollout_done(self, k: int, rnd: Round, result: tuple[list, dict[str, float]]) -> None:
        """Score agent k's answers, add them to the pool and the capability windows; k waits for its take."""
        answers, m = result
        agent_id = self.t.agent_ids[k]
        timings: dict[str, float] = {}
        rnd.metrics.update(self.t._rollout_done(agent_id, m, timings))
        start = time.perf_counter()
        scored, stats = self.t._score(rnd.problems, answers)
        timings[f"timing/reward/{agent_id}"] = time.perf_counter() - start
        rnd.metrics.update({f"agent/{agent_id}/scored/{key.removeprefix('reward/')}": v
                            for key, v in stats.items() if key.startswith("reward/")})
        rnd.metrics[f"agent/{agent_id}/unscorable"] = stats[f"agent/{agent_id}/unscorable"]
        rnd.metrics.update(timings)
        self.busy[k] += timings[f"timing/rollout/{agent_id}"]
        added = self.pool.add(scored.trajectories, prompts=rnd.prompts, problems=rnd.problems, version=rnd.version)
        for pos, a in enumerate(added):  # the worker keeps the answer as (tag, its position in the round)
            self.own_keys[k][a.uid] = (rnd.tag, pos)
        done = [a for a in added if a.reward is not None]
        if done:
            self.capability.observe_answers(torch.tensor([a.reward for a in done], dtype=torch.float64),
                                            torch.tensor([a.prompt for a in done]),
                                            torch.tensor([a.source for a in done]))
        rnd.scored_at = time.perf_counter()
        self.held[k] = rnd
        self._since[k] = rnd.scored_at

    def may_take(self, k: int) -> bool:
        """Whether k's group wait is over: no partner's rollout of its round's prompts in flight, or the wait
        reached ``async.group_wait_s``."""
        rnd = self.held[k]
        if not set(rnd.prompts) & set(self._inflight_prompts(k)):
            return True
        return self.group_wait is not None and time.perf_counter() - (rnd.scored_at or 0.0) >= self.group_wait

    def take(self, k: int) -> None:
        """k's take from the pool under the bound, sent to its worker's update."""
        rnd = self.held.pop(k)
        take = self.pool.take(k, self.versions[k], self.bound)
        keys = self.own_keys[k]
        own = [keys.pop(a.uid) for a in take.answers if a.source == k]
        forget = [keys.pop(a.uid) for a in take.expired if a.source == k]
        if not take.answers:  # nothing to train on (every own answer expired): the next round
            self.start_round(k)
            return
        capability, omega = self.capability.capability, self.capability.omega_matrix()
        pool = take.trajectory_pool()
        self._submit(k, "update", (take, rnd, pool, capability, omega),
                     self.t._update_request(pool, omega, own_keys=tuple(own), forget=tuple(forget)))
        self._prune()

    def update_done(self, k: int, payload: tuple, loss_metrics: dict[str, Any]) -> dict[str, float]:
        """Agent k's new version; its metrics line."""
        take, rnd, pool, capability, omega = payload
        agent_id, prefix = self.t.agent_ids[k], f"agent/{self.t.agent_ids[k]}/"
        timings: dict[str, float] = {}
        line = dict(rnd.metrics)
        line.update(self.t._update_done(k, loss_metrics, timings))
        line.update(timings)
        self.busy[k] += timings[f"timing/update/{agent_id}"]
        self.versions[k] += 1
        self.updates[k] += 1
        line.update({key: v for key, v in self.t._pool_metrics(pool, capability, omega).items()
                     if key.startswith(prefix)})
        line.update(self._async_metrics(k, take))
        line["pool/size"] = len(pool)
        return line

    def _async_metrics(self, k: int, take: PoolTake) -> dict[str, float]:
        ids, a = self.t.agent_ids, f"agent/{self.t.agent_ids[k]}"
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        # idle: the share of the wall time since the loop began that the agent's worker did not compute (it waited
        # for scoring, its group, a cut, the driver); wait: the part spent in group waits and cuts
        out: dict[str, float] = {f"{a}/version": self.versions[k],
                                 f"{a}/async/idle_frac": max(0.0, 1.0 - self.busy[k] / elapsed),
                                 f"{a}/async/wait_frac": self.idle[k] / elapsed,
                                 f"{a}/async/updates_per_hour": self.updates[k] * 3600.0 / elapsed}
        for key, v in take.metrics().items():
            name, _, source = key.partition("/")
            if name.startswith("staleness_"):
                out[f"{a}/staleness/{name.removeprefix('staleness_')}"] = v
            else:
                out[f"{a}/async/{name}" + (f"/{ids[int(source)]}" if source else "")] = v
        joint = {p for p in take.prompts if len({x.source for x in take.answers if x.prompt == p}) > 1}
        out[f"{a}/async/joint_frac"] = len(joint) / max(len(take.prompts), 1)
        acc = self.pool.accounting()
        out["pool/held"], out["pool/added"] = len(self.pool), acc["added"]
        for j, b in enumerate(ids):
            out[f"pool/pending/{b}"], out[f"pool/used/{b}"] = acc["pending"][j], acc["used"][j]
            out[f"pool/expired/{b}"] = acc["expired"][j]
        return out

    # ---- the event loop -----------------------------------------------------------------------------
    def run_until(self, stop: Callable[[], bool], on_update: Callable[[int, dict[str, float]], None]) -> None:
        """Keep every agent's chain going until ``stop()``; then drain the calls in flight (the cut: their
        answers enter the pool, their updates are counted and logged) and return with nothing in flight."""
        for k in range(self.n):
            if k in self.held or any(h.agent == k for h in self.inflight):
                continue
            self.start_round(k)
        while True:
            stopping = stop()
            for k in sorted(self.held):
                if not stopping and self.may_take(k):
                    self.take(k)
            if not self.inflight:
                return
            waits = [self.held[k].scored_at or 0.0 for k in self.held]
            timeout = None if stopping or self.group_wait is None or not waits else \
                max(0.0, min(waits) + self.group_wait - time.perf_counter())
            event = self.t.backend.wait_any(list(self.inflight), timeout)
            if event is None:
                continue
            handle, result = event
            kind, payload = self.inflight.pop(handle)
            k = handle.agent
            if kind == "rollout":
                self.rollout_done(k, payload, result)
            else:
                line = self.update_done(k, payload, result)
                self.t.step_idx += 1
                on_update(k, line)
                if not stop():
                    self.start_round(k)
                else:
                    self._since[k] = time.perf_counter()

    def resume_calls(self) -> None:
        """After a cut: agents holding a scored round take (their group wait restarts), the others begin a round."""
        now = time.perf_counter()
        for rnd in self.held.values():
            rnd.scored_at = now

    # ---- checkpoint state ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"pool": self.pool.state_dict(), "capability": self.capability.state_dict(),
                "versions": list(self.versions), "tags": list(self.tags),
                "handed": {p: sorted(a) for p, a in self.handed.items()},
                "problems": {p: (x.id, x.prompt, x.answer, dict(x.meta)) for p, x in self.problems.items()},
                "own_keys": [dict(m) for m in self.own_keys],
                "held": {k: (r.tag, r.prompts, r.version, r.metrics) for k, r in self.held.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pool.load_state_dict(state["pool"])
        self.capability.load_state_dict(state["capability"])
        self.versions, self.tags = list(state["versions"]), list(state["tags"])
        self.handed = {int(p): set(a) for p, a in state["handed"].items()}
        self.problems = {int(p): Problem(*x) for p, x in state["problems"].items()}
        self.own_keys = [{int(u): tuple(key) for u, key in m.items()} for m in state["own_keys"]]  # type: ignore[misc]
        self.held = {int(k): Round(tag, prompts, [self.problems[p] for p in prompts], version, metrics=metrics)
                     for k, (tag, prompts, version, metrics) in state["held"].items()}
        for rnd in self.held.values():
            rnd.scored_at = time.perf_counter()


def train_async(t: Trainer, progress: Callable[[int, dict[str, float]], None] | None = None) -> dict[str, Any]:
    """``Trainer.train`` in the asynchronous mode: the same files, evaluations and checkpoints, every agent at
    its own pace until the slowest has made ``trainer.steps`` updates."""
    from hacrl.trainer.trainer import _on_main_thread, timed

    cfg = t.cfg.trainer
    loop = AsyncLoop(t)
    state = getattr(t, "_async_state", None)
    if state is not None:
        loop.load_state_dict(state)
    handlers = {s: signal.signal(s, t._request_stop) for s in (signal.SIGINT, signal.SIGTERM)} \
        if _on_main_thread() else {}
    last_eval: dict[str, float] | None = None
    # cuts: evaluations and checkpoints at multiples of the slowest agent's version
    slowest = min(loop.versions)
    next_eval = (slowest // cfg.eval_every + 1) * cfg.eval_every if cfg.eval_every else None
    next_ckpt = (slowest // cfg.checkpoint_every + 1) * cfg.checkpoint_every if cfg.checkpoint_every else None

    def due() -> int:
        marks = [m for m in (next_eval, next_ckpt, cfg.steps) if m is not None]
        return min(marks)

    def on_update(k: int, line: dict[str, float]) -> None:
        t.sink.log(t.step_idx, line)
        if progress:
            progress(t.step_idx, line)

    try:
        write_atomic(t.run_dir / "config.yaml", dump_config(t.cfg))
        if t.step_idx == 0:
            t.sink.log(0, t.evaluate_start())
        while min(loop.versions) < cfg.steps and not t._stop_requested:
            mark = due()
            loop.run_until(lambda m=mark: min(loop.versions) >= m or t._stop_requested, on_update)
            slowest = min(loop.versions)
            final = slowest >= cfg.steps
            metrics: dict[str, float] = {}
            if final or (next_eval is not None and slowest >= next_eval):
                with timed(metrics, "eval"):
                    evaluation = t.evaluate(budget=final)
                metrics.update(evaluation)
                last_eval = evaluation if final else None
                next_eval = (slowest // cfg.eval_every + 1) * cfg.eval_every if cfg.eval_every else None
            if metrics:
                metrics.update({f"agent/{a}/version": v for a, v in zip(t.agent_ids, loop.versions, strict=True)})
                t.sink.log(t.step_idx, metrics)
            if next_ckpt is not None and slowest >= next_ckpt and not final:
                save_async_checkpoint(t, loop)
                next_ckpt = (slowest // cfg.checkpoint_every + 1) * cfg.checkpoint_every
            loop.resume_calls()
        path = save_async_checkpoint(t, loop)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        t.close()
    return {"first": t.eval_record(0), "last": last_eval, "checkpoint": path, "stopped": t._stop_requested}


def save_async_checkpoint(t: Trainer, loop: AsyncLoop) -> Any:
    """A checkpoint at a cut (nothing in flight): the workers' weights, optimizers, random streams, versions and
    kept own answers; the trainer state the lock-step trainer's keys plus the loop's (``async``)."""
    assert not loop.inflight, "a checkpoint is taken at a cut"
    state = {"step": t.step_idx, "data_pos": t.data_pos, "tracker": t.tracker.state_dict(), "rng": ckpt.rng_state(),
             "async": loop.state_dict()}
    manifest = {"agents": [{"id": a.id, "model": a.model} for a in t.cfg.agents], "algorithm": t.cfg.algorithm.name,
                "mode": "async", "versions": list(loop.versions)}
    ids = t.agent_ids
    return ckpt.save_checkpoint(t.run_dir / "checkpoints", t.step_idx,
                                lambda tmp: t.backend.call("save", [(tmp / "agents" / i,) for i in ids]),
                                state, manifest, t.cfg.trainer.keep_last)
