"""Atomic checkpoints: everything needed to resume exactly, written to a temporary directory and renamed
into place only when complete; old checkpoints are pruned only after the new one is in place. A checkpoint
damaged afterwards (a file cut short, a manifest that is not JSON) is recognised by ``verify_checkpoint``
without loading its tensors; ``usable_checkpoint`` passes over it to the newest intact one.

    checkpoints/step-000012/
      manifest.json        agent ids and model sources, step, algorithm, every file's size (written last)
      trainer_state.pt     step, capability window, data position, RNG states
      agents/<id>/         save_pretrained weights + tokenizer, optimizer.pt, reference/ (if KL)
"""

from __future__ import annotations

import json
import os
import random
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hacrl.errors import DamagedCheckpoint, DiskFull
from hacrl.failpoints import failpoint
from hacrl.run.files import disk_full, free_bytes, guard, is_disk_full

MANIFEST = "manifest.json"
STATE = "trainer_state.pt"


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())


def save_checkpoint(
    ckpt_root: Path, step: int, write_agents: Callable[[Path], Any], state: dict[str, Any], manifest: dict[str, Any],
    keep_last: int,
) -> Path:
    """Write ``step-<step>`` atomically and prune older checkpoints beyond ``keep_last``.

    ``write_agents(tmp)`` writes every agent under ``tmp/agents/<id>`` (the workers do it, wherever they run:
    on a Ray cluster the run directory must be on a filesystem every node sees). If anything fails before the
    rename, the temporary directory is removed and the previous checkpoint stays the latest; a full disk
    is ``DiskFull`` naming the checkpoint and about the space it needs (the previous checkpoint's size)."""
    with guard(ckpt_root):
        ckpt_root.mkdir(parents=True, exist_ok=True)
    for stale in list(ckpt_root.glob(".tmp-step-*")) + list(ckpt_root.glob(".old-step-*")):
        shutil.rmtree(stale, ignore_errors=True)  # left by a run killed mid-write
    final = ckpt_root / f"step-{step:06d}"
    tmp = ckpt_root / f".tmp-step-{step:06d}-{os.getpid()}"
    try:
        tmp.mkdir()
        write_agents(tmp)
        torch.save(state, tmp / STATE)
        # the size of every file, so that a checkpoint cut short later (a copy, a full disk) is recognised
        files = {p.relative_to(tmp).as_posix(): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
        (tmp / MANIFEST).write_text(json.dumps({**manifest, "step": step, "files": files}, indent=2))
        _fsync_tree(tmp)
    except BaseException as exc:
        full = _discard(exc, ckpt_root, tmp, final)
        if full is None:
            raise
    else:
        full = None
    if full is not None:  # raised out here, the failed write's frames (and its open files) are let go ...
        if full.free is not None:  # ... so the space its half-written files held is counted free
            full.free = free_bytes(ckpt_root)
        raise full
    failpoint("checkpoint", step)
    if final.exists():  # re-saving the same step (e.g. after a resume): swap, then delete the old one
        old = ckpt_root / f".old-step-{step:06d}-{os.getpid()}"
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old)
    else:
        os.rename(tmp, final)
    _fsync_dir(ckpt_root)
    for stale in complete_checkpoints(ckpt_root)[:-keep_last]:
        shutil.rmtree(stale, ignore_errors=True)
    return final


# a write that failed with this little room left failed for want of room, whatever the library said: torch.save
# on a full disk raises RuntimeError("... unexpected pos 576 vs 534"), which names no errno
NEARLY_FULL = 1 << 20


def _discard(exc: BaseException, ckpt_root: Path, tmp: Path, final: Path) -> DiskFull | None:
    """Remove the half-written ``tmp``; the ``DiskFull`` to raise instead of ``exc`` if the disk was full."""
    free = free_bytes(ckpt_root)
    full = isinstance(exc, Exception) and (is_disk_full(exc) or (free is not None and free < NEARLY_FULL))
    written = _tree_bytes(tmp)
    shutil.rmtree(tmp, ignore_errors=True)  # the previous checkpoint stays the latest, untouched
    if not full:
        return None
    previous = latest_checkpoint(ckpt_root)
    needed = max(_tree_bytes(previous) if previous else 0, written)
    return disk_full(exc, final, needed or None, estimated=True)


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def complete_checkpoints(ckpt_root: Path) -> list[Path]:
    """Complete checkpoints (renamed into place, manifest present), oldest first."""
    if not ckpt_root.is_dir():
        return []
    found = [p for p in ckpt_root.glob("step-*") if p.is_dir() and (p / MANIFEST).is_file() and (p / STATE).is_file()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def latest_checkpoint(ckpt_root: Path) -> Path | None:
    found = complete_checkpoints(ckpt_root)
    return found[-1] if found else None


def read_manifest(ckpt: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((ckpt / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DamagedCheckpoint(f"checkpoint {ckpt} is damaged: {MANIFEST} cannot be read ({_first_line(exc)})"
                                ) from None
    if not isinstance(manifest, dict):
        raise DamagedCheckpoint(f"checkpoint {ckpt} is damaged: {MANIFEST} is not a JSON object")
    return manifest


def load_state(ckpt: Path) -> dict[str, Any]:
    try:
        return torch.load(ckpt / STATE, weights_only=False)
    except Exception as exc:  # noqa: BLE001 - a cut-short zip, a pickle error, ...: all mean a damaged file
        raise DamagedCheckpoint(f"checkpoint {ckpt} is damaged: {STATE} cannot be read ({_first_line(exc)})"
                                ) from None


def verify_checkpoint(ckpt: Path) -> str | None:
    """What is wrong with a complete checkpoint's files (naming the file), or None. Cheap: it compares the
    sizes the manifest recorded and reads the headers of safetensors and torch files, not the tensors."""
    try:
        manifest = read_manifest(ckpt)
    except DamagedCheckpoint as exc:
        return str(exc).split(" is damaged: ", 1)[-1]
    recorded = manifest.get("files") or {}
    for rel, size in recorded.items():
        path = ckpt / rel
        if not path.is_file():
            return f"{rel} is missing"
        if path.stat().st_size != size:
            return f"{rel} is {path.stat().st_size} bytes, {size} when written (cut short or overwritten)"
    for path in sorted(ckpt.rglob("*")):
        rel = path.relative_to(ckpt).as_posix()
        if path.suffix == ".safetensors":
            problem = _safetensors_problem(path)
        elif path.suffix == ".pt":
            problem = _torch_file_problem(path)
        else:
            continue
        if problem:
            return f"{rel} {problem}"
    return None


def usable_checkpoint(ckpt_root: Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest complete checkpoint whose files are intact, and the newer ones passed over with why."""
    damaged: list[tuple[Path, str]] = []
    for path in reversed(complete_checkpoints(ckpt_root)):
        problem = verify_checkpoint(path)
        if problem is None:
            return path, damaged
        damaged.append((path, problem))
    return None, damaged


def unusable_why(damaged: list[tuple[Path, str]], none_saved: str) -> str:
    """Why ``usable_checkpoint`` found none, for a one-line error: the newest damaged checkpoint and its problem,
    else ``none_saved``.

    >>> unusable_why([(Path("step-000004"), "model/ missing")], "no checkpoint")
    'no intact checkpoint (step-000004: model/ missing)'
    >>> unusable_why([], "no checkpoint")
    'no checkpoint'
    """
    return f"no intact checkpoint ({damaged[0][0].name}: {damaged[0][1]})" if damaged else none_saved


def passed_over(damaged: list[tuple[Path, str]], found: Path, doing: str) -> list[str]:
    """The warning line for each damaged checkpoint ``usable_checkpoint`` passed over on the way to ``found``.

    >>> passed_over([(Path("step-000004"), "model/ missing")], Path("step-000002"), "resuming from")
    ['hacrl: warning: checkpoint step-000004 is damaged (model/ missing); resuming from step-000002']
    """
    return [f"hacrl: warning: checkpoint {path.name} is damaged ({problem}); {doing} {found.name}"
            for path, problem in damaged]


def _safetensors_problem(path: Path) -> str | None:
    """A safetensors file is an 8-byte header length, a JSON header, then exactly the tensors' bytes."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if size < 8 or n > size - 8:
                return "has a damaged header (cut short?)"
            header = json.loads(f.read(n))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return "has a damaged header"
    if not isinstance(header, dict):
        return "has a damaged header"
    ends = [t["data_offsets"][1] for k, t in header.items()
            if k != "__metadata__" and isinstance(t, dict) and len(t.get("data_offsets", ())) == 2]
    if 8 + n + max(ends, default=0) != size:
        return f"is {size} bytes, its header describes {8 + n + max(ends, default=0)} (cut short?)"
    return None


def _torch_file_problem(path: Path) -> str | None:
    """torch.save writes a zip archive; one cut short loses its central directory at the end."""
    try:
        with zipfile.ZipFile(path) as z:
            z.infolist()
    except (OSError, zipfile.BadZipFile) as exc:
        return f"cannot be read ({_first_line(exc)})"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
