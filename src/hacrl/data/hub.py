"""Hugging Face Hub names for models and data sets, read from the local Hub cache only.

hacrl never downloads: ``agents.<id>.model: Qwen/Qwen3-0.6B`` (optionally ``@<revision>``: a branch,
tag or commit hash) resolves to the snapshot directory that ``hf download Qwen/Qwen3-0.6B`` (or an
earlier ``from_pretrained``) left in the Hub cache, ``$HF_HUB_CACHE`` (default ``$HF_HOME/hub``,
``~/.cache/huggingface/hub``): ``models--Qwen--Qwen3-0.6B/snapshots/<commit>/…``, with
``refs/<branch>`` naming the commit. Data sets work the same way (``datasets--org--name``; see
:func:`hub_dataset_rows`). The lookup is ``huggingface_hub.snapshot_download(..., local_files_only=True)``,
which touches no network whatever ``HF_HUB_OFFLINE`` says; a name that is not cached is a one-line
:class:`~hacrl.errors.InputError` naming the ``hf download`` command that fetches it.

A local path that exists always wins over a Hub name of the same spelling (``models/foo`` as a directory
is that directory). A spec is taken for a Hub name only if it looks like one: ``org/name`` with no
other ``/``, not starting with ``.``, ``/`` or ``~``.

Run: ``python -m hacrl.data.hub Qwen/Qwen3-0.6B`` prints the cached snapshot directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hacrl.errors import InputError

__all__ = ["hub_cache_dir", "hub_dataset_rows", "is_hub_name", "parse_hub_name", "resolve_hub_model",
           "split_dataset_spec"]

_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_HUB_NAME = re.compile(rf"^(?P<repo>{_PART}/{_PART})(?:@(?P<rev>[A-Za-z0-9._/-]+))?$")
_DATA_SUFFIXES = (".parquet", ".jsonl", ".json")


def is_hub_name(spec: str) -> bool:
    """Whether ``spec`` is spelled like a Hub repo id (``org/name``, optionally ``@revision``).

    >>> is_hub_name("Qwen/Qwen3-0.6B"), is_hub_name("Qwen/Qwen3-0.6B@main"), is_hub_name("./models/x")
    (True, True, False)
    >>> is_hub_name("/models/x"), is_hub_name("a/b/c"), is_hub_name("builtin:llama-bpe")
    (False, False, False)
    """
    return bool(_HUB_NAME.match(spec)) and not spec.startswith((".", "~"))


def parse_hub_name(spec: str) -> tuple[str, str | None]:
    """(repo id, revision or None) of a Hub name.

    >>> parse_hub_name("org/name@v1.0"), parse_hub_name("org/name")
    (('org/name', 'v1.0'), ('org/name', None))
    """
    m = _HUB_NAME.match(spec)
    if m is None:
        raise InputError(f"{spec!r} is not a Hub name; write org/name or org/name@revision")
    return m["repo"], m["rev"]


def hub_cache_dir() -> Path:
    """The Hub cache as the environment says now (huggingface_hub reads it once, at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(os.environ["HUGGINGFACE_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _snapshot(spec: str, repo_type: str, field: str) -> Path:
    """The cached snapshot directory of a Hub repo, or a one-line InputError naming the download."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    repo, rev = parse_hub_name(spec)
    flag = " --repo-type dataset" if repo_type == "dataset" else ""
    fetch = f"hf download {repo}{flag}{f' --revision {rev}' if rev else ''}"
    cache = hub_cache_dir()
    try:
        path = snapshot_download(repo, repo_type=repo_type, revision=rev, cache_dir=cache,
                                 local_files_only=True)
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError):
        raise InputError(f"{field}: {spec} is neither a local path nor a {repo_type} in the Hugging Face "
                         f"cache {cache}; fix: `{fetch}` on a machine with network (then copy the cache), "
                         f"or give a local directory") from None
    return Path(path)


def resolve_hub_model(spec: str, field: str = "model") -> Path:
    """The cached snapshot directory of model ``org/name[@revision]``; it must hold a config.json."""
    path = _snapshot(spec, "model", field)
    if not (path / "config.json").is_file():
        repo, _ = parse_hub_name(spec)
        raise InputError(f"{field}: the cached snapshot {path} of {spec} has no config.json (a partial "
                         f"download?); fix: `hf download {repo}`")
    return path


# ---- data sets ------------------------------------------------------------------------------------
def split_dataset_spec(spec: str) -> tuple[str, str | None]:
    """(Hub name, split or None) of ``org/name[@revision][:split]``.

    >>> split_dataset_spec("openai/gsm8k:test"), split_dataset_spec("HuggingFaceH4/MATH-500")
    (('openai/gsm8k', 'test'), ('HuggingFaceH4/MATH-500', None))
    """
    name, sep, split = spec.rpartition(":")
    if sep and is_hub_name(name) and re.fullmatch(r"[A-Za-z0-9._-]+", split):
        return name, split
    return spec, None


def _split_of(rel: str) -> str:
    """The split a data file of a Hub dataset repo belongs to, by the Hub's file-naming conventions:
    ``data/train-00000-of-00001.parquet``, ``test.jsonl``, ``main/test-….parquet``, ``train/0.parquet``."""
    parts = rel.split("/")
    stem = re.sub(r"\.(parquet|jsonl|json)$", "", parts[-1])
    head = re.split(r"[-_.]\d|-of-", stem)[0]
    for candidate in (head, *reversed(parts[:-1])):
        if candidate in ("train", "test", "validation", "valid", "dev", "eval"):
            return candidate
    return head


def dataset_files(snapshot: Path, split: str | None, spec: str) -> list[Path]:
    """The data files of one split of a dataset snapshot (every config's files of that split)."""
    files = sorted(p for p in snapshot.rglob("*") if p.is_file() and p.name.endswith(_DATA_SUFFIXES)
                   and not any(part.startswith(".") for part in p.relative_to(snapshot).parts))
    by_split: dict[str, list[Path]] = {}
    for f in files:
        by_split.setdefault(_split_of(f.relative_to(snapshot).as_posix()), []).append(f)
    if not by_split:
        raise InputError(f"{spec}: the cached snapshot {snapshot} holds no {'/'.join(_DATA_SUFFIXES)} files; "
                         f"fix: give a local data file")
    if split is None and len(by_split) == 1:
        split = next(iter(by_split))
    if split not in by_split:
        name = split_dataset_spec(spec)[0]
        raise InputError(f"{spec}: the cached dataset has splits {', '.join(sorted(by_split))}; "
                         f"{'no split ' + repr(split) if split else 'pick one'}: fix: write {name}:<split>, "
                         f"e.g. {name}:{sorted(by_split)[0]}")
    return by_split[split]


def hub_dataset_rows(spec: str, split: str | None = None,
                     field: str = "data") -> Iterator[dict[str, Any] | str]:
    """Rows of dataset ``org/name[@revision][:split]`` from the Hub cache.

    The cached repo snapshot (``datasets--org--name``) is read file by file (parquet, jsonl, json) with
    :func:`hacrl.data.rows.iter_rows`; a split in the spec wins over ``split``. A repo whose data files
    are not plain parquet/jsonl (a loading script, arrow shards) falls back to ``datasets.load_dataset``
    over the datasets cache with ``HF_HUB_OFFLINE=1`` (a data set prepared there earlier).
    """
    from hacrl.data.rows import iter_rows

    name, spec_split = split_dataset_spec(spec)
    split = spec_split or split
    try:
        snapshot = _snapshot(name, "dataset", field)
    except InputError as missing:
        yield from _datasets_cache_rows(name, split, missing)
        return
    for f in dataset_files(snapshot, split, spec):
        yield from iter_rows(f)


def _datasets_cache_rows(name: str, split: str | None, missing: InputError) -> Iterator[dict[str, Any] | str]:
    """Rows of a data set that ``datasets.load_dataset`` prepared in its own cache earlier
    (``$HF_DATASETS_CACHE``, default ``$HF_HOME/datasets``: ``org___name/<config>/<version>/<commit>/``),
    loaded with datasets' offline mode on (it reads its flag at import, so it is set on the module)."""
    try:
        import datasets
    except ImportError:
        raise missing from None
    repo, rev = parse_hub_name(name)
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface").expanduser()
    cache = Path(os.environ.get("HF_DATASETS_CACHE") or home / "datasets").expanduser()
    if not (cache / repo.replace("/", "___")).is_dir():
        raise missing
    from huggingface_hub import constants

    old = datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        obj = datasets.load_dataset(repo, revision=rev, split=split, cache_dir=str(cache))
    except Exception:  # noqa: BLE001 - datasets raises many kinds; "not cached" is the message that helps
        raise missing from None
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = old
    if isinstance(obj, datasets.DatasetDict):
        splits = list(obj)
        if len(splits) != 1:
            raise InputError(f"{name}: the cached dataset has splits {', '.join(splits)}; pick one: fix: "
                             f"write {name}:<split>, e.g. {name}:{splits[0]}")
        obj = obj[splits[0]]
    yield from obj


if __name__ == "__main__":
    import sys

    for arg in sys.argv[1:]:
        print(resolve_hub_model(arg, field=arg))
