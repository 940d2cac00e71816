"""Where metrics go: a JSONL file (always), TensorBoard event files (if installed), or nothing.

Each sink takes flat ``{namespaced/key: number}`` dicts once per step.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Protocol

logger = logging.getLogger(__name__)


class MetricsSink(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...
    def close(self) -> None: ...


class JsonlSink:
    """Appends one JSON object per step; flushed and fsynced so a kill loses at most the current line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._f = open(path, "a", encoding="utf-8")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
        self._f.write(json.dumps({"step": step, **clean}, sort_keys=True) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class TensorBoardSink:
    def __init__(self, log_dir: Path, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the `tensorboard` package

        self._w = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for k, v in metrics.items():
            if isinstance(v, int | float) and math.isfinite(v):
                self._w.add_scalar(k, v, step)
        self._w.flush()

    def close(self) -> None:
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
        for s in self.sinks:
            s.close()
