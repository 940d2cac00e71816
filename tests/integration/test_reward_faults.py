"""A reward that hangs, raises or returns NaN on some answers: the step completes, the answers are
counted as unscorable, and training goes on; a reward that fails on every answer is a clear error."""

import math
import time
from pathlib import Path

import pytest

from hacrl.config import load_config
from hacrl.errors import InputError
from hacrl.trainer.trainer import Trainer

pytestmark = pytest.mark.model

HERE = Path(__file__).resolve().parent


def trainer_with(tmp_path, fn, timeout=0.5):
    cfg = load_config("tiny-test", overrides=[f"task.reward={HERE / 'faulty_rewards.py'}:{fn}",
                                              f"task.reward_timeout_s={timeout}"])
    (tmp_path / "run").mkdir()
    return Trainer(cfg, tmp_path / "run")


@pytest.mark.parametrize("fn,kind", [("hangs_on_ones", "timeout"), ("raises_on_ones", "error"),
                                     ("nan_on_ones", "nan")])
def test_misbehaving_reward_answers_are_skipped_and_counted(tmp_path, fn, kind):
    trainer = trainer_with(tmp_path, fn)
    try:
        start = time.monotonic()
        metrics = trainer.step()
        elapsed = time.monotonic() - start
    finally:
        trainer.scorer.close()
    bad = metrics[f"reward/{kind}"]
    assert bad > 0, "the sampled answers should include some starting with 1"
    assert metrics["reward/ok"] + bad == metrics["pool/size"]
    assert sum(metrics[f"agent/{a.id}/unscorable"] for a in trainer.agents) == bad
    for a in trainer.agents:
        assert math.isfinite(metrics[f"agent/{a.id}/pg_loss"])
        # unscorable answers never enter a learner's view
        assert metrics[f"agent/{a.id}/count/own"] + metrics[f"agent/{a.id}/count/cross"] == metrics["reward/ok"]
    if kind == "timeout":  # each hanging answer costs about the limit, never the hour it asks for
        assert elapsed < 60


def test_a_reward_failing_on_every_answer_is_a_clear_error(tmp_path):
    trainer = trainer_with(tmp_path, "always_raises")
    try:
        with pytest.raises(InputError, match="task.reward: no answer of step 1 could be scored.*broken grader"):
            trainer.step()
    finally:
        trainer.scorer.close()
