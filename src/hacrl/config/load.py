"""Loading a config tree: named presets, YAML files, ``--set a.b=c`` overrides, one-line errors."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from hacrl.config.schema import Config, ConfigError, TaskConfig
from hacrl.config.vocabulary import describe, foreign_key, leaves


def preset_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("hacrl.presets").iterdir() if p.name.endswith(".yaml"))


def preset_text(name: str) -> str:
    f = resources.files("hacrl.presets") / f"{name}.yaml"
    if not f.is_file():
        import difflib

        close = difflib.get_close_matches(name, preset_names(), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(f"--preset {name!r} is unknown; {hint}valid: {', '.join(preset_names())}")
    return f.read_text()


def _parse_value(raw: str) -> Any:
    try:
        return yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        return raw


def apply_override(tree: dict[str, Any], assignment: str) -> None:
    """Apply ``a.b.c=value`` to a nested dict; list items (agents) are addressed by id — dots and all, as in
    ``agents.qwen3-1.7b-base.lr`` — or by index.

    >>> tree = {"agents": [{"id": "qwen3-1.7b-base", "lr": 1e-6}, {"id": "b"}]}
    >>> apply_override(tree, "agents.qwen3-1.7b-base.lr=0.002"); apply_override(tree, "agents.1.lr=0.003")
    >>> tree["agents"]
    [{'id': 'qwen3-1.7b-base', 'lr': 0.002}, {'id': 'b', 'lr': 0.003}]
    """
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected key=value, e.g. trainer.steps=20")
    key, raw = assignment.split("=", 1)
    parts = key.strip().split(".")
    node: Any = tree
    i = 0
    while i < len(parts) - 1:
        part, where = parts[i], ".".join(parts[: i + 1])
        if isinstance(node, list):
            node, used = _list_item(node, parts[i:-1], where)
            i += used
            continue
        if not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {where} is not a section")
        node = node.setdefault(part, {})
        i += 1
    last = parts[-1]
    if isinstance(node, list):
        raise ConfigError(f"--set {key}: name a field of the item, e.g. agents.<id>.lr=1e-4")
    if not isinstance(node, dict):
        raise ConfigError(f"--set {key}: {'.'.join(parts[:-1])} is not a section")
    node[last] = _parse_value(raw)


def _list_item(items: list[Any], parts: list[str], where: str) -> tuple[Any, int]:
    """The item ``parts`` start with and how many parts its name took: the longest id made of leading parts
    (an id may hold dots), else an index."""
    ids = {str(item.get("id")): item for item in items if isinstance(item, dict)}
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in ids:
            return ids[".".join(parts[:n])], n
    part = parts[0]
    if part.isdigit() and int(part) < len(items):
        return items[int(part)], 1
    listed = ", ".join(f"{k} (agents.{i})" for i, k in enumerate(ids))
    raise ConfigError(f"--set {where}: no agent with id {part!r}; ids: {listed}")


def _format_error(err: ValidationError, tree: dict[str, Any] | None = None) -> str:
    return _format_one(err.errors()[0], tree)


def config_problems(preset: str | None = None, path: str | Path | None = None,
                    overrides: list[str] | None = None) -> list[str]:
    """Every problem of the config ``load_config`` would build, one line each (``load_config`` stops at the
    first): ``hacrl train --check``'s config part. Empty when it loads."""
    try:
        load_config(preset, path, overrides)
    except ConfigError as exc:
        first = str(exc)
    else:
        return []
    try:  # the tree it validated, to list the others too
        tree = _tree(preset, path, overrides)
        Config.model_validate(tree)
    except ValidationError as err:
        return list(dict.fromkeys(_format_one(e, tree) for e in err.errors()))
    except ConfigError:
        pass
    return [first]


def config_without_errors(preset: str | None = None, path: str | Path | None = None,
                          overrides: list[str] | None = None) -> tuple[Config | None, int]:
    """The config ``load_config`` would build with every key that fails validation left at its default, and
    how many keys that was: what ``hacrl train --check`` checks further when the config has errors. None when
    it cannot be built so (a file or ``--set`` that does not parse, a required key missing, an error that no
    key of the tree carries).

    >>> cfg, dropped = config_without_errors("tiny-test", overrides=["trainer.stepz=3", "trainer.steps=-1"])
    >>> cfg.trainer.steps, dropped
    (20, 2)
    """
    try:
        tree = _tree(preset, path, overrides)
    except ConfigError:
        return None, 0
    dropped: set[tuple[Any, ...]] = set()
    while True:
        try:
            return Config.model_validate(tree), len(dropped)
        except ValidationError as err:
            removed = {key for e in err.errors() if (key := _drop(tree, list(e["loc"]))) is not None}
        if not removed:
            return None, len(dropped)
        dropped |= removed


def _drop(tree: dict[str, Any], loc: list[Any]) -> tuple[Any, ...] | None:
    """Remove the deepest key of ``tree`` on the path ``loc`` (pydantic's error location, whose tail may name
    a union's member type rather than a key) and return its path; None when there is none, or it is a list
    item (an agent is not a key with a default).

    >>> tree = {"task": {"reward": 3}, "agents": [{"id": "a", "lrr": 1}]}
    >>> _drop(tree, ["task", "reward", "str"]), _drop(tree, ["agents", 0, "lrr"]), _drop(tree, ["agents", 0, "x"])
    (('task', 'reward'), ('agents', 0, 'lrr'), None)
    >>> tree
    {'task': {}, 'agents': [{'id': 'a'}]}
    """
    node: Any = tree
    found: list[Any] = []
    for part in loc:
        if isinstance(node, dict) and part in node or isinstance(node, list) and isinstance(part, int) \
                and 0 <= part < len(node):
            found.append(part)
            node = node[part]
        else:
            break
    if not found or isinstance(found[-1], int):
        return None
    parent: Any = tree
    for part in found[:-1]:
        parent = parent[part]
    del parent[found[-1]]
    return tuple(found)


def _format_one(first: Any, tree: dict[str, Any] | None = None) -> str:
    parts = list(first["loc"])
    agents = (tree or {}).get("agents")
    if len(parts) > 1 and parts[0] == "agents" and isinstance(parts[1], int) and isinstance(agents, list) \
            and parts[1] < len(agents) and isinstance(agents[parts[1]], dict) and agents[parts[1]].get("id"):
        parts[1] = agents[parts[1]]["id"]  # agents.<id>.lr, as --set names it, not agents.0.lr
    loc = ".".join(str(x) for x in parts)
    if first["type"] == "extra_forbidden":
        guess, foreign = _guess_key(list(first["loc"])), _foreign_answer(first, loc)
        if foreign is not None and (guess is None or guess.rsplit(".", 1)[-1] != first["loc"][-1]):
            # a TRL/verl name wins over a close spelling (beta is not delta); the same field elsewhere wins over it
            return f"{foreign} (every key: `hacrl presets --fields`)"
        prefix = ".".join(str(x) for x in parts[:-1])
        fix = f"did you mean {guess if '.' in guess else '.'.join(filter(None, [prefix, guess]))!r}?" if guess \
            else "remove it or check its spelling"
        return f"config: unknown key {loc!r}; {fix} (every key: `hacrl presets --fields`)"
    if first["type"] == "missing":
        return f"config: {loc} is required"
    value = first.get("input")
    shown = f" (got {value!r})" if not isinstance(value, dict | list) else ""
    msg = first["msg"].removeprefix("Value error, ")
    return f"config: {loc}: {msg}{shown}" if loc else f"config: {msg}"


def _foreign_answer(error: Any, loc: str) -> str | None:
    """``config: unknown key …`` answered with hacrl's key for each TRL or verl name under the unknown key
    (:mod:`hacrl.config.vocabulary`), or None when it holds none: one key (``--set data.train_batch_size=8``
    is named whole), or a section of them (verl's ``data:`` pasted into a file)."""
    raw = list(error["loc"])
    paths = leaves(raw, error.get("input"))
    found = [f for f in map(foreign_key, paths) if f is not None]
    if not found:
        return None
    if len(paths) == 1:  # the one key, with what it holds: actor_rollout_ref.actor.optim.lr
        loc = ".".join([loc, *paths[0][len(leaves(raw, None)[0]):]])
    return f"config: unknown key {loc!r}; " + "; ".join(describe(*f) for f in found)


def _section_of(annotation: Any) -> type[BaseModel] | None:
    """The config section an annotation holds: ``TaskConfig``, ``list[AgentSpec]``, ``LoraSpec | None``."""
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next(filter(None, (_section_of(a) for a in typing.get_args(annotation))), None)


def _guess_key(loc: list[Any]) -> str | None:
    """The key an unknown one was probably meant to be: a close spelling in its own section (``step`` →
    ``steps``), else a section holding that exact field (``trainer.delta`` → ``algorithm.delta``).

    >>> _guess_key(["trainer", "step"]), _guess_key(["trainer", "delta"]), _guess_key(["agents", 0, "lrr"])
    ('steps', 'algorithm.delta', 'lr')
    >>> _guess_key(["trainr"]), _guess_key(["trainer", "zzz"]) is None
    ('trainer', True)
    """
    import difflib

    section: type[BaseModel] | None = Config
    for part in loc[:-1]:
        if isinstance(part, str) and section is not None:
            field = config_fields(section).get(part)
            section = _section_of(field.annotation) if field else None
    if section is None or not isinstance(loc[-1], str):
        return None
    close = difflib.get_close_matches(loc[-1], list(config_fields(section)), n=1, cutoff=0.6)
    if close:
        return close[0]
    if section is Config or len(loc) != 2:
        return None
    homes = [name for name, f in config_fields(Config).items()
             if (sub := _section_of(f.annotation)) is not None and sub is not section and loc[-1] in sub.model_fields]
    return f"{'agents.<id>' if homes[0] == 'agents' else homes[0]}.{loc[-1]}" if homes else None


def config_fields(section: type[BaseModel]) -> dict[str, Any]:
    """A section's fields by the key a config file uses (``async``, the field ``async_``)."""
    return {f.alias or name: f for name, f in section.model_fields.items()}


def build_config(tree: dict[str, Any]) -> Config:
    try:
        return Config.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(_format_error(err, tree)) from None


def load_config(
    preset: str | None = None, path: str | Path | None = None, overrides: list[str] | None = None
) -> Config:
    """The preset (``tiny-model`` when neither is given), then the YAML file at ``path`` layered on it (later
    wins: see :func:`merge_trees`), then ``overrides``; validated. A dataset task without ``task.name`` is
    named after its file (:func:`dataset_name`), so config.yaml records the name the run goes by."""
    return build_config(_tree(preset, path, overrides))


def _tree(preset: str | None, path: str | Path | None, overrides: list[str] | None) -> dict[str, Any]:
    """The tree ``load_config`` validates: the preset, the file layered on it, the overrides."""
    tree = _read_tree(preset_text(preset or "tiny-model")) if preset or path is None else {}
    if path is not None:
        tree = merge_trees(tree, _read_tree(_config_text(Path(path)), str(path)))
    for assignment in overrides or []:
        apply_override(tree, assignment)
    task = tree.get("task")
    # a dataset left at no name or at the builtin default (add2, say from a preset it layers on): its file's
    if isinstance(task, dict) and task.get("kind") == "dataset" \
            and task.get("name") in (None, TaskConfig.model_fields["name"].default) \
            and isinstance(task.get("train_path"), str) and task["train_path"].strip():
        task["name"] = dataset_name(task["train_path"])
    return tree


def _config_text(p: Path) -> str:
    if p.is_dir():
        raise ConfigError(f"--config {p}: is a directory; give a YAML file")
    if not p.is_file():
        raise ConfigError(f"--config {p}: no such file")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--config {p}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                          f"{exc.start}); save the file as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"--config {p}: cannot be read ({exc.strerror}); check its permissions") from None


def _read_tree(text: str, source: str = "config") -> dict[str, Any]:
    r"""The YAML mapping in ``text``; an error names ``source`` (the file), the line and column, and the problem.

    >>> _read_tree("trainer:\n  steps: [1\n", "my.yaml")
    Traceback (most recent call last):
    ...
    hacrl.config.schema.ConfigError: my.yaml:3:1: not valid YAML: while parsing a flow sequence, expected ',' or ']', but got '<stream end>'
    """
    try:
        tree = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None)
        context = getattr(exc, "context", None)
        what = ", ".join(filter(None, [context, problem])) or str(exc).splitlines()[0]
        raise ConfigError(f"{at}: not valid YAML: {what}") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections")
    return tree


def merge_trees(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` layered on ``base`` (a config file on a preset): mappings merge key by key, any other value of
    ``top`` replaces ``base``'s. ``agents`` merge by id when every agent ``top`` lists is one of ``base``'s
    (a file that changes an agent's lr); a list naming another agent replaces the whole list.

    >>> base = {"trainer": {"steps": 30, "batch_size": 16}, "agents": [{"id": "a", "lr": 1.0}, {"id": "b"}]}
    >>> merge_trees(base, {"trainer": {"steps": 2}, "agents": [{"id": "b", "lr": 2.0}]})
    {'trainer': {'steps': 2, 'batch_size': 16}, 'agents': [{'id': 'a', 'lr': 1.0}, {'id': 'b', 'lr': 2.0}]}
    >>> merge_trees(base, {"agents": [{"id": "c", "model": "m"}]})["agents"]
    [{'id': 'c', 'model': 'm'}]
    """
    out = dict(base)
    for key, value in top.items():
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            out[key] = merge_trees(old, value)
        elif key == "agents" and isinstance(old, list) and isinstance(value, list) and value \
                and all(isinstance(a, dict) for a in [*old, *value]) \
                and {a.get("id") for a in value} <= {a.get("id") for a in old}:
            by_id = {a.get("id"): a for a in value}
            out[key] = [merge_trees(a, by_id[a.get("id")]) if a.get("id") in by_id else a for a in old]
        else:
            out[key] = value
    return out


_SPLIT_NAME = re.compile(r"(train|training|test|testing|val|valid|validation|dev|eval|data)(-\d+-of-\d+)?",
                         re.IGNORECASE)


def dataset_name(spec: str) -> str:
    """The name of a dataset task that has no ``task.name``: its file's, or its folder's when the file is
    named after its split (``train.jsonl`` says nothing); a Hub data set's repo name.

    >>> dataset_name("data/gsm8k/train.jsonl"), dataset_name("~/data/gsm8k/train.parquet")
    ('gsm8k', 'gsm8k')
    >>> dataset_name("my_problems.jsonl"), dataset_name("openai/gsm8k@main:test"), dataset_name("gsm8k_saved/")
    ('my_problems', 'gsm8k', 'gsm8k_saved')
    """
    path = Path(spec.strip()).expanduser().absolute()
    for part in [path, *path.parents]:
        stem = re.split("[@:]", part.name)[0]  # a Hub name's @revision and :split
        stem = stem.removesuffix(".jsonl").removesuffix(".json").removesuffix(".parquet")
        if stem and not _SPLIT_NAME.fullmatch(stem):
            return stem
    return "dataset"


def dump_config(cfg: Config) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
