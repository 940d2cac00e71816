"""A Task over reasoning-gym's procedural datasets (extra ``hacrl[gym]``, imported when a task is built).

:func:`reasoning_gym_task` makes a train, a held-out and a worked-example dataset from disjoint item seed
ranges (the seed map is in :mod:`hacrl.data.splits`) and wraps them in a :class:`ReasoningGymTask`;
prompts use the paper's template (see :mod:`hacrl.data.datasets`) unless another is given.

Held-out problems are fixed, whatever ``run.seed`` (decided: benchmark style, so per-problem results pair
across seeds and seeds add training noise only): item ``i`` of the held-out stream comes from
``Random(test_seed + i)``, ``test_seed`` defaulting to :data:`hacrl.data.splits.HELD_OUT_SEED`. The
held-out list keeps the first item of each distinct (normalised) question, ``test_size`` of them, and a
problem's id is ``<name>/test/<i>``, the same in every seed's run. The train stream (item seeds
``run.seed + i``) skips every held-out question (:func:`~hacrl.data.splits.normalize_question`).

:func:`worked_answer` writes an answer in the task's format; the fine-tuned builtin copy
(``hacrl.agents.gguf.sft_examples``) and ``task.fewshot`` prompts both use it.
"""

from __future__ import annotations

import difflib
import functools
import logging
import math
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

from hacrl.data.datasets import PAPER_TEMPLATE, check_template, seeded_order
from hacrl.data.rows import SkipRow, answer_text, require_extra
from hacrl.data.splits import EXAMPLE_SEED, HELD_OUT_SEED, normalize_question
from hacrl.errors import InputError
from hacrl.types import Problem

__all__ = ["ReasoningGymTask", "held_out_questions", "reasoning_gym_task", "unfaithful_value", "worked_answer"]

logger = logging.getLogger(__name__)

_SCAN = 20  # held-out items read per distinct question asked for, at most (plus _SCAN_EXTRA)
_SCAN_EXTRA = 1000


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text.replace(",", "")))
    except ValueError:
        return False


def worked_answer(name: str, item: dict[str, Any], shown: str | None = None) -> str:
    """A worked answer to a reasoning-gym item in the task's format: for ``basic_arithmetic`` the
    expression, its value, then the value in ``\\boxed{}``; for other datasets the boxed answer alone.
    ``shown``, if given, is written as the expression's value in place of the right one (an *unfaithful*
    working: the box still holds the right answer; :func:`unfaithful_value` draws one).

    >>> item = {"question": "Calculate 32 + 59.", "answer": "91", "metadata": {"expression": "32 + 59"}}
    >>> worked_answer("basic_arithmetic", item)
    '32 + 59 = 91. The answer is \\\\boxed{91}.'
    >>> worked_answer("fraction_simplification", {"answer": "1/2", "metadata": {}})
    'The answer is \\\\boxed{1/2}.'
    """
    answer = answer_text(item.get("answer"))
    expression = (item.get("metadata") or {}).get("expression")
    if name == "basic_arithmetic" and isinstance(expression, str):
        return f"{expression} = {answer if shown is None else shown}. The answer is \\boxed{{{answer}}}."
    return f"The answer is \\boxed{{{answer}}}."


def unfaithful_value(value: int, rng: random.Random) -> int:
    """A wrong value that looks like ``value``: the same sign and number of digits, drawn uniformly among
    those, never ``value`` itself (so a learner cannot tell it from the right one by its length).

    >>> rng = random.Random(0)
    >>> [unfaithful_value(v, rng) for v in (156, 7, -23, 0)]
    [964, 6, -63, 4]
    """
    digits = len(str(abs(value)))
    low = 10 ** (digits - 1) if digits > 1 else (1 if value < 0 else 0)
    high = 10 ** digits - 1
    while True:
        drawn = rng.randint(low, high)
        if value < 0:
            drawn = -drawn
        if drawn != value:
            return drawn


class ReasoningGymTask:
    """A Task over reasoning-gym datasets: train (``size`` items), held-out (the first ``test_size``
    distinct questions of ``test_ds``; all of them when None) and, optionally, worked examples.

    The reward is the spec ``reward`` if given; otherwise per problem: ``numeric`` (last number in the
    completion, lenient) when the answer is a number, else the dataset's own ``score_answer`` on the
    last ``\\boxed{}`` of the completion (or the whole stripped completion when there is none).
    """

    def __init__(self, name: str, train_ds: Any, test_ds: Any, *, test_size: int | None = None,
                 examples_ds: Any = None, prompt_template: str = PAPER_TEMPLATE, reward: str | None = None,
                 max_new_tokens: int = 1024):
        from hacrl.rewards import get_reward

        self.name, self.max_new_tokens, self.reward_spec = name, max_new_tokens, reward
        self._train_ds, self._examples_ds = train_ds, examples_ds
        self._template = check_template(prompt_template)
        try:
            self._reward_fn = get_reward(reward) if reward else None
        except ValueError as exc:
            raise InputError(f"task reward: {exc}") from None
        self._numeric = get_reward("numeric")
        self.skipped: Counter[str] = Counter()  # items without a usable question or answer, per reason
        self.held_out_repeats = 0  # held-out items passed over: their question came earlier in the stream
        self._test = self._distinct(test_ds, test_size)
        self._held = {normalize_question(p.meta["question"]) for p in self._test}
        if not self._test:
            raise InputError(f"reasoning-gym {name!r}: no usable test item ({dict(self.skipped)})")

    def _distinct(self, ds: Any, n: int | None) -> list[Problem]:
        """The first ``n`` items of ``ds`` with a question not seen before in it (normalised)."""
        out: list[Problem] = []
        seen: set[str] = set()
        for i in range(len(ds)):
            if n is not None and len(out) >= n:
                break
            problem = self._problem(ds, i, "test")
            if problem is None:
                continue
            key = normalize_question(problem.meta["question"])
            if key in seen:
                self.held_out_repeats += 1
                continue
            seen.add(key)
            out.append(problem)
        if n is not None and 0 < len(out) < n:
            logger.warning("reasoning-gym %s: %d distinct held-out questions in the first %d items, %d asked "
                           "for (the dataset's question space is small)", self.name, len(out), len(ds), n)
        return out

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
        """The train items once per epoch, reshuffled each epoch, without any held-out question; never ends."""
        epoch = 0
        while True:
            yielded = 0
            for i in seeded_order(len(self._train_ds), f"train/{seed}/{epoch}"):
                problem = self._train_problem(i)
                if problem is not None:
                    yielded += 1
                    yield problem
            if not yielded:
                raise InputError(f"reasoning-gym {self.name!r}: no train item left (unusable: "
                                 f"{dict(self.skipped)}; the rest are test items); fix: raise size")
            epoch += 1

    def _train_problem(self, index: int) -> Problem | None:
        """Train item ``index`` as a problem; None when it is unusable (counted in ``skipped``) or held out."""
        problem = self._problem(self._train_ds, index, "train")
        held = problem is not None and normalize_question(problem.meta["question"]) in self._held
        return None if held else problem

    @functools.cached_property
    def num_train(self) -> int:
        """Problems in one pass of :meth:`train_problems` (``trainer.num_train_epochs``): the items are read once,
        the first time it is asked, without counting their skips in ``skipped`` again."""
        skipped = self.skipped.copy()
        n = sum(self._train_problem(i) is not None for i in range(len(self._train_ds)))
        self.skipped = skipped
        return n

    def test_problems(self, n: int | None = None) -> list[Problem]:
        return list(self._test if n is None else self._test[:n])

    def fewshot_prefix(self, k: int) -> str:
        """``k`` worked examples (the prompt, a newline, :func:`worked_answer`, a blank line) to put before
        every prompt: the first ``k`` distinct non-held-out questions of the worked-example stream (item
        seeds ``EXAMPLE_SEED + i``), the same for every run of this task."""
        if self._examples_ds is None:
            raise InputError(f"task.fewshot: reasoning-gym {self.name!r} was built without worked examples")
        blocks: list[str] = []
        seen: set[str] = set()
        for i in range(len(self._examples_ds)):
            if len(blocks) == k:
                break
            item = self._examples_ds[i]
            problem = self._problem(self._examples_ds, i, "example")
            key = normalize_question(problem.meta["question"]) if problem else None
            if problem is None or key is None or key in self._held or key in seen:
                continue
            seen.add(key)
            blocks.append(f"{problem.prompt}\n{worked_answer(self.name, item)}\n\n")
        if len(blocks) < k:
            raise InputError(f"task.fewshot={k}: reasoning-gym {self.name!r} gives only {len(blocks)} worked "
                             f"examples outside the held-out split; fix: a smaller task.fewshot")
        return "".join(blocks)

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


def _create(rg: Any, name: str, seed: int, size: int, config: dict[str, Any] | None) -> Any:
    try:
        return rg.create_dataset(name, seed=seed, size=size, **(config or {}))
    except (TypeError, ValueError, AssertionError) as exc:
        raise InputError(f"reasoning-gym {name!r} rejected its config {config or {}}: {exc}") from None


def reasoning_gym_task(name: str, *, seed: int = 0, size: int = 10_000, test_size: int = 200,
                       test_seed: int = HELD_OUT_SEED, reward: str | None = None,
                       prompt_template: str = PAPER_TEMPLATE, max_new_tokens: int = 1024,
                       config: dict[str, Any] | None = None) -> ReasoningGymTask:
    """A Task over ``reasoning_gym.create_dataset(name, seed=..., size=..., **config)``.

    reasoning-gym builds item ``i`` from ``Random(seed + i)``: train uses item seeds ``seed .. seed+size-1``;
    the held-out problems are the first ``test_size`` distinct questions among items ``test_seed + i``
    (read lazily, at most ``20·test_size + 1000`` items), the same for every ``seed``; held-out questions
    are filtered out of the train stream, so the splits are disjoint even when two item seeds give the
    same question.
    """
    rg = require_extra("reasoning_gym", "gym", f"the reasoning-gym task {name!r}")
    if size < 1 or test_size < 1:
        raise InputError(f"reasoning-gym {name!r}: size and test_size must be >= 1, got {size}, {test_size}")
    known = list(getattr(getattr(rg, "factory", None), "DATASETS", {}))
    if known and name not in known:
        close = difflib.get_close_matches(name, known, n=5) or sorted(known)[:8]
        raise InputError(f"unknown reasoning-gym dataset {name!r}; did you mean: {', '.join(close)} "
                         f"({len(known)} datasets in reasoning_gym.factory.DATASETS)")
    train = _create(rg, name, seed, size, config)
    test = _create(rg, name, test_seed, _SCAN * test_size + _SCAN_EXTRA, config)
    examples = _create(rg, name, EXAMPLE_SEED, _SCAN_EXTRA, config)
    return ReasoningGymTask(name, train, test, test_size=test_size, examples_ds=examples,
                            prompt_template=prompt_template, reward=reward, max_new_tokens=max_new_tokens)


def held_out_questions(name: str, *, n: int, config: dict[str, Any] | None = None,
                       test_seed: int = HELD_OUT_SEED) -> set[str]:
    """The normalised questions of the first ``n`` held-out problems of the reasoning-gym task ``name``
    with dataset options ``config``: what a recipe drawing its own data must leave out."""
    task = reasoning_gym_task(name, size=1, test_size=n, test_seed=test_seed, config=config)
    return {normalize_question(p.meta["question"]) for p in task.test_problems()}
