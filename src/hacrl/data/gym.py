"""A Task over reasoning-gym's procedural datasets (extra ``hacrl[gym]``, imported when a task is built).

:func:`reasoning_gym_task` makes a train and a test dataset from disjoint seed ranges and wraps them in a
:class:`ReasoningGymTask`; prompts use the paper's template (see :mod:`hacrl.data.datasets`) unless
another is given.
"""

from __future__ import annotations

import difflib
import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

from hacrl.data.datasets import PAPER_TEMPLATE, check_template, seeded_order
from hacrl.data.rows import SkipRow, answer_text, require_extra
from hacrl.errors import InputError
from hacrl.types import Problem

__all__ = ["ReasoningGymTask", "reasoning_gym_task"]


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text.replace(",", "")))
    except ValueError:
        return False


class ReasoningGymTask:
    """A Task over two reasoning-gym datasets: train (``size`` items) and test (``test_size`` items).

    The reward is the spec ``reward`` if given; otherwise per problem: ``numeric`` (last number in the
    completion, lenient) when the answer is a number, else the dataset's own ``score_answer`` on the
    last ``\\boxed{}`` of the completion (or the whole stripped completion when there is none).
    """

    def __init__(self, name: str, train_ds: Any, test_ds: Any, *, prompt_template: str = PAPER_TEMPLATE,
                 reward: str | None = None, max_new_tokens: int = 1024):
        from hacrl.rewards import get_reward

        self.name, self.max_new_tokens, self.reward_spec = name, max_new_tokens, reward
        self._train_ds, self._test_ds = train_ds, test_ds
        self._template = check_template(prompt_template)
        try:
            self._reward_fn = get_reward(reward) if reward else None
        except ValueError as exc:
            raise InputError(f"task reward: {exc}") from None
        self._numeric = get_reward("numeric")
        self.skipped: Counter[str] = Counter()  # items without a usable question or answer, per reason
        self._test = [p for i in range(len(test_ds)) if (p := self._problem(test_ds, i, "test"))]
        self._held = {p.meta["question"] for p in self._test}
        if not self._test:
            raise InputError(f"reasoning-gym {name!r}: no usable test item ({dict(self.skipped)})")

    def _problem(self, ds: Any, index: int, split: str) -> Problem | None:
        item = ds[index]
        try:
            question = answer_text(item.get("question"), "question")
            answer = answer_text(item.get("answer"))
        except SkipRow as skip:
            self.skipped[f"{split}/{skip.reason}"] += 1
            return None
        meta = {"split": split, "question": question, "metadata": item.get("metadata", {})}
        prompt = self._template.replace("{question}", question)
        return Problem(id=f"{self.name}/{split}/{index}", prompt=prompt, answer=answer, meta=meta)

    def train_problems(self, seed: int) -> Iterator[Problem]:
        """The train items once per epoch, reshuffled each epoch, without any test question; never ends."""
        epoch = 0
        while True:
            yielded = 0
            for i in seeded_order(len(self._train_ds), f"train/{seed}/{epoch}"):
                problem = self._problem(self._train_ds, i, "train")
                if problem is not None and problem.meta["question"] not in self._held:
                    yielded += 1
                    yield problem
            if not yielded:
                raise InputError(f"reasoning-gym {self.name!r}: no train item left (unusable: "
                                 f"{dict(self.skipped)}; the rest are test items); fix: raise size")
            epoch += 1

    def test_problems(self, n: int | None = None) -> list[Problem]:
        return list(self._test if n is None else self._test[:n])

    def reward(self, completion: str, sample: dict[str, Any]) -> float | None:
        """``sample`` is a problem's ``as_sample()``: its meta carries reasoning-gym's question and metadata."""
        if self._reward_fn is not None:
            return self._reward_fn(completion, sample)
        if _is_number(sample["answer"]):
            return self._numeric(completion, sample)
        from hacrl.rewards.math_reward import last_boxed

        guess = last_boxed(completion)
        entry = {"question": sample["question"], "answer": sample["answer"], "metadata": sample["metadata"]}
        return float(self._train_ds.score_answer(guess if guess is not None else completion.strip(), entry))


def reasoning_gym_task(name: str, *, seed: int = 0, size: int = 10_000, test_size: int = 200,
                       reward: str | None = None, prompt_template: str = PAPER_TEMPLATE,
                       max_new_tokens: int = 1024, config: dict[str, Any] | None = None) -> ReasoningGymTask:
    """A Task over ``reasoning_gym.create_dataset(name, seed=..., size=..., **config)``.

    reasoning-gym builds item ``i`` from ``Random(seed + i)``, so train uses seeds ``seed .. seed+size-1``
    and test ``seed+size .. seed+size+test_size-1``: disjoint streams; test questions are also filtered
    out of the train stream, so the splits are disjoint even when two seeds give the same question.
    """
    rg = require_extra("reasoning_gym", "gym", f"the reasoning-gym task {name!r}")
    if size < 1 or test_size < 1:
        raise InputError(f"reasoning-gym {name!r}: size and test_size must be >= 1, got {size}, {test_size}")
    known = list(getattr(getattr(rg, "factory", None), "DATASETS", {}))
    if known and name not in known:
        close = difflib.get_close_matches(name, known, n=5) or sorted(known)[:8]
        raise InputError(f"unknown reasoning-gym dataset {name!r}; did you mean: {', '.join(close)} "
                         f"({len(known)} datasets in reasoning_gym.factory.DATASETS)")
    try:
        train = rg.create_dataset(name, seed=seed, size=size, **(config or {}))
        test = rg.create_dataset(name, seed=seed + size, size=test_size, **(config or {}))
    except (TypeError, ValueError, AssertionError) as exc:
        raise InputError(f"reasoning-gym {name!r} rejected its config {config or {}}: {exc}") from None
    return ReasoningGymTask(name, train, test, prompt_template=prompt_template, reward=reward,
                            max_new_tokens=max_new_tokens)
