"""The ``local`` backend: every agent's worker in the trainer's process, called one after the other."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hacrl.backends.worker import AgentWorker
from hacrl.config import Config


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
