"""Several weighted rewards: each function's own value per answer comes back beside the weighted sum (for the
per-function metrics, ``agent/<id>/reward/<name>``), named as TRL names them, and the sum is unchanged to the bit."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from hacrl.rewards import RewardScorer, RewardSet

FILE = Path(__file__).resolve().parent / "step_rewards.py"
SAMPLES = [{"answer": "12", "solution": "12", "prompt": "5+7="} for _ in range(4)]
ANSWERS = ["12", "13", "", "12 or 13"]


def spec(name: str) -> str:
    return f"{FILE}:{name}"


@pytest.mark.parametrize("timeout_s", [None, 5.0])
def test_each_function_comes_back_beside_the_weighted_sum(timeout_s):
    import step_rewards

    accuracy = step_rewards.accuracy(ANSWERS, ["12"] * 4)  # [1, 0, 0, 0]
    brevity = [step_rewards.brevity(a, {}) for a in ANSWERS]  # [0.75, 0.75, None (empty), 0.0]
    with RewardScorer([spec("accuracy"), spec("brevity")], weights=[1.0, 0.5], timeout_s=timeout_s) as scorer:
        result = scorer.score(ANSWERS, SAMPLES)
    assert result.by_function == {"accuracy": accuracy, "brevity": brevity}
    # the weighted sum as TRL's reward_weights make it, over the functions that scored the answer, bit for bit
    assert result.rewards == step_rewards.weighted_by_hand(ANSWERS, ["12"] * 4) == [1.375, 0.375, 0.0, 0.0]


@pytest.mark.parametrize("timeout_s", [None, 5.0])
def test_a_single_reward_keeps_no_parts(timeout_s):
    with RewardScorer(spec("accuracy"), timeout_s=timeout_s) as scorer:
        result = scorer.score(ANSWERS, SAMPLES)
    assert result.by_function == {} and result.rewards == [1.0, 0.0, 0.0, 0.0]


def test_an_error_in_one_function_keeps_the_others_value():
    def broken(completion, sample):
        raise RuntimeError("no")

    result = RewardScorer(["exact", broken], timeout_s=None).score(["12"], SAMPLES[:1])
    assert result.rewards == [None] and result.error == 1  # an error wins: the answer is unscorable
    assert result.by_function == {"exact": [1.0], "broken": [None]}


def test_functions_are_named_as_trl_names_them_once_each():
    def accuracy(completions, **kwargs):
        return [1.0] * len(completions)

    def scaled(completion, sample, factor):
        return factor

    names = RewardSet.build(["math", accuracy, spec("accuracy"), functools.partial(scaled, factor=2.0),
                             lambda c, s: 1.0]).names
    # a registered spec by its registry name; a function by its __name__ (a partial: its function's), repeats numbered
    assert names == ["math", "accuracy", "accuracy_2", "scaled", "<lambda>"]
