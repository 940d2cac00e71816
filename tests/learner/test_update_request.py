"""The update's message (``hacrl.learner.request.UpdateRequest``): the driver builds one for the step, the
backend hands it to every worker as it is (locally the same object; on Ray a pickled copy), and the worker's
update reads every field from it."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
import torch

from hacrl.backends.local import LocalBackend
from hacrl.config import load_config
from hacrl.learner.algorithms import derive_for
from hacrl.learner.request import UpdateRequest
from hacrl.pool import TrajectoryPool
from hacrl.rollout import SamplingParams
from hacrl.types import Problem, Trajectory

pytestmark = pytest.mark.usefixtures("one_thread")

PROBLEMS = [Problem("p0", "1+1=", "2"), Problem("p1", "2+2=", "4")]


def _request(pool: TrajectoryPool, **fields) -> UpdateRequest:
    omega = torch.tensor([[1.0, 0.25], [4.0, 1.0]])
    return UpdateRequest(pool, omega, **fields)


def test_a_request_is_frozen_and_survives_pickling_field_by_field():
    pool = TrajectoryPool(PROBLEMS, [Trajectory(1, 0, "x", True, -1.5, 2, reward=1.0)])
    req = _request(pool, own_keys=((3, 0),), forget=((1, 4),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.own_keys = None  # type: ignore[misc]
    back = pickle.loads(pickle.dumps(req))  # what the ray backend sends
    assert back.pool.problems == PROBLEMS and back.pool.trajectories == pool.trajectories
    assert torch.equal(back.omega_NN, req.omega_NN)
    assert (back.own_keys, back.forget) == (((3, 0),), ((1, 4),))
    assert _request(pool).own_keys is None and _request(pool).forget == ()


@pytest.mark.model
def test_the_local_backend_hands_every_worker_the_request_and_the_derived_values(monkeypatch):
    cfg = load_config("tiny-test", overrides=["algorithm.name=gspo"])
    derived = derive_for(cfg)
    backend = LocalBackend(cfg, derived)
    try:
        assert all(w.derived is derived for w in backend.workers)  # handed, not resolved again
        problems = [Problem(f"p{i}", f"{i}+{i}=", str(2 * i)) for i in range(cfg.trainer.batch_size)]
        params = SamplingParams(n=derived.group_size, temperature=1.0, top_p=1.0, max_new_tokens=4)
        answers = backend.rollout([p.prompt for p in problems], [params] * 2, recompute=False)
        pool = TrajectoryPool(problems, [dataclasses.replace(t, reward=float(i % 2))
                                         for a, _ in answers for i, t in enumerate(a)])
        request = _request(pool)
        seen: list[UpdateRequest] = []
        for w in backend.workers:
            real = w.update
            monkeypatch.setattr(w, "update", lambda r, _real=real: (seen.append(r), _real(r))[1])
        results = backend.update(request)
        assert [s is request for s in seen] == [True, True]
        # gspo, B = 4 prompts x G = 4 own answers: 16 rows in minibatches of Derived's size, one step each
        assert (derived.minibatch_size, derived.num_minibatches) == (8, 2)
        assert [m["optimizer_steps"] for m in results] == [2, 2]
        assert [w.step_idx for w in backend.workers] == [1, 1]
    finally:
        backend.close()
