"""The Python trainer: a hacrl run built from Python objects, as TRL's ``GRPOTrainer`` is built.

>>> from hacrl import HACRLTrainer                                              # doctest: +SKIP
>>> def accuracy(completions, solution, **kwargs):                             # doctest: +SKIP
...     return [1.0 if c.strip() == s else 0.0 for c, s in zip(completions, solution)]
>>> trainer = HACRLTrainer(models=["builtin:qwen2-char", "builtin:llama-bpe"], reward_funcs=accuracy,
...                        train_dataset=[{"prompt": "07+85=", "solution": "92"}, ...], preset="tiny-test",
...                        overrides={"trainer.steps": 2})                     # doctest: +SKIP
>>> result = trainer.train()   # TrainResult: run_dir, accuracy {agent: (before, after)}, config   # doctest: +SKIP

What each argument becomes (a config, then the same start as ``hacrl train``: :func:`hacrl.cli.train.run_training`):

- ``models``: ``agents``. A string is a model spec (``builtin:<name>``, a directory, ``org/name`` in the
  Hugging Face cache); the preset's agent with that model keeps its settings (id, lr, ...), another gets an
  id from its name and the defaults. A dict is an agent's fields (``{"id": ..., "model": ..., "lr": ...}``).
  A loaded model, ``(model, tokenizer)`` or a model whose ``name_or_path`` has its tokenizer, is saved with
  ``save_pretrained`` under the data directory and trained from there (a copy: the object is not updated).
- ``reward_funcs``: ``task.reward`` (+ ``reward_weights``, ``reward_contract``). A string is a reward spec;
  a function with an importable spec (:func:`hacrl.rewards.spec_of`) goes by it; any other callable (a lambda,
  a closure, a function of ``__main__`` or a notebook) is registered in this process under a ``python:``
  name and reaches the scorer's worker processes pickled with cloudpickle (a dependency of hacrl).
- ``train_dataset`` / ``eval_dataset``: ``task.train_path`` / ``task.test_path`` (``task.kind: dataset``).
  A ``datasets.Dataset`` or a list of dicts is written once as JSONL to ``<data_dir>/<train|eval>-<hash>.jsonl``
  (``data_dir`` default: ``.hacrl-data`` beside the run directory), so config.yaml names a file that
  ``hacrl eval --run`` reads again; a string is a path or hub name as ``task.train_path`` takes it.
- ``args``: TRL's ``GRPOConfig`` keywords as a dict (``learning_rate``, ``lr_scheduler_type``, ``warmup_ratio``,
  ``num_train_epochs``, ``per_device_train_batch_size``, ...), as :mod:`hacrl.config.trl_args` maps them: the
  per-model ones on every agent (under an agent dict's own fields), ``output_dir`` and ``reward_weights`` as
  the arguments of those names; another TRL name is a one-line error naming hacrl's key.
- ``preset``, ``config`` (a YAML path or a dict) and ``overrides`` (``{"trainer.steps": 2}`` or
  ``["trainer.steps=2"]``) layer as ``--preset``, ``--config`` and ``--set`` do; the arguments above go
  between the config and the overrides.

``trainer.export()`` then writes each agent as a plain Hugging Face folder with a model card (``hacrl export``).
transformers' progress bars are off while ``train()`` runs (as in ``hacrl train``) and as they were afterwards.

Rewards are scored where ``hacrl train`` scores them, in the driver's scorer (its worker processes), for the
``local`` and the ``ray`` backend alike: callables never need to reach a Ray actor.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hacrl.config import Config, ConfigError, RolloutConfig, load_config
from hacrl.config.trl_args import TRLSettings, trl_settings

__all__ = ["HACRLTrainer", "TrainResult", "TrainingFailed", "train"]


class TrainingFailed(RuntimeError):
    """The run stopped without finishing (an agent failed, training diverged, a full disk, a stop request); the
    line above on stderr says why and how to continue. ``code`` is ``hacrl train``'s exit code."""

    def __init__(self, code: int, run_dir: Path) -> None:
        super().__init__(f"training in {run_dir} stopped with exit code {code}; the message above says why")
        self.code, self.run_dir = code, run_dir


@dataclass
class TrainResult:
    """A finished run: its directory, config, and each agent's held-out greedy accuracy (before, after)."""

    run_dir: Path
    config: Config
    accuracy: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)  # Trainer.train()'s: first/last evaluations, checkpoint


class HACRLTrainer:
    """A hacrl training built from Python (see the module doc); ``train()`` runs it and returns a TrainResult."""

    def __init__(self, models: Sequence[Any] | None = None,
                 reward_funcs: str | Callable[..., Any] | Sequence[str | Callable[..., Any]] | None = None, *,
                 train_dataset: Any = None, eval_dataset: Any = None, reward_weights: Sequence[float] | None = None,
                 reward_contract: str = "auto", preset: str | None = "tiny-model",
                 config: str | Path | Mapping[str, Any] | None = None,
                 overrides: Mapping[str, Any] | Sequence[str] | None = None, output_dir: str | Path | None = None,
                 data_dir: str | Path | None = None, overwrite: bool = False, resume: bool = False,
                 quiet: bool = True, args: Mapping[str, Any] | None = None) -> None:
        import yaml

        from hacrl.config.load import apply_override, merge_trees, preset_text

        tree: dict[str, Any] = yaml.safe_load(preset_text(preset)) or {} if preset else {}
        if config is not None:
            mine = dict(config) if isinstance(config, Mapping) else \
                yaml.safe_load(Path(config).read_text(encoding="utf-8")) or {}
            tree = merge_trees(tree, mine)
        sets = [f"{k}={json.dumps(v, default=str)}" for k, v in overrides.items()] if isinstance(overrides, Mapping) \
            else list(overrides or [])
        trl = _trl_args(args, tree, sets)  # TRL's GRPOConfig names, under the overrides
        tree = merge_trees(tree, trl.tree)
        output_dir = _given_once("output_dir", output_dir, trl.output_dir)
        reward_weights = _given_once("reward_weights", reward_weights, trl.reward_weights)
        if output_dir is not None:
            self.run_dir = Path(output_dir)
        else:  # as hacrl train names it: <run.output_dir>/<run.name or python-<algorithm>-<time>>
            probe = copy.deepcopy(tree)
            for assignment in sets:
                apply_override(probe, assignment)
            run, algorithm = probe.get("run") or {}, probe.get("algorithm") or {}
            self.run_dir = Path(run.get("output_dir") or "runs") / (
                run.get("name") or f"python-{algorithm.get('name', 'hacpo')}-{time.strftime('%Y%m%d-%H%M%S')}")
        self.data_dir = Path(data_dir) if data_dir is not None else self.run_dir.parent / ".hacrl-data"
        task: dict[str, Any] = {}
        if train_dataset is not None:
            task.update(kind="dataset", train_path=self._data(train_dataset, "train"))
            given = tree.get("task") or {}
            if not given.get("name") or given.get("kind") != "dataset":  # not the preset's builtin task name
                task["name"] = "dataset"
        if eval_dataset is not None:
            task["test_path"] = self._data(eval_dataset, "eval")
        if reward_funcs is not None:
            items = [reward_funcs] if isinstance(reward_funcs, str) or callable(reward_funcs) else list(reward_funcs)
            specs = [_reward_spec(f) for f in items]
            task["reward"] = specs[0] if len(specs) == 1 else specs
            task["reward_contract"] = reward_contract
            task["reward_weights"] = None if reward_weights is None else [float(w) for w in reward_weights]
        if task:
            tree = merge_trees(tree, {"task": task})
        if models is not None:
            tree["agents"] = self._agents(models, tree.get("agents") or [], trl.agent)
        elif trl.agent:
            tree["agents"] = [{**a, **trl.agent} for a in tree.get("agents") or []]
        self.config = _load(tree, sets)
        self.overwrite, self.resume, self.quiet = overwrite, resume, quiet

    def train(self) -> TrainResult:
        """Prepare the run directory and train, as ``hacrl train`` does (:func:`hacrl.cli.train.run_training`)."""
        from hacrl.cli.train import Launch, run_training
        from hacrl.run.sinks import eval_key, read_evals

        def command(run_dir: Path, flag: str | None, extra: list[str] | None = None) -> str:
            arg = {"--resume": "resume=True", "--overwrite": "overwrite=True"}.get(flag or "", "")
            sets = f", overrides=[{', '.join(repr(e) for e in extra)}]" if extra else ""
            return f"HACRLTrainer(..., output_dir={str(run_dir)!r}{', ' + arg if arg else ''}{sets}).train()"

        launch = Launch(resume="latest" if self.resume else None, overwrite=self.overwrite, quiet=self.quiet,
                        command=command)
        with _no_progress_bars():
            outcome = run_training(self.config, self.run_dir, launch)
        if outcome.code != 0:
            raise TrainingFailed(outcome.code, self.run_dir)
        result = outcome.result or {}
        first, last = result.get("first") or {}, result.get("last") or {}
        accuracy = {a.id: (first.get(eval_key(a.id)), last.get(eval_key(a.id))) for a in self.config.agents}
        if outcome.result is None:  # a run that had already finished: its evaluations from eval.jsonl
            evals = read_evals(self.run_dir)
            end = max((step for step, _ in evals), default=0)
            accuracy = {a.id: (evals.get((0, a.id)), evals.get((end, a.id))) for a in self.config.agents}
        return TrainResult(self.run_dir, self.config, accuracy, result)

    def export(self, output_dir: str | Path | None = None, *, step: int | None = None,
               agents: Sequence[str] | None = None) -> list[Path]:
        """Each agent of the trained run as a plain Hugging Face folder with a model card, as ``hacrl export``
        writes it (:func:`hacrl.cli.export.export_run`; default ``output_dir``: ``<run>/export/step-<N>``)."""
        from hacrl.cli.export import export_run

        return export_run(self.run_dir, step=step, output=None if output_dir is None else Path(output_dir),
                          agents=None if agents is None else list(agents))

    # ---- arguments into config values -----------------------------------------------------------
    def _data(self, data: Any, kind: str) -> str:
        """A path for ``task.train_path``/``test_path``: a string as it is, rows written once as JSONL."""
        if isinstance(data, (str, Path)):
            return str(data)
        if isinstance(data, Mapping) or (hasattr(data, "keys") and not hasattr(data, "features")):
            splits = ", ".join(repr(k) for k in list(data.keys())[:4])
            raise ConfigError(f"{kind}_dataset: a mapping of {splits} (a DatasetDict?); pass one split, e.g. "
                              f"dataset['train'], or a list of rows")
        text = "".join(json.dumps(dict(row), default=_jsonable, ensure_ascii=False) + "\n" for row in data)
        if not text:
            raise ConfigError(f"{kind}_dataset is empty; give rows")
        digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]
        path = self.data_dir / f"{kind}-{digest}.jsonl"
        if not path.is_file():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
        return str(path.resolve())

    def _agents(self, models: Sequence[Any], preset_agents: list[dict[str, Any]],
                common: Mapping[str, Any]) -> list[dict[str, Any]]:
        """``agents`` from ``models``, each with the ``common`` fields (``args``' learning rate, schedule, ...):
        over a preset agent's, under those an agent's dict gives."""
        if isinstance(models, (str, Mapping)) or hasattr(models, "save_pretrained"):
            models = [models]
        by_model = {a.get("model"): a for a in preset_agents if isinstance(a, dict)}
        out: list[dict[str, Any]] = []
        for item in models:
            if isinstance(item, Mapping):
                agent = {**common, **item}
                agent.setdefault("id", _agent_id(str(agent.get("model", "agent")), out))
            elif isinstance(item, (str, Path)):
                agent = {**(by_model.get(str(item)) or {"id": _agent_id(str(item), out), "model": str(item)}),
                         **common}
            else:
                agent = {**self._loaded_model(item, out), **common}
            if any(a["id"] == agent["id"] for a in out):
                agent["id"] = _agent_id(agent["id"], out)
            out.append(agent)
        return out

    def _loaded_model(self, item: Any, taken: list[dict[str, Any]]) -> dict[str, Any]:
        """A loaded model (or ``(model, tokenizer)``) saved under the data directory, as an agent of that path."""
        model, tokenizer = item if isinstance(item, tuple) else (item, None)
        if not hasattr(model, "save_pretrained"):
            raise ConfigError(f"models: {type(model).__name__} is neither a model spec, an agent's fields (dict) nor "
                              f"a loaded Hugging Face model; give one of those")
        source = getattr(model, "name_or_path", "") or getattr(getattr(model, "config", None), "_name_or_path", "")
        if tokenizer is None:
            from transformers import AutoTokenizer

            try:
                tokenizer = AutoTokenizer.from_pretrained(source)
            except Exception as exc:  # noqa: BLE001 - any failure means: the tokenizer must be given
                raise ConfigError(f"models: no tokenizer found for the loaded model ({source or 'no name_or_path'}: "
                                  f"{exc}); pass (model, tokenizer)") from None
        agent_id = _agent_id(str(source) or type(model).__name__, taken)
        where = self.data_dir / "models" / f"{self.run_dir.name}-{agent_id}"
        model.save_pretrained(where)
        tokenizer.save_pretrained(where)
        return {"id": agent_id, "model": str(where.resolve())}


def train(models: Sequence[Any] | None = None,
          reward_funcs: str | Callable[..., Any] | Sequence[str | Callable[..., Any]] | None = None,
          **kwargs: Any) -> TrainResult:
    """``HACRLTrainer(models, reward_funcs, **kwargs).train()``."""
    return HACRLTrainer(models, reward_funcs, **kwargs).train()


def _trl_args(args: Mapping[str, Any] | None, tree: dict[str, Any], sets: list[str]) -> TRLSettings:
    """``args`` (TRL's GRPOConfig names) as hacrl's values (:func:`hacrl.config.trl_args.trl_settings`), G from
    the config with the overrides when ``args`` has no num_generations."""
    from hacrl.config.load import apply_override

    if not args:
        return TRLSettings()
    if not isinstance(args, Mapping):
        raise ConfigError(f"args: {type(args).__name__} is not a mapping; give TRL's GRPOConfig keywords as a dict, "
                          f"args=dict(learning_rate=1e-6, ...)")
    probe = copy.deepcopy(tree)
    for assignment in sets:
        apply_override(probe, assignment)
    default = RolloutConfig.model_fields["rollouts_per_prompt"].default
    return trl_settings(args, rollouts_per_prompt=(probe.get("rollout") or {}).get("rollouts_per_prompt", default))


def _given_once(name: str, given: Any, from_args: Any) -> Any:
    if given is not None and from_args is not None:
        raise ConfigError(f"{name} is given twice (the {name} argument and args[{name!r}]); give one")
    return given if given is not None else from_args


def _reward_spec(fn: str | Callable[..., Any]) -> str:
    """A reward's spec: a string as it is; a function by its importable spec; else a ``python:`` name (pickled
    for the workers). A function of ``__main__`` is pickled too: loading the script again in a worker would
    run it again."""
    from hacrl.rewards import register_python, spec_of

    if isinstance(fn, str):
        return fn
    if not callable(fn):
        raise ConfigError(f"reward_funcs: {type(fn).__name__} is neither a reward spec nor a callable")
    spec = None if getattr(fn, "__module__", None) == "__main__" else spec_of(fn)
    return spec or register_python(fn)


def _agent_id(source: str, taken: list[dict[str, Any]]) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", source.removeprefix("builtin:").rstrip("/").split("/")[-1]).strip("-")
    base = base or "agent"
    ids = {a.get("id") for a in taken}
    name, n = base, 2
    while name in ids:
        name, n = f"{base}-{n}", n + 1
    return name


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """transformers' progress bars (loading and writing weights) off while hacrl trains, as ``hacrl train`` has
    them; as they were afterwards."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def _jsonable(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else str(value)


def _load(tree: dict[str, Any], overrides: list[str]) -> Config:
    """``tree`` with ``overrides`` on it, validated by :func:`hacrl.config.load_config` (through a YAML file:
    it reads presets, files and --set, and names a dataset task after its file)."""
    import yaml

    with tempfile.TemporaryDirectory(prefix="hacrl-api-") as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
        return load_config(path=path, overrides=overrides)
