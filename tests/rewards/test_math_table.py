"""The math reward against a table of (gold, completion, verdict) rows a careful grader would give.

Each row is graded by ``hacrl.rewards.math_reward.math_answer`` (normalised string match OR
math-verify). Rows where math-verify alone disagreed and the reward fixes it (by extraction or
normalisation) are marked ``# fixed:``; rows the reward still gets wrong are strict xfails with the
reason, so a fix shows up as an XPASS.
"""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from hacrl.rewards import math_reward
from hacrl.rewards.math_reward import last_boxed, math_answer, normalize_answer

ROWS = [
    # id, gold (None: no "answer" key), completion, expected reward
    # fractions, \frac vs /, \dfrac
    ("frac", r"\frac{1}{2}", r"so $\boxed{\frac{1}{2}}$", 1.0),
    ("frac-vs-slash", r"\frac{1}{2}", r"\boxed{1/2}", 1.0),
    ("slash-vs-frac", "1/2", r"\boxed{\frac{1}{2}}", 1.0),
    ("dfrac", r"\frac{3}{4}", r"\boxed{\dfrac{3}{4}}", 1.0),
    ("dfrac-gold-tfrac-short", r"\dfrac{3}{4}", r"\boxed{\tfrac34}", 1.0),
    ("unreduced-frac", r"\frac{1}{2}", r"\boxed{\frac{2}{4}}", 1.0),
    ("mixed-number", r"\frac{7}{3}", r"\boxed{2\frac{1}{3}}", 1.0),
    ("wrong-frac", r"\frac{1}{3}", r"\boxed{\frac{1}{4}}", 0.0),
    ("rounded-decimal-for-frac", r"\frac{1}{3}", r"\boxed{0.33}", 0.0),
    ("neg-frac-forms", r"-\frac{1}{2}", r"\boxed{\frac{-1}{2}}", 1.0),
    ("neg-frac-sign-lost", r"-\frac{1}{2}", r"\boxed{\frac{1}{2}}", 0.0),
    # roots and pi
    ("sqrt-simplify", r"2\sqrt{2}", r"\boxed{\sqrt{8}}", 1.0),
    ("sqrt-short", r"\frac{\sqrt{3}}{2}", r"\boxed{\frac{\sqrt3}{2}}", 1.0),
    ("sqrt-rationalised", r"\frac{\sqrt{2}}{2}", r"\boxed{\frac{1}{\sqrt{2}}}", 1.0),
    ("sqrt-decimal", r"\sqrt{2}", r"\boxed{1.414}", 0.0),
    ("sqrt-wrong", r"3\sqrt{2}", r"\boxed{2\sqrt{3}}", 0.0),
    ("pi", r"2\pi", r"\boxed{2\pi}", 1.0),
    ("pi-decimal", r"\pi", r"\boxed{3.14}", 0.0),
    ("pi-over-2", r"\frac{\pi}{2}", r"\boxed{\pi/2}", 1.0),
    ("pi-extra-symbol", r"\pi", r"\boxed{\pi r}", 0.0),
    # intervals, sets, tuples
    ("interval", "(1,2]", r"\boxed{(1, 2]}", 1.0),
    ("interval-closed-vs-open", "(1,2)", r"\boxed{[1,2]}", 0.0),
    ("interval-infinity", r"(-\infty, 3)", r"\boxed{(-\infty,3)}", 1.0),
    ("interval-membership", "[1,2]", r"\boxed{x \in [1,2]}", 1.0),
    ("interval-union", r"(-\infty,0)\cup(1,\infty)", r"\boxed{(-\infty, 0) \cup (1, \infty)}", 1.0),
    ("set-order", r"\{1,2,3\}", r"\boxed{\{3,2,1\}}", 1.0),
    ("solution-list-order", "1, 2", r"\boxed{2, 1}", 1.0),
    ("set-wrong", r"\{1,2\}", r"\boxed{\{1,3\}}", 0.0),
    # fixed: math-verify reads \varnothing as a symbol; mapped to \emptyset first
    ("empty-set-symbols", r"\emptyset", r"\boxed{\varnothing}", 1.0),
    ("tuple-left-right", "(3,4)", r"\boxed{\left( 3, 4 \right)}", 1.0),
    ("tuple-order", "(3,4)", r"\boxed{(4,3)}", 0.0),
    # degrees, percentages, units, money
    ("degrees-gold", r"90^\circ", r"\boxed{90}", 1.0),
    ("degrees-pred", "30", r"\boxed{30^{\circ}}", 1.0),
    # fixed: math-verify leaves "30°" unparsed; both sides map ° to ^{\circ}
    ("degrees-unicode", r"30^\circ", r"\boxed{30°}", 1.0),
    ("degrees-wrong", "45", r"\boxed{60^\circ}", 0.0),
    ("percent-gold", r"50\%", r"\boxed{50}", 1.0),
    ("percent-pred", "25", r"\boxed{25\%}", 1.0),
    ("percent-wrong", r"10\%", r"\boxed{20\%}", 0.0),
    ("units-gold", r"10\text{ cm}", r"\boxed{10}", 1.0),
    ("units-pred", "10", r"\boxed{10 \text{ cm}}", 1.0),
    ("units-long", "6", r"\boxed{6\text{ square units}}", 1.0),
    ("units-mbox", "5", r"\boxed{5\mbox{ cm}}", 1.0),
    ("dollar-gold", r"\$18", r"\boxed{18}", 1.0),
    ("dollar-pred-cents", "18", r"\boxed{\$18.00}", 1.0),
    # text answers
    ("text", r"\text{Monday}", r"\boxed{\text{Monday}}", 1.0),
    ("text-bare", r"\text{Monday}", r"\boxed{Monday}", 1.0),
    ("text-wrong", r"\text{Monday}", r"\boxed{\text{Tuesday}}", 0.0),
    ("choice-paren", r"\text{(C)}", r"\boxed{C}", 1.0),
    ("choice-wrong", "A", r"\boxed{B}", 0.0),
    ("text-parity-wrong", r"\text{even}", r"\boxed{\text{odd}}", 0.0),
    # LaTeX noise
    ("noise-left-right", "(1,2)", r"\boxed{\left(1,2\right)}", 1.0),
    ("noise-negthinspace", "12", r"\boxed{\!12}", 1.0),
    # fixed: math-verify rejects "1\,000"; the normalised match drops \, and reads 1000
    ("noise-thinspace-thousands", "1000", r"\boxed{1\,000}", 1.0),
    ("noise-dollars-around", "5", r"The answer is $\boxed{5}$.", 1.0),
    ("noise-displaystyle", r"\frac{1}{2}", r"$$\boxed{\displaystyle \frac{1}{2}}$$", 1.0),
    # fixed: math-verify keeps "5." as an unparsed string; the trailing period is stripped
    ("noise-trailing-period", "5", r"\boxed{5.}", 1.0),
    # several boxes, fbox, nesting, space form
    ("last-box-wins", "6", r"First \boxed{5}, but correcting: \boxed{6}", 1.0),
    ("earlier-box-ignored", "5", r"First \boxed{5}, but correcting: \boxed{6}", 0.0),
    ("fbox-last", "4", r"\fbox{3} then \boxed{4}", 1.0),
    ("fbox-after-boxed", "3", r"\boxed{4} then \fbox{3}", 1.0),
    ("nested-braces", r"\frac{1}{\sqrt{2}}", r"\boxed{\frac{1}{\sqrt{2}}}", 1.0),
    ("nested-groups", "x^{2}+1", r"\boxed{{x^{2}}+{1}}", 1.0),
    ("nested-boxes", "5", r"\boxed{\boxed{5}}", 1.0),
    ("space-form", "5", r"so $\boxed 5$", 1.0),
    ("space-form-frac", r"\frac{1}{2}", r"\boxed \frac12", 1.0),
    # no box, empty, malformed, adversarial
    ("no-box", "5", "The answer is 5.", 0.0),
    ("empty-completion", "5", "", 0.0),
    ("empty-box", "5", r"\boxed{}", 0.0),
    ("unbalanced-box", "5", r"\boxed{5", 0.0),
    ("extra-closing-brace", "5", r"\boxed{5}}", 1.0),
    ("last-box-truncated", "5", r"\boxed{5} and \boxed{6", 0.0),
    ("escaped-brace-unbalanced", "5", r"\boxed{5\}", 0.0),
    ("not-a-box-command", "5", r"\boxeds{5}", 0.0),
    ("empty-last-box", "5", r"\boxed{5} \boxed{}", 0.0),
    ("long-prefix-100k", "5", "x" * 100_000 + r" \boxed{5}", 1.0),
    ("long-box-100k", "5", r"\boxed{" + "1+" * 50_000 + "1}", 0.0),
    ("unbalanced-prefix-50k", "5", "{" * 50_000 + r"\boxed{5}", 1.0),
    ("deeply-nested-boxes", "5", r"\boxed{" * 1000 + "5" + "}" * 1000, 1.0),
    ("garbage-box", "5", r"\boxed{)(][\frac{}{}^_}", 0.0),
    # negatives, decimals vs fractions, thousands separators
    ("negative", "-3", r"\boxed{-3}", 1.0),
    ("negative-sign-lost", "-3", r"\boxed{3}", 0.0),
    ("negative-parens", "-7", r"\boxed{-(7)}", 1.0),
    ("negative-unicode-minus", "-7", "\\boxed{\u22127}", 1.0),
    ("decimal-vs-frac", "0.5", r"\boxed{\frac{1}{2}}", 1.0),
    ("frac-vs-decimal", r"\frac{1}{2}", r"\boxed{0.5}", 1.0),
    ("decimal-vs-short-frac", "3.5", r"\boxed{\frac72}", 1.0),
    ("leading-dot-decimal", "0.25", r"\boxed{.25}", 1.0),
    ("trailing-zero-decimal", "2.5", r"\boxed{2.50}", 1.0),
    ("thousands-pred", "1234", r"\boxed{1,234}", 1.0),
    ("thousands-gold", "1,000,000", r"\boxed{1000000}", 1.0),
    ("thousands-braced-comma", "1000", r"\boxed{1{,}000}", 1.0),
    ("thousands-money", "1234.5", r"\boxed{\$1,234.50}", 1.0),
    # algebra, equations, matrices, complex; gold formats
    ("polynomial-expanded", "x^2+2x+1", r"\boxed{(x+1)^2}", 1.0),
    ("equation-pred", "3", r"\boxed{x=3}", 1.0),
    ("equation-gold", "y=2x+1", r"\boxed{2x+1}", 1.0),
    ("matrix", r"\begin{pmatrix}1\\2\end{pmatrix}", r"\boxed{\begin{pmatrix}1\\2\end{pmatrix}}", 1.0),
    ("complex", "3+4i", r"\boxed{3+4i}", 1.0),
    ("gold-boxed", r"$\boxed{7}$", r"\boxed{7}", 1.0),
    ("gold-gsm-hashes", "She sold 48/2 = 24 in May.\n#### 72", r"\boxed{72}", 1.0),
    ("gold-int-type", 42, r"\boxed{42}", 1.0),
    ("gold-missing", None, r"\boxed{5}", None),
    ("gold-empty", "", r"\boxed{5}", None),
]

KNOWN_LIMITATIONS = [
    pytest.param("infinity-word", r"\infty", r"\boxed{\text{infinity}}", 1.0, marks=pytest.mark.xfail(
        strict=True, reason="math-verify does not read number words; the normalised match compares strings")),
    pytest.param("digits-split-by-space", "11", r"\boxed{1 1}", 0.0, marks=pytest.mark.xfail(
        strict=True, reason="the Hendrycks normalisation drops all spaces (so '1 000' == 1000), "
                            "which also joins '1 1' into 11")),
]



def _sample(gold: object) -> dict:
    return {} if gold is None else {"answer": gold}


@pytest.mark.parametrize(("gold", "completion", "expected"),
                         [pytest.param(*row[1:], id=row[0]) for row in ROWS]
                         + [pytest.param(*p.values[1:], id=p.values[0], marks=p.marks)
                            for p in KNOWN_LIMITATIONS])
def test_math_table(gold: object, completion: str, expected: float | None) -> None:
    assert math_answer(completion, _sample(gold)) == expected


def test_table_is_large_and_ids_unique() -> None:
    ids = [row[0] for row in ROWS]
    assert len(ids) >= 60 and len(set(ids)) == len(ids)


def test_rows_the_normalised_fallback_alone_still_grades(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without math-verify the reward degrades to string match but still gets these rows right."""
    monkeypatch.setattr(math_reward, "_math_verify", lambda: None)
    easy = ["frac", "frac-vs-slash", "dfrac", "decimal-vs-frac", "frac-vs-decimal", "units-pred",
            "degrees-gold", "percent-gold", "noise-left-right", "last-box-wins", "no-box", "empty-box",
            "thousands-pred", "negative-sign-lost", "text-bare", "dollar-pred-cents", "long-box-100k"]
    table = {row[0]: row[1:] for row in ROWS}
    for rid in easy:
        gold, completion, expected = table[rid]
        assert math_answer(completion, _sample(gold)) == expected, rid
    # and what only math-verify can see is (safely) a miss
    assert math_answer(r"\boxed{\sqrt{8}}", {"answer": r"2\sqrt{2}"}) == 0.0


def test_math_verify_runs_off_the_main_thread() -> None:
    """math-verify's signal-based timeout must stay disabled, or this pair (which only math-verify can
    grade) would fail in a thread."""
    out: list[float | None] = []
    t = threading.Thread(target=lambda: out.append(math_answer(r"\boxed{\sqrt{8}}", {"answer": r"2\sqrt2"})))
    t.start()
    t.join(60)
    assert out == [1.0]


def test_importing_rewards_does_not_import_math_verify() -> None:
    code = "import sys, hacrl.rewards; assert 'math_verify' not in sys.modules and 'sympy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize(("text", "box"), [
    (r"a \boxed{1} b \boxed{2} c", "2"),
    (r"\boxed{\frac{a}{b}}", r"\frac{a}{b}"),
    (r"\boxed{\{1,2\}}", r"\{1,2\}"),
    (r"\boxed {7}", "7"),
    (r"$\boxed 7$.", "7"),
    (r"\fbox{3}", "3"),
    (r"\boxed{", None),
    (r"\boxed", None),
    ("", None),
])
def test_last_boxed(text: str, box: str | None) -> None:
    assert last_boxed(text) == box


@pytest.mark.parametrize(("a", "b"), [
    ("0.5", r"\frac{1}{2}"), (r"\frac12", "1/2"), ("-0.5", r"\frac{-1}{2}"), (r"-\frac{1}{2}", "-1/2"),
    (r"\$1{,}000", "1000"), ("1,000", "1000"), (r"\left[1,2\right)", "[1,2)"), (r"10\text{ cm}", "10"),
    (r"\text{Monday}", "Monday"), ("30°", r"30^{\circ}"),
])
def test_normalize_equal(a: str, b: str) -> None:
    assert normalize_answer(a) == normalize_answer(b)


@pytest.mark.parametrize(("a", "b"), [("1/2", "1/3"), ("(1,2)", "[1,2]"), ("-5", "5"), ("1,2", "12")])
def test_normalize_different(a: str, b: str) -> None:
    assert normalize_answer(a) != normalize_answer(b)


def test_last_boxed_is_linear_in_box_like_commands() -> None:
    # (#17) each "\boxedx" used to restart the search for "\fbox" from the end: quadratic, minutes here
    import time

    text = "\\boxedx" * 200_000
    start = time.perf_counter()
    assert last_boxed(text) is None
    assert last_boxed("\\boxed{7}" + text) == "7" and last_boxed(text + "\\fbox{8}") == "8"
    assert time.perf_counter() - start < 5.0
