"""What the driver may ask of the agents' workers: the ``Backend`` protocol, one typed method per call.

A backend holds one ``AgentWorker`` per agent (``hacrl.backends.worker``) wherever they run: in the trainer's
process (``local``) or in Ray actors (``ray``). Each method below is one worker method run by every agent, results
in agent order (the lock-step trainer), or by one agent, in flight until ``wait_any`` hands back its result (the
asynchronous loop, docs/async.md). ``hacrl.backends.registry`` maps ``backend.name`` to the class.

A worker that dies or raises is reported as ``AgentFailure`` naming the agent, the method and the cause.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from hacrl.config import Config, Derived
    from hacrl.learner.request import UpdateRequest
    from hacrl.rollout import SamplingParams
    from hacrl.types import Trajectory

# one agent's rollout: its answers (unscored, without token ids) and its metrics (``busy_s``, ...)
Rollout = tuple[list["Trajectory"], dict[str, float]]


class AgentFailure(RuntimeError):
    """An agent's worker died or failed; the message names the agent, what it was doing and why."""


@dataclass(frozen=True, eq=False)
class Handle:
    """One call to one agent's worker, started by a ``submit_*`` method and collected with ``wait_any``:
    ``method`` is the worker method it runs (for failure messages), ``ref`` the Ray object reference, or locally
    the call's result itself."""

    agent: int
    method: str
    ref: Any


class Backend(Protocol):
    """The agents' workers, as the trainer and the asynchronous loop call them. Every method runs the worker
    method of the same name (``AgentWorker.rollout`` for ``rollout`` and ``submit_rollout``, ...)."""

    name: str

    def __init__(self, cfg: Config, derived: Derived, *, resume_from: Path | None = None, step: int = 0) -> None:
        """Load every agent of ``cfg`` (from the checkpoint ``resume_from`` of ``step``), each worker given
        ``derived`` (``hacrl.config.derive``, resolved once by the trainer)."""

    # ---- every agent, results in agent order --------------------------------------------------------
    def info(self) -> list[dict[str, Any]]:
        """Each agent's model, size, device, host and process."""
        ...

    def rollout(self, prompts: list[str], params: Sequence[SamplingParams], *,
                recompute: bool | None = None) -> list[Rollout]:
        """Every agent answers ``prompts`` with its own ``params`` (one per agent): ``params.n`` answers a
        prompt; its own token ids stay in its worker for the update."""
        ...

    def update(self, request: UpdateRequest) -> list[dict[str, Any]]:
        """Every agent trains on ``request`` (the step's pool and ω); each agent's update metrics."""
        ...

    def generate_answers(self, prompts: list[str], params: SamplingParams) -> list[list[Trajectory]]:
        """Every agent's answers to ``prompts`` for evaluation or validation (unscored, prompt-major)."""
        ...

    def save(self, paths: Sequence[Path]) -> None:
        """Every agent writes its weights, optimizer and random stream to its own path (one per agent)."""
        ...

    # ---- one agent, in flight until wait_any ------------------------------------------------------
    def submit_rollout(self, agent: int, prompts: list[str], params: SamplingParams, *,
                       recompute: bool | None = None, tag: int | None = None) -> Handle:
        """Start agent ``agent``'s rollout; its result is a ``Rollout``. ``tag``: the round whose own answers
        the worker keeps for a later update."""
        ...

    def submit_update(self, agent: int, request: UpdateRequest) -> Handle:
        """Start agent ``agent``'s update; its result is the update metrics."""
        ...

    def submit_generate_answers(self, agent: int, prompts: list[str], params: SamplingParams) -> Handle:
        """Start agent ``agent``'s evaluation answers; its result is a list of ``Trajectory``."""
        ...

    def wait_any(self, handles: Sequence[Handle], timeout: float | None = None) -> tuple[Handle, Any] | None:
        """The first of ``handles`` to finish and its result, or None when none finished within ``timeout``
        seconds (or there are no handles)."""
        ...

    def close(self) -> None:
        """Close every worker (and stop what the backend started)."""
        ...
