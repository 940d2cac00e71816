"""Stopping a worker where a loss, gradient, weight or log-prob becomes non-finite: one ``TrainingDiverged``
line naming the agent, the step and the phase, and what to lower."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch

from hacrl.config import AgentSpec
from hacrl.errors import TrainingDiverged


def check_update(model: torch.nn.Module, metrics: dict[str, float], spec: AgentSpec, step: int) -> None:
    """After the optimizer steps of update ``step``: the losses and gradient norm the learner reported, then the
    weights."""
    bad = sorted(k for k, v in metrics.items() if ("loss" in k or k in ("grad_norm", "kl"))
                 and not math.isfinite(v))
    if bad:
        kinds = [w for w, hit in (("loss", any("loss" in k for k in bad)), ("KL", "kl" in bad),
                                  ("gradient norm", "grad_norm" in bad)) if hit]
        shown = ", ".join(f"{k} {metrics[k]}" for k in bad)
        raise diverged(spec, "update", step, f"its {' and '.join(kinds)} became non-finite ({shown})")
    # this rank's shard of a sharded parameter (no collective here: the metrics above are the same on every rank)
    params = [(n, local_values(p)) for n, p in model.named_parameters() if p.requires_grad]
    flags = [torch.isfinite(p).all() for _, p in params if p.numel()]
    if flags and not bool(torch.stack(flags).all()):
        name = next(n for n, p in params if not bool(torch.isfinite(p).all()))
        raise diverged(spec, "update", step, f"its weights became non-finite ({name})")


@contextlib.contextmanager
def diverges_in(model: torch.nn.Module, spec: AgentSpec, phase: str, step: int) -> Iterator[None]:
    """An engine that meets non-finite logits raises FloatingPointError: say which agent, step and phase."""
    try:
        yield
    except (FloatingPointError, RuntimeError) as exc:
        if not isinstance(exc, FloatingPointError) and "probability tensor contains" not in str(exc):
            raise  # (transformers' generate samples with torch.multinomial, which says this)
        largest = max((float(local_values(p).abs().max()) for p in model.parameters()
                       if local_values(p).numel()), default=0.0)
        what = str(exc) if isinstance(exc, FloatingPointError) else "non-finite sampling probabilities"
        raise diverged(spec, phase, step, f"{what} (largest weight magnitude {largest:.3g})") from None


def diverged(spec: AgentSpec, phase: str, step: int, what: str) -> TrainingDiverged:
    return TrainingDiverged(f"agent {spec.id!r} diverged at step {step} ({phase}): {what}; lower "
                            f"agents.{spec.id}.lr (now {spec.lr:g}) or agents.{spec.id}.grad_clip "
                            f"(now {spec.grad_clip:g})")


def local_values(p: torch.Tensor) -> torch.Tensor:
    """A parameter's values held here: the local shard of a DTensor (FSDP), else the tensor itself."""
    to_local = getattr(p, "to_local", None)
    return (to_local() if to_local is not None else p).detach()
