"""The asynchronous mode's worker side (docs/async.md, "The objective"): an own answer kept across an update and
trained on one version later reaches the loss with π_old = π_prox, the learner's pass at the start of that
update (not the rollout's log-prob), and the weight min(exp(mean log π_prox − mean log π_behav), cap); the kept
answers survive a checkpoint.

One tiny agent (gspo: own answers only), two rounds rolled out at version 0; round 1 trains first (fresh), then
round 0 (version gap 1)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from hacrl.backends.worker import AgentWorker
from hacrl.config import load_config
from hacrl.learner.old_logprobs import recompute_logprobs
from hacrl.learner.request import UpdateRequest
from hacrl.pool import TrajectoryPool
from hacrl.rollout import SamplingParams
from hacrl.rollout.base import Sample
from hacrl.types import Problem

pytestmark = pytest.mark.model

PROBLEMS = [Problem(f"p{i}", f"{i}+{i}=", str(2 * i)) for i in range(1, 5)]


def make_worker(resume_from=None) -> AgentWorker:
    cfg = load_config("tiny-test", overrides=[
        "agents=[{id: a, model: 'builtin:qwen2-char', lr: 5.0e-2}]", "algorithm.name=gspo", "trainer.mode=async",
        "algorithm.clip_low=0.2", "algorithm.clip_high=0.28", "async.staleness_cap=1.5"])
    return AgentWorker(cfg, 0, resume_from=resume_from)


def scored_pool(answers, problems) -> TrajectoryPool:
    # rewards 0/1 alternating within each prompt: non-zero advantages
    return TrajectoryPool(problems, [dataclasses.replace(t, reward=float(i % 2)) for i, t in enumerate(answers)])


def prox_means(worker: AgentWorker, pool: TrajectoryPool, keys) -> list[float]:
    """The learner's mean log-prob of each kept own answer now (π_prox), from a pass of our own."""
    rendered = [worker.agent.render_prompt(p.prompt) for p in pool.problems]
    samples = [worker.own[k] for k in keys]
    out = recompute_logprobs(worker.agent, rendered, [Sample(s.prompt_index, s.token_ids, s.logps, s.finished)
                                                      for s in samples], worker.cfg.trainer.micro_batch_size)
    return [sum(s.logps) / len(s.logps) for s in out]


def test_a_stale_own_answer_trains_against_pi_prox_with_the_staleness_weight(spy, tmp_path):
    worker = make_worker()
    params = SamplingParams(n=2, temperature=1.0, top_p=1.0, max_new_tokens=4)
    rounds = [PROBLEMS[:2], PROBLEMS[2:]]
    answers = [worker.rollout([p.prompt for p in ps], params, recompute=False, tag=tag)[0]
               for tag, ps in enumerate(rounds)]
    keys = [[(tag, i) for i in range(len(a))] for tag, a in enumerate(answers)]
    assert worker.pending_keys() == keys[0] + keys[1]
    omega = torch.ones(1, 1)

    # round 1 at version 0: fresh, weight 1, π_old the rollout's
    fresh = worker.update(UpdateRequest(scored_pool(answers[1], rounds[1]), omega,
                                        own_keys=tuple(keys[1])))
    assert fresh["staleness_is/stale_frac"] == 0.0
    assert worker.step_idx == 1 and worker.pending_keys() == keys[0]
    rollout_means = sorted(t.logp_mean for t in answers[1])
    torch.testing.assert_close(sorted(spy[-1].inputs.old_logp_mean_B.tolist()), rollout_means)

    # the kept round 0 survives a checkpoint: version and answers
    worker.save(tmp_path / "agents" / "a")
    restored = make_worker(resume_from=tmp_path)
    assert restored.step_idx == 1 and restored.pending_keys() == keys[0]
    assert [restored.own[k] for k in keys[0]] == [worker.own[k] for k in keys[0]]

    # round 0 at version 1: gap 1 → π_old = π_prox, weight min(exp(π_prox − π_behav), 1.5) per answer
    pool = scored_pool(answers[0], rounds[0])
    prox = prox_means(worker, pool, keys[0])
    behav = [t.logp_mean for t in answers[0]]
    assert max(abs(p - b) for p, b in zip(prox, behav, strict=True)) > 1e-4  # the update moved the policy
    calls = len(spy)
    pool = TrajectoryPool(pool.problems, [dataclasses.replace(t, version_gap=1) for t in pool.trajectories])
    stale = worker.update(UpdateRequest(pool, omega, own_keys=tuple(keys[0])))
    inputs = [c.inputs for c in spy[calls:]]
    got = sorted(zip(torch.cat([i.old_logp_mean_B for i in inputs]).tolist(),
                     torch.cat([i.rollout_weight_B for i in inputs]).tolist(), strict=True))
    want = sorted((p, min(math.exp(p - b), 1.5)) for p, b in zip(prox, behav, strict=True))
    torch.testing.assert_close(got, want, rtol=0, atol=2e-6)
    assert stale["staleness_is/stale_frac"] == 1.0 and stale["staleness_is/version_gap_mean"] == 1.0
    assert worker.pending_keys() == [] and worker.step_idx == 2


def test_an_update_naming_answers_the_worker_does_not_keep_fails_with_the_agent():
    worker = make_worker()
    params = SamplingParams(n=2, temperature=1.0, top_p=1.0, max_new_tokens=4)
    answers, _ = worker.rollout([p.prompt for p in PROBLEMS[:1]], params, recompute=False, tag=0)
    with pytest.raises(RuntimeError, match="agent a: .* not kept here"):
        worker.update(UpdateRequest(scored_pool(answers, PROBLEMS[:1]), torch.ones(1, 1),
                                    own_keys=((5, 0), (5, 1))))
