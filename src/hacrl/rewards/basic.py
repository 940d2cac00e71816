"""String and number rewards: ``exact`` (strip + string equality) and ``numeric`` (GSM8K style).

``numeric`` takes the last number in the completion, the way GSM8K graders do (verl's ``gsm8k``
scorer in "flexible" mode, lm-eval's last-number filter), and compares it with the ground truth as a
number. It departs from verl in two ways: it gives no 0.1 format credit, and it compares with a small
tolerance instead of as strings, so "18.00" matches "18".

Both are pure, cheap and safe to run inline (``RewardScorer(..., timeout_s=None)``).
"""

from __future__ import annotations

import math
import re
from typing import Any

from hacrl.rewards.base import REWARDS

# An unsigned number: digits with optional thousands separators and an optional decimal part, or a
# bare ".5"; never the tail of a word ("CO2") or of another number. The sign is decided in code.
_NUMBER = re.compile(r"(?<![\w.])(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+)")
_NOISE = str.maketrans({"$": "", "\u2212": "-", "\u00a0": " "})  # dollar, unicode minus, nbsp


def _gold_text(sample: dict[str, Any]) -> str | None:
    answer = sample.get("answer")
    if answer is None:
        return None
    text = str(answer).strip()
    return text or None


@REWARDS.register("exact")
def exact(completion: str, sample: dict[str, Any]) -> float | None:
    """1.0 if the stripped completion equals the stripped ground truth, else 0.0; None without one.

    >>> exact("  Paris\\n", {"answer": "Paris"})
    1.0
    >>> exact("paris", {"answer": "Paris"})
    0.0
    >>> exact("Paris", {}) is None
    True
    """
    gold = _gold_text(sample)
    if gold is None:
        return None
    return 1.0 if completion.strip() == gold else 0.0


def last_number(text: str) -> float | None:
    """The last number in ``text`` as a float (commas, '$', a trailing '.', signs handled), or None.

    >>> last_number("She pays $1,234.50 in total.")
    1234.5
    >>> last_number("10 - 3 = 7, so the answer is -7.")
    -7.0
    >>> last_number("no digits") is None
    True
    """
    text = text.translate(_NOISE)
    matches = list(_NUMBER.finditer(text))
    if not matches:
        return None
    match = matches[-1]
    value = float(match.group().replace(",", ""))
    # A '-' right before the number is a sign unless it follows a digit or ')': "10 - 3" is subtraction.
    before = text[: match.start()].rstrip(" ")
    if before.endswith("-") and before[:-1].rstrip(" ")[-1:] not in tuple("0123456789)"):
        value = -value
    return value


def gsm_gold(answer: str) -> float | None:
    """The ground-truth number: the text after '####' if present (GSM8K), else the whole answer.

    >>> gsm_gold("Janet sells 16 - 3 - 4 = 9 eggs.\\n#### 18")
    18.0
    >>> gsm_gold("-3.5")
    -3.5
    """
    text = answer.rsplit("####", 1)[-1] if "####" in answer else answer
    return last_number(text)


@REWARDS.register("numeric")
def numeric(completion: str, sample: dict[str, Any]) -> float | None:
    """1.0 if the completion's last number equals the ground truth's number, else 0.0.

    Numbers are equal within 1e-6 absolute (1e-12 relative) tolerance. The ground truth may be a GSM8K
    solution ending in "#### 42". Returns None when the ground truth
    holds no number (the sample cannot be scored this way); a completion without a number gets 0.0.

    >>> numeric("So she makes $1,800.", {"answer": "#### 1800"})
    1.0
    >>> numeric("The answer is 18.00", {"answer": "18"})
    1.0
    >>> numeric("It is 17.", {"answer": "18"})
    0.0
    >>> numeric("It is 17.", {"answer": "eighteen"}) is None
    True
    """
    text = _gold_text(sample)
    gold = None if text is None else gsm_gold(text)
    if gold is None:
        return None
    pred = last_number(completion)
    if pred is None:
        return 0.0
    return 1.0 if math.isclose(pred, gold, rel_tol=1e-12, abs_tol=1e-6) else 0.0
