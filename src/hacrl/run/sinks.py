"""Where metrics go: a JSONL file (always), TensorBoard event files (if installed), or nothing; and how
they read back: the evaluation keys, a step's phase times, metrics.jsonl, eval.jsonl and
eval_problems.jsonl records (from a compacted comparison's records.parquet where the files went there).

Each sink takes flat ``{namespaced/key: number}`` dicts once per step.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from pathlib import Path
from typing import Any, Protocol

from hacrl.run.files import append_bytes, guard, open_append

logger = logging.getLogger(__name__)


class MetricsSink(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...
    def close(self) -> None: ...


class JsonlSink:
    """Appends one JSON object per step in one write, fsynced: a kill or a full disk leaves every line whole
    (a line that did not fit is taken back, and the error is ``DiskFull`` naming the file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = open_append(path)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
        assert self._fd is not None, "log after close"
        append_bytes(self._fd, self.path, (json.dumps({"step": step, **clean}, sort_keys=True) + "\n").encode())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class TensorBoardSink:
    def __init__(self, log_dir: Path, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the `tensorboard` package

        self.log_dir = log_dir
        with guard(log_dir):
            self._w = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)
        self._failed = False

    def log(self, step: int, metrics: dict[str, float]) -> None:
        # a full disk may cut the last event record short: TensorBoard's reader stops at it, and a resumed
        # run starts a new event file whose purge_step drops the steps after its checkpoint
        try:
            with guard(self.log_dir):
                for k, v in metrics.items():
                    if isinstance(v, int | float) and math.isfinite(v):
                        self._w.add_scalar(k, v, step)
                self._w.flush()
        except BaseException:
            self._failed = True
            raise

    def close(self) -> None:
        if self._failed:  # its failure was reported already; closing would only repeat it
            with contextlib.suppress(Exception):
                self._w.close()
            return
        with guard(self.log_dir):
            self._w.close()


class NullSink:
    def log(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def close(self) -> None:
        pass


def tensorboard_sink(log_dir: Path, purge_step: int | None = None) -> MetricsSink:
    try:
        return TensorBoardSink(log_dir, purge_step)
    except ImportError:
        logger.warning("tensorboard is not installed; TensorBoard logging is off (pip install 'hacrl[report]')")
        return NullSink()


class MultiSink:
    def __init__(self, sinks: list[MetricsSink]) -> None:
        self.sinks = sinks

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for s in self.sinks:
            s.log(step, metrics)

    def close(self) -> None:
        """Close every sink, even after one fails (a full disk); then raise the first failure."""
        failures = []
        for s in self.sinks:
            try:
                s.close()
            except Exception as exc:  # noqa: BLE001 - raised below, once the others are closed
                failures.append(exc)
        if failures:
            raise failures[0]


# ---- the metric keys, and reading a run's logs back ------------------------------------------------------

def eval_key(agent: str, metric: str = "greedy_acc", benchmark: str | None = None) -> str:
    """The key of an evaluation number: ``eval/<agent>/<metric>`` on the task's held-out split,
    ``eval/<agent>/<benchmark>/<metric>`` on an eval benchmark (agent ids hold no '/').

    >>> eval_key("a"), eval_key("a", "sampled_pass@4", "math500")
    ('eval/a/greedy_acc', 'eval/a/math500/sampled_pass@4')
    """
    return f"eval/{agent}/{metric}" if benchmark is None else f"eval/{agent}/{benchmark}/{metric}"


def parse_eval_key(key: str) -> tuple[str, str | None, str] | None:
    """``(agent, benchmark or None, metric)`` of an ``eval_key``; None for any other key.

    >>> parse_eval_key("eval/a/greedy_acc"), parse_eval_key("eval/a/gsm8k/greedy_acc"), parse_eval_key("pool/size")
    (('a', None, 'greedy_acc'), ('a', 'gsm8k', 'greedy_acc'), None)
    """
    parts = key.split("/")
    if parts[0] != "eval" or len(parts) not in (3, 4):
        return None
    return parts[1], (parts[2] if len(parts) == 4 else None), parts[-1]


def phase_times(metrics: dict[str, Any]) -> dict[str, float]:
    """A step's ``timing/<phase>`` totals in seconds: not the per-agent ``timing/<phase>/<agent>`` nor the
    ``timing/<phase>_overlap`` ratios logged beside them.

    >>> phase_times({"timing/rollout": 1.0, "timing/rollout/a": 0.6, "timing/rollout_overlap": 1.2, "x": 3})
    {'rollout': 1.0}
    """
    out = {}
    for k, v in metrics.items():
        name = k.removeprefix("timing/")
        if k.startswith("timing/") and "/" not in name and not name.endswith("_overlap") and isinstance(v, int | float):
            out[name] = float(v)
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of metrics.jsonl or eval.jsonl (each has a ``step``); a line cut short by a kill is skipped.
    A run's file that ``hacrl compare --compact`` moved into its comparison's records.parquet is read from there
    (:mod:`hacrl.run.records`): the same records, in the same order."""
    if not path.is_file():
        from hacrl.run.records import compacted_lines  # pyarrow only for a compacted run

        lines = compacted_lines(path)
        return [r for r in lines or [] if isinstance(r, dict) and "step" in r]
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "step" in rec:
            out.append(rec)
    return out


def is_task_record(record: dict[str, Any]) -> bool:
    """An eval.jsonl or eval_problems.jsonl record of the task's held-out split at the training answer budget:
    not one of an eval benchmark, nor one at the longer ``trainer.eval_budget``.

    >>> is_task_record({"task": "add2"}), is_task_record({"benchmark": "gsm8k"}), is_task_record({"budget": 128})
    (True, False, False)
    """
    return "benchmark" not in record and "budget" not in record


def read_evals(run_dir: Path) -> dict[tuple[int, str], float]:
    """(step, agent) → greedy accuracy on the task's held-out split, from the run's eval.jsonl (from its
    metrics.jsonl's ``eval/<agent>/greedy_acc`` when eval.jsonl holds none)."""
    out: dict[tuple[int, str], float] = {}
    for r in read_jsonl(run_dir / "eval.jsonl"):
        if "agent" in r and is_task_record(r) and r.get("greedy_acc") is not None:
            out[int(r["step"]), r["agent"]] = float(r["greedy_acc"])
    if not out:
        for m in read_jsonl(run_dir / "metrics.jsonl"):
            for k, v in m.items():
                parsed = parse_eval_key(k)
                if parsed is not None and parsed[1:] == (None, "greedy_acc") and v is not None:
                    out[int(m["step"]), parsed[0]] = float(v)
    return out


def read_sampled_evals(run_dir: Path) -> dict[tuple[int, str], dict[str, float]]:
    """(step, agent) → ``{"avg", "pass", "k"}``: the sampled evaluation on the task's held-out split
    (``trainer.eval_k`` answers per problem: their mean accuracy avg@k and pass@k), from eval.jsonl; empty
    when the run evaluated greedily only."""
    out: dict[tuple[int, str], dict[str, float]] = {}
    for r in read_jsonl(run_dir / "eval.jsonl"):
        if "agent" in r and is_task_record(r) and r.get("sampled_avg") is not None:
            out[int(r["step"]), r["agent"]] = {"avg": float(r["sampled_avg"]), "k": int(r.get("k") or 0),
                                               "pass": float(r["sampled_pass"]) if r.get("sampled_pass")
                                               is not None else math.nan}
    return out


def read_problem_evals(run_dir: Path) -> list[dict[str, Any]]:
    """The per-problem evaluation records of a run (eval_problems.jsonl), in file order: one per (step,
    agent, suite) with ``step``, ``agent``, ``task`` or ``benchmark``, and the arrays of
    ``hacrl.trainer.evaluation.ProblemRecords`` (``ids``, ``reward``, ``unscorable``, ``finished``,
    ``tokens``, ``texts``; ``sampled`` and ``sampled_finished`` with ``trainer.eval_k`` > 0). Empty for a
    run made before these records existed; a line cut short by a kill is skipped."""
    return [r for r in read_jsonl(run_dir / "eval_problems.jsonl") if "agent" in r and "ids" in r]
