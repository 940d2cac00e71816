"""The ``trust`` method's validation checks (``hacrl.core.trust``): a fixed slice of the task's *training* split,
answered greedily by every agent every ``algorithm.trust_every`` steps, each answer scored as right (reward ≥ 1, the
trainer's accuracy threshold) or not.

The slice is the first ``algorithm.trust_val_size`` distinct problems of the training stream drawn with
``VALIDATION_SEED``, whatever the run's seed, so every seed and arm checks the same problems. They are training
problems, not held out: the runs may also train on some of them (a 30-step tiny run draws 480 of add2's ≈ 9,000
training problems), which the paired test tolerates, since it compares a learner with itself on the same problems.
The held-out split is never used.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

from hacrl.learner.sharing import CORRECT_REWARD
from hacrl.rewards import ScoreResult
from hacrl.rollout import SamplingParams
from hacrl.types import Problem, Trajectory

VALIDATION_SEED = 0x7275  # fixed: the same slice for every run seed
_MAX_DRAWS = 50  # draws per wanted problem before a small training split is taken as it is


def validation_slice(stream: Iterable[Problem], n: int) -> list[Problem]:
    """The first ``n`` distinct problems (by id) of ``stream``; fewer when the split has fewer (a small data set).

    >>> [p.id for p in validation_slice((Problem(str(i % 3), "", "") for i in range(100)), 5)]
    ['0', '1', '2']
    """
    seen: dict[str, Problem] = {}
    for problem in itertools.islice(stream, n * _MAX_DRAWS):
        seen.setdefault(problem.id, problem)
        if len(seen) == n:
            break
    return list(seen.values())


def check(problems: list[Problem], answers_per_agent: list[list[Trajectory]],
          score: Callable[[list[str], list[Problem]], ScoreResult]) -> tuple[tuple[bool, ...], ...]:
    """Per agent, per problem of the slice (in its order): whether the agent's greedy answer was right. An
    unscorable answer counts as wrong."""
    out = []
    for answers in answers_per_agent:
        right = [False] * len(problems)
        result = score([t.text for t in answers], [problems[t.prompt_index] for t in answers])
        for t, reward in zip(answers, result.rewards, strict=True):
            right[t.prompt_index] = reward is not None and reward >= CORRECT_REWARD and t.finished
        out.append(tuple(right))
    return tuple(out)


def greedy(max_new_tokens: int) -> SamplingParams:
    """The checks' sampling: one greedy answer per problem, the run's answer budget."""
    return SamplingParams(n=1, max_new_tokens=max_new_tokens, greedy=True)
