"""Readers for local copies of the paper's seven evaluation benchmarks.

``load_benchmark(name, path)`` reads the common local layouts of each benchmark (jsonl, json, parquet,
a ``save_to_disk`` directory, or a directory of such files, e.g. the Hendrycks MATH tarball's one JSON
file per problem) and returns Problems whose ``prompt`` is the bare question, whose ``answer`` is the
string the ``math`` reward should check, and whose ``meta["benchmark"]`` is the canonical name.

| name | fields read | answer |
|---|---|---|
| ``math500`` | problem, answer (solution), subject, level, unique_id | ``answer`` |
| ``math`` | problem, solution (answer), type, level | ``answer``, else the solution's last ``\\boxed{}`` |
| ``gsm8k`` | question, answer ``"... #### 1,234"`` | ``1234`` (commas and ``$`` dropped) |
| ``aime2025`` | problem or question, answer, id/year/url | integer string (``"070"`` → ``"70"``) |
| ``amc2023`` | question or problem, answer (``27.0``) | ``"27"`` |
| ``minerva`` | problem/solution or question/answer | ``answer``, else the solution's last ``\\boxed{}`` |
| ``olympiadbench`` | question, final_answer (list), unit | the items without ``$``, joined by ``", "`` |

Rows that cannot give a question and an answer are skipped and counted (as in
:func:`hacrl.data.datasets.load_problems`); OlympiadBench rows with images are skipped as ``needs_image``.
Names are matched loosely (``MATH-500``, ``aime_2025``, ``amc23`` work).

Run: ``python -c "from hacrl.data.benchmarks import *; print(load_benchmark('gsm8k', 'test.jsonl')[0])"``
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hacrl.data.rows import MISSING, LoadResult, SkipRow, answer_text, get_field, iter_rows
from hacrl.errors import InputError
from hacrl.registry import Registry
from hacrl.types import Problem

__all__ = ["BENCHMARKS", "Benchmark", "canonical_name", "load_benchmark", "read_benchmark"]

logger = logging.getLogger(__name__)

# A parser maps one row to (question, answer, id or None, meta) or raises SkipRow.
Parsed = tuple[str, str, Any, dict[str, Any]]


@dataclass(frozen=True)
class Benchmark:
    name: str
    parse: Callable[[dict[str, Any]], Parsed]
    fields: str  # what the reader looks for, for error messages


BENCHMARKS: Registry[Benchmark] = Registry("benchmark")
_ALIASES = {"aime25": "aime2025", "amc23": "amc2023", "minervamath": "minerva", "olympiad": "olympiadbench",
            "hendrycksmath": "math", "competitionmath": "math"}
_DATA_SUFFIXES = (".jsonl", ".json", ".parquet")


def canonical_name(name: str) -> str:
    """The registry name for a loosely written benchmark name.

    >>> canonical_name("MATH-500"), canonical_name("aime_2025"), canonical_name("AMC23")
    ('math500', 'aime2025', 'amc2023')
    """
    key = re.sub(r"[\s_\-]", "", name.lower())
    return _ALIASES.get(key, key)


def _benchmark(name: str, fields: str) -> Callable[[Callable[[dict[str, Any]], Parsed]], Any]:
    def deco(fn: Callable[[dict[str, Any]], Parsed]) -> Callable[[dict[str, Any]], Parsed]:
        BENCHMARKS.add(name, Benchmark(name, fn, fields))
        return fn

    return deco


# ---- field helpers ----------------------------------------------------------------------------------
def _first(row: dict[str, Any], *names: str) -> Any:
    for name in names:
        value = get_field(row, name)
        if value is not MISSING:
            return value
    return MISSING


def _answer_or_boxed(row: dict[str, Any]) -> str:
    """The ``answer`` field, else the last ``\\boxed{}`` of ``solution``."""
    value = get_field(row, "answer")
    if value is not MISSING:
        return answer_text(value)
    solution = get_field(row, "solution")
    if not isinstance(solution, str):
        raise SkipRow("missing_answer")
    from hacrl.rewards.math_reward import last_boxed

    boxed = last_boxed(solution)
    if boxed is None or not boxed.strip():
        raise SkipRow("no_boxed_answer")
    return boxed.strip()


def _integer_like(text: str) -> str:
    """``"070"`` → ``"70"``, ``"27.0"`` → ``"27"``; anything else unchanged."""
    if re.fullmatch(r"[+-]?\d+(\.0*)?", text):
        return str(int(float(text))) if len(text) < 16 else text
    return text


def _level(value: Any) -> Any:
    match = re.fullmatch(r"(?:Level\s*)?(\d+)", str(value).strip()) if value is not MISSING else None
    return int(match.group(1)) if match else (None if value is MISSING else value)


def _meta(row: dict[str, Any], **names: tuple[str, ...]) -> dict[str, Any]:
    out = {}
    for key, candidates in names.items():
        value = _first(row, *candidates)
        if value is not MISSING:
            out[key] = value
    return out


# ---- the seven readers ------------------------------------------------------------------------------
@_benchmark("math500", "problem, answer (or solution with \\boxed{}), subject, level, unique_id")
def _math500(row: dict[str, Any]) -> Parsed:
    question = answer_text(_first(row, "problem", "question"), "question")
    meta = _meta(row, subject=("subject", "type"))
    if (level := _level(_first(row, "level"))) is not None:
        meta["level"] = level
    return question, _answer_or_boxed(row), _first(row, "unique_id", "id"), meta


@_benchmark("math", "problem, solution with \\boxed{} (or answer), type, level")
def _math(row: dict[str, Any]) -> Parsed:
    return _math500(row)


@_benchmark("gsm8k", "question, answer ending in '#### <number>'")
def _gsm8k(row: dict[str, Any]) -> Parsed:
    question = answer_text(_first(row, "question", "problem"), "question")
    raw = answer_text(get_field(row, "answer"))
    final = raw.rsplit("####", 1)[1] if "####" in raw else raw
    final = final.replace(",", "").replace("$", "").strip()
    if not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)", final):
        raise SkipRow("no_final_answer")
    return question, _integer_like(final), _first(row, "id", "idx"), {}


@_benchmark("aime2025", "problem or question, answer (integer), optional id/year/url")
def _aime2025(row: dict[str, Any]) -> Parsed:
    question = answer_text(_first(row, "problem", "question"), "question")
    answer = _integer_like(answer_text(get_field(row, "answer")))
    return question, answer, _first(row, "id", "problem_idx", "idx"), _meta(row, year=("year",), url=("url",))


@_benchmark("amc2023", "question or problem, answer (a number, e.g. 27.0), optional id/url")
def _amc2023(row: dict[str, Any]) -> Parsed:
    question = answer_text(_first(row, "question", "problem"), "question")
    answer = _integer_like(answer_text(get_field(row, "answer")))
    return question, answer, _first(row, "id", "idx"), _meta(row, url=("url",))


@_benchmark("minerva", "problem and solution with \\boxed{}, or question and answer")
def _minerva(row: dict[str, Any]) -> Parsed:
    question = answer_text(_first(row, "problem", "question"), "question")
    return question, _answer_or_boxed(row), _first(row, "idx", "id"), _meta(row, subject=("type", "subject"))


def _strip_dollars(text: str) -> str:
    text = text.strip()
    while len(text) >= 2 and text.startswith("$") and text.endswith("$"):
        text = text[1:-1].strip()
    return text


@_benchmark("olympiadbench", "question, final_answer (list of strings), unit, is_multiple_answer")
def _olympiadbench(row: dict[str, Any]) -> Parsed:
    question = answer_text(_first(row, "question", "problem"), "question")
    has_image = any(row.get(f"image_{i}") for i in range(1, 10))
    if has_image or "multimodal" in str(row.get("modality", "")).lower():
        raise SkipRow("needs_image")
    value = _first(row, "final_answer", "answer")
    items = value if isinstance(value, list) else [value]
    parts = [_strip_dollars(answer_text(item)) for item in items] if items else []
    if not parts or not all(parts):
        raise SkipRow("empty_answer")
    meta = _meta(row, unit=("unit",), answer_type=("answer_type",),
                 is_multiple_answer=("is_multiple_answer",), subject=("subject",), subfield=("subfield",))
    return question, ", ".join(parts), _first(row, "id"), meta


# ---- reading ----------------------------------------------------------------------------------------
def _dir_rows(path: Path, split: str | None) -> Iterator[dict[str, Any] | str]:
    """Rows of every data file under a plain directory; a .json object is one row (id = its path)."""
    files = sorted(q for q in path.rglob("*") if q.is_file() and q.name.endswith(_DATA_SUFFIXES))
    if split is not None:
        files = [q for q in files if split in q.relative_to(path).as_posix()]
    else:
        names = {q.relative_to(path).as_posix() for q in files}
        if any("train" in n for n in names) and any("test" in n for n in names):
            raise InputError(f"{path} holds both train and test files; fix: set split (e.g. 'test') or "
                             f"point at the test file")
    if not files:
        raise InputError(f"no {'/'.join(_DATA_SUFFIXES)} files under {path}"
                         f"{f' matching split {split!r}' if split else ''}; fix: check the path")
    for file in files:
        if file.suffix == ".json":
            try:
                data = json.loads(file.read_bytes().decode("utf-8-sig"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                yield "bad_json"
                continue
            if isinstance(data, dict) and not isinstance(data.get("data"), list):
                yield {"unique_id": file.relative_to(path).as_posix(), **data}
                continue
        yield from iter_rows(file)


def read_benchmark(name: str, path: str | Path, *, split: str | None = None) -> LoadResult:
    """Read a benchmark into a LoadResult (problems and skip counts); see :func:`load_benchmark`."""
    key = canonical_name(name)
    if key not in BENCHMARKS:
        raise InputError(f"unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS.names())}")
    bench, p = BENCHMARKS.get(key), Path(path)
    plain_dir = p.is_dir() and not any((p / m).exists() for m in ("dataset_info.json", "state.json",
                                                                   "dataset_dict.json"))
    rows = _dir_rows(p, split) if plain_dir else iter_rows(p, split=split)
    skipped: Counter[str] = Counter()
    problems: list[Problem] = []
    seen: set[str] = set()
    for index, row in enumerate(rows):
        try:
            if isinstance(row, str):
                raise SkipRow(row)
            question, answer, raw_id, meta = bench.parse(row)
            pid = f"{key}/{index if raw_id is MISSING else raw_id}"
            if pid in seen:
                raise SkipRow("duplicate_id")
        except SkipRow as skip:
            skipped[skip.reason] += 1
            continue
        seen.add(pid)
        problems.append(Problem(id=pid, prompt=question, answer=answer, meta={**meta, "benchmark": key}))
    counts = dict(sorted(skipped.items()))
    summary = ", ".join(f"{k}={v}" for k, v in counts.items())
    if not problems:
        raise InputError(f"no usable {key} rows in {p} (looked for {bench.fields}; skipped: "
                         f"{summary or 'the file has no rows'}); fix: check that the path is a {key} file")
    if counts:
        logger.warning("%s %s: skipped %d rows (%s)", key, p, sum(counts.values()), summary)
    return LoadResult(problems, counts)


def load_benchmark(name: str, path: str | Path, *, split: str | None = None) -> list[Problem]:
    """The problems of benchmark ``name`` (in :data:`BENCHMARKS`, loosely matched) read from ``path``."""
    return read_benchmark(name, path, split=split).problems


def benchmark_prompts(name: str, path: str | Path, *, n: int | None = None,
                      template: str | None = None) -> list[Problem]:
    """Benchmark problems ready to ask: the first ``n`` with the question put into ``template``
    (default: the paper's "... output the final answer within \\boxed{}."), graded by the math reward;
    ``meta["question"]`` keeps the bare question (for the run-start fine-tuning overlap check)."""
    from dataclasses import replace

    from hacrl.data.datasets import PAPER_TEMPLATE

    template = template or PAPER_TEMPLATE
    problems = load_benchmark(name, path)[:n]
    return [replace(p, prompt=template.replace("{question}", p.prompt), meta={**p.meta, "question": p.prompt})
            for p in problems]
