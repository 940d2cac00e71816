"""Where the agents live: ``local`` (every ``AgentWorker`` in the trainer's process, called one after the
other) or ``ray`` (one Ray actor per agent with its own CPUs/GPUs, called concurrently; an agent with
``data_parallel: W`` gets W actors, one replica each, that the trainer addresses as one).

The trainer talks to both through ``call(method, args_per_agent)``, which returns one result per agent in
agent order. The algorithm never sees which backend runs it: the same seed gives the same metrics. The
asynchronous mode (docs/async.md) calls one agent at a time instead: ``submit(agent, method, *args)`` returns a
``Handle`` and ``wait_any(handles)`` the first that finished with its result (on Ray ``ray.wait`` with one
return; locally the call runs at once in ``submit`` and ``wait_any`` takes the handles in the order given, a
deterministic sequential loop).

A Ray actor that dies (killed, out of memory, its node lost) or raises is reported as ``AgentFailure``
naming the agent, the method and the cause; the run directory keeps its last complete checkpoint, so
``hacrl train --resume`` continues from there.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hacrl.config import Config, Derived

if TYPE_CHECKING:
    from hacrl.backends.local import LocalBackend
    from hacrl.backends.ray_actors import RayBackend

logger = logging.getLogger(__name__)


class AgentFailure(RuntimeError):
    """An agent's worker died or failed; the message names the agent, what it was doing and why."""


@dataclass(frozen=True, eq=False)
class Handle:
    """One call to one agent's worker, submitted with ``backend.submit`` and collected with ``wait_any``
    (the asynchronous mode): ``ref`` is the Ray object reference, or locally the call's result itself."""

    agent: int
    method: str
    ref: Any


def make_backend(cfg: Config, derived: Derived, *, resume_from: Path | None = None,
                 step: int = 0) -> LocalBackend | RayBackend:
    """The workers of ``cfg``'s agents, each given ``derived`` (``hacrl.config.derive``, resolved once by the
    trainer) at construction."""
    start = time.perf_counter()
    if cfg.backend.name == "ray":
        from hacrl.backends.ray_actors import RayBackend

        backend: LocalBackend | RayBackend = RayBackend(cfg, derived, resume_from=resume_from, step=step)
    else:
        from hacrl.backends.local import LocalBackend

        backend = LocalBackend(cfg, derived, resume_from=resume_from, step=step)
    logger.log(logging.INFO if cfg.backend.name == "ray" else logging.DEBUG, "backend %s: %d agents ready in %.1f s",
               cfg.backend.name, len(cfg.agents), time.perf_counter() - start)
    return backend


__all__ = ["AgentFailure", "Handle", "make_backend"]
