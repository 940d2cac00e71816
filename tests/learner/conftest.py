"""The learner tests' spy on the policy losses (``spy``): a registry standing in for ``POLICY_LOSSES`` whose
entries call the real loss and keep its ``LossInputs``, ``StepSettings`` and value."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from hacrl.core import POLICY_LOSSES, LossInputs, StepSettings
from hacrl.learner import update
from hacrl.registry import Registry


@dataclass
class Call:
    loss: str
    inputs: LossInputs
    settings: StepSettings
    value: float


@pytest.fixture
def spy(monkeypatch) -> list[Call]:
    """Every policy-loss call of the learner, in order."""
    calls: list[Call] = []
    registry: Registry = Registry("policy loss")
    for name in POLICY_LOSSES:
        real = POLICY_LOSSES.get(name)

        def recorded(inputs, settings, _real=real, _name=name):
            loss, metrics = _real(inputs, settings)
            calls.append(Call(_name, inputs, settings, float(loss.detach())))
            return loss, metrics
        registry.add(name, recorded)
    monkeypatch.setattr(update, "POLICY_LOSSES", registry)
    return calls
