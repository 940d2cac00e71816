"""A comparison's run records in one compressed columnar file, ``<comparison>/records.parquet``, read back line
for line (and file for file) as the files they came from.

``hacrl compare --compact DIR`` (:mod:`hacrl.report.compact`) moves every finished run's files here: the lines of
``metrics.jsonl``, ``eval.jsonl`` and ``eval_problems.jsonl``, and the whole texts of ``config.yaml``,
``provenance.jsonl`` and ``compare.json``; the run's directory keeps at most a samples excerpt. Readers go through
:func:`run_text` and :func:`hacrl.run.sinks.read_jsonl`, which read a run's file where it exists and the records
file where the run's ``compare.json`` (the file, or where that is gone, its copy here) says it went, so every
reader sees the same records in either layout.

The file is Parquet (zstd), one row per line of the line files and one row per whole-text file:

| column | type | holds |
|---|---|---|
| ``algo`` | string | the run's directory under ``runs/`` (``hacpo``, ``hacpo@delta=0.6``) |
| ``seed`` | int64 | its ``seed-<s>`` |
| ``source`` | string | the file: ``metrics``, ``eval`` or ``eval_problems`` (lines), or a whole text's file name |
| ``line`` | int64 | the line's index in that file (0-based; 0 for a whole text) |
| ``keys`` | string | the JSON list of the line's keys in their order (null for a line that is no JSON object) |
| ``raw`` | string | the text of a line that is no JSON object (a line cut short by a kill), or a whole text |
| ``<source>:<key>`` | per key | the value of ``key`` in the lines of ``source``, one column per key |

A value column's type is the one every value of that key has: int64, float64, bool, string, or a list (of
lists) of one of these (``eval_problems:ids``, ``eval_problems:reward``, ``eval_problems:sampled``); a key whose
values mix types is a string column of JSON texts, marked ``encoding: json`` in its field metadata. A key
absent from a line is not in its ``keys``; a JSON null is a null that is. So each line reads back as the same
object: its keys in order, 1 and 1.0 and True kept apart, NaN kept (only the bytes of the line are not kept:
spacing and line endings); a whole text reads back byte for byte. pyarrow (``hacrl[report]``) is imported only
here, when such a file is read or written. Format 1 (before whole texts) is read as well.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hacrl.errors import InputError

RECORDS_FILE = "records.parquet"
SOURCES = ("metrics", "eval", "eval_problems")  # each is <source>.jsonl in a run directory, kept line by line
RUN_RECORD = "compare.json"
TEXTS = ("config.yaml", "provenance.jsonl", RUN_RECORD)  # kept whole, under their file names
COMPACTED = "compacted"  # compare.json's key: the files of the run that moved into RECORDS_FILE
META_KEY = b"hacrl.records"
FORMAT_VERSION = 2
READABLE = (1, 2)  # 1: the line files only
BASE_COLUMNS = ("algo", "seed", "source", "line", "keys", "raw")
INSTALL = "pip install 'hacrl[report]'"

Line = dict[str, Any] | str  # a JSON object, or the text of a line that is none
RunKey = tuple[str, int]  # (algo, seed)


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError:
        raise InputError(f"reading or writing {RECORDS_FILE} needs pyarrow: {INSTALL}") from None
    return pa, pq


# ---- one JSONL file as lines ------------------------------------------------------------------------------

def parse_lines(text: str) -> list[Line]:
    """Each line of a JSONL text as the object it holds, or as its text where it holds no JSON object.

    >>> parse_lines('{"step": 0, "a": 1.0}\\n{"step": 1, "a"\\n[1]')
    [{'step': 0, 'a': 1.0}, '{"step": 1, "a"', '[1]']
    """
    out: list[Line] = []
    for line in text.splitlines():  # read_jsonl's split
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            rec = None
        out.append(rec if isinstance(rec, dict) else line)
    return out


def read_lines(path: Path) -> list[Line]:
    """A JSONL file's lines (:func:`parse_lines`); empty when there is no file."""
    return parse_lines(path.read_text(encoding="utf-8")) if path.is_file() else []


def same_lines(a: list[Line], b: list[Line]) -> bool:
    """Whether two files' lines are the same: every object with its keys in order and each value of the same
    type (1 ≠ 1.0 ≠ True, NaN = NaN), every other line with the same text.

    >>> same_lines([{"a": 1}], [{"a": 1.0}]), same_lines([{"a": float("nan")}], [{"a": float("nan")}])
    (False, True)
    """
    return len(a) == len(b) and all(json.dumps(x) == json.dumps(y) for x, y in zip(a, b, strict=True))


# ---- the column types -------------------------------------------------------------------------------------

def _kind(value: Any) -> Any:
    """A value's column kind: None (null), "bool", "int", "float", "str", ("list", inner kind or None when
    empty), or "json" (anything else: a dict, a list mixing kinds or holding a null, a huge int)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if -2 ** 63 <= value < 2 ** 63 else "json"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        inner = None
        for item in value:
            inner = _join(inner, "json" if item is None else _kind(item))
        return "json" if inner == "json" else ("list", inner)
    return "json"


def _join(a: Any, b: Any) -> Any:
    """The kind holding both kinds (None: nothing seen yet).

    >>> _join(("list", None), ("list", "float")), _join("int", "float")
    (('list', 'float'), 'json')
    """
    if a is None or a == b:
        return b
    if b is None:
        return a
    if isinstance(a, tuple) and isinstance(b, tuple):
        inner = _join(a[1], b[1])
        return "json" if inner == "json" else ("list", inner)
    return "json"


def column_kind(values: Iterable[Any]) -> Any:
    """The kind of a column holding ``values`` ("json" for one of nulls only)."""
    kind = None
    for v in values:
        kind = _join(kind, _kind(v))
        if kind == "json":
            break
    return "json" if kind is None else kind


def _arrow_type(pa: Any, kind: Any) -> Any:
    if isinstance(kind, tuple):
        return pa.list_(_arrow_type(pa, kind[1] or "int"))
    return {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "str": pa.string(),
            "json": pa.string()}[kind]


# ---- writing ----------------------------------------------------------------------------------------------

def _rows(runs: dict[RunKey, dict[str, list[Line]]]) -> list[tuple[str, int, str, int, Line]]:
    """(algo, seed, source, line index, line) of every line, by run, source and line."""
    return [(algo, seed, source, i, line) for algo, seed in sorted(runs) for source in (*SOURCES, *TEXTS)
            for i, line in enumerate(runs[algo, seed].get(source, []))]


def _value_column(pa: Any, name: str, values: list[Any]) -> tuple[Any, Any]:
    """The field and array of one value column (its type from :func:`column_kind`)."""
    kind = column_kind(values)
    if kind == "json":
        values = [None if v is None else json.dumps(v) for v in values]
    field = pa.field(name, _arrow_type(pa, kind), metadata={b"encoding": b"json"} if kind == "json" else None)
    return field, pa.array(values, field.type)


def to_table(runs: dict[RunKey, dict[str, list[Line]]]) -> Any:
    """The Arrow table of ``runs``: (algo, seed) → source → its lines, where a whole text's source (a name in
    ``TEXTS``) holds one line, the text (see the module docstring)."""
    pa, _ = _pyarrow()
    rows = _rows(runs)
    objects = [line if isinstance(line, dict) else None for *_, line in rows]
    base = {"algo": [r[0] for r in rows], "seed": [r[1] for r in rows], "source": [r[2] for r in rows],
            "line": [r[3] for r in rows], "keys": [None if o is None else json.dumps(list(o)) for o in objects],
            "raw": [None if o is not None else r[4] for r, o in zip(rows, objects, strict=True)]}
    types = {"seed": pa.int64(), "line": pa.int64()}
    fields = [pa.field(n, types.get(n, pa.string())) for n in BASE_COLUMNS]
    arrays = [pa.array(base[f.name], f.type) for f in fields]
    for source in SOURCES:
        mine = [o if r[2] == source else None for r, o in zip(rows, objects, strict=True)]
        for key in dict.fromkeys(k for o in mine if o is not None for k in o):
            field, array = _value_column(pa, f"{source}:{key}", [None if o is None else o.get(key) for o in mine])
            fields.append(field)
            arrays.append(array)
    meta = {META_KEY: json.dumps({"version": FORMAT_VERSION, "sources": list(SOURCES)}).encode()}
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=meta))


def write_table(table: Any, path: Path) -> None:
    """``table`` as Parquet (zstd) at ``path``, fsynced (the caller renames it into place)."""
    _, pq = _pyarrow()
    pq.write_table(table, path, compression="zstd", compression_level=9)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---- reading ----------------------------------------------------------------------------------------------

class Records:
    """One records file read into memory: each run's lines of each source, decoded on demand."""

    def __init__(self, path: Path) -> None:
        _, pq = _pyarrow()
        try:
            self.table = pq.read_table(path)
        except Exception as exc:  # noqa: BLE001 - pyarrow's many error types: one line naming the file
            raise InputError(f"{path}: not a readable records file ({exc}); restore it from version control "
                             f"or a backup") from None
        meta = json.loads((self.table.schema.metadata or {}).get(META_KEY, b"{}"))
        if meta.get("version") not in READABLE:
            raise InputError(f"{path}: records format {meta.get('version')!r}, this hacrl reads "
                             f"{' and '.join(map(str, READABLE))}; use the hacrl version that wrote it")
        cols = [self.table.column(n).to_pylist() for n in ("algo", "seed", "source", "line")]
        self.index: dict[tuple[str, int, str], list[tuple[int, int]]] = {}
        for row, (algo, seed, source, line) in enumerate(zip(*cols, strict=True)):
            self.index.setdefault((algo, seed, source), []).append((line, row))

    def runs(self) -> list[RunKey]:
        """The (algo, seed) of every run the file holds, sorted."""
        return sorted({(a, s) for a, s, _ in self.index})

    def lines(self, algo: str, seed: int, source: str) -> list[Line]:
        """The run's lines of ``source`` in file order (empty when the file holds none)."""
        rows = [row for _, row in sorted(self.index.get((algo, seed, source), []))]
        if not rows:
            return []
        sub = self.table.take(rows)
        prefix = f"{source}:"
        names = [n for n in sub.column_names if n.startswith(prefix)]
        values = {n[len(prefix):]: self._decoded(sub, n) for n in names}
        keys_col, raw_col = sub.column("keys").to_pylist(), sub.column("raw").to_pylist()
        order: dict[str, list[str]] = {}  # a file's lines share few key lists: each parsed once
        out: list[Line] = []
        for i, (keys, raw) in enumerate(zip(keys_col, raw_col, strict=True)):
            if keys is None:
                out.append(raw)
                continue
            names_i = order.setdefault(keys, json.loads(keys))
            out.append({k: values[k][i] for k in names_i})
        return out

    def run(self, algo: str, seed: int) -> dict[str, list[Line]]:
        """Every source's lines of one run, a whole text's as one line (the sources it holds none of are left
        out)."""
        return {s: self.lines(algo, seed, s) for s in (*SOURCES, *TEXTS) if (algo, seed, s) in self.index}

    def text(self, algo: str, seed: int, name: str) -> str | None:
        """The whole text of the run's file ``name`` (one of ``TEXTS``); None when the file holds none."""
        lines = self.lines(algo, seed, name)
        return lines[0] if lines and isinstance(lines[0], str) else None

    @staticmethod
    def _decoded(table: Any, name: str) -> list[Any]:
        values: list[Any] = table.column(name).to_pylist()
        if (table.schema.field(name).metadata or {}).get(b"encoding") == b"json":
            return [None if v is None else json.loads(v) for v in values]
        return values


@functools.lru_cache(maxsize=2)
def _cached(path: str, mtime_ns: int, size: int) -> Records:
    return Records(Path(path))


def load(path: Path) -> Records:
    """The records file at ``path``, read once per version of the file (its time and size)."""
    st = path.stat()
    return _cached(str(path.resolve()), st.st_mtime_ns, st.st_size)


def run_key(run_dir: Path) -> RunKey | None:
    """(algo, seed) of ``<comparison>/runs/<algo>/seed-<s>``; None for a directory not laid out so.

    >>> run_key(Path("cmp/runs/hacpo@delta=0.6/seed-3")), run_key(Path("runs/mine"))
    (('hacpo@delta=0.6', 3), None)
    """
    name, algo_dir = run_dir.name, run_dir.parent
    if not name.startswith("seed-") or not name[5:].isdigit() or algo_dir.parent.name != "runs":
        return None
    return algo_dir.name, int(name[5:])


def records_path(run_dir: Path) -> Path:
    """The records file of the comparison a ``runs/<algo>/seed-<s>`` directory belongs to."""
    return run_dir.parent.parent.parent / RECORDS_FILE


def _stored_text(run_dir: Path, name: str) -> str | None:
    """The whole text of the run's file ``name`` in its comparison's records file; None without one (pyarrow is
    imported only where there is a records file)."""
    key, path = run_key(run_dir), records_path(run_dir)
    if key is None or not path.is_file():
        return None
    return load(path).text(*key, name)


def compacted_files(run_dir: Path) -> list[str]:
    """The files of a run that its comparison's records file holds (compare.json's ``compacted``)."""
    text = run_text(run_dir / RUN_RECORD)
    try:
        record = json.loads(text) if text is not None else None
    except json.JSONDecodeError:
        return []
    files = record.get(COMPACTED) if isinstance(record, dict) else None
    return [str(f) for f in files] if isinstance(files, list) else []


def _missing(run_dir: Path, name: str) -> InputError:
    return InputError(f"{run_dir}: its compare.json says its {name} is in {records_path(run_dir)}, which is "
                      f"missing or lacks it; restore that file (from version control or a backup)")


def run_text(path: Path) -> str | None:
    """The text of a run's file (``config.yaml``, ``provenance.jsonl``, ``compare.json``): the file where it
    exists; else its copy in the comparison's records file, where the run's compare.json names it among the
    moved files (compare.json itself: where the records file holds one); None when there is neither."""
    if path.is_file():
        return path.read_text(encoding="utf-8")
    run_dir, name = path.parent, path.name
    if name not in TEXTS:
        return None
    if name == RUN_RECORD:
        return _stored_text(run_dir, name)
    if name not in compacted_files(run_dir):
        return None
    text = _stored_text(run_dir, name)
    if text is None:
        raise _missing(run_dir, name)
    return text


def has_run(run_dir: Path) -> bool:
    """Whether a run is there: its directory, or (compacted, its directory gone) its record in the comparison's
    records file."""
    return run_dir.is_dir() or _stored_text(run_dir, RUN_RECORD) is not None


def compacted_lines(path: Path) -> list[Line] | None:
    """The lines of a run's ``metrics.jsonl``, ``eval.jsonl`` or ``eval_problems.jsonl`` that ``hacrl compare
    --compact`` moved into the comparison's records file; None when they were not moved (then the file, or
    nothing, is the record)."""
    run_dir, source = path.parent, path.name.removesuffix(".jsonl")
    key = run_key(run_dir)
    if source not in SOURCES or key is None or path.name not in compacted_files(run_dir):
        return None
    if not records_path(run_dir).is_file():
        raise _missing(run_dir, path.name)
    return load(records_path(run_dir)).lines(*key, source)
