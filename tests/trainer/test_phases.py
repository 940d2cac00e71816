"""The trainer's phases (``hacrl.trainer.phases``) on hand-built inputs, without a model: what a step's metrics
say about its pool, how the scorer's rewards come back into the pool, how each agent's update metrics and cross
ratios reach that agent's keys and adaptive window, the data order, and the loop's cadence of evaluations and
checkpoints.

The pure phases take a literal pool; elsewhere the models of a real tiny trainer are swapped for a scripted
backend (``Scripted``), so each value here is computed by hand; mutation testing (docs/mutation.md) runs these
tests against the trainer's phase code.
"""

from __future__ import annotations

import copy
import io
import json
import logging
import math
import signal
import threading
from collections.abc import Sequence
from typing import Any

import pytest
import torch

from hacrl.config import load_config
from hacrl.core import CapabilityTracker
from hacrl.errors import InputError
from hacrl.learner.request import UpdateRequest
from hacrl.pool import TrajectoryPool
from hacrl.rewards import ScoreResult
from hacrl.rollout import SamplingParams
from hacrl.trainer.phases import (
    DataStream,
    Phases,
    pool_metrics,
    rescue_share,
    rollout_metrics,
    sub_phase_timings,
)
from hacrl.trainer.trainer import Trainer
from hacrl.types import Problem, Trajectory

THREE = ("agents=[{id: a, model: 'builtin:qwen2-char-small', lr: 3.0e-4}, "
         "{id: b, model: 'builtin:qwen2-char', lr: 3.0e-4}, {id: c, model: 'builtin:llama-bpe', lr: 3.0e-4}]")
REWARD = {"right": 1.0, "half": 0.5, "wrong": 0.0, "?": None}  # the scripted scorer's rewards by answer text
IDS = ["a", "b", "c"]


def answer(group: int, source: int, text: str = "wrong", *, finished: bool = True, tokens: int = 1,
           reward: float | None = None) -> Trajectory:
    return Trajectory(prompt_index=group, source=source, text=text, finished=finished, logp_sum=-1.0,
                      num_tokens=tokens, reward=reward)


def problems(n: int) -> list[Problem]:
    return [Problem(f"p{i}", f"{i}+1=", str(i + 1)) for i in range(n)]


def scripted_score(texts: list[str], _problems: list[Problem]) -> ScoreResult:
    """1 for "right", 0.5 for "half", 0 for "wrong", unscorable (the function returned None) for "?"."""
    result = ScoreResult([None] * len(texts))
    for i, text in enumerate(texts):
        value = REWARD[text]
        result.record(i, "ok" if value is not None else "none", value, None if value is not None else "returned None")
    return result


class Scripted:
    """A backend (the lock-step methods of ``hacrl.backends.Backend`` that a step calls) whose agents answer and
    update as scripted: ``answers[i]`` are agent i's answers to any batch, ``updates[i]`` its update metrics; every
    call is recorded as (method, its arguments by name). Any other method is missing: a step must not call it."""

    def __init__(self, answers: list[list[Trajectory]], rollouts: list[dict[str, float]],
                 updates: list[dict[str, Any]]) -> None:
        self.answers, self.rollouts, self.updates = answers, rollouts, updates
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def rollout(self, prompts: list[str], params: Sequence[SamplingParams], *,
                recompute: bool | None = None) -> list[tuple[list[Trajectory], dict[str, float]]]:
        self.calls.append(("rollout", {"prompts": prompts, "params": list(params), "recompute": recompute}))
        return [(list(a), dict(m)) for a, m in zip(self.answers, self.rollouts, strict=True)]

    def update(self, request: UpdateRequest) -> list[dict[str, Any]]:
        self.calls.append(("update", {"request": request}))
        return [copy.deepcopy(u) for u in self.updates]  # copies: the trainer pops timings and cross ratios out

    def close(self) -> None:
        pass


@pytest.fixture
def trainer(tmp_path, monkeypatch):
    """A three-agent tiny trainer with the adaptive window, its models replaced by a scripted backend."""
    torch.set_num_threads(1)
    cfg = load_config("tiny-test", overrides=[THREE, "algorithm.cross_window=adaptive", "trainer.log_samples=2",
                                              "rollout.temperature=0.7", "rollout.top_p=0.9"])
    t = Trainer(cfg, tmp_path, sinks=False)
    t.backend.close()
    t.backend = Scripted([[], [], []], [{"busy_s": 0.0}] * 3, [{"busy_s": 0.0}] * 3)
    t.phases.score_texts = scripted_score
    yield t
    t.close()


def phases(score=scripted_score) -> Phases:
    """The phases of three agents a, b, c without a trainer."""
    return Phases(IDS, SamplingParams(n=2), recompute=False, score_texts=score)


# ---- what a step's metrics say about its pool --------------------------------------------------------------

def test_pool_metrics_hand_computed():
    # a: prompt 0 right (3 tokens), wrong unfinished (4); prompt 1 half (2), unscorable (5)
    # b: prompt 1 right (2)    c: prompt 0 right (2), prompt 1 unscorable unfinished (4)
    pool = TrajectoryPool(problems(2), [
        answer(0, 0, reward=1.0, tokens=3), answer(0, 0, reward=0.0, tokens=4, finished=False),
        answer(1, 0, reward=0.5, tokens=2), answer(1, 0, reward=None, tokens=5),
        answer(1, 1, reward=1.0, tokens=2),
        answer(0, 2, reward=1.0, tokens=2), answer(1, 2, reward=None, tokens=4, finished=False)])
    capability = torch.tensor([0.1, 0.2, 0.3])
    omega = torch.tensor([[1.0, 2.0, 3.0], [4.0, 1.0, 5.0], [6.0, 7.0, 1.0]])  # ω[learner, source]
    got = pool_metrics(pool, IDS, capability, omega)
    want = {
        "pool/size": 7,
        # the mean over scored answers (0.5 counts half a reward, not an accuracy); tokens and finished over all
        "agent/a/reward": 1.5 / 3, "agent/a/accuracy": 1 / 3, "agent/a/capability": 0.1,
        "agent/a/answer_tokens": 14 / 4, "agent/a/finished_frac": 3 / 4,
        "agent/b/reward": 1.0, "agent/b/accuracy": 1.0, "agent/b/capability": 0.2,
        "agent/b/answer_tokens": 2.0, "agent/b/finished_frac": 1.0,
        "agent/c/reward": 1.0, "agent/c/accuracy": 1.0, "agent/c/capability": 0.3,
        "agent/c/answer_tokens": 3.0, "agent/c/finished_frac": 0.5,
        "agent/a/omega/b": 2.0, "agent/a/omega/c": 3.0, "agent/b/omega/a": 4.0, "agent/b/omega/c": 5.0,
        "agent/c/omega/a": 6.0, "agent/c/omega/b": 7.0,
        # prompts the learner did not solve and the source did: a misses prompt 1, which b solved; b misses
        # prompt 0 (no answer), which a and c solved; c misses prompt 1, which b solved
        "agent/a/rescue/b": 0.5, "agent/a/rescue/c": 0.0, "agent/b/rescue/a": 0.5, "agent/b/rescue/c": 0.5,
        "agent/c/rescue/a": 0.0, "agent/c/rescue/b": 0.5,
    }
    assert got == pytest.approx(want)
    assert list(got) == list(want)[:1] + [k for k in got if k != "pool/size"]  # and no other keys


def test_a_one_prompt_pool_rescues_all_or_nothing():
    pool = TrajectoryPool(problems(1), [answer(0, 0, reward=0.0), answer(0, 1, reward=1.0), answer(0, 2, reward=None)])
    got = pool_metrics(pool, IDS, torch.zeros(3), torch.ones(3, 3))
    assert (got["agent/a/rescue/b"], got["agent/b/rescue/a"], got["agent/c/rescue/b"]) == (1.0, 0.0, 1.0)


def test_an_agent_without_answers_reads_zero_not_nan():
    pool = TrajectoryPool(problems(1), [answer(0, 0, reward=1.0)])
    got = pool_metrics(pool, IDS, torch.zeros(3), torch.ones(3, 3))
    assert [got[f"agent/b/{k}"] for k in ("reward", "accuracy", "answer_tokens", "finished_frac")] == [0, 0, 0, 0]


def test_rescue_share_counts_prompts_the_source_solved_and_the_learner_did_not():
    # prompt 0: a right, b wrong      -> b rescued by a
    # prompt 1: a half (not solved), b right, b wrong -> a rescued by b
    # prompt 2: a right, b right      -> neither
    # prompt 3: a unscorable, c right (b no answer) -> a and b rescued by c
    pool = TrajectoryPool(problems(4), [
        answer(0, 0, reward=1.0), answer(0, 1, reward=0.0),
        answer(1, 0, reward=0.5), answer(1, 1, reward=1.0), answer(1, 1, reward=0.0),
        answer(2, 0, reward=1.0), answer(2, 1, reward=1.0),
        answer(3, 0, reward=None), answer(3, 2, reward=1.0)])
    assert rescue_share(pool, learner=1, source=0) == 1 / 4  # prompt 0
    assert rescue_share(pool, learner=0, source=1) == 1 / 4  # prompt 1
    assert rescue_share(pool, learner=0, source=2) == 1 / 4  # prompt 3
    assert rescue_share(pool, learner=1, source=2) == 1 / 4  # prompt 3
    assert rescue_share(pool, learner=2, source=0) == 2 / 4  # prompts 0 and 2: c answered only prompt 3
    assert rescue_share(pool, learner=2, source=1) == 2 / 4  # prompts 1 and 2
    assert rescue_share(TrajectoryPool([], []), learner=0, source=1) == 0.0  # an empty pool: 0, not a division


# ---- rewards back into the pool ------------------------------------------------------------------------------

def test_score_puts_each_reward_on_its_answer_and_counts_the_unscorable_per_agent(caplog):
    ps = problems(2)
    answers = [answer(0, 0, "right"), answer(1, 0, "?"), answer(0, 1, "wrong"), answer(1, 1, "half"),
               answer(0, 2, "?"), answer(1, 2, "?")]
    seen = []

    def score(texts, probs):
        seen.append((texts, [p.id for p in probs]))
        return scripted_score(texts, probs)

    with caplog.at_level(logging.WARNING, logger="hacrl.trainer.phases"):
        pool, stats = phases(score).score(ps, answers, step=1)
    # the scorer saw each answer with its own prompt's problem
    assert seen == [(["right", "?", "wrong", "half", "?", "?"], ["p0", "p1", "p0", "p1", "p0", "p1"])]
    assert [t.reward for t in pool.trajectories] == [1.0, None, 0.0, 0.5, None, None]
    assert [(t.prompt_index, t.source, t.text) for t in pool.trajectories] == \
        [(t.prompt_index, t.source, t.text) for t in answers]
    assert pool.problems == ps
    assert stats == {"reward/ok": 3, "reward/none": 3, "reward/error": 0, "reward/nan": 0, "reward/timeout": 0,
                     "agent/a/unscorable": 1, "agent/b/unscorable": 0, "agent/c/unscorable": 2}
    assert caplog.messages == ["step 1: 3 answer(s) unscorable (none): answer 1: returned None"]


def test_a_timed_out_reward_is_logged_as_timed_out(caplog):
    def score(texts, _probs):
        result = ScoreResult([1.0, None])
        result.ok, result.timeout, result.first_message = 1, 1, {"timeout": "answer 1: took longer than 5 s"}
        return result

    with caplog.at_level(logging.WARNING, logger="hacrl.trainer.phases"):
        phases(score).score(problems(1), [answer(0, 0, "right"), answer(0, 1, "?")], step=7)
    assert caplog.messages == ["step 7: 1 answer(s) timed out: answer 1: took longer than 5 s"]


def test_a_step_with_no_scorable_answer_is_one_clear_error():
    def score(texts, _probs):
        result = ScoreResult([None] * 3)
        result.none, result.timeout = 2, 1
        result.first_message = {"none": "answer 0: returned None", "timeout": "answer 2: took longer than 5 s"}
        return result

    with pytest.raises(InputError) as err:
        phases(score).score(problems(1), [answer(0, 0), answer(0, 1), answer(0, 2)], step=3)
    assert str(err.value) == ("task.reward: no answer of step 3 could be scored (2 none: answer 0: returned None; "
                              "1 timeout: answer 2: took longer than 5 s); fix the reward function or raise "
                              "task.reward_timeout_s")


def test_a_step_with_no_scorable_answer_and_none_timed_out_does_not_advise_the_timeout():
    def score(texts, _probs):
        result = ScoreResult([None] * 2)
        result.error = 2
        result.first_message = {"error": "answer 0: KeyError: 'ground_truth'"}
        return result

    with pytest.raises(InputError) as err:
        phases(score).score(problems(1), [answer(0, 0), answer(0, 1)], step=1)
    assert str(err.value) == ("task.reward: no answer of step 1 could be scored (2 error: answer 0: KeyError: "
                              "'ground_truth'); fix the reward function")


def test_a_kind_counted_without_a_message_reads_empty():
    def score(texts, _probs):
        result = ScoreResult([None])
        result.error = 1  # a scorer that counted the failure but kept no message for it
        return result

    with pytest.raises(InputError, match=r"could be scored \(1 error: \); fix"):
        phases(score).score(problems(1), [answer(0, 0)], step=1)


def test_a_scorer_returning_fewer_rewards_than_answers_is_an_error():
    short = phases(lambda texts, probs: scripted_score(texts[:-1], probs[:-1]))
    with pytest.raises(ValueError, match="zip"):
        short.score(problems(1), [answer(0, 0, "right"), answer(0, 1, "right")], step=1)


def test_a_step_without_answers_is_not_an_error():
    pool, stats = phases(lambda texts, probs: ScoreResult([])).score(problems(1), [], step=1)
    assert len(pool) == 0 and stats["reward/ok"] == 0 and stats["agent/a/unscorable"] == 0


# ---- update metrics and cross ratios, each to its own agent -----------------------------------------------------

def test_update_done_routes_metrics_and_timings_to_the_learner():
    # the adaptive window lives in each learner's worker (hacrl.learner.window): its bounds arrive as metrics
    timings: dict[str, float] = {}
    metrics = {"window_lower/a": 0.7, "window_lower/c": 0.6, "busy_s": 2.5, "busy_forward_s": 1.0,
               "busy_backward_s": 0.5, "pg_loss": 0.3}
    out = phases().update_metrics(1, metrics, timings)
    assert list(out.items()) == [("agent/b/window_lower/a", 0.7), ("agent/b/window_lower/c", 0.6),
                                 ("agent/b/pg_loss", 0.3)]
    assert timings == {"timing/update/b": 2.5, "timing/forward/b": 1.0, "timing/backward/b": 0.5}


def test_update_done_without_an_adaptive_window_keeps_every_metric():
    timings: dict[str, float] = {}
    out = phases().update_metrics(2, {"busy_s": 1.0, "kl": 0.25, "count/cross": 8}, timings)
    assert out == {"agent/c/kl": 0.25, "agent/c/count/cross": 8}
    assert timings == {"timing/update/c": 1.0}


@pytest.mark.model
def test_a_backend_returning_fewer_agents_than_it_has_is_an_error(trainer):
    trainer.backend = Scripted([[], []], [{"busy_s": 0.0}] * 2, [])  # two results for three agents
    with pytest.raises(ValueError, match="zip"):
        trainer._rollout(problems(4))


def test_rollout_done_names_the_agent_and_splits_its_timings():
    timings: dict[str, float] = {"timing/rollout": 4.0}
    got = rollout_metrics("b", {"busy_s": 3.0, "busy_recompute_s": 1.0, "tokens": 12.0}, timings)
    assert got == {"agent/b/rollout/tokens": 12.0}
    assert timings == {"timing/rollout": 4.0, "timing/rollout/b": 3.0, "timing/recompute/b": 1.0}
    assert rollout_metrics("a", {"busy_s": 3.0, "gap": 0.5}, None) == {"agent/a/rollout/gap": 0.5}


def test_sub_phase_timings_take_only_busy_seconds():
    m = {"busy_forward_s": 1, "busy_s_total": 2.0, "not_busy_forward_s": 3.0, "busy_ref_s": 0.25, "loss": 1.0}
    assert sub_phase_timings(m, "x") == {"timing/forward/x": 1.0, "timing/ref/x": 0.25}
    assert m == {"busy_s_total": 2.0, "not_busy_forward_s": 3.0, "loss": 1.0}
    assert isinstance(sub_phase_timings({"busy_a_s": 1}, "x")["timing/a/x"], float)


# ---- the data order ------------------------------------------------------------------------------------------

def test_the_data_stream_takes_batches_in_order_from_its_position_and_stops_short_with_a_clear_error():
    b, skipped = 4, problems(5)
    ps = [Problem(f"q{i}", "", "") for i in range(2 * b + 1)]
    data = DataStream("add2", iter(skipped + ps), start=5)  # a resumed run: the first 5 were taken before
    assert data.take(b) == ps[:b]
    assert data.next_problem() == (5 + b, ps[b])  # one at a time (the asynchronous mode): its position too
    assert data.take(b - 1) == ps[b + 1:2 * b]
    assert data.position == 5 + 2 * b  # counted for resume
    with pytest.raises(RuntimeError, match="task 'add2' ran out of training problems"):
        data.take(b)
    assert data.position == 5 + 2 * b  # a short batch is not counted
    with pytest.raises(RuntimeError, match="ran out"):
        DataStream("add2", []).next_problem()


# ---- one whole step, scripted --------------------------------------------------------------------------------

@pytest.mark.model
def test_a_scripted_step(trainer):
    b, g = trainer.cfg.trainer.batch_size, trainer.derived.group_size
    assert (b, g) == (4, 4)
    # a answers "right" to everything, b "wrong", c one "right" per prompt and three unscorable
    per_agent = [[answer(p, 0, "right", tokens=2) for p in range(b) for _ in range(g)],
                 [answer(p, 1, "wrong", tokens=3, finished=False) for p in range(b) for _ in range(g)],
                 [answer(p, 2, "right" if k == 0 else "?") for p in range(b) for k in range(g)]]
    trainer.backend = Scripted(per_agent, [{"busy_s": 0.5, "tokens": 10.0}, {"busy_s": 1.5, "tokens": 20.0},
                                           {"busy_s": 2.0, "tokens": 30.0}],
                               [{"busy_s": 1.0, "pg_loss": 0.1},
                                {"busy_s": 2.0, "pg_loss": 0.2, "window_lower/c": 0.55},  # b's worker's bound
                                {"busy_s": 3.0, "pg_loss": 0.3}])
    ps = problems(b)
    trainer.data, trainer.step_idx = DataStream("add2", iter(ps)), 3  # a resumed run's fourth step
    metrics = trainer.step()
    assert trainer.step_idx == 4

    (rollout, r), (update, u) = trainer.backend.calls
    # at temperature 0.7 the engine's log-probs are not π_old's: the workers recompute them
    assert (rollout, update, r["recompute"]) == ("rollout", "update", True)
    assert r["prompts"] == [p.prompt for p in ps]
    assert r["params"] == [SamplingParams(n=g, temperature=0.7, top_p=0.9, max_new_tokens=4)] * 3  # one per agent
    # the capability tracker saw this step's scored answers: a 16/16, b 0/16, c 4/4
    tracker = CapabilityTracker(3, window=trainer.cfg.algorithm.capability_window)
    tracker.update(*_rewards_and_sources(per_agent))
    request = u["request"]  # the one request every agent's update reads
    assert len(request.pool) == 3 * b * g and request.own_keys is None and request.forget == ()
    assert torch.equal(request.omega_NN, tracker.omega_matrix())  # the one ω, the tracker's (its clamps)
    assert metrics["reward/ok"] == 2 * b * g + b and metrics["reward/none"] == b * (g - 1)
    assert [metrics[f"agent/{a}/unscorable"] for a in "abc"] == [0, 0, b * (g - 1)]
    assert [metrics[f"agent/{a}/rollout/tokens"] for a in "abc"] == [10.0, 20.0, 30.0]
    assert [metrics[f"agent/{a}/pg_loss"] for a in "abc"] == [0.1, 0.2, 0.3]
    assert [metrics[f"agent/{a}/accuracy"] for a in "abc"] == [1.0, 0.0, 1.0]
    assert metrics["agent/b/window_lower/c"] == pytest.approx(0.55)
    assert [metrics[f"timing/rollout/{a}"] for a in "abc"] == [0.5, 1.5, 2.0]
    assert [metrics[f"timing/update/{a}"] for a in "abc"] == [1.0, 2.0, 3.0]
    for phase, busy in (("rollout", 4.0), ("update", 6.0)):
        assert metrics[f"timing/{phase}_overlap"] == pytest.approx(busy / metrics[f"timing/{phase}"])
    for phase in ("data", "rollout", "reward", "capability", "update"):
        assert 0 <= metrics[f"timing/{phase}"] < 60
    # the first two prompts' answers, every agent's, in samples/step-000004.jsonl
    lines = [json.loads(x) for x in (trainer.run_dir / "samples" / "step-000004.jsonl").read_text().splitlines()]
    assert [x["problem_id"] for x in lines] == ["p0", "p1"]
    assert lines[1]["prompt"] == "1+1=" and lines[1]["answer"] == "2"
    assert [(a["agent"], a["text"], a["reward"], a["finished"]) for a in lines[0]["answers"]] == \
        [("a", "right", 1.0, True)] * g + [("b", "wrong", 0.0, False)] * g + [("c", "right", 1.0, True)] + \
        [("c", "?", None, True)] * (g - 1)


@pytest.mark.model
def test_a_step_with_the_fixed_window_passes_no_bounds(tmp_path, monkeypatch):
    cfg = load_config("tiny-test", overrides=[THREE])
    t = Trainer(cfg, tmp_path, sinks=False)
    try:
        t.backend.close()
        b, g = cfg.trainer.batch_size, t.derived.group_size
        t.backend = Scripted([[answer(p, i, "right") for p in range(b) for _ in range(g)] for i in range(3)],
                             [{"busy_s": 0.0}] * 3, [{"busy_s": 0.0, "pg_loss": 0.5}] * 3)
        t.phases.score_texts = scripted_score
        t.data = DataStream("add2", problems(b))
        metrics = t.step()
        assert not any("window_lower" in k for k in metrics) and metrics["agent/c/pg_loss"] == 0.5
    finally:
        t.close()


def _rewards_and_sources(per_agent: list[list[Trajectory]]) -> tuple[torch.Tensor, torch.Tensor]:
    scored = [(REWARD[t.text], t.source) for answers in per_agent for t in answers if REWARD[t.text] is not None]
    return torch.tensor([r for r, _ in scored]), torch.tensor([s for _, s in scored])


def set_trainer(trainer: Trainer, **settings: Any) -> None:
    """Change ``trainer.*`` settings of a built trainer (the config is frozen)."""
    cfg = trainer.cfg
    trainer.cfg = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update=settings)})


@pytest.mark.model
def test_no_samples_file_without_log_samples(trainer):
    set_trainer(trainer, log_samples=0)
    trainer._write_samples(TrajectoryPool(problems(1), [answer(0, 0, reward=1.0)]))
    assert not (trainer.run_dir / "samples").exists()


# ---- the loop's cadence --------------------------------------------------------------------------------------

class Recorder:
    def __init__(self) -> None:
        self.lines: list[tuple[int, dict]] = []

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.lines.append((step, dict(metrics)))

    def close(self) -> None:
        pass


@pytest.mark.model
def test_the_loop_evaluates_and_checkpoints_on_its_cadence(trainer, monkeypatch):
    set_trainer(trainer, steps=5, eval_every=2, checkpoint_every=3)
    events: list[tuple] = []

    def step():
        trainer.step_idx += 1
        events.append(("step", trainer.step_idx))
        return {"m": float(trainer.step_idx)}

    def evaluate(*, budget=False):
        events.append(("eval", trainer.step_idx, budget))
        return {"eval/a/greedy_acc": trainer.step_idx / 10}

    def save_checkpoint():
        events.append(("checkpoint", trainer.step_idx))
        return trainer.run_dir / f"ckpt-{trainer.step_idx}"

    monkeypatch.setattr(trainer, "step", step)
    monkeypatch.setattr(trainer, "evaluate", evaluate)
    monkeypatch.setattr(trainer, "evaluate_start", lambda: events.append(("start",)) or {"eval/a/greedy_acc": 0.0})
    monkeypatch.setattr(trainer, "save_checkpoint", save_checkpoint)
    monkeypatch.setattr(trainer, "eval_record", lambda s: {"first": s})
    trainer.sink = sink = Recorder()
    progress: list[tuple[int, dict]] = []
    out = trainer.train(lambda step, metrics: progress.append((step, dict(metrics))))
    assert progress == sink.lines[1:]  # the progress callback sees each step's line as it is logged
    assert events == [("start",), ("step", 1), ("step", 2), ("eval", 2, False), ("step", 3), ("checkpoint", 3),
                      ("step", 4), ("eval", 4, False), ("step", 5), ("eval", 5, True), ("checkpoint", 5)]
    assert [s for s, _ in sink.lines] == [0, 1, 2, 3, 4, 5]
    assert sink.lines[0][1] == {"eval/a/greedy_acc": 0.0}
    assert sink.lines[2][1]["eval/a/greedy_acc"] == 0.2 and "eval/a/greedy_acc" not in sink.lines[3][1]
    # the step-3 checkpoint's write time is logged with the next step's line
    assert "timing/checkpoint" not in sink.lines[3][1] and sink.lines[4][1]["timing/checkpoint"] >= 0
    assert "timing/checkpoint" not in sink.lines[5][1]
    assert all(math.isfinite(m["timing/eval"]) for s, m in sink.lines if s in (2, 4, 5))
    assert out == {"first": {"first": 0}, "last": {"eval/a/greedy_acc": 0.5}, "checkpoint": trainer.run_dir /
                   "ckpt-5", "stopped": False}
    assert (trainer.run_dir / "config.yaml").exists()


@pytest.mark.model
def test_a_resumed_loop_skips_the_start_evaluation_and_a_stop_request_ends_it_with_a_checkpoint(trainer,
                                                                                                 monkeypatch):
    set_trainer(trainer, steps=10, eval_every=2, checkpoint_every=0)
    trainer.step_idx = 4
    events: list[tuple] = []

    def step():
        trainer.step_idx += 1
        events.append(("step", trainer.step_idx))
        if trainer.step_idx == 6:
            trainer.stop.requested = True  # as SIGTERM's handler does
        return {}

    monkeypatch.setattr(trainer, "step", step)
    monkeypatch.setattr(trainer, "evaluate_start", lambda: events.append(("start",)) or {})
    monkeypatch.setattr(trainer, "evaluate", lambda **kw: events.append(("eval",)) or {})
    monkeypatch.setattr(trainer, "save_checkpoint", lambda: events.append(("checkpoint", trainer.step_idx)))
    monkeypatch.setattr(trainer, "eval_record", lambda s: None)
    trainer.sink = Recorder()
    out = trainer.train()
    assert events == [("step", 5), ("step", 6), ("eval",), ("checkpoint", 6)]
    assert out["stopped"] is True and out["last"] is None  # "last" is the final evaluation's, not step 6's


@pytest.mark.model
def test_the_asynchronous_mode_runs_its_own_loop_in_the_same_scaffold(trainer, monkeypatch):
    calls = []
    monkeypatch.setattr(trainer, "async_loop", lambda: "loop")
    monkeypatch.setattr(trainer, "_train_async",
                        lambda loop, progress: calls.append((loop, progress)) or ({"eval/a/greedy_acc": 1.0}, "ckpt"))
    monkeypatch.setattr(trainer, "evaluate_start", lambda: {"eval/a/greedy_acc": 0.0})
    monkeypatch.setattr(trainer, "eval_record", lambda s: {"first": s})
    trainer.sink = sink = Recorder()
    set_trainer(trainer, mode="async")
    progress = print
    assert trainer.train(progress) == {"first": {"first": 0}, "last": {"eval/a/greedy_acc": 1.0},
                                       "checkpoint": "ckpt", "stopped": False}
    assert calls == [("loop", progress)]
    assert sink.lines == [(0, {"eval/a/greedy_acc": 0.0})] and (trainer.run_dir / "config.yaml").exists()


# ---- samples and signals -------------------------------------------------------------------------------------

@pytest.mark.model
def test_one_logged_sample_a_step_in_a_file_of_its_own(trainer):
    set_trainer(trainer, log_samples=1)
    pool = TrajectoryPool(problems(2), [answer(0, 0, "right", reward=1.0), answer(1, 1, "wrong", reward=0.0)])
    for step in (1, 2):  # the samples folder exists from the second step on
        trainer.step_idx = step
        trainer._write_samples(pool)
    for step in (1, 2):
        lines = (trainer.run_dir / "samples" / f"step-00000{step}.jsonl").read_text().splitlines()
        assert [json.loads(x)["problem_id"] for x in lines] == ["p0"]


@pytest.mark.model
def test_the_loop_takes_sigterm_while_it_runs_and_gives_it_back(trainer, monkeypatch):
    set_trainer(trainer, steps=1, eval_every=0, checkpoint_every=0)
    before = signal.getsignal(signal.SIGTERM)
    seen = []

    def step():
        seen.append(signal.getsignal(signal.SIGTERM))
        trainer.step_idx += 1
        return {}

    monkeypatch.setattr(trainer, "step", step)
    monkeypatch.setattr(trainer, "evaluate_start", lambda: {})
    monkeypatch.setattr(trainer, "evaluate", lambda **kw: {})
    monkeypatch.setattr(trainer, "save_checkpoint", lambda: None)
    trainer.train()
    assert seen == [trainer.stop.request]  # SIGTERM: finish the step, checkpoint, stop
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.model
def test_the_loop_runs_off_the_main_thread_without_signal_handlers(trainer, monkeypatch):
    # a trainer driven from a worker thread (a notebook's, a service's) cannot install handlers: it runs anyway
    set_trainer(trainer, steps=1, eval_every=0, checkpoint_every=0)
    monkeypatch.setattr(trainer, "step", lambda: setattr(trainer, "step_idx", trainer.step_idx + 1) or {})
    monkeypatch.setattr(trainer, "evaluate_start", lambda: {})
    monkeypatch.setattr(trainer, "evaluate", lambda **kw: {})
    monkeypatch.setattr(trainer, "save_checkpoint", lambda: None)
    out: list = []
    thread = threading.Thread(target=lambda: out.append(trainer.train()))
    thread.start()
    thread.join(60)
    assert out and out[0]["stopped"] is False and trainer.step_idx == 1


# ---- checkpoint state, one function for both loops -------------------------------------------------------------

class StubLoop:
    """What ``checkpoint_state`` reads of the asynchronous loop."""

    def state_dict(self) -> dict:
        return {"versions": [2, 1]}

    def manifest(self) -> dict:
        return {"mode": "async", "versions": [2, 1]}


@pytest.mark.model
def test_checkpoint_state_is_the_lock_step_one_plus_the_async_loops(trainer):
    trainer.step_idx = 3
    trainer.data.take(2)
    state, manifest = trainer.checkpoint_state()
    assert list(state) == ["step", "data_pos", "tracker", "rng"]  # the adaptive window: in each worker's files
    assert (state["step"], state["data_pos"]) == (3, 2)
    agents = [{"id": a, "model": m} for a, m in zip(IDS, ("builtin:qwen2-char-small", "builtin:qwen2-char",
                                                          "builtin:llama-bpe"), strict=True)]
    assert manifest == {"agents": agents, "algorithm": "hacpo"}
    state, manifest = trainer.checkpoint_state(StubLoop())  # type: ignore[arg-type]
    assert list(state) == ["step", "data_pos", "tracker", "rng", "async"]
    assert state["async"] == {"versions": [2, 1]}
    assert manifest == {"agents": agents, "algorithm": "hacpo", "mode": "async", "versions": [2, 1]}


@pytest.mark.model
def test_the_async_loops_agent_states_go_through_a_checkpoint(trainer):
    from hacrl.trainer.async_loop import AgentState, AsyncLoop, Round

    loop = AsyncLoop(trainer.cfg, trainer.phases, None, trainer.data, step=7)
    loop.agents[0] = AgentState(version=4, tag=5, own_keys={11: (4, 0), 12: (4, 1)}, busy=2.0, idle=1.0, updates=3)
    loop.agents[2] = AgentState(version=3, tag=3)
    ps = problems(2)
    loop.problems, loop.handed = {8: ps[0], 9: ps[1]}, {8: {0, 2}, 9: {0}}
    loop.held[2] = Round(3, [8, 9], ps, 3, metrics={"agent/c/unscorable": 1.0})
    state = loop.state_dict()
    assert (state["versions"], state["tags"]) == ([4, 0, 3], [5, 0, 3])
    assert state["own_keys"] == [{11: (4, 0), 12: (4, 1)}, {}, {}]
    again = AsyncLoop(trainer.cfg, trainer.phases, None, trainer.data)
    buffer = io.BytesIO()
    torch.save(state, buffer)  # as the checkpoint writes it
    buffer.seek(0)
    again.load_state_dict(torch.load(buffer, weights_only=False))
    assert again.versions == [4, 0, 3] and [a.tag for a in again.agents] == [5, 0, 3]
    assert again.agents[0].own_keys == {11: (4, 0), 12: (4, 1)}
    assert (again.agents[0].busy, again.agents[0].updates) == (0.0, 0)  # this process's counts start afresh
    assert again.handed == loop.handed and again.problems == loop.problems
    assert again.held[2].prompts == [8, 9] and again.held[2].problems == ps and again.held[2].version == 3
    assert again.manifest() == {"mode": "async", "versions": [4, 0, 3]}


# ---- the asynchronous loop's cadence (a scripted loop: agent a makes two updates to b's and c's one) -------------

class PacedLoop:
    """What ``Trainer._train_async`` drives: updates in the order a, a, b, c, a, a, b, c, ... until ``stop()``."""

    def __init__(self) -> None:
        self.versions, self.step, self.resumed = [0, 0, 0], 0, 0
        self.order = [0, 0, 1, 2]

    def run_until(self, stop, on_update) -> None:
        while not stop():
            k = self.order[self.step % 4]
            self.versions[k] += 1
            self.step += 1
            on_update(self.step, k, {"agent": float(k)})

    def resume_calls(self) -> None:
        self.resumed += 1


@pytest.mark.model
def test_the_async_loop_is_cut_for_evaluations_and_checkpoints_at_the_slowest_agents_versions(trainer, monkeypatch):
    set_trainer(trainer, steps=4, eval_every=2, checkpoint_every=3)
    events: list[tuple] = []
    monkeypatch.setattr(trainer, "evaluate",
                        lambda *, budget=False: events.append(("eval", trainer.step_idx, budget)) or {"e": 1.0})
    monkeypatch.setattr(trainer, "save_checkpoint",
                        lambda loop=None: events.append(("checkpoint", trainer.step_idx, list(loop.versions))) or "ck")
    trainer.sink = sink = Recorder()
    loop, progress = PacedLoop(), []
    last, path = trainer._train_async(loop, lambda step, line: progress.append(step))  # type: ignore[arg-type]
    # the slowest (c) reaches 2 at the run's 8th update, 3 at the 12th, 4 at the 16th
    assert events == [("eval", 8, False), ("checkpoint", 12, [6, 3, 3]), ("eval", 16, True),
                      ("checkpoint", 16, [8, 4, 4])]
    assert (last, path, trainer.step_idx, loop.resumed) == ({"e": 1.0}, "ck", 16, 3)
    assert progress == list(range(1, 17))  # every update line, none of the evaluations' lines
    evaluations = [(s, m) for s, m in sink.lines if "e" in m]
    assert [s for s, _ in evaluations] == [8, 16]
    assert [evaluations[0][1][f"agent/{a}/version"] for a in IDS] == [4, 2, 2]
    assert all(0 <= m["timing/eval"] < 60 for _, m in evaluations)
    assert [s for s, m in sink.lines if "e" not in m] == list(range(1, 17))


@pytest.mark.model
def test_a_stop_request_ends_the_async_loop_at_the_next_cut_with_a_checkpoint(trainer, monkeypatch):
    set_trainer(trainer, steps=10, eval_every=0, checkpoint_every=0)
    events: list[tuple] = []
    monkeypatch.setattr(trainer, "evaluate", lambda **kw: events.append(("eval",)) or {})
    monkeypatch.setattr(trainer, "save_checkpoint", lambda loop=None: events.append(("checkpoint", trainer.step_idx)))
    trainer.sink = Recorder()

    def progress(step, _line):
        if step == 4:
            trainer.stop.requested = True  # as SIGTERM's handler does

    last, _ = trainer._train_async(PacedLoop(), progress)  # type: ignore[arg-type]
    assert events == [("checkpoint", 4)] and last is None


@pytest.mark.model
def test_a_stop_request_is_a_flag_while_the_handlers_are_installed(trainer):
    before = signal.getsignal(signal.SIGTERM)
    with trainer.stop.installed():
        signal.raise_signal(signal.SIGTERM)
    assert trainer.stop.requested and signal.getsignal(signal.SIGTERM) == before
