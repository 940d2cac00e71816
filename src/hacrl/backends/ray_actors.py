"""The ``ray`` backend: one Ray actor per agent (per replica with ``data_parallel``), called concurrently.

Each public method is the worker's method of the same name, run on every replica of every agent at once
(``_call_all``: one merged result per agent, in agent order) or, for ``submit_*``, on one agent's actor, its
result collected by ``wait_any`` (``ray.wait`` with one return).

A Ray actor that dies (killed, out of memory, its node lost) or raises is reported as ``AgentFailure``
naming the agent, its rank (0 without data parallel), the method and the cause; bad input inside an
actor stays the same one-line ``InputError`` as locally.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hacrl.backends.base import AgentFailure, Handle, Rollout
from hacrl.backends.worker import AgentWorker
from hacrl.config import Config, ConfigError, Derived
from hacrl.errors import InputError
from hacrl.learner.request import UpdateRequest
from hacrl.rollout import SamplingParams
from hacrl.types import Trajectory

logger = logging.getLogger(__name__)

# environment variables a worker process must see (fault injection for tests and drills)
FORWARDED_ENV = ("HACRL_FAILPOINT",)


def machine_shortfall(cfg: Config, resources: Sequence[tuple[float, float]]) -> list[str]:
    """The CPUs and GPUs the agents' actors ask for (``resources``: (CPUs, GPUs) per agent, each times its
    ``data_parallel`` replicas) beyond this machine's, one line each: what a local Ray instance could never
    place. ``hacrl train --check`` lists them; :class:`RayBackend` stops at them before Ray starts."""
    import torch

    cpus = sum(c * a.data_parallel for (c, _), a in zip(resources, cfg.agents, strict=True))
    gpus = sum(g * a.data_parallel for (_, g), a in zip(resources, cfg.agents, strict=True))
    have_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    have_cpus = os.cpu_count() or 1
    out = []
    if gpus > have_gpus:
        out.append(f"backend.name=ray: the agents' actors ask for {gpus:g} GPU(s) and this machine has {have_gpus}; "
                   f"lower agents.<id>.num_gpus / data_parallel, or give backend.address of a cluster that has them")
    if cpus > have_cpus:
        out.append(f"backend.name=ray: the agents' actors ask for {cpus:g} CPU(s) and this machine has {have_cpus}; "
                   f"lower backend.num_cpus_per_agent or agents.<id>.num_cpus")
    return out


class RayBackend:
    """One Ray actor per agent, with ``num_cpus`` / ``num_gpus`` from the agent's spec or the backend
    defaults, optionally reserved together in a placement group. Starts a local Ray instance unless
    ``backend.address`` names a cluster or Ray is already initialized in this process."""

    name = "ray"

    def __init__(self, cfg: Config, derived: Derived, *, resume_from: Path | None = None, step: int = 0) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("backend.name=ray needs Ray: pip install 'hacrl[ray]'") from None
        self._ray = ray
        self.ids = [a.id for a in cfg.agents]
        self._started = False
        self._failed = False
        resources = [self._resources(cfg, i) for i in range(len(cfg.agents))]  # checked before Ray starts
        if not ray.is_initialized():
            if not cfg.backend.address:  # a local Ray gets this machine's CPUs and GPUs: an actor asking for
                shortfall = machine_shortfall(cfg, resources)  # more would wait for them for ever
                if shortfall:
                    raise ConfigError("; ".join(shortfall))
            ray.init(address=cfg.backend.address, include_dashboard=False, log_to_driver=True,
                     configure_logging=False)
            self._started = True
        env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
        self._placement = self._placement_group(cfg, resources)
        remote_cls = ray.remote(AgentWorker)
        self.groups: list[list[Any]] = []  # per agent, its replicas in rank order
        bundle = 0
        for i, (num_cpus, num_gpus) in enumerate(resources):
            world = cfg.agents[i].data_parallel
            group = []
            for rank in range(world):
                # enable_task_events off: Ray's GCS would keep a ~3.6 KiB record of every call (up to 100,000
                # by default: ~2 MiB per 100 steps of tiny-test, bench/soak.py); hacrl reports failures itself
                options: dict[str, Any] = {"num_cpus": num_cpus, "num_gpus": num_gpus, "max_restarts": 0,
                                           "enable_task_events": False}
                if self._placement is not None:
                    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

                    options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                        self._placement, placement_group_bundle_index=bundle)
                bundle += 1
                # torch threads: the actor's whole CPUs, fewer if trainer.threads says so (more would
                # oversubscribe the node: OpenMP threads of several actors spinning on the same cores)
                threads = min(cfg.trainer.threads or 10**6, max(1, int(num_cpus)))
                group.append(remote_cls.options(**options).remote(
                    cfg, i, derived, resume_from=resume_from, step=step, env=env, threads=threads, rank=rank, world=world,
                    defer_setup=True, quiet=True))
            self.groups.append(group)
        self._call_all("setup")  # loads every agent at once; a failure names the agent
        self._init_data_parallel()

    def _init_data_parallel(self) -> None:
        groups = [(i, g) for i, g in enumerate(self.groups) if len(g) > 1]
        addresses = [self._get(g[0].rendezvous.remote(), self.ids[i], "rendezvous") for i, g in groups]
        refs = [(i, [actor.init_data_parallel.remote(addr) for actor in g]) for (i, g), addr in zip(groups, addresses)]
        for i, rank_refs in refs:
            for rank, ref in enumerate(rank_refs):
                self._get(ref, self.ids[i], "init_data_parallel", rank)

    @staticmethod
    def _resources(cfg: Config, i: int) -> tuple[float, float]:
        spec, b = cfg.agents[i], cfg.backend
        cpus = b.num_cpus_per_agent if spec.num_cpus is None else spec.num_cpus
        gpus = b.num_gpus_per_agent if spec.num_gpus is None else spec.num_gpus
        if spec.device.startswith("cuda") and gpus == 0:
            raise ConfigError(f"agents.{spec.id}.device={spec.device} but its Ray actor gets no GPU; set "
                              f"agents.{spec.id}.num_gpus or backend.num_gpus_per_agent")
        ordinal = spec.device.partition(":")[2]
        if ordinal.isdigit() and int(ordinal) >= max(1, int(gpus)):
            raise ConfigError(f"agents.{spec.id}.device={spec.device}: a Ray actor sees only its own GPUs, as "
                              f"cuda:0..{max(1, int(gpus)) - 1}; set agents.{spec.id}.device=cuda")
        return cpus, gpus

    def _placement_group(self, cfg: Config, resources: list[tuple[float, float]]) -> Any:
        if cfg.backend.placement_strategy is None:
            return None
        from ray.util.placement_group import placement_group

        bundles = [{"CPU": c, **({"GPU": g} if g else {})}
                   for (c, g), spec in zip(resources, cfg.agents, strict=True) for _ in range(spec.data_parallel)]
        pg = placement_group(bundles, strategy=cfg.backend.placement_strategy)
        ready, _ = self._ray.wait([pg.ready()], timeout=120)
        if not ready:
            raise ConfigError(f"backend.placement_strategy={cfg.backend.placement_strategy}: the cluster could not "
                              f"reserve {bundles} within 120 s; lower the per-agent resources or add nodes")
        return pg

    # ---- every agent, results in agent order --------------------------------------------------------
    def info(self) -> list[dict[str, Any]]:
        return self._call_all("info")

    def rollout(self, prompts: list[str], params: Sequence[SamplingParams], *,
                recompute: bool | None = None) -> list[Rollout]:
        return self._call_all("rollout", [(prompts, p) for p in params], merge=_merge_rollouts, recompute=recompute)

    def update(self, request: UpdateRequest) -> list[dict[str, Any]]:
        return self._call_all("update", [(request,)] * len(self.groups))

    def generate_answers(self, prompts: list[str], params: SamplingParams) -> list[list[Trajectory]]:
        return self._call_all("generate_answers", [(prompts, params)] * len(self.groups), merge=_merge_answers)

    def save(self, paths: Sequence[Path]) -> None:
        self._call_all("save", [(path,) for path in paths])

    # ---- one agent (one replica: the asynchronous mode refuses data parallel) ----------------------
    def submit_rollout(self, agent: int, prompts: list[str], params: SamplingParams, *,
                       recompute: bool | None = None, tag: int | None = None) -> Handle:
        return Handle(agent, "rollout", self.groups[agent][0].rollout.remote(prompts, params, recompute=recompute,
                                                                             tag=tag))

    def submit_update(self, agent: int, request: UpdateRequest) -> Handle:
        return Handle(agent, "update", self.groups[agent][0].update.remote(request))

    def submit_generate_answers(self, agent: int, prompts: list[str], params: SamplingParams) -> Handle:
        return Handle(agent, "generate_answers", self.groups[agent][0].generate_answers.remote(prompts, params))

    def wait_any(self, handles: Sequence[Handle], timeout: float | None = None) -> tuple[Handle, Any] | None:
        """The first of ``handles`` to finish and its result (``ray.wait`` with one return), or None when none
        finished within ``timeout`` seconds; a call that died or raised is reported as ``_call_all`` reports it."""
        if not handles:
            return None
        by_ref = {h.ref: h for h in handles}
        ready, _ = self._ray.wait(list(by_ref), num_returns=1, timeout=timeout)
        if not ready:
            return None
        handle = by_ref[ready[0]]
        return handle, self._get(handle.ref, self.ids[handle.agent], handle.method)

    # ---- the dispatcher behind them ------------------------------------------------------------------
    def _call_all(self, method: str, args_per_agent: Sequence[tuple] | None = None,
                  merge: Callable[[list[Any]], Any] = lambda per_rank: per_rank[0], **kwargs: Any) -> list[Any]:
        """Every replica of every agent runs the worker's ``method`` (all at once); one result per agent, its
        replicas' results merged by ``merge`` (default: rank 0's, the same on every rank).

        Results are taken as they finish, so a replica that dies or raises is reported at once, even
        while the other replicas of its agent wait for it inside a collective."""
        args = args_per_agent or [()] * len(self.groups)
        refs = [[getattr(actor, method).remote(*a, **kwargs) for actor in group]
                for group, a in zip(self.groups, args, strict=True)]
        pending = {ref: (i, rank) for i, rank_refs in enumerate(refs) for rank, ref in enumerate(rank_refs)}
        results: dict[Any, Any] = {}
        while pending:
            ready, _ = self._ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i, rank = pending.pop(ref)
                try:
                    results[ref] = self._get(ref, self.ids[i], method, rank)
                except AgentFailure:
                    self._raise_first_failure(refs, ref, list(pending), method)
        return [merge([results[ref] for ref in rank_refs]) for rank_refs in refs]

    def _raise_first_failure(self, refs: list[list[Any]], failed: Any, pending: list[Any], method: str) -> None:
        """Report one failure in a stable order when several come together (a node lost, every actor's
        failpoint): give the others 2 s to finish, then the first actor that *died*, in agent and rank
        order, else the first that raised — a replica whose peer died fails too, in its collective."""
        done, _ = self._ray.wait(pending, num_returns=len(pending), timeout=2.0) if pending else ([], [])
        finished = {failed, *done}
        failures: list[AgentFailure] = []
        for i, rank_refs in enumerate(refs):
            for rank, ref in enumerate(rank_refs):
                if ref in finished:
                    try:
                        self._get(ref, self.ids[i], method, rank)
                    except AgentFailure as exc:
                        failures.append(exc)
        raise next((f for f in failures if getattr(f, "died", False)), failures[0])

    def _get(self, ref: Any, agent_id: str, method: str, rank: int = 0) -> Any:
        exc_mod = self._ray.exceptions
        who = f"agent {agent_id!r} rank {rank}"
        try:
            return self._ray.get(ref)
        except exc_mod.RayTaskError as exc:
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            self._failed = True  # the other replicas may be stuck in a collective: close() kills them at once
            if isinstance(cause, InputError):  # bad input or a divergence inside an actor (TrainingDiverged):
                raise cause from None  # the same one-line error as locally
            failure = AgentFailure(f"{who} failed in {method}: {type(cause).__name__}: {_first_line(cause)}")
        except exc_mod.RayActorError as exc:
            lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
            reason = lines[0] + (f" {lines[-1]}" if len(lines) > 1 else "")
            self._failed = True  # the other replicas may be stuck in a collective: close() kills them at once
            failure = AgentFailure(f"{who}: its Ray actor died during {method} ({reason[:400]})")
            failure.died = True  # type: ignore[attr-defined]
        failure.method = method  # type: ignore[attr-defined]  # "save": after its step, writing the checkpoint
        raise failure from None

    def close(self) -> None:
        ray = self._ray
        for actor in (a for group in self.groups for a in group):
            if self._failed:
                ray.kill(actor)
                continue
            try:
                ray.get(actor.close.remote(), timeout=60)
            except Exception as exc:  # noqa: BLE001 - a dead actor has nothing left to close
                logger.debug("closing an agent actor: %s", _first_line(exc))
            ray.kill(actor)
        if self._placement is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self._placement)
        if self._started:
            ray.shutdown()


def _merge_rollouts(per_rank: list[Rollout]) -> Rollout:
    """One agent's rollout from its replicas: the answers concatenated in rank order (each rank answered its
    share of the prompts), busy time the slowest rank's, ``*_max`` metrics the largest, the others averaged."""
    if len(per_rank) == 1:
        return per_rank[0]
    rollouts = [r for part, _ in per_rank for r in part]
    metrics: dict[str, float] = {"busy_s": max(m["busy_s"] for _, m in per_rank)}
    for key in {k for _, m in per_rank for k in m} - {"busy_s"}:
        values = [m[key] for _, m in per_rank if key in m]
        metrics[key] = max(values) if key.endswith("_max") else sum(values) / len(values)
    return rollouts, metrics


def _merge_answers(per_rank: list[list[Trajectory]]) -> list[Trajectory]:
    """One agent's evaluation answers from its replicas, concatenated in rank order (each answered its share)."""
    return [x for part in per_rank for x in part]


def _first_line(exc: BaseException) -> str:
    lines = [x for x in str(exc).strip().splitlines() if x.strip()]
    return lines[0][:300] if lines else type(exc).__name__
