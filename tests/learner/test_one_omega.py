"""One ω: the learner's advantages and loss weights use exactly the ω the driver passes (its tracker's, with
the run's clamps), never a second ω computed from the capabilities with ``hacrl.core``'s default clamps."""

from __future__ import annotations

import pytest
import torch

from hacrl.core import CapabilityTracker, hacpo_advantages
from hacrl.learner.algorithms import ALGORITHMS
from hacrl.learner.view import ViewRow, assign_advantages

SIGMA = 0.5773503  # unbiased std of the group's rewards [1, 0, 1, 0]: sqrt(1/3)


def _rows() -> list[ViewRow]:
    # one prompt: learner 0 wrote rewards 1, 0; agent 1 wrote 1, 0
    return [ViewRow(0, s, s == 0, [1], [2], -1.0, None, r) for s, r in ((0, 1.0), (0, 0.0), (1, 1.0), (1, 0.0))]


def test_the_learner_uses_the_drivers_clamped_omega():
    # P̂ = (0.8, 0.1): ω^(0,1) = 8, ω^(1,0) = 0.125 unclamped; this tracker clamps ω to [0.5, 2]
    tracker = CapabilityTracker(2, window=1, ratio_min=0.5, ratio_max=2.0)
    tracker.update(torch.tensor([0.8, 0.1]), torch.tensor([0, 1]))
    omega_NN = tracker.omega_matrix()
    assert omega_NN.tolist() == [[1.0, 2.0], [0.5, 1.0]]
    rows = _rows()
    assign_advantages(rows, 0, ALGORITHMS.get("hacpo"), omega_NN)
    # baseline with ω^(0,1) = 2: μ̂ = (1 + 0 + 2·1 + 2·0)/4 = 0.75 (≤ the max reward 1: no fallback)
    # A(R=1) = 0.25/σ = 0.4330127, A(R=0) = −0.75/σ = −1.2990381
    assert [r.advantage for r in rows] == pytest.approx([0.25 / SIGMA, -0.75 / SIGMA] * 2, rel=1e-5)
    # the loss weighs agent 1's answers by ω^(1,0) = 0.5 (the clamp), own answers by 1
    assert [r.omega for r in rows] == [1.0, 1.0, 0.5, 0.5]
    # the module defaults would differ on both: ω^(0,1) = 8 makes μ̂ = 2.25 > 1, the fallback own mean 0.5
    default = hacpo_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.zeros(4, dtype=torch.long),
                               torch.tensor([0, 0, 1, 1]), learner=0, capability=tracker.capability)
    assert default.tolist() == pytest.approx([0.5 / SIGMA, -0.5 / SIGMA] * 2, rel=1e-5)


def test_the_passed_omega_row_is_the_baselines_weight():
    # ω^(1,0) = 3 given directly (no capability): learner 1's μ̂ = (3·1 + 3·0 + 1 + 0)/4 = 1.0 (not above max 1)
    adv = hacpo_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.zeros(4, dtype=torch.long),
                           torch.tensor([0, 0, 1, 1]), learner=1, omega=torch.tensor([3.0, 1.0]))
    assert adv.tolist() == pytest.approx([0.0, -1.0 / SIGMA] * 2, rel=1e-5)


def test_omega_and_capability_exclude_each_other():
    args = (torch.tensor([1.0, 0.0]), torch.zeros(2, dtype=torch.long), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="exactly one"):
        hacpo_advantages(*args, learner=0)
    with pytest.raises(ValueError, match="exactly one"):
        hacpo_advantages(*args, learner=0, capability=torch.ones(2), omega=torch.ones(2))
    with pytest.raises(ValueError, match="into omega"):
        hacpo_advantages(*args, learner=2, omega=torch.ones(2))
