"""The asynchronous mode (``trainer.mode=async``, docs/async.md): every agent trains at its own pace and shares
its answers through a ``SharedPool``.

The driver keeps one chain of calls per agent going: rollout → scoring → pool → (group wait) → take → update →
rollout ... It waits on whichever call finishes first (``backend.wait_any``), never on all agents. The phases
are the lock-step trainer's own code (``hacrl.trainer.phases``): ``Phases.sampling`` / ``rollout_metrics`` around
the worker's ``rollout``, ``Phases.score`` on one agent's answers, ``Phases.update_request`` / ``update_metrics``
around the worker's ``update``, ``pool_metrics`` on the take; the training problems come from the trainer's
``DataStream``. What this module adds: the ledger (which prompts each agent answers next), the take from the
pool under the staleness bound, ``RecentCapability`` for ω and P̂, each agent's state (``AgentState``) and
metrics, and the quiescent cut for evaluations and checkpoints.

Each agent's ``version`` is its number of updates. The run ends when the slowest agent has made
``trainer.steps`` updates; faster agents go on training until then. metrics.jsonl gets one line per update
with ``step`` = the run's total number of updates (checkpoints and evaluations are named by it too); the
line names the agent's own version. With the local backend the calls run one at a time in a fixed order:
at ``async.bound=0`` without a group-wait limit this is the lock-step trainer's run, update for update.

``Trainer.train`` drives the loop (when to cut for evaluations and checkpoints); the loop is built from the
phases, the backend and the data stream (``Trainer.async_loop``) and knows nothing of the trainer.
Run it with ``hacrl train --set trainer.mode=async`` (tests: tests/integration/test_async.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from hacrl.backends import Backend, Handle
from hacrl.config import Config
from hacrl.core import RecentCapability
from hacrl.pool.shared import PoolTake, SharedPool
from hacrl.trainer.phases import DataStream, Phases, pool_metrics, rollout_metrics
from hacrl.types import Problem

logger = logging.getLogger(__name__)


def next_multiple(done: int, every: int) -> int | None:
    """The next multiple of ``every`` after ``done`` (the next cut for an evaluation or a checkpoint); None for
    ``every`` 0 (never).

    >>> next_multiple(0, 2), next_multiple(3, 2), next_multiple(4, 2), next_multiple(4, 0)
    (2, 4, 6, None)
    """
    return (done // every + 1) * every if every else None


@dataclass
class Round:
    """One agent's round: the prompts handed to it (ids in the training stream) and where it stands."""

    tag: int  # the agent's round number: the worker keeps its own answers under it
    prompts: list[int]
    problems: list[Problem]
    version: int  # the agent's version that answers them
    scored_at: float | None = None  # when its answers entered the pool (the group wait starts)
    metrics: dict[str, float] = field(default_factory=dict)  # rollout and scoring metrics, logged with the update


@dataclass
class AgentState:
    """One agent's place in the loop."""

    version: int = 0  # updates made: the agent's version
    tag: int = 0  # rounds started
    own_keys: dict[int, tuple[int, int]] = field(default_factory=dict)  # pool uid → the worker's key of the answer
    busy: float = 0.0  # seconds its worker computed (its rollouts' and updates' busy_s)
    idle: float = 0.0  # seconds it waited in group waits and cuts
    updates: int = 0  # updates made since the loop began (this process)
    since: float | None = None  # when its current wait began


class AsyncLoop:
    """The driver's state in the asynchronous mode: each agent's state, the ledger, the pool, capability and the
    calls in flight. ``step`` counts the run's updates (the metrics lines' ``step``), from ``step`` given."""

    def __init__(self, cfg: Config, phases: Phases, backend: Backend, data: DataStream, *, step: int = 0) -> None:
        self.phases, self.backend, self.data = phases, backend, data
        self.n = len(phases.agent_ids)
        self.batch_size = cfg.trainer.batch_size
        self.bound, self.group_wait = cfg.async_.bound, cfg.async_.group_wait_s  # the staleness bound
        self.step = step
        self.pool = SharedPool(self.n)
        self.capability = RecentCapability(self.n, window=cfg.algorithm.capability_window * cfg.trainer.batch_size)
        self.agents = [AgentState() for _ in range(self.n)]
        self.handed: dict[int, set[int]] = {}  # prompt id → agents it was handed to (while it may still be used)
        self.problems: dict[int, Problem] = {}  # prompt id → problem, for the same prompts
        self.held: dict[int, Round] = {}  # agent → its scored round waiting for its take (group wait or a cut)
        self.inflight: dict[Handle, tuple[str, Any]] = {}  # handle → ("rollout", Round) or ("update", PoolTake, ...)
        self.started = time.perf_counter()

    @property
    def versions(self) -> list[int]:
        """Each agent's version."""
        return [a.version for a in self.agents]

    # ---- the ledger ---------------------------------------------------------------------------------
    def _inflight_prompts(self, exclude: int) -> dict[int, int]:
        """Prompt id → the agent (other than ``exclude``) whose rollout of it is in flight."""
        return {p: r_agent for h, (kind, rnd) in self.inflight.items() if kind == "rollout"
                for r_agent in [h.agent] if r_agent != exclude for p in rnd.prompts}

    def _next_prompts(self, k: int) -> list[int]:
        """Agent k's next B prompts: those with partners' answers k can still use, then those in flight at a
        partner and not handed to k, oldest first; then fresh ones from the training stream."""
        b = self.batch_size
        chosen = [p for p in self.pool.waiting_prompts(k, self.bound) if p in self.problems][:b]
        for p in sorted(self._inflight_prompts(k)):
            if len(chosen) < b and p not in chosen and k not in self.handed.get(p, set()):
                chosen.append(p)
        while len(chosen) < b:
            prompt, problem = self.data.next_problem()
            self.problems[prompt] = problem
            chosen.append(prompt)
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
        prompts, agent = self._next_prompts(k), self.agents[k]
        rnd = Round(agent.tag, prompts, [self.problems[p] for p in prompts], agent.version)
        agent.tag += 1
        self._wake(k)
        handle = self.backend.submit_rollout(k, [self.problems[p].prompt for p in prompts], self.phases.sampling,
                                             recompute=self.phases.recompute, tag=rnd.tag)
        self.inflight[handle] = ("rollout", rnd)

    def _wake(self, k: int) -> None:
        agent = self.agents[k]
        if agent.since is not None:
            agent.idle += time.perf_counter() - agent.since
            agent.since = None

    def rollout_done(self, k: int, rnd: Round, result: tuple[list, dict[str, float]]) -> None:
        """Score agent k's answers, add them to the pool and the capability windows; k waits for its take."""
        answers, m = result
        agent, agent_id = self.agents[k], self.phases.agent_ids[k]
        timings: dict[str, float] = {}
        rnd.metrics.update(rollout_metrics(agent_id, m, timings))
        start = time.perf_counter()
        scored, stats = self.phases.score(rnd.problems, answers, step=self.step + 1)
        timings[f"timing/reward/{agent_id}"] = time.perf_counter() - start
        rnd.metrics.update({f"agent/{agent_id}/scored/{key.removeprefix('reward/')}": v
                            for key, v in stats.items() if key.startswith("reward/")})
        rnd.metrics[f"agent/{agent_id}/unscorable"] = stats[f"agent/{agent_id}/unscorable"]
        rnd.metrics.update(timings)
        agent.busy += timings[f"timing/rollout/{agent_id}"]
        added = self.pool.add(scored.trajectories, prompts=rnd.prompts, problems=rnd.problems, version=rnd.version)
        for pos, a in enumerate(added):  # the worker keeps the answer as (tag, its position in the round)
            agent.own_keys[a.uid] = (rnd.tag, pos)
        done = [a for a in added if a.reward is not None]
        if done:
            self.capability.observe_answers(torch.tensor([a.reward for a in done], dtype=torch.float64),
                                            torch.tensor([a.prompt for a in done]),
                                            torch.tensor([a.source for a in done]))
        rnd.scored_at = time.perf_counter()
        self.held[k] = rnd
        agent.since = rnd.scored_at

    def may_take(self, k: int) -> bool:
        """Whether k's group wait is over: no partner's rollout of its round's prompts in flight, or the wait
        reached ``async.group_wait_s``."""
        rnd = self.held[k]
        if not set(rnd.prompts) & set(self._inflight_prompts(k)):
            return True
        return self.group_wait is not None and time.perf_counter() - (rnd.scored_at or 0.0) >= self.group_wait

    def take(self, k: int) -> None:
        """k's take from the pool under the staleness bound, sent to its worker's update."""
        rnd = self.held.pop(k)
        take = self.pool.take(k, self.agents[k].version, self.bound)
        keys = self.agents[k].own_keys
        own = [keys.pop(a.uid) for a in take.answers if a.source == k]
        forget = [keys.pop(a.uid) for a in take.expired if a.source == k]
        if not take.answers:  # nothing to train on (every own answer expired): the next round
            self.start_round(k)
            return
        capability_N, omega_NN = self.capability.capability, self.capability.omega_matrix()
        pool = take.trajectory_pool()  # each own answer carries its version gap (Trajectory.version_gap)
        request = self.phases.update_request(pool, omega_NN, own_keys=own, forget=forget)
        self._wake(k)
        self.inflight[self.backend.submit_update(k, request)] = ("update", (take, rnd, pool, capability_N, omega_NN))
        self._prune()

    def update_done(self, k: int, payload: tuple, loss_metrics: dict[str, Any]) -> dict[str, float]:
        """Agent k's new version; its metrics line."""
        take, rnd, pool, capability_N, omega_NN = payload
        agent, agent_id = self.agents[k], self.phases.agent_ids[k]
        timings: dict[str, float] = {}
        line = dict(rnd.metrics)
        line.update(self.phases.update_metrics(k, loss_metrics, timings))
        line.update(timings)
        agent.busy += timings[f"timing/update/{agent_id}"]
        agent.version += 1
        agent.updates += 1
        line.update({key: v for key, v in pool_metrics(pool, self.phases.agent_ids, capability_N, omega_NN).items()
                     if key.startswith(f"agent/{agent_id}/")})
        line.update(self._async_metrics(k, take))
        line["pool/size"] = len(pool)
        return line

    def _async_metrics(self, k: int, take: PoolTake) -> dict[str, float]:
        ids, agent, a = self.phases.agent_ids, self.agents[k], f"agent/{self.phases.agent_ids[k]}"
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        # idle: the share of the wall time since the loop began that the agent's worker did not compute (it waited
        # for scoring, its group, a cut, the driver); wait: the part spent in group waits and cuts
        out: dict[str, float] = {f"{a}/version": agent.version,
                                 f"{a}/async/idle_frac": max(0.0, 1.0 - agent.busy / elapsed),
                                 f"{a}/async/wait_frac": agent.idle / elapsed,
                                 f"{a}/async/updates_per_hour": agent.updates * 3600.0 / elapsed}
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
    def run_until(self, stop: Callable[[], bool], on_update: Callable[[int, int, dict[str, float]], None]) -> None:
        """Keep every agent's chain going until ``stop()``; then drain the calls in flight (the cut: their
        answers enter the pool, their updates are counted and logged) and return with nothing in flight.
        ``on_update(step, k, line)``: agent k's update made the run's ``step``-th; ``line`` its metrics."""
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
            event = self.backend.wait_any(list(self.inflight), timeout)
            if event is None:
                continue
            handle, result = event
            kind, payload = self.inflight.pop(handle)
            k = handle.agent
            if kind == "rollout":
                self.rollout_done(k, payload, result)
            else:
                line = self.update_done(k, payload, result)
                self.step += 1
                on_update(self.step, k, line)
                if not stop():
                    self.start_round(k)
                else:
                    self.agents[k].since = time.perf_counter()

    def resume_calls(self) -> None:
        """After a cut: agents holding a scored round take (their group wait restarts), the others begin a round."""
        now = time.perf_counter()
        for rnd in self.held.values():
            rnd.scored_at = now

    # ---- checkpoint state ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps (only at a cut: nothing in flight)."""
        assert not self.inflight, "a checkpoint is taken at a cut"
        return {"pool": self.pool.state_dict(), "capability": self.capability.state_dict(),
                "versions": [a.version for a in self.agents], "tags": [a.tag for a in self.agents],
                "handed": {p: sorted(a) for p, a in self.handed.items()},
                "problems": {p: (x.id, x.prompt, x.answer, dict(x.meta)) for p, x in self.problems.items()},
                "own_keys": [dict(a.own_keys) for a in self.agents],
                "held": {k: (r.tag, r.prompts, r.version, r.metrics) for k, r in self.held.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pool.load_state_dict(state["pool"])
        self.capability.load_state_dict(state["capability"])
        for agent, version, tag, keys in zip(self.agents, state["versions"], state["tags"], state["own_keys"],
                                             strict=True):
            agent.version, agent.tag = version, tag
            agent.own_keys = {int(u): (int(key[0]), int(key[1])) for u, key in keys.items()}
        self.handed = {int(p): set(a) for p, a in state["handed"].items()}
        self.problems = {int(p): Problem(*x) for p, x in state["problems"].items()}
        self.held = {int(k): Round(tag, prompts, [self.problems[p] for p in prompts], version, metrics=metrics)
                     for k, (tag, prompts, version, metrics) in state["held"].items()}
        for rnd in self.held.values():
            rnd.scored_at = time.perf_counter()

    def manifest(self) -> dict[str, Any]:
        """What a checkpoint's manifest says of the loop."""
        return {"mode": "async", "versions": self.versions}
