"""The one-time warnings about a run's rewards and data (hacrl.trainer.reward_checks): all-zero rewards of an
agent, rewards outside [0, 1], a batch larger than the training set. Hand-built answers, then one short run."""

from __future__ import annotations

import json
import logging

import pytest

from hacrl.cli import main
from hacrl.trainer.reward_checks import RewardWarnings, warn_if_batch_exceeds_data
from hacrl.types import Trajectory

LOGGER = "hacrl.trainer.reward_checks"


def answers(*rewards_by_agent: list[float | None]) -> list[Trajectory]:
    return [Trajectory(prompt_index=0, source=i, text="x", finished=True, logp_sum=0.0, num_tokens=1, reward=r)
            for i, rewards in enumerate(rewards_by_agent) for r in rewards]


def said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def test_all_zero_rewards_of_an_agent_are_said_once_per_agent(caplog):
    warnings = RewardWarnings()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        warnings.check(answers([0.0, 1.0], [0.0, 0.0, None]), ["a", "b"], step=1)  # b: its scored rewards all 0
        warnings.check(answers([0.0, 0.0], [0.0, 0.0]), ["a", "b"], step=2)  # a now too; b not again
        warnings.check(answers([0.0], [0.0]), ["a", "b"], step=3)
    lines = said(caplog)
    assert len(lines) == 2, lines
    assert lines[0].startswith("step 1: every reward of agent b is 0 (2 answers)")
    assert lines[1].startswith("step 2: every reward of agent a is 0 (2 answers)")


def test_no_warning_for_rewards_in_range_nor_for_an_agent_with_no_scored_answer(caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        RewardWarnings().check(answers([0.0, 1.0, 0.5], [None, None]), ["a", "b"], step=1)
    assert said(caplog) == []


@pytest.mark.parametrize("rewards, low, high", [([0.0, 2.5], "0", "2.5"), ([-1.0, 1.0], "-1", "1")])
def test_rewards_outside_0_1_are_said_once_naming_accuracy_as_reward(caplog, rewards, low, high):
    warnings = RewardWarnings()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        warnings.check(answers(rewards), ["a"], step=4)
        warnings.check(answers([3.0, 1.0]), ["a"], step=5)
    lines = said(caplog)
    assert len(lines) == 1 and lines[0].startswith(f"step 4: rewards outside [0, 1] (from {low} to {high})"), lines
    assert "read as rewards, not accuracies" in lines[0]


def test_a_batch_larger_than_the_training_set_is_said(caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert warn_if_batch_exceeds_data(8, 5, "mine") and not warn_if_batch_exceeds_data(5, 5, "mine")
    assert said(caplog) == [("trainer.batch_size=8 prompts per step, but task mine has 5 training problems: every "
                             "step repeats problems; lower trainer.batch_size to at most 5, or give more data")]


@pytest.mark.model
def test_a_run_on_three_rows_with_a_reward_that_never_pays_says_each_once(tmp_path, caplog):
    data, held_out = tmp_path / "three.jsonl", tmp_path / "test.jsonl"
    for path, firsts in ((data, (1, 2, 3)), (held_out, (4, 5))):
        path.write_text("".join(json.dumps({"question": f"0{i}+01=", "answer": f"0{i + 1}"}) + "\n" for i in firsts))
    zero = tmp_path / "zero_reward.py"
    zero.write_text("def zero(completion, sample):\n    return 0.0\n")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert main(["train", "--preset", "tiny-test", "--set", "task.kind=dataset", "--set", f"task.train_path={data}",
                     "--set", f"task.test_path={held_out}", "--set", "task.name=mine", "--set", f"task.reward={zero}:zero",
                     "--set", "task.prompt_template='{question}'", "--set", "trainer.eval_size=2",
                     "--set", "trainer.log_samples=0", "-q", "--output", str(tmp_path / "run")]) == 0
    lines = said(caplog)
    assert lines[0].startswith("trainer.batch_size=4 prompts per step, but task mine has 3 training problems"), lines
    assert sorted(x.split(" is 0")[0] for x in lines[1:]) == [
        "step 1: every reward of agent llama-bpe", "step 1: every reward of agent qwen-char"]  # 2 steps, once each
