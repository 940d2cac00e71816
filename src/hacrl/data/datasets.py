"""Problems from local data files, and a Task over them (plus an optional reasoning-gym source).

- :func:`load_problems` reads ``.jsonl``, ``.json`` (a list or ``{"data": [...]}``), ``.parquet``, or a
  directory written by ``datasets.Dataset.save_to_disk`` / ``DatasetDict.save_to_disk`` (pick ``split``).
  Field names may be dotted paths (``reward_model.ground_truth``). verl's parquet layout (``prompt`` =
  chat messages, ``reward_model.ground_truth``, ``data_source``) is detected when the default field
  names are not in the rows. Bad rows are skipped and counted by reason; no usable row is an
  :class:`~hacrl.errors.InputError` whose one-line message names the file, the fields, the counts and
  the fix.
- :class:`DatasetTask` implements the Task protocol over a train list and a test list (given, or a
  seeded held-out fraction of the train list: disjoint by construction). :func:`make_dataset_task`
  builds one from paths, for the config layer.
- :func:`reasoning_gym_task` wraps ``reasoning_gym.create_dataset`` (extra ``hacrl[gym]``).

``Problem.prompt`` from :func:`load_problems` is the bare question; :class:`DatasetTask` renders it
with the prompt template (default: the paper's, below). verl prompts are already full prompts: they
carry ``meta["templated"] = True`` and the default template leaves them as they are.

Only the standard library is imported here; ``datasets``/``pyarrow`` (extra ``hacrl[data]``) are
imported by the readers that need them.

>>> task = DatasetTask([Problem("a", "1+1?", "2"), Problem("b", "2+2?", "4")], test_fraction=0.5)
>>> len(task.test_problems()), task.test_problems()[0].prompt.endswith("within \\\\boxed{}.")
(1, True)
"""

from __future__ import annotations

import difflib
import functools
import importlib
import json
import logging
import math
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hacrl.errors import InputError
from hacrl.types import Problem

__all__ = ["MAX_LINE_BYTES", "PAPER_TEMPLATE", "DatasetTask", "LoadResult", "ReasoningGymTask", "SkipRow",
           "answer_text", "get_field", "iter_rows", "load_problems", "make_dataset_task",
           "reasoning_gym_task"]

logger = logging.getLogger(__name__)

PAPER_TEMPLATE = "{question} Let's think step by step and output the final answer within \\boxed{}."
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
def _require(module: str, extra: str, why: str) -> Any:
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
        raise InputError(f"data file not found: {p}; fix: check the path (relative paths start at "
                         f"{Path.cwd()})")
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
    pq = _require("pyarrow.parquet", "data", f"reading {path}")
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
    hf = _require("datasets", "data", f"reading {path}")
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


def _chat_user_text(messages: list[Any]) -> tuple[str, str | None]:
    """The last user message's content and the system message's (if any) of a chat message list."""
    user = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    system = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "system"]
    if not user:
        raise SkipRow("bad_type_question")
    return answer_text(user[-1], "question"), (system[0] if system and isinstance(system[0], str) else None)


def _is_chat(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def _is_verl(row: dict[str, Any]) -> bool:
    return _is_chat(row.get("prompt")) and isinstance(row.get("reward_model"), dict)


def _fix_hint(counts: dict[str, int], first: dict[str, Any] | None) -> str:
    """What to change, judged from why the rows were skipped."""
    fixes = []
    if first is not None and any(k.startswith(("missing_", "bad_type_")) for k in counts):
        fixes.append(f"name the fields with question_field/answer_field (dotted paths allowed); the first "
                     f"row has fields {', '.join(map(str, first))}")
    if "prompt_too_long" in counts:
        fixes.append("raise max_prompt_chars")
    if "line_too_long" in counts:
        fixes.append("raise max_line_bytes")
    if not fixes:
        fixes.append("repair the rows (one JSON object per line, UTF-8, non-empty question and answer)"
                     if counts else "give a file with rows")
    return "; or ".join(fixes)


# ---- load_problems ----------------------------------------------------------------------------------
def load_problems(path: str | Path, *, question_field: str = "question", answer_field: str = "answer",
                  id_field: str | None = None, split: str | None = None, max_prompt_chars: int | None = None,
                  max_line_bytes: int = MAX_LINE_BYTES) -> LoadResult:
    """Read a local data file into Problems (prompt = the bare question), skipping and counting bad rows.

    Args:
        path: a .jsonl, .json, .parquet file or a save_to_disk directory.
        question_field, answer_field, id_field: (dotted) field names. A question that is a list of
            chat messages gives its last user message. Without ``id_field`` ids are ``{stem}/{row}``.
        split: the split of a saved DatasetDict (optional when it has one split).
        max_prompt_chars: rows whose question is longer are skipped as ``prompt_too_long``.
        max_line_bytes: jsonl lines longer than this are skipped as ``line_too_long``.
    """
    p = Path(path)
    stem = p.name.removesuffix(".jsonl").removesuffix(".json").removesuffix(".parquet")
    stem = f"{stem}/{split}" if split and p.is_dir() else stem
    skipped: Counter[str] = Counter()
    problems: list[Problem] = []
    seen_ids: set[str] = set()
    first: dict[str, Any] | None = None
    q_field, a_field, verl = question_field, answer_field, False
    for index, row in enumerate(iter_rows(p, split=split, max_line_bytes=max_line_bytes)):
        if isinstance(row, str):
            skipped[row] += 1
            continue
        if first is None:
            first = row
            if (q_field, a_field) == ("question", "answer") and "question" not in row and _is_verl(row):
                q_field, a_field, verl = "prompt", "reward_model.ground_truth", True
        try:
            problem = _row_problem(row, index, stem, q_field, a_field, id_field, verl, max_prompt_chars)
            if problem.id in seen_ids:
                raise SkipRow("duplicate_id")
        except SkipRow as skip:
            skipped[skip.reason] += 1
            continue
        seen_ids.add(problem.id)
        problems.append(problem)
    counts = dict(sorted(skipped.items()))
    if not problems:
        looked = f"question field {q_field!r}, answer field {a_field!r}" + (f", id field {id_field!r}"
                                                                              if id_field else "")
        summary = ", ".join(f"{k}={v}" for k, v in counts.items()) or "the file has no rows"
        raise InputError(f"no usable rows in {p} (looked for {looked}; skipped: {summary}); "
                         f"fix: {_fix_hint(counts, first)}")
    if counts:
        logger.warning("%s: skipped %d rows (%s)", p, sum(counts.values()),
                       ", ".join(f"{k}={v}" for k, v in counts.items()))
    return LoadResult(problems, counts)


def _row_problem(row: dict[str, Any], index: int, stem: str, q_field: str, a_field: str,
                 id_field: str | None, verl: bool, max_chars: int | None) -> Problem:
    value = get_field(row, q_field)
    meta: dict[str, Any] = {"row": index}
    if _is_chat(value):
        question, system = _chat_user_text(value)
        meta["templated"] = True
        if system:
            meta["system"] = system
    else:
        question = answer_text(value, "question")
    answer = answer_text(get_field(row, a_field), "answer")
    if max_chars is not None and len(question) > max_chars:
        raise SkipRow("prompt_too_long")
    pid = f"{stem}/{index}" if id_field is None else answer_text(get_field(row, id_field), "id")
    if verl:
        meta.update({k: row[k] for k in ("data_source", "ability") if row.get(k) is not None})
    return Problem(id=pid, prompt=question, answer=answer, meta=meta)


# ---- DatasetTask ------------------------------------------------------------------------------------
def check_template(template: str) -> str:
    """The template if it holds ``{question}`` exactly once (it is filled by plain replacement)."""
    if not isinstance(template, str) or template.count("{question}") != 1:
        raise InputError(f"prompt_template must contain '{{question}}' exactly once, got {template!r}; "
                         f"e.g. {PAPER_TEMPLATE!r}")
    return template


def _order(n: int, key: str) -> list[int]:
    order = list(range(n))
    random.Random(key).shuffle(order)
    return order


class DatasetTask:
    """A Task over fixed train and test problem lists.

    Args:
        train: problems whose prompt is the bare question (as :func:`load_problems` gives them).
        test: held-out problems; None holds out ``test_fraction`` of ``train`` (a permutation seeded by
            ``split_seed``). Train problems whose question also appears in ``test`` are dropped
            (counted as ``train/in_test``).
        prompt_template: ``{question}`` is replaced by the question; None = the paper's template,
            except for problems already marked ``meta["templated"]`` (verl prompts), kept as they are.
        reward: a reward spec for :func:`hacrl.rewards.get_reward`; kept as ``reward_spec``.
        max_prompt_chars: problems whose rendered prompt is longer are dropped (``*/prompt_too_long``).
        skipped: counts to report (e.g. ``{"train/bad_json": 2}``); ``skipped`` adds this task's own.

    ``train_problems(seed)`` repeats the train list forever, reshuffled every epoch (seeded by
    ``seed`` and the epoch). ``test_problems(n)`` is the first ``n`` of the test list in a fixed
    shuffled order (seeded by ``split_seed``), so a small ``n`` is a uniform sample.
    """

    def __init__(self, train: list[Problem], test: list[Problem] | None = None, *, name: str = "dataset",
                 prompt_template: str | None = None, reward: str = "math", max_new_tokens: int = 4096,
                 test_fraction: float = 0.05, split_seed: int = 0, max_prompt_chars: int | None = None,
                 skipped: dict[str, int] | None = None):
        from hacrl.rewards import get_reward

        try:
            self._reward_fn = get_reward(reward)
        except ValueError as exc:
            raise InputError(f"task reward: {exc}") from None
        self.name, self.reward_spec, self.max_new_tokens = name, reward, max_new_tokens
        self.prompt_template = None if prompt_template is None else check_template(prompt_template)
        self.skipped: dict[str, int] = Counter(skipped or {})  # type: ignore[assignment]
        if test is None:
            train, test = _hold_out(train, test_fraction, split_seed, name)
        held = {" ".join(p.prompt.split()) for p in test}
        self.skipped["train/in_test"] += sum(" ".join(p.prompt.split()) in held for p in train)
        train = [p for p in train if " ".join(p.prompt.split()) not in held]
        self._train = self._render_all(train, "train", max_prompt_chars)
        self._test = self._render_all([test[i] for i in _order(len(test), f"test/{split_seed}")], "test",
                                      max_prompt_chars)
        self.skipped = {k: v for k, v in sorted(self.skipped.items()) if v}
        if not self._train or not self._test:
            raise InputError(f"task {name!r}: {len(self._train)} train and {len(self._test)} test problems "
                             f"left (dropped: {self.skipped}); fix: give more rows, a separate test file "
                             f"or a larger max_prompt_chars")

    def _render_all(self, problems: list[Problem], split: str, max_chars: int | None) -> list[Problem]:
        out = []
        for p in problems:
            if not (self.prompt_template is None and p.meta.get("templated")):
                template = self.prompt_template or PAPER_TEMPLATE
                p = replace(p, prompt=template.replace("{question}", p.prompt))
            if max_chars is not None and len(p.prompt) > max_chars:
                self.skipped[f"{split}/prompt_too_long"] += 1
            else:
                out.append(p)
        return out

    def train_problems(self, seed: int) -> Iterator[Problem]:
        """Every train problem once per epoch, in a new seeded order each epoch; never ends."""
        epoch = 0
        while True:
            for i in _order(len(self._train), f"train/{seed}/{epoch}"):
                yield self._train[i]
            epoch += 1

    def test_problems(self, n: int | None = None) -> list[Problem]:
        """The first ``n`` (default all) test problems; fewer if the test set is smaller."""
        if n is not None and n > len(self._test):
            logger.info("task %s has %d test problems; asked for %d", self.name, len(self._test), n)
        return list(self._test if n is None else self._test[:n])

    def reward(self, completion: str, problem: Problem) -> float | None:
        sample = {**problem.meta, "prompt": problem.prompt, "answer": problem.answer}
        return self._reward_fn(completion, sample)

    @property
    def num_train(self) -> int:
        return len(self._train)


def _hold_out(problems: list[Problem], fraction: float, seed: int,
              name: str) -> tuple[list[Problem], list[Problem]]:
    """(train, test): a seeded ``fraction`` of ``problems`` as test, the rest as train, file order kept."""
    if not 0 < fraction < 1:
        raise InputError(f"test_fraction must be in (0, 1), got {fraction}")
    if len(problems) < 2:
        raise InputError(f"task {name!r}: {len(problems)} usable problem(s), too few to hold out a test "
                         f"split; fix: give more rows or a separate test file")
    order = _order(len(problems), f"split/{seed}")
    n_test = min(max(1, round(fraction * len(problems))), len(problems) - 1)
    return [problems[i] for i in sorted(order[n_test:])], [problems[i] for i in sorted(order[:n_test])]


def make_dataset_task(*, train_path: str | Path, test_path: str | Path | None = None,
                      test_benchmark: str | None = None, name: str | None = None,
                      question_field: str = "question", answer_field: str = "answer",
                      id_field: str | None = None, train_split: str | None = None,
                      test_split: str | None = None, prompt_template: str | None = None,
                      reward: str = "math", max_new_tokens: int = 4096, test_fraction: float = 0.05,
                      split_seed: int = 0, max_prompt_chars: int | None = None) -> DatasetTask:
    """Load the files and build a :class:`DatasetTask` (the config layer's entry point).

    ``test_path`` is read with the same field names as ``train_path``, or, with ``test_benchmark`` (a
    name in :data:`hacrl.data.benchmarks.BENCHMARKS`), by that benchmark's reader. Without
    ``test_path`` a ``test_fraction`` of the train file is held out. ``max_prompt_chars`` bounds the
    rendered prompt (template included). Skip counts are kept as ``task.skipped["train/<reason>"]``.
    """
    if test_benchmark is not None and test_path is None:
        raise InputError("test_benchmark is set but test_path is not; fix: give the benchmark file's path")
    read = functools.partial(load_problems, question_field=question_field, answer_field=answer_field,
                             id_field=id_field)
    train = read(train_path, split=train_split)
    skipped = {f"train/{k}": v for k, v in train.skipped.items()}
    test = None
    if test_path is not None:
        if test_benchmark is not None:
            from hacrl.data.benchmarks import read_benchmark

            loaded = read_benchmark(test_benchmark, test_path, split=test_split)
        else:
            loaded = read(test_path, split=test_split)
        test = loaded.problems
        skipped.update({f"test/{k}": v for k, v in loaded.skipped.items()})
    return DatasetTask(train.problems, test, name=name or Path(train_path).stem,
                       prompt_template=prompt_template,
                       reward=reward, max_new_tokens=max_new_tokens, test_fraction=test_fraction,
                       split_seed=split_seed, max_prompt_chars=max_prompt_chars, skipped=skipped)


# ---- reasoning-gym ----------------------------------------------------------------------------------
def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text.replace(",", "")))
    except ValueError:
        return False


class ReasoningGymTask:
    """A Task over two reasoning-gym datasets: train (``size`` items) and test (``test_size`` items).

    The reward is the spec ``reward`` if given; otherwise per problem: ``numeric`` (last number in the
    completion, lenient) when the answer is a number, else the dataset's own ``score_answer`` on the
    last ``\\boxed{}`` of the completion (or the whole stripped completion when there is none).
    """

    def __init__(self, name: str, train_ds: Any, test_ds: Any, *, prompt_template: str = PAPER_TEMPLATE,
                 reward: str | None = None, max_new_tokens: int = 1024):
        from hacrl.rewards import get_reward

        self.name, self.max_new_tokens, self.reward_spec = name, max_new_tokens, reward
        self._train_ds, self._test_ds = train_ds, test_ds
        self._template = check_template(prompt_template)
        try:
            self._reward_fn = get_reward(reward) if reward else None
        except ValueError as exc:
            raise InputError(f"task reward: {exc}") from None
        self._numeric = get_reward("numeric")
        self.skipped: Counter[str] = Counter()  # items without a usable question or answer, per reason
        self._test = [p for i in range(len(test_ds)) if (p := self._problem(test_ds, i, "test"))]
        self._held = {p.meta["question"] for p in self._test}
        if not self._test:
            raise InputError(f"reasoning-gym {name!r}: no usable test item ({dict(self.skipped)})")

    def _problem(self, ds: Any, index: int, split: str) -> Problem | None:
        item = ds[index]
        try:
            question = answer_text(item.get("question"), "question")
            answer = answer_text(item.get("answer"))
        except SkipRow as skip:
            self.skipped[f"{split}/{skip.reason}"] += 1
            return None
        meta = {"split": split, "question": question, "metadata": item.get("metadata", {})}
        prompt = self._template.replace("{question}", question)
        return Problem(id=f"{self.name}/{split}/{index}", prompt=prompt, answer=answer, meta=meta)

    def train_problems(self, seed: int) -> Iterator[Problem]:
        """The train items once per epoch, reshuffled each epoch, without any test question; never ends."""
        epoch = 0
        while True:
            yielded = 0
            for i in _order(len(self._train_ds), f"train/{seed}/{epoch}"):
                problem = self._problem(self._train_ds, i, "train")
                if problem is not None and problem.meta["question"] not in self._held:
                    yielded += 1
                    yield problem
            if not yielded:
                raise InputError(f"reasoning-gym {self.name!r}: no train item left (unusable: "
                                 f"{dict(self.skipped)}; the rest are test items); fix: raise size")
            epoch += 1

    def test_problems(self, n: int | None = None) -> list[Problem]:
        return list(self._test if n is None else self._test[:n])

    def reward(self, completion: str, problem: Problem) -> float | None:
        sample = {**problem.meta, "prompt": problem.prompt, "answer": problem.answer}
        if self._reward_fn is not None:
            return self._reward_fn(completion, sample)
        if _is_number(problem.answer):
            return self._numeric(completion, sample)
        from hacrl.rewards.math_reward import last_boxed

        guess = last_boxed(completion)
        entry = {"question": problem.meta["question"], "answer": problem.answer,
                 "metadata": problem.meta["metadata"]}
        return float(self._train_ds.score_answer(guess if guess is not None else completion.strip(), entry))


def reasoning_gym_task(name: str, *, seed: int = 0, size: int = 10_000, test_size: int = 200,
                       reward: str | None = None, prompt_template: str = PAPER_TEMPLATE,
                       max_new_tokens: int = 1024, config: dict[str, Any] | None = None) -> ReasoningGymTask:
    """A Task over ``reasoning_gym.create_dataset(name, seed=..., size=..., **config)``.

    reasoning-gym builds item ``i`` from ``Random(seed + i)``, so train uses seeds ``seed .. seed+size-1``
    and test ``seed+size .. seed+size+test_size-1``: disjoint streams; test questions are also filtered
    out of the train stream, so the splits are disjoint even when two seeds give the same question.
    """
    rg = _require("reasoning_gym", "gym", f"the reasoning-gym task {name!r}")
    if size < 1 or test_size < 1:
        raise InputError(f"reasoning-gym {name!r}: size and test_size must be >= 1, got {size}, {test_size}")
    known = list(getattr(getattr(rg, "factory", None), "DATASETS", {}))
    if known and name not in known:
        close = difflib.get_close_matches(name, known, n=5) or sorted(known)[:8]
        raise InputError(f"unknown reasoning-gym dataset {name!r}; did you mean: {', '.join(close)} "
                         f"({len(known)} datasets in reasoning_gym.factory.DATASETS)")
    try:
        train = rg.create_dataset(name, seed=seed, size=size, **(config or {}))
        test = rg.create_dataset(name, seed=seed + size, size=test_size, **(config or {}))
    except (TypeError, ValueError, AssertionError) as exc:
        raise InputError(f"reasoning-gym {name!r} rejected its config {config or {}}: {exc}") from None
    return ReasoningGymTask(name, train, test, prompt_template=prompt_template, reward=reward,
                            max_new_tokens=max_new_tokens)

