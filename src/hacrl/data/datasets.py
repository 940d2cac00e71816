"""Problems from local data files, and a Task over them.

- :func:`load_problems` reads ``.jsonl``, ``.json`` (a list or ``{"data": [...]}``), ``.parquet``, or a
  directory written by ``datasets.Dataset.save_to_disk`` / ``DatasetDict.save_to_disk`` (pick ``split``),
  through :func:`hacrl.data.rows.iter_rows`. Field names may be dotted paths
  (``reward_model.ground_truth``). verl's parquet layout (``prompt`` = chat messages,
  ``reward_model.ground_truth``, ``data_source``) is detected when the default field names are not in
  the rows. Bad rows are skipped and counted by reason; no usable row is an
  :class:`~hacrl.errors.InputError` whose one-line message names the file, the fields, the counts and
  the fix.
- :class:`DatasetTask` implements the Task protocol over a train list and a test list (given, or a
  seeded held-out fraction of the train list), with every train question that is also a test question
  (:func:`hacrl.data.splits.normalize_question`) dropped. The held-out split is drawn with
  ``task.test_seed``, not ``run.seed``: every seed of a comparison evaluates the same problems, under
  the same ids. :func:`make_dataset_task` builds one from paths, for the config layer.
- The reasoning-gym source (extra ``hacrl[gym]``) is :func:`hacrl.data.gym.reasoning_gym_task`.

``Problem.prompt`` from :func:`load_problems` is the bare question; :class:`DatasetTask` renders it
with the prompt template (default: the paper's, below). verl prompts are already full prompts: they
carry ``meta["templated"] = True`` and the default template leaves them as they are.

Only the standard library is imported here; ``datasets``/``pyarrow`` (extra ``hacrl[data]``) are
imported by the readers in :mod:`hacrl.data.rows` that need them.

>>> task = DatasetTask([Problem("a", "1+1?", "2"), Problem("b", "2+2?", "4")], test_fraction=0.5)
>>> len(task.test_problems()), task.test_problems()[0].prompt.endswith("within \\\\boxed{}.")
(1, True)
"""

from __future__ import annotations

import functools
import logging
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from hacrl.data.rows import MAX_LINE_BYTES, LoadResult, SkipRow, answer_text, get_field, iter_rows
from hacrl.data.splits import HELD_OUT_SEED, normalize_question
from hacrl.errors import InputError
from hacrl.types import Problem

__all__ = ["PAPER_TEMPLATE", "DatasetTask", "check_template", "load_problems", "make_dataset_task",
           "seeded_order"]

logger = logging.getLogger(__name__)

PAPER_TEMPLATE = "{question} Let's think step by step and output the final answer within \\boxed{}."


# ---- load_problems ----------------------------------------------------------------------------------
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
            q_field, a_field = _trl_fields(row, q_field, a_field, question_field, answer_field)
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


def _trl_fields(row: dict[str, Any], q_field: str, a_field: str, q_given: str, a_given: str) -> tuple[str, str]:
    """TRL's layout (``prompt``, and ``solution`` or ``ground_truth`` for the answer) when the fields were
    left at their defaults and the rows have no ``question`` / ``answer`` column."""
    if not (q_given == q_field == "question" and "question" not in row and "prompt" in row):
        return q_field, a_field
    if a_given == a_field == "answer" and "answer" not in row:
        a_field = next((f for f in ("solution", "ground_truth") if f in row), a_field)
    return "prompt", a_field


def _row_problem(row: dict[str, Any], index: int, stem: str, q_field: str, a_field: str,
                 id_field: str | None, verl: bool, max_chars: int | None) -> Problem:
    value = get_field(row, q_field)
    # every column of the row reaches the reward (TRL passes them all); hacrl's own fields win
    meta: dict[str, Any] = {**row, "row": index}
    if _is_chat(value):
        question, system = _chat_user_text(value)
        meta.update(templated=True, chat_prompt=value)
        if system:
            meta["system"] = system
    else:
        question = answer_text(value, "question")
        if q_field == "prompt":  # a prompt is passed as written: no template unless one is given
            meta["templated"] = True
    answer = answer_text(get_field(row, a_field), "answer")
    if max_chars is not None and len(question) > max_chars:
        raise SkipRow("prompt_too_long")
    pid = f"{stem}/{index}" if id_field is None else answer_text(get_field(row, id_field), "id")
    return Problem(id=pid, prompt=question, answer=answer, meta=meta)


# ---- DatasetTask ------------------------------------------------------------------------------------
def check_template(template: str) -> str:
    """The template if it holds ``{question}`` exactly once (it is filled by plain replacement)."""
    if not isinstance(template, str) or template.count("{question}") != 1:
        raise InputError(f"prompt_template must contain '{{question}}' exactly once, got {template!r}; "
                         f"e.g. {PAPER_TEMPLATE!r}")
    return template


def seeded_order(n: int, key: str) -> list[int]:
    """A permutation of ``range(n)`` fixed by the string ``key`` (the same on every machine and run)."""
    order = list(range(n))
    random.Random(key).shuffle(order)
    return order


class DatasetTask:
    """A Task over fixed train and test problem lists.

    Args:
        train: problems whose prompt is the bare question (as :func:`load_problems` gives them).
        test: held-out problems; None holds out ``test_fraction`` of ``train`` (a permutation seeded by
            ``split_seed``). Questions are compared with :func:`~hacrl.data.splits.normalize_question`:
            a test question asked again later in ``test`` is kept once (``test/repeated_question``), and
            train problems whose question is a test question are dropped (``train/in_test``).
        prompt_template: ``{question}`` is replaced by the question; None = the paper's template,
            except for problems already marked ``meta["templated"]`` (verl prompts), kept as they are.
        reward: a reward spec for :func:`hacrl.rewards.get_reward`; kept as ``reward_spec``.
        max_prompt_chars: problems whose rendered prompt is longer are dropped (``*/prompt_too_long``).
        skipped: counts to report (e.g. ``{"train/bad_json": 2}``); ``skipped`` adds this task's own.
        split_seed: seed of the held-out split and of its order; the config layer passes
            ``task.test_seed`` (fixed by default), never ``run.seed``, so every seed of a comparison is
            evaluated on the same problems, with the same ids.

    ``train_problems(seed)`` repeats the train list forever, reshuffled every epoch (seeded by
    ``seed`` and the epoch). ``test_problems(n)`` is the first ``n`` of the test list in a fixed
    shuffled order (seeded by ``split_seed``), so a small ``n`` is a uniform sample.
    """

    def __init__(self, train: list[Problem], test: list[Problem] | None = None, *, name: str = "dataset",
                 prompt_template: str | None = None, reward: str | list[str] = "math", max_new_tokens: int = 4096,
                 test_fraction: float = 0.05, split_seed: int = HELD_OUT_SEED, max_prompt_chars: int | None = None,
                 skipped: dict[str, int] | None = None, reward_contract: str = "auto"):
        from hacrl.rewards import RewardSet

        try:
            self._rewards = RewardSet.build(reward, contract=reward_contract)
        except ValueError as exc:
            raise InputError(f"task reward: {exc}") from None
        self.name, self.reward_spec, self.max_new_tokens = name, reward, max_new_tokens
        self.prompt_template = None if prompt_template is None else check_template(prompt_template)
        self.skipped: dict[str, int] = Counter(skipped or {})  # type: ignore[assignment]
        if test is None:
            train, test = _hold_out(train, test_fraction, split_seed, name)
        distinct = _first_of_each(test)
        self.skipped["test/repeated_question"] += len(test) - len(distinct)
        test = distinct
        held = {normalize_question(p.prompt) for p in test}
        self.skipped["train/in_test"] += sum(normalize_question(p.prompt) in held for p in train)
        train = [p for p in train if normalize_question(p.prompt) not in held]
        self._train = self._render_all(train, "train", max_prompt_chars)
        order = seeded_order(len(test), f"test/{split_seed}")
        self._test = self._render_all([test[i] for i in order], "test", max_prompt_chars)
        self.skipped = {k: v for k, v in sorted(self.skipped.items()) if v}
        if not self._train or not self._test:
            raise InputError(f"task {name!r}: {len(self._train)} train and {len(self._test)} test problems "
                             f"left (dropped: {self.skipped}); fix: give more rows, a separate test file "
                             f"or a larger max_prompt_chars")

    def _render_all(self, problems: list[Problem], split: str, max_chars: int | None) -> list[Problem]:
        out = []
        for p in problems:
            p = replace(p, meta={**p.meta, "question": p.prompt})  # the bare question, for split checks
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
            for i in seeded_order(len(self._train), f"train/{seed}/{epoch}"):
                yield self._train[i]
            epoch += 1

    def test_problems(self, n: int | None = None) -> list[Problem]:
        """The first ``n`` (default all) test problems; fewer if the test set is smaller."""
        if n is not None and n > len(self._test):
            logger.info("task %s has %d test problems; asked for %d", self.name, len(self._test), n)
        return list(self._test if n is None else self._test[:n])

    def reward(self, completion: str, sample: dict[str, Any]) -> float | None:
        return self._rewards.score_one(completion, sample)[1]

    @property
    def num_train(self) -> int:
        return len(self._train)

    def fewshot_prefix(self, k: int) -> str:
        """``k`` worked examples to put before every prompt: train problems (a fixed draw, the same for every
        run over these files), each its prompt, a newline, ``The answer is \\boxed{<answer>}.`` and a blank
        line. The files hold final answers, not solutions, so an example shows the answer format only; it
        is offered for the rewards that read such an answer (``math``, ``numeric``)."""
        if self.reward_spec not in ("math", "numeric"):
            raise InputError(f"task.fewshot: the worked examples of dataset {self.name!r} answer as "
                             f"\\boxed{{<answer>}}, which task.reward={self.reward_spec!r} may not read; fix: "
                             f"task.reward=math (or numeric), or task.fewshot=0")
        if k > len(self._train):
            raise InputError(f"task.fewshot={k}: dataset {self.name!r} has {len(self._train)} train problems; "
                             f"fix: a smaller task.fewshot")
        picks = seeded_order(len(self._train), "fewshot")[:k]
        return "".join(f"{self._train[i].prompt}\nThe answer is \\boxed{{{self._train[i].answer}}}.\n\n"
                       for i in picks)


def _first_of_each(problems: list[Problem]) -> list[Problem]:
    """``problems`` without the later copies of a question (compared normalised), order kept."""
    seen: set[str] = set()
    out = []
    for p in problems:
        key = normalize_question(p.prompt)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def _hold_out(problems: list[Problem], fraction: float, seed: int,
              name: str) -> tuple[list[Problem], list[Problem]]:
    """(train, test): a seeded ``fraction`` of ``problems`` as test, the rest as train, file order kept."""
    if not 0 < fraction < 1:
        raise InputError(f"test_fraction must be in (0, 1), got {fraction}")
    if len(problems) < 2:
        raise InputError(f"task {name!r}: {len(problems)} usable problem(s), too few to hold out a test "
                         f"split; fix: give more rows or a separate test file")
    order = seeded_order(len(problems), f"split/{seed}")
    n_test = min(max(1, round(fraction * len(problems))), len(problems) - 1)
    return [problems[i] for i in sorted(order[n_test:])], [problems[i] for i in sorted(order[:n_test])]


def make_dataset_task(*, train_path: str | Path, test_path: str | Path | None = None,
                      test_benchmark: str | None = None, name: str | None = None,
                      question_field: str = "question", answer_field: str = "answer",
                      id_field: str | None = None, train_split: str | None = None,
                      test_split: str | None = None, prompt_template: str | None = None,
                      reward: str | list[str] = "math", max_new_tokens: int = 4096, test_fraction: float = 0.05,
                      split_seed: int = HELD_OUT_SEED, max_prompt_chars: int | None = None,
                      reward_contract: str = "auto") -> DatasetTask:
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
                       split_seed=split_seed, max_prompt_chars=max_prompt_chars, skipped=skipped,
                       reward_contract=reward_contract)
