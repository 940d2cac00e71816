"""The methods composed from the ingredients of docs/methods.md train through the ``Trainer``: two steps of the
``tiny-test`` preset each, finite losses, every agent's weights moved, and each method's own metrics logged."""

from __future__ import annotations

import math

import pytest
import torch

from hacrl.config import load_config
from hacrl.trainer.trainer import Trainer

pytestmark = pytest.mark.model

# each method's metric that only it logs (or that shows its ingredient at work)
METHOD_METRICS = {
    "naive-recompute": "partner_old/log_ratio_to_author",
    "sgt": "count/imitated",
    "luffy": "count/cross",
    "ftis": "count/cross",
    "gated-group": "count/cross",
}


@pytest.mark.parametrize("algo", sorted(METHOD_METRICS))
def test_a_composed_method_trains_two_steps(tmp_path, algo):
    cfg = load_config("tiny-test", overrides=[f"algorithm.name={algo}", "trainer.steps=2"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    trainer = Trainer(cfg, run_dir)
    try:
        before = [{k: v.detach().clone() for k, v in a.model.state_dict().items()} for a in trainer.agents]
        for _ in range(2):
            metrics = trainer.step()
            for a in trainer.agents:
                assert math.isfinite(metrics[f"agent/{a.id}/pg_loss"])
                assert math.isfinite(metrics[f"agent/{a.id}/grad_norm"])
                assert f"agent/{a.id}/{METHOD_METRICS[algo]}" in metrics
        for a, snap in zip(trainer.agents, before, strict=True):
            assert any(not torch.equal(snap[k], v) for k, v in a.model.state_dict().items()), a.id
    finally:
        trainer.close()


def test_a_variant_composed_in_the_config_trains(tmp_path):
    # hacpo whose partner answers are shared only on the prompts the learner failed
    cfg = load_config("tiny-test", overrides=["algorithm.share_prompts=learner_failed", "trainer.steps=1"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    trainer = Trainer(cfg, run_dir)
    try:
        metrics = trainer.step()
        for a in trainer.agents:
            assert math.isfinite(metrics[f"agent/{a.id}/pg_loss"])
            g, b = cfg.rollout.rollouts_per_prompt, cfg.trainer.batch_size
            assert metrics[f"agent/{a.id}/count/cross"] <= g * b
    finally:
        trainer.close()
