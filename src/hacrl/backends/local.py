"""The ``local`` backend: every agent's worker in the trainer's process, called one after the other."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hacrl.backends import Handle
from hacrl.backends.worker import AgentWorker
from hacrl.config import Config, Derived


class LocalBackend:
    """Every agent in this process."""

    name = "local"

    def __init__(self, cfg: Config, derived: Derived, *, resume_from: Path | None = None, step: int = 0) -> None:
        self.workers = [AgentWorker(cfg, i, derived, resume_from=resume_from, step=step)
                        for i in range(len(cfg.agents))]

    def call(self, method: str, args_per_agent: Sequence[tuple] | None = None, **kwargs: Any) -> list[Any]:
        args = args_per_agent or [()] * len(self.workers)
        return [getattr(w, method)(*a, **kwargs) for w, a in zip(self.workers, args, strict=True)]

    def submit(self, agent: int, method: str, *args: Any, **kwargs: Any) -> Handle:
        """Run ``method`` on one agent's worker now (an exception comes out here, as from ``call``)."""
        return Handle(agent, method, getattr(self.workers[agent], method)(*args, **kwargs))

    def wait_any(self, handles: Sequence[Handle], timeout: float | None = None) -> tuple[Handle, Any] | None:
        """The first of ``handles`` and its result: every local call has finished when ``submit`` returns, so
        this is the order given (None without handles)."""
        return (handles[0], handles[0].ref) if handles else None

    def close(self) -> None:
        for w in self.workers:
            w.close()
