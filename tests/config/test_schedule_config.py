"""The schedule and epoch keys (agents[i].lr_schedule, warmup_steps, warmup_ratio; trainer.num_train_epochs):
their defaults, one-line errors naming the key for bad values, and the steps counted from epochs."""

from __future__ import annotations

import math

import pytest

from hacrl.config import ConfigError, build_config, training_differences, with_epoch_steps
from hacrl.config.schema import epoch_steps


def config(agent: dict | None = None, **trainer):
    return build_config({"agents": [{"id": "a", "model": "m", **(agent or {})}], "trainer": trainer})


def test_the_defaults_are_todays_constant_rate_and_a_step_count():
    cfg = config()
    a = cfg.agents[0]
    assert (a.lr_schedule, a.warmup_steps, a.warmup_ratio) == ("constant", 0, 0.0)
    assert cfg.trainer.num_train_epochs is None and cfg.trainer.steps == 20


@pytest.mark.parametrize(("agent", "trainer", "message"), [
    ({"lr_schedule": "cosin"}, {}, (r"agents\.a\.lr_schedule: Input should be 'constant', 'linear', 'cosine' or "
                                   r"'constant_with_warmup' \(got 'cosin'\)")),
    ({"lr_schedule": "linear", "warmup_steps": -1}, {}, (r"agents\.a\.warmup_steps: Input should be greater than or "
                                                       r"equal to 0")),
    ({"lr_schedule": "linear", "warmup_ratio": -0.1}, {}, r"agents\.a\.warmup_ratio: Input should be greater"),
    ({"lr_schedule": "cosine", "warmup_ratio": 1.5}, {}, (r"agents\.a\.warmup_ratio: Input should be less than or "
                                                        r"equal to 1 \(got 1\.5\)")),
    ({"warmup_ratio": 0.1}, {}, (r"agents\.a: warmup_ratio=0\.1 needs a schedule with a warm-up; set "
                                r"agents\.a\.lr_schedule=constant_with_warmup")),
    ({"warmup_steps": 5}, {}, r"agents\.a: warmup_steps=5 needs a schedule"),
    ({"lr_schedule": "linear", "warmup_steps": 30}, {"steps": 20},
     r"agents\.a\.warmup_steps=30 is more than the run's 20 trainer\.steps .*lower it"),
    ({}, {"num_train_epochs": 0}, r"trainer\.num_train_epochs: Input should be greater than 0"),
    ({}, {"num_train_epochs": -1.0}, r"trainer\.num_train_epochs: Input should be greater than 0"),
], ids=["unknown-schedule", "negative-warmup", "negative-ratio", "ratio-above-1", "ratio-without-schedule",
        "steps-without-schedule", "warmup-longer-than-run", "zero-epochs", "negative-epochs"])
def test_bad_values_are_one_line_errors_naming_the_key(agent, trainer, message):
    with pytest.raises(ConfigError, match=message) as e:
        config(agent, **trainer)
    assert "\n" not in str(e.value) and "unknown key" not in str(e.value)


def test_trl_values_are_taken():
    cfg = config({"lr_schedule": "cosine", "warmup_ratio": 0.1}, num_train_epochs=1.5)
    assert cfg.agents[0].lr_schedule == "cosine" and cfg.trainer.num_train_epochs == 1.5
    # the warm-up of an epoch-counted run is checked once the steps are known (with_epoch_steps)
    assert config({"lr_schedule": "linear", "warmup_steps": 30}, num_train_epochs=1).agents[0].warmup_steps == 30


def test_epochs_count_the_steps_over_the_training_set():
    for epochs, n, b in [(1, 100, 16), (3, 100, 16), (0.5, 7, 2), (2.5, 1000, 32), (0.1, 30, 3), (1, 3, 16)]:
        assert epoch_steps(epochs, n, b) == max(1, math.ceil(round(epochs * n, 9) / b)), (epochs, n, b)
    assert epoch_steps(0.1, 30, 3) == 1  # 0.1 × 30 is 3 prompts, one step (not 3.0000000000000004: two)


def test_with_epoch_steps_sets_the_count_and_keeps_an_agreeing_one():
    cfg = with_epoch_steps(config(num_train_epochs=2, batch_size=4), 10, "rows")
    assert cfg.trainer.steps == 5 and cfg.trainer.num_train_epochs == 2  # ceil(2 × 10 / 4)
    # config.yaml of that run holds both: read back, they agree
    again = with_epoch_steps(build_config(cfg.model_dump(mode="json")), 10, "rows")
    assert again.trainer.steps == 5
    plain = config(steps=7)
    assert with_epoch_steps(plain, None, "add2") is plain  # without epochs nothing is counted


def test_a_null_step_count_leaves_it_to_the_epochs():
    """A preset's steps cleared with ``trainer.steps: null``; without epochs null is the default."""
    tree = {"agents": [{"id": "a", "model": "m"}], "trainer": {"steps": None, "num_train_epochs": 1, "batch_size": 4}}
    assert with_epoch_steps(build_config(tree), 10, "rows").trainer.steps == 3
    assert config(steps=None).trainer.steps == 20


@pytest.mark.parametrize(("num_train", "trainer", "message"), [
    (10, {"steps": 3}, (r"trainer\.steps=3 and trainer\.num_train_epochs=2 disagree: 2 passes over 10 training "
                       r"problems at 4 per step are 5 steps; set one of them \(trainer\.steps=null")),
    (None, {}, r"trainer\.num_train_epochs: task 'add2' draws new problems without end.*set trainer\.steps"),
], ids=["disagreeing-steps", "endless-task"])
def test_epochs_that_cannot_be_counted_are_one_line_errors(num_train, trainer, message):
    with pytest.raises(ConfigError, match=message) as e:
        with_epoch_steps(config(num_train_epochs=2, batch_size=4, **trainer), num_train, "add2")
    assert "\n" not in str(e.value)


def test_a_warmup_longer_than_the_epoch_counted_run_is_refused():
    cfg = config({"lr_schedule": "cosine", "warmup_steps": 6}, num_train_epochs=2, batch_size=4)
    with pytest.raises(ConfigError, match=r"agents\.a\.warmup_steps=6 is more than the run's 5 trainer\.steps"):
        with_epoch_steps(cfg, 10, "rows")


def test_a_run_may_continue_with_other_epochs_but_not_another_schedule():
    old = config(num_train_epochs=1).model_dump(mode="json")
    assert training_differences(old, config(num_train_epochs=3).model_dump(mode="json")) == []
    new = config({"lr_schedule": "cosine"}).model_dump(mode="json")
    assert training_differences(old, new) == [("agents.a.lr_schedule", "constant", "cosine")]
    # a run made before schedules existed had the constant rate: it continues with the default
    del old["agents"][0]["lr_schedule"], old["agents"][0]["warmup_steps"], old["agents"][0]["warmup_ratio"]
    assert training_differences(old, config().model_dump(mode="json")) == []
