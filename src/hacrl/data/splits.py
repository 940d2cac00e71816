"""One rule for "the same question", and the seed map that keeps training, fine-tuning and held-out data apart.

Every comparison between splits in hacrl (train against held-out, a fine-tuned copy's questions against a
run's evaluation problems) goes through :func:`normalize_question`: Unicode NFKC, case-folded, runs of
whitespace made one space, trailing sentence punctuation dropped. Two questions that differ only in
spacing, case, full-width characters or a final ``.``/``?`` count as one.

Held-out problems are the same for every ``run.seed`` (decided: benchmark style, so per-problem results
pair across seeds and seeds add training noise only). reasoning-gym builds item ``i`` of a dataset made
with ``seed`` from ``Random(seed + i)``; the item seeds in use are:

| stream | item seeds |
|---|---|
| a run's train stream | ``run.seed + i``, ``i < task.size`` |
| the fine-tuned builtin copies (``hacrl.agents.gguf``) | ``SFT_SEED + i`` = ``10_000_000 + i`` |
| worked examples (``task.fewshot``) | :data:`EXAMPLE_SEED` ``+ i`` = ``20_000_000 + i`` |
| held-out problems | ``task.test_seed + i``, default :data:`HELD_OUT_SEED` = ``1_000_000_000`` |

Seed ranges keep the streams apart in the common case; the question filter makes them disjoint always
(two item seeds can give the same question). A local dataset's held-out fraction and order are drawn with
``task.test_seed`` too, never with ``run.seed``.

>>> normalize_question("  What is  ３+3 ?\\n") == normalize_question("what is 3+3")
True
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from hacrl.types import HELD_OUT_SEED, Problem

__all__ = ["EXAMPLE_SEED", "HELD_OUT_SEED", "normalize_question", "overlapping", "question_of"]

# HELD_OUT_SEED (1_000_000_000, defined in hacrl.types): the default task.test_seed, far above any run's
# train item seeds (run.seed + i)
EXAMPLE_SEED = 20_000_000  # item seeds of reasoning-gym worked examples (task.fewshot), shared by every run
_TRAILING = ".?!,;:" + " "  # stripped from the end after NFKC (which maps "？", "。"-like forms and "…")


def normalize_question(text: str) -> str:
    """The form in which two questions are compared: NFKC, case-folded, whitespace collapsed to single
    spaces, trailing ``. ? ! , ; :`` and spaces removed. Inner punctuation and digits are kept.

    >>> normalize_question("Calculate  58 + 98.")
    'calculate 58 + 98'
    >>> normalize_question("ＷＨＡＴ is 2*3 ?!"), normalize_question("07+85=")
    ('what is 2*3', '07+85=')
    >>> normalize_question("x...") == normalize_question("X…"), normalize_question("f(x)")
    (True, 'f(x)')
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(folded.split()).rstrip(_TRAILING)


def question_of(problem: Problem) -> str:
    """The bare question of a problem: ``meta["question"]`` when the prompt is a rendered template (or has
    worked examples before it), else the prompt itself (the builtin tasks' prompts are their questions).

    >>> question_of(Problem("a", "Q? Think.", "1", {"question": "Q?"})), question_of(Problem("b", "07+85=", "92"))
    ('Q?', '07+85=')
    """
    question = problem.meta.get("question")
    return question if isinstance(question, str) else problem.prompt


def overlapping(questions: Iterable[str], problems: Iterable[Problem]) -> list[Problem]:
    """The problems whose (normalised) question is among ``questions`` (normalised here too).

    >>> [p.id for p in overlapping(["what is 1+1"], [Problem("a", "What is 1+1?", "2"), Problem("b", "2+2?", "4")])]
    ['a']
    """
    seen = {normalize_question(q) for q in questions}
    return [p for p in problems if normalize_question(question_of(p)) in seen]
