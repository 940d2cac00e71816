"""The adaptive cross window held by the learner that owns it (``hacrl.learner.window.LearnerWindow``): its row of
ℓ_0 per source, fed the cross ratios its update saw, the bounds it used logged per source, and its state in the
worker's own checkpoint files; a checkpoint whose trainer state still holds every learner's window resumes too."""

from __future__ import annotations

import pytest
import torch

from hacrl.backends.worker import AgentWorker
from hacrl.config import load_config
from hacrl.core.window import CrossWindow
from hacrl.learner.window import WINDOW_FILE, LearnerWindow
from hacrl.run import checkpoint as ckpt

THREE = ["a", "b", "c"]


def _window(learner: int) -> LearnerWindow:
    return LearnerWindow(learner, THREE, delta=0.2, target=0.75, floor=0.1, smoothing=1.0)


def test_observe_logs_the_bounds_used_and_moves_only_the_sources_seen():
    w = _window(1)
    assert w.bounds() == [0.8, 0.8, 0.8]  # 1 − δ before any ratio
    out = w.observe([0.7, 0.8, 0.6], {0: [0.3, 0.6, 0.9, 1.1], 2: []})
    # the bounds used for each source's answers; the learner's own entry (0.8) is not a cross bound
    assert out == {"window_lower/a": 0.7, "window_lower/c": 0.6}
    # a's ratios ≤ 1: 0.9, 0.6, 0.3; target 0.75 of 4 → k = 3: the third largest, 0.3 (taken in float64)
    assert w.bounds() == [0.3, 0.8, 0.8]
    # a source missing from the ratios leaves its bound alone; smoothing 1 takes the newest estimate
    w.observe(w.bounds(), {0: [0.5, 0.5, 0.5, 0.5]})
    assert w.bounds() == [0.5, 0.8, 0.8]


def test_state_round_trips_and_an_old_trainer_state_gives_each_learner_its_row():
    w = _window(2)
    w.observe(w.bounds(), {1: [0.4, 0.4, 0.4, 0.4]})
    back = _window(2)
    back.load_state_dict(w.state_dict())
    assert back.bounds() == [0.8, 0.4, 0.8] and back.window.seen_NN[2].tolist() == [False, True, False]
    # the trainer's N×N CrossWindow state of an older checkpoint: rows 0 and 2 moved
    old = CrossWindow(3, delta=0.2, target=0.75, floor=0.1, smoothing=1.0)
    old.observe(0, 1, torch.tensor([0.5, 0.5, 0.5, 0.5], dtype=torch.float64))
    old.observe(2, 0, torch.tensor([0.25, 0.25, 0.25, 0.25], dtype=torch.float64))
    rows = [_window(i) for i in range(3)]
    for r in rows:
        r.load_state_dict(old.state_dict())
    assert [r.bounds() for r in rows] == [[0.8, 0.5, 0.8], [0.8, 0.8, 0.8], [0.25, 0.8, 0.8]]
    with pytest.raises(ValueError, match="for 2 agents, this run has 3"):
        _window(0).load_state_dict({"lower_N": torch.ones(2), "seen_N": torch.ones(2, dtype=torch.bool)})


def _worker(resume_from=None) -> AgentWorker:
    cfg = load_config("tiny-test", overrides=["algorithm.name=hacpo-adaptive"])
    return AgentWorker(cfg, 1, resume_from=resume_from)


@pytest.mark.model
def test_the_workers_window_survives_its_checkpoint_and_an_old_one(tmp_path):
    worker = _worker()
    assert worker.window is not None and worker.window.bounds() == [0.8, 0.8]
    worker.window.observe(worker.window.bounds(), {0: [0.6, 0.6, 0.6, 0.6]})
    assert worker.window.bounds() == [0.6, 0.8]
    agent_dir = tmp_path / "new" / "agents" / worker.spec.id
    worker.save(agent_dir)
    assert (agent_dir / WINDOW_FILE).is_file()
    assert _worker(resume_from=tmp_path / "new").window.bounds() == [0.6, 0.8]
    # a checkpoint written when the trainer held the windows: no window file, the trainer state's "window"
    old_dir = tmp_path / "old" / "agents" / worker.spec.id
    worker.save(old_dir)
    (old_dir / WINDOW_FILE).unlink()
    full = CrossWindow(2, delta=0.2, target=0.75, floor=0.1, smoothing=1.0)
    full.observe(1, 0, torch.tensor([0.45] * 4, dtype=torch.float64))
    full.observe(0, 1, torch.tensor([0.35] * 4, dtype=torch.float64))
    torch.save({"step": 1, "window": full.state_dict()}, tmp_path / "old" / ckpt.STATE)
    assert _worker(resume_from=tmp_path / "old").window.bounds() == [0.45, 0.8]  # learner 1's row
