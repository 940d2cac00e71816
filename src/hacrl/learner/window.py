"""One learner's adaptive cross window (``algorithm.cross_window: adaptive``; the rule is ``hacrl.core.window``):
its ℓ_0 per source agent, held by the learner's own worker. The worker reads the bounds before its update, feeds
the window the cross ratios the update saw after it (``update_learner``'s ``observed_ratios``), logs the bound it
used per source as ``window_lower/<source id>`` (the trainer prefixes ``agent/<learner id>/``), and keeps the
state in its own checkpoint files (``WINDOW_FILE``). A checkpoint written while the trainer held every learner's
window (its state's ``window``, the N×N ``CrossWindow`` state) resumes too: each learner takes its row.
"""

from __future__ import annotations

from pathlib import Path

import torch

from hacrl.config import Config
from hacrl.core.window import CrossWindow
from hacrl.learner.algorithms import adaptive_window, resolve
from hacrl.run import checkpoint as ckpt

WINDOW_FILE = "cross_window.pt"


class LearnerWindow:
    """Learner ``learner``'s row of a ``CrossWindow`` over the agents ``ids`` (its own entry unused)."""

    def __init__(self, learner: int, ids: list[str], *, delta: float, target: float, floor: float,
                 smoothing: float) -> None:
        self.learner, self.ids = learner, list(ids)
        self.window = CrossWindow(len(ids), delta=delta, target=target, floor=floor, smoothing=smoothing)

    @classmethod
    def for_run(cls, cfg: Config, learner: int) -> LearnerWindow | None:
        """The window of agent ``learner`` of ``cfg``; None where the run keeps the fixed 1 − δ, or where its
        composed algorithm's loss has no cross window to adapt (``adaptive_window``)."""
        a = cfg.algorithm
        if not adaptive_window(resolve(a), a.cross_window):
            return None
        return cls(learner, [s.id for s in cfg.agents], delta=a.delta, target=a.window_target, floor=a.window_floor,
                   smoothing=a.window_smoothing)

    def bounds(self) -> list[float]:
        """ℓ_0 for each source agent, this update's ``cross_lower0``."""
        return self.window.bounds(self.learner)

    def observe(self, used: list[float], ratios: dict[int, list[float]]) -> dict[str, float]:
        """Feed the window the cross ratios the update saw (source → ratios; a source without any keeps its
        bound); returns the bounds ``used`` per source as ``window_lower/<source id>``."""
        out = {}
        for j, source_id in enumerate(self.ids):
            if j != self.learner:
                out[f"window_lower/{source_id}"] = used[j]
                self.window.observe(self.learner, j, torch.tensor(ratios.get(j, []), dtype=torch.float64))
        return out

    def state_dict(self) -> dict:
        return {"lower_N": self.window.lower_NN[self.learner].clone(),
                "seen_N": self.window.seen_NN[self.learner].clone()}

    def load_state_dict(self, state: dict) -> None:
        """This learner's state, or the trainer's N×N ``CrossWindow`` state of an older checkpoint (its row)."""
        n = len(self.ids)
        old = "lower_NN" in state
        lower, seen = (state["lower_NN"], state["seen_NN"]) if old else (state["lower_N"], state["seen_N"])
        shape = (n, n) if old else (n,)
        if tuple(lower.shape) != shape or tuple(seen.shape) != shape:
            raise ValueError(f"cross-window state is for {lower.shape[0]} agents, this run has {n}")
        if old:
            lower, seen = lower[self.learner], seen[self.learner]
        self.window.lower_NN[self.learner] = lower.to(torch.float64)
        self.window.seen_NN[self.learner] = seen.to(torch.bool)

    def save(self, agent_dir: Path) -> None:
        torch.save(self.state_dict(), agent_dir / WINDOW_FILE)

    def restore(self, resume_from: Path, agent_id: str) -> None:
        """From the checkpoint ``resume_from``: the learner's own file, else the trainer state's ``window`` (a
        checkpoint from before the learners held their windows), else (none saved) as new."""
        path = resume_from / "agents" / agent_id / WINDOW_FILE
        state = torch.load(path, weights_only=True) if path.is_file() else ckpt.load_state(resume_from).get("window")
        if state is not None:
            self.load_state_dict(state)
