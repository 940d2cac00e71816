"""Worked examples before every prompt (``task.fewshot: k``): GSPO given the answer format without a partner.

:func:`with_fewshot` wraps a task so that every prompt, train and held-out alike, starts with the same
``k`` worked examples in the task's answer format, drawn once from the train side (never a held-out
problem) by the task's own ``fewshot_prefix(k)``:

| task | a worked example |
|---|---|
| builtin (``add2`` ...) | ``12+34=46`` and a newline, then the next (the prompt ends ``07+85=``) |
| reasoning-gym | the prompt, a newline, :func:`hacrl.data.gym.worked_answer` (for ``basic_arithmetic`` exactly the answers the fine-tuned SmolLM2 copy was trained on: ``32 + 59 = 91. The answer is \\boxed{91}.``), a blank line |
| dataset files | the prompt, a newline, ``The answer is \\boxed{<answer>}.`` (files hold final answers, not solutions), a blank line; rewards ``math`` and ``numeric`` only |

Problem ids and answers are unchanged (a problem with examples before it is the same problem: per-problem
results pair with a run without them), and ``meta["question"]`` keeps the bare question. A task that
cannot write worked examples is refused with one line.

>>> from hacrl.data.tasks import get_task
>>> task = with_fewshot(get_task("add2"), 2)
>>> task.test_problems(1)[0].prompt.count("\\n"), task.test_problems(1)[0].id == get_task("add2").test_problems(1)[0].id
(2, True)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from hacrl.data.splits import question_of
from hacrl.errors import InputError
from hacrl.types import Problem

__all__ = ["FewShotTask", "with_fewshot"]


class FewShotTask:
    """``task`` with ``prefix`` (its worked examples) put before every prompt; everything else is the task's."""

    def __init__(self, task: Any, prefix: str, k: int) -> None:
        self.task, self.prefix, self.fewshot = task, prefix, k

    def __getattr__(self, name: str) -> Any:  # name, max_new_tokens, reward_spec, skipped, num_train, ...
        if name == "task":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.task, name)

    def _with_examples(self, problem: Problem) -> Problem:
        meta = {**problem.meta, "question": question_of(problem)}
        return dataclasses.replace(problem, prompt=self.prefix + problem.prompt, meta=meta)

    def train_problems(self, seed: int) -> Iterator[Problem]:
        return (self._with_examples(p) for p in self.task.train_problems(seed))

    def test_problems(self, n: int | None = None) -> list[Problem]:
        return [self._with_examples(p) for p in self.task.test_problems(n)]

    def reward(self, completion: str, sample: dict[str, Any]) -> float | None:
        return self.task.reward(completion, sample)


def with_fewshot(task: Any, k: int) -> Any:
    """``task`` itself when ``k`` is 0, else a :class:`FewShotTask` with ``k`` of its worked examples."""
    if k == 0:
        return task
    make = getattr(task, "fewshot_prefix", None)
    if make is None:
        raise InputError(f"task.fewshot={k}: task {task.name!r} cannot write worked examples; fix: task.fewshot=0")
    try:
        prefix = make(k)
    except InputError:  # the task's own one line, naming task.fewshot
        raise
    except ValueError as exc:  # a builtin task asked for more examples than its train side has
        raise InputError(f"task.fewshot={k}: {exc}; fix: a smaller task.fewshot") from None
    return FewShotTask(task, prefix, k)
