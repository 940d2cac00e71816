"""The one rule for continuing a run: which settings may differ between a run and its continuation."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel

from hacrl.config.load import config_fields
from hacrl.config.schema import AgentSpec, Config, _Section

# Settings that may differ between a run and its continuation: ``hacrl train --resume``, and ``hacrl compare``
# resuming or reusing a run directory. They change neither what is trained nor what a logged number
# measures: how far it runs (but a learning-rate schedule other than constant is planned over the steps, and
# its checkpoint refuses another count: ``hacrl.agents.lr_schedule``), how often it evaluates and checkpoints,
# extra benchmark evaluations, where logs go, how the work is split (threads, micro-batches: the same sums in
# another order) and where agents run. Not here: trainer.eval_size and eval_k (the held-out numbers would
# measure something else). ``agents.*.x`` is field x of every agent.
RESUME_NEUTRAL = frozenset({
    "trainer.steps", "trainer.num_train_epochs", "trainer.eval_every", "trainer.eval_benchmarks",
    "trainer.eval_budget",
    "trainer.start_eval_cache", "trainer.checkpoint_every",
    "trainer.keep_last", "trainer.log_samples", "trainer.eval_texts", "trainer.threads", "trainer.micro_batch_size",
    "run.name", "run.output_dir", "run.tensorboard", "run.loggers", "run.project", "task.reward_timeout_s",
    "backend", "agents.*.num_cpus", "agents.*.num_gpus",
})


def training_differences(saved: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, saved value, new value)`` for every setting outside ``RESUME_NEUTRAL`` where two config trees
    (a run's config.yaml and ``Config.model_dump(mode="json")``) differ.

    Sections are compared field by field and agents by id (another agent list is the one difference
    ``agents``); other values, dicts and lists included, are compared whole. A field only one tree has
    (added or removed between hacrl versions) is passed over, unless it was added with a plain default: then
    the older run had that default.

    >>> old = {"trainer": {"steps": 2, "batch_size": 4}, "agents": [{"id": "a", "lr": 0.001, "num_cpus": 1}]}
    >>> new = {"trainer": {"steps": 9, "batch_size": 4}, "agents": [{"id": "a", "lr": 0.002, "num_cpus": 4}]}
    >>> training_differences(old, new)
    [('agents.a.lr', 0.001, 0.002)]
    >>> training_differences({"algorithm": {}}, {"algorithm": {"cross_window": "adaptive"}})
    [('algorithm.cross_window', 'fixed', 'adaptive')]
    """
    return list(_differences(Config, saved, new, ""))


def _differences(section: type[BaseModel], old: dict[str, Any], new: dict[str, Any],
                 prefix: str) -> Iterator[tuple[str, Any, Any]]:
    for name, field in config_fields(section).items():
        key, a, b = f"{prefix}{name}", old.get(name, _MISSING), new.get(name, _MISSING)
        if a is _MISSING and key in LEGACY_BEHAVIOUR and LEGACY_BEHAVIOUR[key][0](old):
            a = LEGACY_BEHAVIOUR[key][1]  # added since the run was made, and no value of it is what the run did
        elif a is _MISSING and isinstance(field.default, str | int | float | bool):
            a = field.default  # a setting added since the run was made: the run had its default
        generic = f"agents.*.{name}" if prefix.startswith("agents.") else key
        if a is _MISSING or b is _MISSING or generic in RESUME_NEUTRAL:
            continue
        if section is Config and name == "agents":
            old_ids, new_ids = ([x.get("id") if isinstance(x, dict) else x for x in v] for v in (a, b))
            if old_ids != new_ids:
                yield key, old_ids, new_ids
            else:
                for x, y in zip(a, b, strict=True):
                    yield from _differences(AgentSpec, x, y, f"agents.{x['id']}.")
        elif isinstance(field.annotation, type) and issubclass(field.annotation, _Section) \
                and isinstance(a, dict) and isinstance(b, dict):
            yield from _differences(field.annotation, a, b, f"{key}.")
        elif a != b:
            yield key, a, b


_MISSING = object()

# Settings added since some runs were made whose absence does not mean their default: such a run did what no
# value of the setting reproduces, so it never continues (nor is reused by compare) under today's code. Key →
# (does it apply to the run's section, what the run did).
LEGACY_BEHAVIOUR: dict[str, tuple[Callable[[dict[str, Any]], bool], str]] = {
    "task.test_seed": (lambda task: task.get("kind", "builtin") in ("reasoning-gym", "dataset"),
                       "none (its held-out split moved with run.seed; made before one fixed held-out set)"),
}


def resume_conflict(saved: dict[str, Any], new: dict[str, Any]) -> str | None:
    """None when a run made with the config tree ``saved`` may continue under ``new``; else one line naming
    every differing training setting (both paths that continue runs refuse with it).

    >>> resume_conflict({"algorithm": {"alpha": 1.0}}, {"algorithm": {"alpha": 0.5}})[:37]
    'algorithm.alpha=1.0, now 0.5; a run c'
    """
    found = training_differences(saved, new)
    if not found:
        return None
    listed = "; ".join(f"{key}={a!r}, now {b!r}" for key, a, b in found)
    return (f"{listed}; a run continues only with the training settings it began with (only the step count, "
            f"evaluation and checkpoint cadence, benchmarks, logging, threads, micro-batch size, the reward "
            f"time limit and where agents run may change)")
