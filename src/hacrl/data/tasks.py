"""Built-in procedural tasks with exact-answer verifiers: the embedded default's data.

Each task draws small arithmetic problems from a fixed, finite space (e.g. every pair of 2-digit
operands). A stable hash of the problem puts it either in the held-out test split or in the training
split, so the two are disjoint by construction and the split never depends on a seed, the Python
hash seed or the number of problems asked for. The hash is of the problem's key, and the prompt is
the key plus ``=``, digits and operators only, which :func:`hacrl.data.splits.normalize_question`
leaves as it is: the splits are disjoint by normalised question as well (``tests/data/test_splits.py``
checks every problem of every task). ``train_problems(seed)`` is an infinite, seeded, deterministic
stream drawn (with replacement) from the training split; ``test_problems(n)`` is a fixed list whose
first ``n`` items do not depend on ``n`` and whose ids (``add2/07+85``) are the same in every run.
``fewshot_prefix(k)`` gives ``k`` worked examples from the training split (``task.fewshot``).

The prompt is plain text meant to be tokenized as is: zero-padded operands and no spaces
(``"07+85="``), answer ``"92"``. Fixed-width operands make every prompt the same length and put
each digit at the same position, which is what lets a sub-2M-parameter model learn the task in
minutes; tokenizers should split digits individually.

Registry: ``TASKS.get("add2")()`` returns a :class:`Task`. Only the standard library is used.

>>> task = TASKS.get("add2")()
>>> sample = task.test_problems(1)[0].as_sample()
>>> task.reward(sample["answer"], sample), task.reward(f" {sample['answer']}\\n", sample), task.reward("x", sample)
(1.0, 1.0, 0.0)
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from hacrl.registry import Registry
from hacrl.types import Problem

__all__ = ["TASKS", "ArithmeticTask", "Problem", "Task", "exact_match", "get_task"]


@runtime_checkable
class Task(Protocol):
    """What the trainer needs from a task.

    ``reward`` is the task's verifier, a reward function like any other (``hacrl.rewards``): it gets an
    answer and its problem's ``Problem.as_sample()``. ``reward_spec`` names it for a fresh process (a
    registry name or ``module:function``): the trainer then scores in worker processes under
    ``task.reward_timeout_s``; None marks a trusted, cheap verifier, scored inline.
    """

    @property
    def name(self) -> str: ...

    @property
    def max_new_tokens(self) -> int: ...

    @property
    def reward_spec(self) -> str | None: ...

    def train_problems(self, seed: int) -> Iterator[Problem]: ...

    def test_problems(self, n: int | None = None) -> list[Problem]: ...

    def reward(self, completion: str, sample: dict[str, Any]) -> float | None: ...


def exact_match(completion: str, answer: str | None) -> float | None:
    """1.0 if ``completion`` equals ``answer`` after stripping whitespace, else 0.0; None if unscorable.

    >>> exact_match(" 92\\n", "92"), exact_match("092", "92"), exact_match("92 93", "92")
    (1.0, 0.0, 0.0)
    >>> exact_match(None, "92") is None
    True
    """
    if not isinstance(completion, str) or not isinstance(answer, str):
        return None
    return 1.0 if completion.strip() == answer.strip() else 0.0


# A generator maps a random source to (key, prompt, answer, meta); the key names the problem.
Generator = Callable[[random.Random], tuple[str, str, str, dict[str, Any]]]


def _unit_hash(text: str) -> float:
    """A stable hash of ``text`` mapped to [0, 1) (blake2b, independent of PYTHONHASHSEED)."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass(frozen=True)
class ArithmeticTask:
    """A finite space of problems split into train/test by a stable hash of the problem key.

    Args:
        name: registry name, also the prefix of every problem id.
        generate: draws one problem uniformly from the space.
        space_size: number of distinct problems (used to check the test split is large enough).
        test_fraction: share of the space held out for testing.
        max_new_tokens: a generation budget that fits the longest answer plus EOS with slack for a
            character-level tokenizer.
    """

    name: str
    generate: Generator
    space_size: int
    test_fraction: float
    max_new_tokens: int
    split_name: str | None = None  # another task whose split and draws this one shares (add2-trace: add2's)

    def is_test(self, key: str) -> bool:
        return _unit_hash(f"{self.split_name or self.name}:{key}") < self.test_fraction

    def _problem(self, rng: random.Random, split: str) -> Problem:
        key, prompt, answer, meta = self.generate(rng)
        return Problem(id=f"{self.name}/{key}", prompt=prompt, answer=answer, meta={**meta, "split": split})

    def train_problems(self, seed: int) -> Iterator[Problem]:
        """An infinite stream of training problems (with repeats), fixed by ``seed``."""
        rng = random.Random(f"{self.split_name or self.name}/train/{seed}")
        while True:
            problem = self._problem(rng, "train")
            if not self.is_test(problem.id.split("/", 1)[1]):
                yield problem

    def test_problems(self, n: int | None = None) -> list[Problem]:
        """The first ``n`` problems (default 1000) of the fixed held-out list, without repeats."""
        n = 1000 if n is None else n
        if n > 0.8 * self.space_size * self.test_fraction:
            raise ValueError(f"task {self.name!r} holds out about {self.space_size * self.test_fraction:.0f} "
                             f"problems; asked for {n}")
        return self._distinct("test", "test", n, held_out=True)

    def _distinct(self, draw: str, split: str, n: int, *, held_out: bool) -> list[Problem]:
        """The first ``n`` distinct problems (labelled ``split``) of the fixed draw ``<name>/<draw>``, on the
        held-out side of the split (``held_out``) or on the training side."""
        rng = random.Random(f"{self.split_name or self.name}/{draw}")
        seen: set[str] = set()
        out: list[Problem] = []
        while len(out) < n:
            problem = self._problem(rng, split)
            key = problem.id.split("/", 1)[1]
            if key not in seen and self.is_test(key) == held_out:
                seen.add(key)
                out.append(problem)
        return out

    def fewshot_prefix(self, k: int) -> str:
        """``k`` worked examples for the start of every prompt: distinct training problems from a fixed draw
        (the same for every run), each written ``prompt`` + ``answer`` + newline, e.g. ``"12+34=46\\n"``."""
        if k > 0.5 * self.space_size * (1 - self.test_fraction):
            raise ValueError(f"task {self.name!r} has about {self.space_size * (1 - self.test_fraction):.0f} "
                             f"training problems; asked for {k} worked examples")
        return "".join(f"{p.prompt}{p.answer}\n" for p in self._distinct("fewshot", "example", k, held_out=False))

    reward_spec = None  # exact match: trusted and cheap, scored inline

    def reward(self, completion: str, sample: dict[str, Any]) -> float | None:
        return exact_match(completion, sample.get("answer"))


# ---------------------------------------------------------------- generators


def _binary(op: str, a: int, b: int, width_a: int, width_b: int, result: int) -> tuple[str, str, str, dict]:
    key = f"{a:0{width_a}d}{op}{b:0{width_b}d}"
    return key, f"{key}=", str(result), {"a": a, "b": b, "op": op}


def _add(digits: int) -> Generator:
    hi = 10**digits

    def generate(rng: random.Random) -> tuple[str, str, str, dict]:
        a, b = rng.randrange(hi), rng.randrange(hi)
        return _binary("+", a, b, digits, digits, a + b)

    return generate


def _mul1x3(rng: random.Random) -> tuple[str, str, str, dict]:
    a, b = rng.randrange(10), rng.randrange(1000)
    return _binary("*", a, b, 1, 3, a * b)


def _mixed(rng: random.Random) -> tuple[str, str, str, dict]:
    a, b = rng.randrange(100), rng.randrange(100)
    if rng.random() < 0.5:
        return _binary("+", a, b, 2, 2, a + b)
    return _binary("-", a, b, 2, 2, a - b)


def add2_trace_answer(a: int, b: int) -> str:
    """The worked answer of ``a + b`` (2-digit operands): the ones column, the tens column with its carry, then
    ``>`` and the sum.

    >>> add2_trace_answer(7, 85), add2_trace_answer(31, 42), add2_trace_answer(99, 99)
    ('7+5=12,0+8+1=9>92', '1+2=3,3+4+0=7>73', '9+9=18,9+9+1=19>198')
    """
    ones = a % 10 + b % 10
    tens = a // 10 + b // 10 + ones // 10
    return f"{a % 10}+{b % 10}={ones},{a // 10}+{b // 10}+{ones // 10}={tens}>{a + b}"


def _add2_trace(rng: random.Random) -> tuple[str, str, str, dict]:
    a, b = rng.randrange(100), rng.randrange(100)
    key, prompt, _, meta = _binary("+", a, b, 2, 2, a + b)
    return key, prompt, add2_trace_answer(a, b), meta


def final_number(completion: str) -> str | None:
    r"""The text after the last ``>`` of a worked answer, stripped; None without one.

    >>> final_number("7+5=12,0+8+1=9>92"), final_number(" junk>92\n"), final_number("92")
    ('92', '92', None)
    """
    if not isinstance(completion, str) or ">" not in completion:
        return None
    return completion.rsplit(">", 1)[1].strip()


def trace_consistent(completion: str, a: int, b: int) -> bool:
    """Whether a worked answer to ``a + b`` is arithmetically right throughout: its operands are the problem's
    digits, each column's sum and the carry are right, and the number after ``>`` is the sum the columns give.
    (The reward reads only that number; this is the mechanism study's check of the working.)

    >>> trace_consistent("7+5=12,0+8+1=9>92", 7, 85), trace_consistent("7+5=13,0+8+1=9>92", 7, 85)
    (True, False)
    >>> trace_consistent("3+1=4,2+6+0=8>92", 7, 85), trace_consistent("7+5=12,0+8+1=9>93", 7, 85)
    (False, False)
    """
    return isinstance(completion, str) and completion.strip() == add2_trace_answer(a, b)


class TraceTask(ArithmeticTask):
    """``add2-trace``: add2's problems and split, answered with a worked trace; the reward reads only the
    number after the last ``>`` (a wrong working with the right sum scores 1)."""

    def reward(self, completion: str, sample: dict[str, Any]) -> float | None:
        gold = final_number(sample.get("answer"))  # type: ignore[arg-type]
        if gold is None or not isinstance(completion, str):
            return None
        return 1.0 if final_number(completion) == gold else 0.0


TASKS: Registry[Callable[[], Task]] = Registry("task")


@TASKS.register("add2")
def add2() -> ArithmeticTask:
    """2-digit addition, zero-padded operands: ``"07+85="`` → ``"92"``. 10^4 problems, ~1500 held out."""
    return ArithmeticTask("add2", _add(2), 10**4, 0.15, max_new_tokens=6)


@TASKS.register("add2-trace")
def add2_trace() -> TraceTask:
    """add2 with a worked answer: ``"07+85="`` → ``"7+5=12,0+8+1=9>92"`` (ones column, tens column with its
    carry, the sum); rewarded on the sum after ``>`` only. add2's problems, ids ``add2-trace/07+85`` and split."""
    return TraceTask("add2-trace", _add2_trace, 10**4, 0.15, max_new_tokens=24, split_name="add2")


@TASKS.register("add3")
def add3() -> ArithmeticTask:
    """3-digit addition: ``"007+085="`` → ``"92"``. 10^6 problems, ~20 000 held out."""
    return ArithmeticTask("add3", _add(3), 10**6, 0.02, max_new_tokens=7)


@TASKS.register("mul1x3")
def mul1x3() -> ArithmeticTask:
    """1-digit times 3-digit: ``"7*085="`` → ``"595"``. 10^4 problems, ~1500 held out."""
    return ArithmeticTask("mul1x3", _mul1x3, 10**4, 0.15, max_new_tokens=7)


@TASKS.register("mixed")
def mixed() -> ArithmeticTask:
    """2-digit addition or subtraction: ``"85-07="`` → ``"78"``, ``"07-85="`` → ``"-78"``. ~2·10^4 problems."""
    return ArithmeticTask("mixed", _mixed, 2 * 10**4, 0.1, max_new_tokens=7)


def get_task(name: str) -> Task:
    """Build the registered task ``name``."""
    return TASKS.get(name)()
