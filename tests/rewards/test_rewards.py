"""The exact and numeric rewards, the registry, spec loading, and that every reward carries a doctest (the
doctests themselves run with the rest of src/hacrl's: --doctest-modules in pyproject.toml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hacrl.rewards import REWARDS, get_reward, math_reward, spec_of
from hacrl.rewards.basic import exact, last_number, numeric

HERE = Path(__file__).resolve().parent
BAD_FILE = HERE / "bad_rewards.py"


# ---- every reward documented ----------------------------------------------------------------------
@pytest.mark.parametrize("name", REWARDS.names())
def test_every_registered_reward_has_a_doctest(name: str) -> None:
    fn = REWARDS.get(name)
    assert fn.__doc__ and ">>>" in fn.__doc__
    assert fn("", {}) is None  # no ground truth: unscorable


# ---- exact ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("completion", "answer", "expected"), [
    ("Paris", "Paris", 1.0), ("  Paris\n", " Paris ", 1.0), ("paris", "Paris", 0.0),
    ("Paris.", "Paris", 0.0), ("", "Paris", 0.0), ("42", 42, 1.0), ("x", None, None), ("x", "  ", None),
])
def test_exact(completion: str, answer: object, expected: float | None) -> None:
    assert exact(completion, {"answer": answer}) == expected


# ---- numeric --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("completion", "answer", "expected"), [
    ("Janet makes 9 * 2 = $18 every day.", "Janet sells 16 - 3 - 4 = 9 eggs.\n#### 18", 1.0),
    ("The total is 1,234.", "#### 1234", 1.0),
    ("The total is $1,234.00", "1,234", 1.0),
    ("It drops to -5 degrees.", "#### -5", 1.0),
    ("10 - 5", "#### -5", 0.0),  # subtraction, not a negative number
    ("So x = 0.5", "#### .5", 1.0),
    ("The answer is 0.1 + 0.2 = 0.30000000000000004", "0.3", 1.0),  # float tolerance
    ("I think 17. No wait, 18.", "#### 18", 1.0),  # last number wins
    ("I think 18. No wait, 17.", "#### 18", 0.0),
    ("About 1000000001", "#### 1000000000", 0.0),  # the tolerance is not relative to 1e9
    ("No idea.", "#### 18", 0.0),
    ("", "#### 18", 0.0),
    ("18", "eighteen", None),  # gold has no number: unscorable
    ("18", None, None),
    ("\u22127 is it", "-7", 1.0),  # unicode minus
    ("The answer: 1,000,000", "1000000", 1.0),
    ("values 1,2,3", "3", 1.0),
])
def test_numeric(completion: str, answer: object, expected: float | None) -> None:
    assert numeric(completion, {"answer": answer}) == expected


@pytest.mark.parametrize(("text", "value"), [
    ("$1,234.50", 1234.5), ("3-5", 5.0), ("(2)-3", 3.0), ("is -3", -3.0), ("CO2", None), ("1,2345", 2345.0),
    ("x" * 100_000 + " 7", 7.0),
])
def test_last_number(text: str, value: float | None) -> None:
    assert last_number(text) == value


# ---- registry and specs ---------------------------------------------------------------------------
def test_registry_names() -> None:
    assert {"exact", "numeric", "math"} <= set(REWARDS.names())
    assert get_reward("math") is math_reward.math_answer


def test_unknown_name_lists_valid_names_and_the_spec_forms() -> None:
    with pytest.raises(ValueError, match=r"unknown reward 'exakt'.*exact, math, numeric.*module:function"):
        get_reward("exakt")


@pytest.mark.parametrize("bad", ["", "   ", None, 3])
def test_empty_or_non_string_spec(bad: object) -> None:
    with pytest.raises(ValueError, match="non-empty string"):
        get_reward(bad)  # type: ignore[arg-type]


def test_module_function_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    assert get_reward("hacrl.rewards.basic:numeric") is numeric
    monkeypatch.syspath_prepend(str(HERE))
    fn = get_reward("bad_rewards:mixed")
    assert fn("a", {"answer": "a"}) == 1.0


def test_file_path_spec() -> None:
    fn = get_reward(f"{BAD_FILE}:mixed")
    assert fn("a", {"answer": "a"}) == 1.0
    assert get_reward(f"{BAD_FILE}:mixed") is fn  # loaded once
    assert spec_of(fn) == f"{BAD_FILE}:mixed"


def test_missing_module() -> None:
    with pytest.raises(ValueError, match=r"reward 'no_such_mod_xyz:f'.*cannot import module 'no_such_mod_xyz'"
                                         r".*PYTHONPATH.*path/to/file\.py:function"):
        get_reward("no_such_mod_xyz:f")


def test_missing_file() -> None:
    with pytest.raises(ValueError, match=r"reward 'nowhere/r\.py:f'.*file .* not found"):
        get_reward("nowhere/r.py:f")


def test_missing_function_lists_callables() -> None:
    with pytest.raises(ValueError, match=r"has no attribute 'nope'.*callables there:.*mixed"):
        get_reward(f"{BAD_FILE}:nope")
    with pytest.raises(ValueError, match=r"has no attribute 'nope'"):
        get_reward("hacrl.rewards.basic:nope")


def test_not_callable() -> None:
    with pytest.raises(ValueError, match=r"'NOT_CALLABLE' is a int, not callable"):
        get_reward(f"{BAD_FILE}:NOT_CALLABLE")


def test_module_that_fails_to_import(tmp_path: Path) -> None:
    broken = tmp_path / "broken_reward.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ValueError, match=r"executing .*broken_reward\.py.* failed with RuntimeError: boom"):
        get_reward(f"{broken}:f")


def test_spec_of() -> None:
    assert spec_of(numeric) == "numeric"
    assert spec_of(last_number) == "hacrl.rewards.basic:last_number"
    assert spec_of(lambda c, s: 1.0) is None

    def local(c: str, s: dict) -> float:
        return 1.0

    assert spec_of(local) is None
