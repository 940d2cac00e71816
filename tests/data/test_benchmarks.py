"""Benchmark readers: each layout gives the answer string the math reward checks, bad rows are counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hacrl.data.benchmarks import BENCHMARKS, canonical_name, load_benchmark, read_benchmark
from hacrl.errors import InputError

B = Path(__file__).parent / "fixtures" / "benchmarks"

# name, path, split, expected (id, answer) pairs, expected skip counts
CASES = [
    ("math500", "math500.jsonl", None,
     [("math500/test/precalculus/807.json", "\\left( 3, \\frac{\\pi}{2} \\right)"),
      ("math500/test/algebra/2036.json", "26000"), ("math500/test/prealgebra/1.json", "7")],
     {"empty_answer": 1}),
    ("math", "math", "test",
     [("math/test/algebra/1.json", "5"), ("math/test/algebra/25.json", "\\frac{3}{4}"),
      ("math/test/number_theory/3.json", "2")],
     {"no_boxed_answer": 1}),
    ("gsm8k", "gsm8k.jsonl", None, [("gsm8k/0", "72"), ("gsm8k/1", "14400"), ("gsm8k/3", "5")],
     {"no_final_answer": 1}),
    ("aime2025", "aime2025.jsonl", None, [("aime2025/0", "70"), ("aime2025/1", "588"), ("aime2025/3", "117")],
     {"missing_question": 1}),
    ("amc2023", "amc2023.jsonl", None, [("amc2023/0", "27"), ("amc2023/1", "36"), ("amc2023/3", "0.75")],
     {"bad_type_answer": 1}),
    ("minerva", "minerva.jsonl", None, [("minerva/0", "0.02"), ("minerva/2", "1024"), ("minerva/3", "0.51")],
     {"no_boxed_answer": 1}),
    ("olympiadbench", "olympiadbench.json", None,
     [("olympiadbench/1606", "-\\frac{1}{2}"), ("olympiadbench/1607", "3, 5"), ("olympiadbench/1608", "25")],
     {"empty_answer": 1, "needs_image": 1}),
]


def test_registry_has_the_seven_benchmarks():
    assert BENCHMARKS.names() == sorted(c[0] for c in CASES)
    names = ["MATH-500", "AIME_2025", "amc23", "Minerva_Math", "OlympiadBench"]
    expected = ["math500", "aime2025", "amc2023", "minerva", "olympiadbench"]
    assert [canonical_name(n) for n in names] == expected


@pytest.mark.parametrize(("name", "path", "split", "expected", "skipped"), CASES, ids=[c[0] for c in CASES])
def test_reader(name, path, split, expected, skipped):
    result = read_benchmark(name, B / path, split=split)
    assert [(p.id, p.answer) for p in result.problems] == expected
    assert result.skipped == skipped
    assert all(p.meta["benchmark"] == name and p.prompt.strip() and "\\boxed" not in p.prompt
               for p in result.problems)
    assert load_benchmark(name, B / path, split=split) == result.problems


def test_meta_fields():
    math500 = load_benchmark("MATH-500", B / "math500.jsonl")
    assert math500[0].meta == {"subject": "Precalculus", "level": 2, "benchmark": "math500"}
    math = load_benchmark("math", B / "math", split="test")
    assert math[0].meta["level"] == 1 and math[0].meta["subject"] == "Algebra"
    olympiad = load_benchmark("olympiadbench", B / "olympiadbench.json")
    assert olympiad[1].meta["is_multiple_answer"] is True and olympiad[2].meta["unit"] == "m/s"
    assert load_benchmark("aime25", B / "aime2025.jsonl")[0].meta["year"] == "2025"


def test_gold_answers_pass_the_math_reward():
    from hacrl.rewards import get_reward

    math = get_reward("math")
    for name, path, split, _, _ in CASES:
        for p in load_benchmark(name, B / path, split=split):
            completion = f"The answer is $\\boxed{{{p.answer}}}$."
            assert math(completion, {"answer": p.answer}) == 1.0, (name, p.answer)


def test_math_parquet_layout(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [json.loads(f.read_text()) for f in sorted((B / "math" / "test").rglob("*.json"))]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "test.parquet")
    result = read_benchmark("math", tmp_path / "test.parquet")
    assert [p.answer for p in result.problems] == ["5", "\\frac{3}{4}", "2"]
    assert [p.id for p in result.problems] == ["math/0", "math/1", "math/3"]


def test_errors(tmp_path):
    with pytest.raises(InputError, match="unknown benchmark 'gsm9k'; valid: aime2025, amc2023, gsm8k"):
        load_benchmark("gsm9k", B / "gsm8k.jsonl")
    with pytest.raises(InputError, match="holds both train and test files; fix: set split"):
        load_benchmark("math", B / "math")
    with pytest.raises(InputError, match="not found"):
        load_benchmark("gsm8k", tmp_path / "missing.jsonl")
    with pytest.raises(InputError) as info:
        load_benchmark("gsm8k", B / "olympiadbench.json")  # the wrong file: no 'answer' field
    msg = str(info.value)
    assert "no usable gsm8k rows" in msg and "olympiadbench.json" in msg and "missing_answer=5" in msg
    assert "looked for question, answer" in msg and "\n" not in msg
