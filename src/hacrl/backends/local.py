"""The ``local`` backend: every agent's worker in the trainer's process, called one after the other.

Each method is the worker's method of the same name, run for each worker in agent order. A ``submit_*`` call runs
at once (an exception comes out there, as from the lock-step methods) and ``wait_any`` hands the handles back
in the order given: the asynchronous loop becomes a deterministic sequential one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hacrl.backends.base import Handle, Rollout
from hacrl.backends.worker import AgentWorker
from hacrl.config import Config, Derived
from hacrl.learner.request import UpdateRequest
from hacrl.rollout import SamplingParams
from hacrl.types import Trajectory


class LocalBackend:
    """Every agent in this process."""

    name = "local"

    def __init__(self, cfg: Config, derived: Derived, *, resume_from: Path | None = None, step: int = 0) -> None:
        self.workers = [AgentWorker(cfg, i, derived, resume_from=resume_from, step=step)
                        for i in range(len(cfg.agents))]

    # ---- every agent, results in agent order --------------------------------------------------------
    def info(self) -> list[dict[str, Any]]:
        return [w.info() for w in self.workers]

    def rollout(self, prompts: list[str], params: Sequence[SamplingParams], *,
                recompute: bool | None = None) -> list[Rollout]:
        return [w.rollout(prompts, p, recompute=recompute) for w, p in zip(self.workers, params, strict=True)]

    def update(self, request: UpdateRequest) -> list[dict[str, Any]]:
        return [w.update(request) for w in self.workers]

    def generate_answers(self, prompts: list[str], params: SamplingParams) -> list[list[Trajectory]]:
        return [w.generate_answers(prompts, params) for w in self.workers]

    def save(self, paths: Sequence[Path]) -> None:
        for w, path in zip(self.workers, paths, strict=True):
            w.save(path)

    # ---- one agent: the call runs now, its handle holds the result ---------------------------------
    def submit_rollout(self, agent: int, prompts: list[str], params: SamplingParams, *,
                       recompute: bool | None = None, tag: int | None = None) -> Handle:
        return Handle(agent, "rollout", self.workers[agent].rollout(prompts, params, recompute=recompute, tag=tag))

    def submit_update(self, agent: int, request: UpdateRequest) -> Handle:
        return Handle(agent, "update", self.workers[agent].update(request))

    def submit_generate_answers(self, agent: int, prompts: list[str], params: SamplingParams) -> Handle:
        return Handle(agent, "generate_answers", self.workers[agent].generate_answers(prompts, params))

    def wait_any(self, handles: Sequence[Handle], timeout: float | None = None) -> tuple[Handle, Any] | None:
        """The first of ``handles`` and its result: every local call has finished when its ``submit_*`` returns,
        so this is the order given (None without handles)."""
        return (handles[0], handles[0].ref) if handles else None

    def close(self) -> None:
        for w in self.workers:
            w.close()
