"""Where the agents live: ``local`` (every ``AgentWorker`` in the trainer's process, called one after the
other) or ``ray`` (one Ray actor per agent with its own CPUs/GPUs, called concurrently).

The trainer talks to both through ``call(method, args_per_agent)``, which returns one result per agent in
agent order. The algorithm never sees which backend runs it: the same seed gives the same metrics.

A Ray actor that dies (killed, out of memory, its node lost) or raises is reported as ``AgentFailure``
naming the agent, the method and the cause; the run directory keeps its last complete checkpoint, so
``hacrl train --resume`` continues from there.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hacrl.config import Config, ConfigError
from hacrl.errors import InputError
from hacrl.trainer.worker import AgentWorker

logger = logging.getLogger(__name__)

# environment variables a worker process must see (fault injection for tests and drills)
FORWARDED_ENV = ("HACRL_FAILPOINT",)


class AgentFailure(RuntimeError):
    """An agent's worker died or failed; the message names the agent, what it was doing and why."""


class LocalBackend:
    """Every agent in this process."""

    name = "local"

    def __init__(self, cfg: Config, *, resume_from: Path | None = None, step: int = 0) -> None:
        self.workers = [AgentWorker(cfg, i, resume_from=resume_from, step=step) for i in range(len(cfg.agents))]

    def call(self, method: str, args_per_agent: Sequence[tuple] | None = None, **kwargs: Any) -> list[Any]:
        args = args_per_agent or [()] * len(self.workers)
        return [getattr(w, method)(*a, **kwargs) for w, a in zip(self.workers, args, strict=True)]

    def close(self) -> None:
        for w in self.workers:
            w.close()


class RayBackend:
    """One Ray actor per agent, with ``num_cpus`` / ``num_gpus`` from the agent's spec or the backend
    defaults, optionally reserved together in a placement group. Starts a local Ray instance unless
    ``backend.address`` names a cluster or Ray is already initialized in this process."""

    name = "ray"

    def __init__(self, cfg: Config, *, resume_from: Path | None = None, step: int = 0) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("backend.name=ray needs Ray: pip install 'hacrl[ray]'") from None
        self._ray = ray
        self.ids = [a.id for a in cfg.agents]
        self._started = False
        if not ray.is_initialized():
            ray.init(address=cfg.backend.address, include_dashboard=False, log_to_driver=True,
                     configure_logging=False)
            self._started = True
        env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
        resources = [self._resources(cfg, i) for i in range(len(cfg.agents))]
        self._placement = self._placement_group(cfg, resources)
        remote_cls = ray.remote(AgentWorker)
        self.actors = []
        for i, (num_cpus, num_gpus) in enumerate(resources):
            options: dict[str, Any] = {"num_cpus": num_cpus, "num_gpus": num_gpus, "max_restarts": 0}
            if self._placement is not None:
                from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    self._placement, placement_group_bundle_index=i)
            threads = cfg.trainer.threads or max(1, int(num_cpus))
            self.actors.append(remote_cls.options(**options).remote(
                cfg, i, resume_from=resume_from, step=step, env=env, threads=threads))
        self.call("info")  # surfaces a failed load now, naming the agent

    @staticmethod
    def _resources(cfg: Config, i: int) -> tuple[float, float]:
        spec, b = cfg.agents[i], cfg.backend
        return (b.num_cpus_per_agent if spec.num_cpus is None else spec.num_cpus,
                b.num_gpus_per_agent if spec.num_gpus is None else spec.num_gpus)

    def _placement_group(self, cfg: Config, resources: list[tuple[float, float]]) -> Any:
        if cfg.backend.placement_strategy is None:
            return None
        from ray.util.placement_group import placement_group

        bundles = [{"CPU": c, **({"GPU": g} if g else {})} for c, g in resources]
        pg = placement_group(bundles, strategy=cfg.backend.placement_strategy)
        ready, _ = self._ray.wait([pg.ready()], timeout=120)
        if not ready:
            raise ConfigError(f"backend.placement_strategy={cfg.backend.placement_strategy}: the cluster could not "
                              f"reserve {bundles} within 120 s; lower the per-agent resources or add nodes")
        return pg

    def call(self, method: str, args_per_agent: Sequence[tuple] | None = None, **kwargs: Any) -> list[Any]:
        args = args_per_agent or [()] * len(self.actors)
        refs = [getattr(actor, method).remote(*a, **kwargs) for actor, a in zip(self.actors, args, strict=True)]
        return [self._get(ref, self.ids[i], method) for i, ref in enumerate(refs)]

    def _get(self, ref: Any, agent_id: str, method: str) -> Any:
        exc_mod = self._ray.exceptions
        try:
            return self._ray.get(ref)
        except exc_mod.RayTaskError as exc:
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            if isinstance(cause, InputError):
                raise cause from None  # bad input inside an actor: the same one-line error as locally
            raise AgentFailure(f"agent {agent_id!r} failed in {method}: {type(cause).__name__}: "
                               f"{_first_line(cause)}") from None
        except exc_mod.RayActorError as exc:
            raise AgentFailure(f"agent {agent_id!r}: its Ray actor died during {method} "
                               f"({_first_line(exc)})") from None

    def close(self) -> None:
        ray = self._ray
        for actor in self.actors:
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


def make_backend(cfg: Config, *, resume_from: Path | None = None, step: int = 0) -> LocalBackend | RayBackend:
    start = time.perf_counter()
    backend = (RayBackend if cfg.backend.name == "ray" else LocalBackend)(cfg, resume_from=resume_from, step=step)
    logger.info("backend %s: %d agents ready in %.1f s", cfg.backend.name, len(cfg.agents),
                time.perf_counter() - start)
    return backend


def _first_line(exc: BaseException) -> str:
    lines = [x for x in str(exc).strip().splitlines() if x.strip()]
    return lines[0][:300] if lines else type(exc).__name__
