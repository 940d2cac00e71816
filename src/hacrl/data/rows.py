"""Reading rows from local data files, and fields from rows: the layer under datasets and benchmarks.

- :func:`iter_rows` yields the rows of a ``.jsonl``, ``.json`` (a list or ``{"data": [...]}``),
  ``.parquet`` file or a directory written by ``datasets.Dataset.save_to_disk`` /
  ``DatasetDict.save_to_disk`` (pick ``split``) as dicts, and a skip reason (a str) for each row that
  cannot be read; a missing path, an unknown format or an unparsable file is an
  :class:`~hacrl.errors.InputError`.
- :func:`get_field` reads a (dotted) field path; :func:`answer_text` turns a field value into a stripped
  string or raises :class:`SkipRow` with the reason to count.
- :class:`LoadResult` is what the loaders (:func:`hacrl.data.datasets.load_problems`,
  :func:`hacrl.data.benchmarks.read_benchmark`) return: the problems and the skip counts.

Only the standard library is imported here; ``datasets``/``pyarrow`` (extra ``hacrl[data]``) are
imported by the readers that need them, through :func:`require_extra`.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hacrl.errors import InputError
from hacrl.types import Problem

__all__ = ["MAX_LINE_BYTES", "MISSING", "LoadResult", "SkipRow", "answer_text", "get_field", "iter_rows",
           "require_extra"]

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 1 << 20  # a jsonl line longer than this (1 MiB) is skipped as "line_too_long"


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()  # what get_field returns for an absent (or null) field
_HF_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
_FORMATS = ".jsonl, .json, .parquet or a directory saved with datasets' save_to_disk"


class SkipRow(Exception):
    """Raised by a row parser: skip this row and count it under ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class LoadResult:
    """The usable problems of a file and, per reason, how many rows were skipped."""

    problems: list[Problem]
    skipped: dict[str, int] = field(default_factory=dict)


# ---- reading rows -----------------------------------------------------------------------------------
def require_extra(module: str, extra: str, why: str) -> Any:
    """Import ``module``, or raise an InputError naming the extra to install (for ``why``)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise InputError(f"{why} needs the optional package {module.split('.')[0]!r} ({exc}); "
                         f"fix: pip install 'hacrl[{extra}]'") from None


def iter_rows(path: str | Path, *, split: str | None = None,
              max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[dict[str, Any] | str]:
    """Yield each row of a data file as a dict, or a skip reason (str) for a row that cannot be read.

    A missing path, an unknown format or a file that cannot be parsed at all is an InputError.
    """
    p = Path(path)
    if not p.exists():
        from hacrl.data.hub import is_hub_name, split_dataset_spec

        if is_hub_name(split_dataset_spec(str(path))[0]):  # org/name[@rev][:split] in the Hub cache
            from hacrl.data.hub import hub_dataset_rows

            yield from hub_dataset_rows(str(path), split)
            return
        raise InputError(f"data file not found: {p}; fix: check the path (relative paths start at "
                         f"{Path.cwd()}), or name a cached Hub dataset as org/name[:split]")
    try:
        if p.is_dir():
            yield from _hf_rows(p, split)
        elif p.name.endswith(".jsonl"):
            yield from _jsonl_rows(p, max_line_bytes)
        elif p.suffix == ".json":
            yield from _json_rows(p, max_line_bytes)
        elif p.suffix == ".parquet":
            yield from _parquet_rows(p)
        else:
            raise InputError(f"cannot read {p}: unknown format {p.suffix or '(no suffix)'!r}; "
                             f"give a {_FORMATS}")
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror or exc}; fix: check the path and its "
                         f"permissions") from None
    if split is not None and not p.is_dir():
        logger.warning("split=%r ignored: %s is a single file, not a saved DatasetDict", split, p)


def _jsonl_rows(path: Path, limit: int) -> Iterator[dict[str, Any] | str]:
    with path.open("rb") as f:
        first = True
        while raw := f.readline(limit + 2):  # +2 leaves room for "\r\n"
            too_long = len(raw.rstrip(b"\r\n")) > limit
            while not raw.endswith(b"\n"):  # cut at the limit (or the last line): read on to its end
                raw = f.readline(1 << 20)
                too_long = too_long or bool(raw)
                if not raw:
                    break
            if too_long:
                yield "line_too_long"
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                yield "not_utf8"
                continue
            if first:
                line, first = line.lstrip("\ufeff"), False
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                yield "bad_json"
                continue
            yield row if isinstance(row, dict) else "not_an_object"


def _json_rows(path: Path, limit: int) -> Iterator[dict[str, Any] | str]:
    try:
        data = json.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise InputError(f"cannot read {path}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                         f"fix: re-encode the file as UTF-8") from None
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # JSON Lines named .json (datasets' to_json writes these)
            yield from _jsonl_rows(path, limit)
            return
        raise InputError(f"cannot parse {path}: {exc.msg} at line {exc.lineno} column {exc.colno}; "
                         f"fix: a .json file must hold one JSON list (or {{\"data\": [...]}}); "
                         f"use .jsonl for one object per line") from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        keys = ", ".join(map(str, list(data)[:8])) if isinstance(data, dict) else type(data).__name__
        raise InputError(f"cannot read {path}: expected a JSON list of rows or {{\"data\": [...]}}, got "
                         f"{'an object with keys ' + keys if isinstance(data, dict) else keys}")
    for row in data:
        yield row if isinstance(row, dict) else "not_an_object"


def _parquet_rows(path: Path) -> Iterator[dict[str, Any] | str]:
    pq = require_extra("pyarrow.parquet", "data", f"reading {path}")
    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=4096)
        for batch in batches:
            yield from batch.to_pylist()
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise InputError(f"cannot read {path} as parquet: {exc}") from None


def _hf_rows(path: Path, split: str | None) -> Iterator[dict[str, Any] | str]:
    if not any((path / m).exists() for m in _HF_MARKERS):
        found = sorted(q.name for q in path.iterdir())[:10]
        raise InputError(f"{path} is a directory but not one saved with datasets' save_to_disk (no "
                         f"{', '.join(_HF_MARKERS)}); fix: point at a data file inside it (found: "
                         f"{', '.join(found) or 'nothing'})")
    hf = require_extra("datasets", "data", f"reading {path}")
    obj = hf.load_from_disk(str(path))
    if isinstance(obj, hf.DatasetDict):
        splits = list(obj)
        if split is None and len(splits) == 1:
            split = splits[0]
        if split not in obj:
            raise InputError(f"{path} holds splits {', '.join(splits)}; "
                             f"{'no split ' + repr(split) if split else 'pick one'}: fix: set split")
        obj = obj[split]
    yield from obj


# ---- fields -----------------------------------------------------------------------------------------
def get_field(row: dict[str, Any], path: str) -> Any:
    """The value at a (dotted) field path, or MISSING; None counts as missing. Digits index lists.

    >>> get_field({"reward_model": {"ground_truth": "7"}}, "reward_model.ground_truth")
    '7'
    >>> get_field({"a": [{"b": 1}]}, "a.0.b"), get_field({"a": None}, "a")
    (1, MISSING)
    """
    value: Any = row.get(path, MISSING)
    if value is MISSING:
        value = row
        for part in path.split("."):
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                return MISSING
    return MISSING if value is None else value


def answer_text(value: Any, what: str = "answer") -> str:
    """A stripped, non-empty string for a field value; numbers as ``27`` or ``0.5`` (never ``27.0``).

    A one-item list is unwrapped. Raises SkipRow(missing_/empty_/bad_type_{what}).

    >>> answer_text(27.0), answer_text(" x "), answer_text(["5"]), answer_text(0.25)
    ('27', 'x', '5', '0.25')
    """
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if value is MISSING or value is None:
        raise SkipRow(f"missing_{what}")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SkipRow(f"bad_type_{what}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SkipRow(f"bad_type_{what}")
        value = str(int(value)) if value.is_integer() else repr(value)
    text = str(value).strip()
    if not text:
        raise SkipRow(f"empty_{what}")
    return text
