"""A worker's own answers from rollout to update: their token ids and log-probs never leave the worker, so it
keeps them here and fills them back into the pool's tokenizer-neutral records for its update.

Each answer is kept under ``(round tag, position in the round)``. Lock-step: the step's answers under tag −1,
replaced by every rollout, and the pool holds exactly them. The asynchronous mode (docs/async.md): every round's
answers under its tag until the update that takes them (``UpdateRequest.own_keys``) or until they expire
(``UpdateRequest.forget``), so answers a later update takes survive the rounds in between, and a checkpoint
(``PENDING_FILE``) keeps them with the worker's version.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import torch

from hacrl.backends.loading import from_checkpoint
from hacrl.pool import TrajectoryPool
from hacrl.rollout.base import Sample

PENDING_FILE = "own_pending.pt"  # the asynchronous mode: the worker's version and its own answers not trained on yet

Key = tuple[int, int]


class OwnAnswers:
    """Agent ``source``'s (named ``agent_id`` in errors) own answers, by key."""

    def __init__(self, source: int, agent_id: str) -> None:
        self.source, self.agent_id = source, agent_id
        self._kept: dict[Key, Sample] = {}

    def __getitem__(self, key: Key) -> Sample:
        return self._kept[key]

    def keys(self) -> list[Key]:
        """The keys kept, sorted."""
        return sorted(self._kept)

    def keep(self, samples: Sequence[Sample], tag: int | None) -> None:
        """A rollout's answers: ``tag`` None (lock-step) replaces the last step's, a round's tag adds them."""
        if tag is None:
            self._kept = {(-1, i): s for i, s in enumerate(samples)}
        else:
            self._kept.update({(tag, i): s for i, s in enumerate(samples)})

    def forget(self, keys: Sequence[Sequence[int]]) -> None:
        """Drop answers that expired unused."""
        for key in keys:
            self._kept.pop((int(key[0]), int(key[1])), None)

    def attach(self, pool: TrajectoryPool, keys: Sequence[Sequence[int]] | None = None) -> TrajectoryPool:
        """``pool`` with this agent's answers given back their token ids and log-probs. ``keys``: each own answer's
        key in the pool's order (used up here); None: lock-step, the pool holds exactly the step's own answers."""
        own_positions = [i for i, t in enumerate(pool.trajectories) if t.source == self.source]
        if keys is None:
            if len(own_positions) != len(self._kept):
                raise RuntimeError(f"agent {self.agent_id}: the pool holds {len(own_positions)} of its answers, "
                                   f"it generated {len(self._kept)} (update without a matching rollout)")
            samples = list(self._kept.values())
        else:
            wanted = [(int(k[0]), int(k[1])) for k in keys]
            missing = [k for k in wanted if k not in self._kept]
            if len(wanted) != len(own_positions) or missing:
                raise RuntimeError(f"agent {self.agent_id}: the pool holds {len(own_positions)} of its answers for "
                                   f"{len(wanted)} keys; {len(missing)} not kept here (update without a matching "
                                   f"rollout)")
            samples = [self._kept.pop(k) for k in wanted]
        trajectories = list(pool.trajectories)
        for i, s in zip(own_positions, samples, strict=True):
            t = trajectories[i]
            if t.prompt_index != s.prompt_index or t.num_tokens != len(s.token_ids):
                raise RuntimeError(f"agent {self.agent_id}: pool answer {i} does not match its rollout")
            behav = float(sum(s.behav_logps)) if s.behav_logps is not None else None
            trajectories[i] = dataclasses.replace(t, token_ids=s.token_ids, token_logps=s.logps, behav_logp_sum=behav)
        return TrajectoryPool(pool.problems, trajectories)

    def save(self, path: Path, version: int) -> None:
        """The worker's version and the answers kept (the asynchronous mode's checkpoint file)."""
        own = [[tag, pos, s.prompt_index, list(s.token_ids), list(s.logps), s.finished,
                None if s.behav_logps is None else list(s.behav_logps)] for (tag, pos), s in self._kept.items()]
        torch.save({"version": version, "own": own}, path)

    def load(self, path: Path) -> int:
        """Restore what ``save`` wrote; returns the worker's version."""
        state = from_checkpoint(path, lambda: torch.load(path, weights_only=True))
        self._kept = {(int(tag), int(pos)): Sample(int(i), tuple(ids), tuple(lp), bool(fin),
                                                  None if behav is None else tuple(behav))
                      for tag, pos, i, ids, lp, fin, behav in state["own"]}
        return int(state["version"])
