"""Where the agents live: ``local`` (every ``AgentWorker`` in the trainer's process, called one after the
other) or ``ray`` (one Ray actor per agent with its own CPUs/GPUs, called concurrently; an agent with
``data_parallel: W`` gets W actors, one replica each, that the trainer addresses as one).

The trainer talks to both through the ``Backend`` protocol (``hacrl.backends.base``): one typed method per
worker call, ``rollout``, ``update``, ``generate_answers``, ``save``, ``info``, each returning one result per agent
in agent order. The algorithm never sees which backend runs it: the same seed gives the same metrics. The
asynchronous mode (docs/async.md) calls one agent at a time instead: ``submit_rollout(agent, ...)`` and
``submit_update(agent, request)`` return a ``Handle`` and ``wait_any(handles)`` the first that finished with its
result (on Ray ``ray.wait`` with one return; locally the call runs at once and ``wait_any`` takes the handles in
the order given, a deterministic sequential loop). ``make_backend`` builds the class that
``hacrl.backends.registry`` names for ``backend.name``.

A Ray actor that dies (killed, out of memory, its node lost) or raises is reported as ``AgentFailure``
naming the agent, the method and the cause; the run directory keeps its last complete checkpoint, so
``hacrl train --resume`` continues from there.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from hacrl.backends.base import AgentFailure, Backend, Handle
from hacrl.config import Config, Derived

logger = logging.getLogger(__name__)


def make_backend(cfg: Config, derived: Derived, *, resume_from: Path | None = None, step: int = 0) -> Backend:
    """The workers of ``cfg``'s agents, each given ``derived`` (``hacrl.config.derive``, resolved once by the
    trainer) at construction, in the backend ``backend.name`` names."""
    from hacrl.backends.registry import BACKENDS  # the backends load torch and the models: not on import

    start = time.perf_counter()
    backend = BACKENDS.get(cfg.backend.name)(cfg, derived, resume_from=resume_from, step=step)
    logger.log(logging.INFO if cfg.backend.name == "ray" else logging.DEBUG, "backend %s: %d agents ready in %.1f s",
               cfg.backend.name, len(cfg.agents), time.perf_counter() - start)
    return backend


__all__ = ["AgentFailure", "Backend", "Handle", "make_backend"]
