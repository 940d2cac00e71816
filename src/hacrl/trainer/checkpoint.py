"""Atomic checkpoints: everything needed to resume exactly, written to a temporary directory and renamed
into place only when complete; old checkpoints are pruned only after the new one is in place.

    checkpoints/step-000012/
      manifest.json        agent ids and model sources, step, algorithm (written last)
      trainer_state.pt     step, capability window, data position, RNG states
      agents/<id>/         save_pretrained weights + tokenizer, optimizer.pt, reference/ (if KL)
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hacrl.failpoints import failpoint

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
    on a Ray cluster the run directory must be on a filesystem every node sees)."""
    ckpt_root.mkdir(parents=True, exist_ok=True)
    for stale in list(ckpt_root.glob(".tmp-step-*")) + list(ckpt_root.glob(".old-step-*")):
        shutil.rmtree(stale, ignore_errors=True)  # left by a run killed mid-write
    final = ckpt_root / f"step-{step:06d}"
    tmp = ckpt_root / f".tmp-step-{step:06d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    write_agents(tmp)
    torch.save(state, tmp / STATE)
    (tmp / MANIFEST).write_text(json.dumps({**manifest, "step": step}, indent=2))
    _fsync_tree(tmp)
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
    return json.loads((ckpt / MANIFEST).read_text())


def load_state(ckpt: Path) -> dict[str, Any]:
    return torch.load(ckpt / STATE, weights_only=False)
