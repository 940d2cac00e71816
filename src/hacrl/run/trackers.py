"""Which metric sinks a run writes to (``run.loggers``), and the experiment trackers wandb and trackio.

``metrics.jsonl`` is always written: resume, ``hacrl compare`` and the benches read it back. The other
sinks get the same flat ``{namespaced/key: number}`` dict at the same step, so a metric has one name
everywhere (``agent/<id>/reward``, ``pool/size``, ``timing/rollout``, ``eval/<id>/greedy_acc``).

| logger | extra | where |
|---|---|---|
| ``jsonl`` | (core) | ``run_dir/metrics.jsonl`` |
| ``tensorboard`` | ``hacrl[report]`` | ``run_dir/tensorboard/`` |
| ``wandb`` | ``hacrl[wandb]`` | wandb project ``run.project`` (``WANDB_MODE=offline``: ``run_dir/wandb/``) |
| ``trackio`` | ``hacrl[trackio]`` | project ``run.project`` in trackio's local store (``$TRACKIO_DIR``) |

Default (``run.loggers`` unset): jsonl, plus tensorboard when the package is installed (nothing said
otherwise). A logger that is listed but not installed stops the run before any model loads with one line
naming the pip command; the older ``run.tensorboard: true`` without TensorBoard is one warning line at
start. Both trackers receive the resolved config and the run directory as their run config, and the
tracker's run identity is kept in ``run_dir/trackers.json`` so that ``--resume`` continues the same
tracker run (wandb: the same run id with ``resume="allow"``; trackio: the same run name with
``resume="allow"``). wandb refuses steps at or below its last logged step, so after a kill steps that
were logged past the checkpoint are not logged again there (metrics.jsonl and TensorBoard are rewound).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import secrets
from pathlib import Path
from typing import Any

from hacrl.config import ConfigError
from hacrl.run.files import write_atomic
from hacrl.run.sinks import JsonlSink, MetricsSink, MultiSink, tensorboard_sink

__all__ = ["LOGGERS", "TrackioSink", "WandbSink", "make_sinks", "resolve_loggers"]

logger = logging.getLogger(__name__)

# logger name -> (module that must import, pip extra)
LOGGERS: dict[str, tuple[str | None, str | None]] = {
    "jsonl": (None, None),
    "tensorboard": ("tensorboard", "report"),
    "wandb": ("wandb", "wandb"),
    "trackio": ("trackio", "trackio"),
}
TRACKERS_FILE = "trackers.json"


def _installed(module: str | None) -> bool:
    return module is None or importlib.util.find_spec(module) is not None


def resolve_loggers(run: Any) -> list[str]:
    """The loggers of ``run`` (a ``RunConfig``): jsonl first; a missing one listed is a ConfigError. An explicit
    ``run.loggers`` is the list; ``run.tensorboard`` (the older switch) adds TensorBoard only where it is unset
    and removes it (false) either way."""
    if run.loggers is None:
        names = ["jsonl", "tensorboard"] if _installed("tensorboard") else ["jsonl"]
        if run.tensorboard and "tensorboard" not in names:
            logger.warning("run.tensorboard is true but tensorboard is not installed: no TensorBoard events; "
                           "fix: pip install 'hacrl[report]' or set run.tensorboard=false")
    else:  # an explicit list is the whole answer: a preset's older `tensorboard: true` does not add to it
        names = ["jsonl", *dict.fromkeys(n for n in run.loggers if n != "jsonl")]
        for name in names:
            module, extra = LOGGERS[name]
            if not _installed(module):
                raise ConfigError(f"run.loggers: {name} is not installed; fix: pip install 'hacrl[{extra}]' "
                                  f"or remove {name} from run.loggers")
    if run.tensorboard is False and "tensorboard" in names:
        names.remove("tensorboard")
    return names


def _numbers(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if isinstance(v, int | float) and math.isfinite(v)}


def _read_ids(run_dir: Path) -> dict[str, Any]:
    path = run_dir / TRACKERS_FILE
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, json.JSONDecodeError):
        return {}


def _save_id(run_dir: Path, name: str, value: dict[str, Any]) -> None:
    ids = {**_read_ids(run_dir), name: value}
    write_atomic(run_dir / TRACKERS_FILE, json.dumps(ids, indent=1, sort_keys=True))  # via trackers.json.tmp


class WandbSink:
    """A wandb run; its id is saved in ``run_dir/trackers.json`` and reused on resume."""

    def __init__(self, run_dir: Path, config: dict[str, Any], project: str) -> None:
        import wandb

        saved = _read_ids(run_dir).get("wandb", {})
        run_id = saved.get("id") or secrets.token_hex(4)  # wandb ids: [a-z0-9]
        self.run = wandb.init(project=saved.get("project", project), name=run_dir.name, id=run_id,
                              resume="allow", dir=str(run_dir), config=config)
        _save_id(run_dir, "wandb", {"id": run_id, "project": saved.get("project", project)})

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(_numbers(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


class TrackioSink:
    """A trackio run named after the run directory (saved in ``run_dir/trackers.json``), resumed by name."""

    def __init__(self, run_dir: Path, config: dict[str, Any], project: str) -> None:
        import trackio

        saved = _read_ids(run_dir).get("trackio", {})
        self.project, self.name = saved.get("project", project), saved.get("name", run_dir.name)
        self.run = trackio.init(project=self.project, name=self.name, config=config, resume="allow")
        _save_id(run_dir, "trackio", {"project": self.project, "name": self.name})

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(_numbers(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


def make_sinks(names: list[str], run_dir: Path, config: dict[str, Any], *, step: int,
               project: str) -> MultiSink:
    """The sinks ``names`` (from :func:`resolve_loggers`) for a run at ``step`` (0, or the resumed step)."""
    tracked = {**config, "run_dir": str(run_dir.resolve())}
    sinks: list[MetricsSink] = [JsonlSink(run_dir / "metrics.jsonl")]
    try:
        for name in names:
            if name == "tensorboard":
                # purge_step drops TensorBoard events a killed run wrote after the checkpoint
                sinks.append(tensorboard_sink(run_dir / "tensorboard", purge_step=step + 1))
            elif name == "wandb":
                sinks.append(WandbSink(run_dir, tracked, project))
            elif name == "trackio":
                sinks.append(TrackioSink(run_dir, tracked, project))
    except BaseException:
        MultiSink(sinks).close()
        raise
    return MultiSink(sinks)
