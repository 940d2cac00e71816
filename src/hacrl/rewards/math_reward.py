"""The ``math`` reward: the last ``\\boxed{...}`` of a completion, graded against the ground truth.

Grading, in order (either test passing gives 1.0):

1. **Normalised string match** - the Hendrycks/lm-eval ``strip_string`` rules that the official HACPO
   reward uses (verl ``math_reward``): drop spaces, ``\\left``/``\\right``, ``\\!``, ``^\\circ``, ``\\%``,
   ``\\$``, a trailing ``.`` and ``\\text{ units}``; ``dfrac``/``tfrac`` -> ``frac``; plus a canonical form
   for plain numbers and simple fractions, so ``0.5 == \\frac12 == 1/2``.
2. **math-verify** (optional extra ``hacrl[math]``), imported lazily on first use: symbolic and numeric
   equivalence (``2\\sqrt2 == \\sqrt8``, intervals, sets, equations ``x=3`` vs ``3``). It is called
   as ``verify(parse(gold), parse(pred))`` - gold first, the call is asymmetric - with both sides
   handed over as ``\\boxed{...}`` so the same extraction applies to each.

Departures from the official reward: math-verify is used (the official code has it commented out), the
normalised match is kept as a fallback for when math-verify is missing or fails, and answers longer
than ``MAX_VERIFY_CHARS`` skip math-verify (sympy can take minutes on them).

Time: math-verify's own time limit uses ``signal.alarm``, which only works on the main thread, so it
is disabled here (``parsing_timeout=None``, ``timeout_seconds=None``). Some inputs still make sympy
run for minutes (e.g. ``9^{9^{9^{9}}}``), so score this reward through
``RewardScorer(..., timeout_s=...)``, whose worker processes enforce the limit.
"""

from __future__ import annotations

import logging
import re
from fractions import Fraction
from functools import lru_cache
from typing import Any

from hacrl.rewards.base import REWARDS

logger = logging.getLogger(__name__)

MAX_VERIFY_CHARS = 1000  # longer gold or predicted answers are compared by normalised string only

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_TOKEN = re.compile(r"[^\s$]+")


# ---- extraction ---------------------------------------------------------------------------------
def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` or ``\\fbox{...}``; None if there is none.

    Braces nest; escaped ``\\{``/``\\}`` do not count; ``\\boxed 5`` (no braces) takes the next
    token. A last box that never closes (a truncated answer) counts as no box.

    >>> last_boxed(r"so $\\boxed{1}$, no wait: $\\boxed{\\frac{1}{2}}$.")
    '\\\\frac{1}{2}'
    >>> last_boxed(r"$\\boxed 5$"), last_boxed(r"\\boxed{5"), last_boxed("five")
    ('5', None, None)
    """
    # each command's search resumes where it stopped: linear in the text, however many "\boxedfoo" it holds
    found = {cmd: text.rfind(cmd) for cmd in _BOX_COMMANDS}
    while True:
        start, name = max((pos, cmd) for cmd, pos in found.items())
        if start < 0:
            return None
        i = start + len(name)
        if i < len(text) and text[i].isalpha():  # "\boxedfoo" is another command
            found[name] = text.rfind(name, 0, start)
            continue
        return _box_argument(text, i)


def _box_argument(text: str, i: int) -> str | None:
    j = i
    while j < len(text) and text[j] in " \t":
        j += 1
    if j >= len(text):
        return None
    if text[j] != "{":  # "\boxed 5": one token, up to whitespace or '$'
        token = _TOKEN.match(text, j)
        return token.group() if token else None
    depth, k = 0, j
    while k < len(text):
        c = text[k]
        if c == "\\":
            k += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[j + 1 : k]
        k += 1
    return None


def gold_answer(sample: dict[str, Any]) -> str | None:
    """The ground truth as a bare answer: after '####', inside a box, outside ``$...$``; or None.

    >>> gold_answer({"answer": r"$\\boxed{\\frac{1}{2}}$"}), gold_answer({"answer": "#### 7"})
    ('\\\\frac{1}{2}', '7')
    """
    answer = sample.get("answer")
    if answer is None:
        return None
    text = str(answer).strip()
    if "####" in text:
        text = text.rsplit("####", 1)[-1].strip()
    if any(cmd in text for cmd in _BOX_COMMANDS):
        text = last_boxed(text) or ""
    return _strip_math_delimiters(text) or None


def _strip_math_delimiters(text: str) -> str:
    text = text.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
            return text[len(left) : len(text) - len(right)].strip()
    return text


# ---- normalised string match --------------------------------------------------------------------
_WRAPPERS = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox)\{([^{}]*)\}")
_UNITS = re.compile(r"\\(?:text|mbox|mathrm)\{\s[^{}]*\}\s*$")  # a trailing "\text{ cm}"
_SPACING = re.compile(r"\\[,;:! ]|\\q?quad|~|\\displaystyle")
_FRAC_SHORT = re.compile(r"\\frac(\d)(\d)")  # \frac12
_FRAC_HALF_SHORT = re.compile(r"\\frac\{([^{}]*)\}(\d)")  # \frac{a}2
_SQRT_SHORT = re.compile(r"\\sqrt(\w)")  # \sqrt3
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_NUM = r"-?(?:\d+(?:\.\d*)?|\.\d+)"
_SIMPLE_NUMBER = re.compile(rf"(?P<sign>-?)(?:(?P<a>{_NUM})|\\frac\{{(?P<n>{_NUM})\}}\{{(?P<d>{_NUM})\}}"
                            rf"|(?P<p>{_NUM})/(?P<q>{_NUM}))")


def normalize_answer(answer: str) -> str:
    """Hendrycks-style string normalisation of a math answer (for the string-match test).

    >>> normalize_answer(r"\\left( \\dfrac{1}{2}, 3 \\right)")
    '(\\\\frac{1}{2},3)'
    >>> normalize_answer(r"10\\text{ cm}"), normalize_answer(r"90^\\circ"), normalize_answer(r"\\$1{,}000.")
    ('10', '90', '1000')
    >>> normalize_answer("0.50") == normalize_answer(r"\\frac12") == normalize_answer("2/4")
    True
    """
    s = answer.strip().replace("\n", "")
    s = _SPACING.sub("", s)
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\u00b0", "")
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = s.replace("\u2212", "-").replace("{,}", "")
    s = _UNITS.sub("", s)
    s = _WRAPPERS.sub(r"\1", s)
    s = s.replace(" ", "").rstrip(".")
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    s = _SQRT_SHORT.sub(r"\\sqrt{\1}", s)
    s = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", s)
    s = _FRAC_HALF_SHORT.sub(r"\\frac{\1}{\2}", s)
    return _canonical_number(s) or s


def _canonical_number(s: str) -> str | None:
    """'0.50', '\\frac{1}{2}', '1/2' -> '1/2'; anything that is not a plain number -> None."""
    m = _SIMPLE_NUMBER.fullmatch(s)
    if m is None:
        return None
    try:
        if m["a"] is not None:
            value = Fraction(m["a"])
        else:
            num, den = (m["n"], m["d"]) if m["n"] is not None else (m["p"], m["q"])
            value = Fraction(num) / Fraction(den)
    except (ValueError, ZeroDivisionError):
        return None
    return str(-value if m["sign"] else value)


# ---- math-verify --------------------------------------------------------------------------------
class _NoTimeoutWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


@lru_cache(maxsize=1)
def _math_verify() -> Any:
    """(parse, verify, extraction config), or None when math-verify is not installed."""
    try:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
    except ImportError:
        logger.warning("math-verify is not installed (pip install 'hacrl[math]'); the math reward "
                       "falls back to normalised string match")
        return None
    for name in ("math_verify.parser", "math_verify.grader"):  # we disable its alarm on purpose
        logging.getLogger(name).addFilter(_NoTimeoutWarning())
    config = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())
    return parse, verify, config


def _prepare_for_math_verify(answer: str) -> str:
    s = answer.strip().replace("\u2212", "-").replace("\u00b0", "^{\\circ}")
    s = s.replace("\\varnothing", "\\emptyset")
    return s.rstrip(" .")


@lru_cache(maxsize=4096)
def _parse_boxed(answer: str) -> tuple[Any, ...]:
    mv = _math_verify()
    if mv is None:
        return ()
    parse, _, config = mv
    return tuple(parse("\\boxed{" + answer + "}", extraction_config=config, parsing_timeout=None))


def math_verify_equal(gold: str, pred: str) -> bool:
    """math-verify's verdict on bare answers; False when it is missing, fails or inputs are too long.

    >>> math_verify_equal(r"2\\sqrt{2}", r"\\sqrt{8}"), math_verify_equal("(1,2)", "(2,1)")
    (True, False)
    """
    mv = _math_verify()
    if mv is None or len(gold) > MAX_VERIFY_CHARS or len(pred) > MAX_VERIFY_CHARS:
        return False
    try:
        gold_parsed = _parse_boxed(_prepare_for_math_verify(gold))
        pred_parsed = _parse_boxed(_prepare_for_math_verify(pred)) if gold_parsed else ()
        if not pred_parsed:
            return False
        return bool(mv[1](list(gold_parsed), list(pred_parsed), timeout_seconds=None))
    except Exception as exc:  # noqa: BLE001 - math-verify catches most errors itself; be safe about the rest
        logger.debug("math-verify failed on %r vs %r: %s", gold[:80], pred[:80], exc)
        return False


def warn_if_no_math_verify(task_cfg: Any, benchmarks: bool = False) -> bool:
    """One warning line, at a run's start, when the ``math`` reward will grade (``task.reward: math``, a
    dataset task's default, or benchmark evaluation) but math-verify is not installed, so that it falls
    back to normalised string match (``\\frac{1}{2}`` vs ``0.5`` then scores 0). True if it warned."""
    import importlib.util

    rewards = task_cfg.reward if isinstance(task_cfg.reward, list) else [task_cfg.reward]
    uses_math = "math" in rewards or (task_cfg.kind == "dataset" and task_cfg.reward is None) or benchmarks
    if not uses_math or importlib.util.find_spec("math_verify") is not None:
        return False
    logger.warning("math-verify is not installed: the math reward grades by normalised string match only "
                   "(equivalent forms like 1/2 and 0.5 score 0); fix: pip install 'hacrl[math]'")
    return True


# ---- the reward ---------------------------------------------------------------------------------
@REWARDS.register("math")
def math_answer(completion: str, sample: dict[str, Any]) -> float | None:
    """1.0 if the last boxed answer equals the ground truth, 0.0 if not or if nothing is boxed.

    Returns None when the sample has no ground truth.

    >>> math_answer(r"Half of it: $\\boxed{\\dfrac{1}{2}}$.", {"answer": "0.5"})
    1.0
    >>> math_answer(r"$\\boxed{\\sqrt{8}}$", {"answer": r"2\\sqrt{2}"})
    1.0
    >>> math_answer("the answer is 0.5", {"answer": "0.5"})
    0.0
    """
    gold = gold_answer(sample)
    if gold is None:
        return None
    pred = last_boxed(completion)
    if pred is None or not pred.strip():
        return 0.0
    if normalize_answer(gold) == normalize_answer(pred) or math_verify_equal(gold, pred):
        return 1.0
    return 0.0


def _warmup() -> None:
    """Import math-verify and sympy once (called by scorer workers before they report ready)."""
    math_verify_equal("\\frac{1}{2}", "0.5")


math_answer.warmup = _warmup  # type: ignore[attr-defined]
