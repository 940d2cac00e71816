"""An agent's learning-rate schedule, named as TRL names it (``lr_scheduler_type``: constant, linear, cosine,
constant_with_warmup; ``warmup_steps``, ``warmup_ratio``) and built with transformers' own ``get_scheduler`` on
the agent's AdamW, so the rates are transformers' to the bit.

The unit is the training step, not the optimizer step: the scheduler advances once per step of
``trainer.steps``, after the agent's update, and every minibatch of a step trains at that step's rate (verl's
actor does the same; TRL advances per optimizer step). A user counts ``trainer.steps`` and ``warmup_steps`` in
training steps, and the optimizer steps per training step differ between algorithms (gspo makes half as many as
2-agent hacpo: ``Derived.num_minibatches``): counted per optimizer step, one ``warmup_steps`` would be another
share of the run for each algorithm. Training step k (from 1) trains at ``lr × λ(k − 1)``, as TRL's optimizer
step k does.

Past ``trainer.steps`` (the asynchronous mode's faster agents train on until the slowest is done) the rate stays
the last step's: transformers' cosine would rise again after its end.

``constant`` builds no scheduler at all: the rate stays ``lr`` and the agent trains exactly as it did before
schedules existed. The scheduler's state goes into a checkpoint (``scheduler.pt``, beside ``optimizer.pt``) with
the schedule it belongs to, so a resumed run trains at the rates of an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from hacrl.config import AgentSpec, ConfigError

if TYPE_CHECKING:
    from torch.optim.lr_scheduler import LRScheduler

SCHEDULER_FILE = "scheduler.pt"


def warmup_steps(*, steps: int, ratio: float, total: int) -> int:
    """TRL's warm-up length: ``steps`` when > 0, else ``ratio`` of the ``total`` training steps, rounded up.

    >>> warmup_steps(steps=3, ratio=0.5, total=10), warmup_steps(steps=0, ratio=0.25, total=10)
    (3, 3)
    >>> warmup_steps(steps=0, ratio=0.0, total=10)
    0
    """
    return steps if steps > 0 else math.ceil(total * ratio)


@dataclasses.dataclass(frozen=True)
class LRSchedule:
    """One of transformers' schedules by name, over ``total_steps`` training steps with ``warmup_steps`` of them
    warming up."""

    name: str
    warmup_steps: int
    total_steps: int

    def build(self, optimizer: torch.optim.Optimizer) -> LRScheduler:
        """transformers' scheduler on ``optimizer`` (its rate becomes the first step's, ``lr × λ(0)``)."""
        from transformers import get_scheduler

        scheduler: LRScheduler = get_scheduler(self.name, optimizer, num_warmup_steps=self.warmup_steps,
                                               num_training_steps=self.total_steps)
        return scheduler

    def advance(self, scheduler: LRScheduler) -> None:
        """A training step is done: the next step's rate, or past the last step, the last one's."""
        if scheduler.last_epoch < self.total_steps - 1:
            scheduler.step()


def agent_schedule(spec: AgentSpec, total_steps: int) -> LRSchedule | None:
    """``spec``'s schedule over the run's ``total_steps``; None for ``constant`` (no scheduler)."""
    if spec.lr_schedule == "constant":
        return None
    warmup = warmup_steps(steps=spec.warmup_steps, ratio=spec.warmup_ratio, total=total_steps)
    return LRSchedule(spec.lr_schedule, warmup, total_steps)


def save_scheduler(scheduler: LRScheduler, schedule: LRSchedule, path: Path) -> None:
    """The scheduler's state and the schedule it follows into ``path/scheduler.pt``."""
    torch.save({"schedule": dataclasses.asdict(schedule), "state": scheduler.state_dict()}, path / SCHEDULER_FILE)


def load_scheduler(scheduler: LRScheduler, schedule: LRSchedule, path: Path, agent_id: str) -> None:
    """Put the state saved by :func:`save_scheduler` back, and the rate it had into the optimizer (whatever the
    optimizer's own state held); a checkpoint of another schedule, or of none, is a one-line error."""
    file = path / SCHEDULER_FILE
    key = f"agents.{agent_id}.lr_schedule"
    if not file.is_file():
        raise ConfigError(f"{key}={schedule.name}: the checkpoint {path} has no {SCHEDULER_FILE} (it was trained "
                          f"with lr_schedule=constant); resume with the run's settings, or start over with --overwrite")
    saved: dict[str, Any] = torch.load(file, weights_only=True)
    if saved["schedule"] != dataclasses.asdict(schedule):
        s = saved["schedule"]
        raise ConfigError(f"{key}: the checkpoint's {s['name']} schedule spans {s['total_steps']} steps with "
                          f"{s['warmup_steps']} of warm-up, this run's {schedule.name} {schedule.total_steps} with "
                          f"{schedule.warmup_steps}; a schedule cannot stretch mid-run: resume with "
                          f"trainer.steps={s['total_steps']} and the run's warm-up, or start over with --overwrite")
    scheduler.load_state_dict(saved["state"])
    for group, lr in zip(scheduler.optimizer.param_groups, scheduler.get_last_lr(), strict=True):
        group["lr"] = lr
