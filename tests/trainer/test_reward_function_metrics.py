"""Per-reward-function metrics (several weighted rewards): each function's mean over an agent's answers as
``agent/<id>/reward/<name>``, beside the weighted sum ``agent/<id>/reward``; hand-computed, no model."""

from __future__ import annotations

from hacrl.rewards import ScoreResult
from hacrl.rollout import SamplingParams
from hacrl.trainer.phases import Phases, reward_function_metrics
from hacrl.types import Problem, Trajectory

BY_FUNCTION = {"acc": [1.0, 0.0, None, 1.0, None], "len": [0.5, 0.25, 0.0, None, None]}
SOURCES = [0, 0, 1, 1, 2]  # agents a, a, b, b, c


def answer(source: int) -> Trajectory:
    return Trajectory(prompt_index=0, source=source, text="x", finished=True, logp_sum=-1.0, num_tokens=1)


def test_each_functions_mean_over_the_answers_it_scored_per_agent():
    got = reward_function_metrics(SOURCES, BY_FUNCTION, ["a", "b", "c"])
    # a: acc (1 + 0) / 2, len (0.5 + 0.25) / 2; b: acc 1 / 1 (None left out), len 0 / 1; c: no function scored it
    assert got == {"agent/a/reward/acc": 0.5, "agent/a/reward/len": 0.375,
                   "agent/b/reward/acc": 1.0, "agent/b/reward/len": 0.0}


def test_a_single_reward_adds_no_key():
    assert reward_function_metrics(SOURCES, {}, ["a", "b", "c"]) == {}


def test_the_scored_step_carries_them():
    def score(texts, _problems):
        result = ScoreResult([1.0, 0.0, 0.0, 1.0, None], by_function=BY_FUNCTION)
        result.ok, result.none = 4, 1
        return result

    phases = Phases(["a", "b", "c"], SamplingParams(n=2), recompute=False, score_texts=score)
    _, stats = phases.score([Problem("p0", "1+1=", "2")], [answer(s) for s in SOURCES], step=1)
    assert stats["agent/a/reward/len"] == 0.375 and stats["agent/b/reward/acc"] == 1.0
    assert "agent/c/reward/acc" not in stats
