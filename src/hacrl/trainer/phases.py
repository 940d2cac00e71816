"""The phases of a training step, one copy for both loops: the lock-step ``Trainer.step`` and the asynchronous
``AsyncLoop`` (``trainer.mode=async``) call the same code around the workers' ``rollout`` and ``update``.

- ``DataStream``: the training problems in order and the position reached (saved in checkpoints);
- ``Phases``: the sampling parameters, the scoring of answers into a ``TrajectoryPool``, the update's request
  (``learner.request.UpdateRequest``) and the update's metrics;
- pure functions of a pool and scalars: ``pool_metrics``, ``rescue_share``, ``rollout_metrics``,
  ``reward_function_metrics``, ``sub_phase_timings``; ``timed`` times a phase.

Nothing here computes a formula (those are in ``hacrl.core``) or talks to a worker: the loops make the calls.
Tests: tests/trainer/test_phases.py (hand-computed, no model).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from hacrl.config import Config, Derived
from hacrl.errors import InputError
from hacrl.learner.request import UpdateRequest
from hacrl.pool import TrajectoryPool
from hacrl.rewards import ScoreResult
from hacrl.rollout import SamplingParams
from hacrl.trainer.reward_checks import RewardWarnings
from hacrl.types import Problem, Trajectory

logger = logging.getLogger(__name__)

Score = Callable[[list[str], list[Problem]], ScoreResult]


# ---- timings --------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def timed(timings: dict[str, float], name: str, report: Callable[[str, float], None] | None = None
          ) -> Iterator[None]:
    """Add the seconds the block took to ``timings["timing/<name>"]``; then, unless it raised, ``report(name,
    seconds)`` (the progress of a long step: ``hacrl train`` prints a line for a long phase)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        seconds = time.perf_counter() - start
        timings[f"timing/{name}"] = timings.get(f"timing/{name}", 0.0) + seconds
    if report is not None:
        report(name, seconds)


def sub_phase_timings(metrics: dict[str, float], agent_id: str) -> dict[str, float]:
    """Pop a worker's ``busy_<phase>_s`` seconds (π_old recomputation; the update's forward, reference,
    backward and optimizer) out of ``metrics`` as ``timing/<phase>/<agent>``.

    >>> m = {"busy_forward_s": 1.5, "loss": 0.1}
    >>> sub_phase_timings(m, "a"), m
    ({'timing/forward/a': 1.5}, {'loss': 0.1})
    """
    keys = [k for k in metrics if k.startswith("busy_") and k.endswith("_s")]
    return {f"timing/{k[5:-2]}/{agent_id}": float(metrics.pop(k)) for k in keys}


def rollout_metrics(agent_id: str, m: dict[str, float], timings: dict[str, float] | None) -> dict[str, float]:
    """One agent's rollout metrics as ``agent/<id>/rollout/*``; its busy seconds and sub-phases into ``timings``.

    >>> timings = {}
    >>> rollout_metrics("a", {"busy_s": 2.0, "busy_recompute_s": 0.5, "tokens": 7.0}, timings), timings
    ({'agent/a/rollout/tokens': 7.0}, {'timing/rollout/a': 2.0, 'timing/recompute/a': 0.5})
    """
    busy, sub = m.pop("busy_s"), sub_phase_timings(m, agent_id)
    if timings is not None:
        timings[f"timing/rollout/{agent_id}"] = busy
        timings.update(sub)
    return {f"agent/{agent_id}/rollout/{k}": v for k, v in m.items()}


# ---- what a pool says ---------------------------------------------------------------------------------------
def rescue_share(pool: TrajectoryPool, *, learner: int, source: int) -> float:
    """Share of the step's prompts on which ``learner`` wrote no correct answer (reward >= 1) and ``source``
    wrote at least one: the prompts where the source's answers can teach the learner something it lacks."""
    solved = {(t.prompt_index, t.source) for t in pool.trajectories if t.reward is not None and t.reward >= 1.0}
    groups = {t.prompt_index for t in pool.trajectories}
    hits = sum((g, learner) not in solved and (g, source) in solved for g in groups)
    return hits / max(len(groups), 1)


def pool_metrics(pool: TrajectoryPool, agent_ids: list[str], capability_N: torch.Tensor, omega_NN: torch.Tensor
                 ) -> dict[str, float]:
    """``pool/size`` and, per agent, its answers' mean reward, accuracy, length and finished share, its
    capability, and per other agent ω[learner, source] and the rescue share.

    Args:
        capability_N: P̂ per agent. omega_NN: ω[learner, source].
    """
    out: dict[str, float] = {"pool/size": len(pool)}
    for i, a in enumerate(agent_ids):
        own = [t for t in pool.trajectories if t.source == i]
        scored = [t.reward for t in own if t.reward is not None]
        out[f"agent/{a}/reward"] = sum(scored) / max(len(scored), 1)
        out[f"agent/{a}/accuracy"] = sum(r >= 1.0 for r in scored) / max(len(scored), 1)
        out[f"agent/{a}/capability"] = float(capability_N[i])
        out[f"agent/{a}/answer_tokens"] = sum(t.num_tokens for t in own) / max(len(own), 1)
        out[f"agent/{a}/finished_frac"] = sum(t.finished for t in own) / max(len(own), 1)
        for j, b in enumerate(agent_ids):
            if j != i:
                out[f"agent/{a}/omega/{b}"] = float(omega_NN[i, j])
                out[f"agent/{a}/rescue/{b}"] = rescue_share(pool, learner=i, source=j)
    return out


def reward_function_metrics(sources: Sequence[int], by_function: dict[str, list[float | None]],
                            agent_ids: Sequence[str]) -> dict[str, float]:
    """With several reward functions (``ScoreResult.by_function``: each one's value per answer, None where it did
    not score it), each function's mean over each agent's answers it scored, as ``agent/<id>/reward/<name>``
    (TRL's ``rewards/<name>/mean``, per agent; ``agent/<id>/reward`` is the weighted sum); ``sources``: each
    answer's agent index. No key where a function scored none of an agent's answers.

    >>> reward_function_metrics([0, 0, 1], {"fmt": [1.0, 0.5, None], "acc": [0.0, 1.0, 1.0]}, ["a", "b"])
    {'agent/a/reward/fmt': 0.75, 'agent/a/reward/acc': 0.5, 'agent/b/reward/acc': 1.0}
    """
    out: dict[str, float] = {}
    for index, agent_id in enumerate(agent_ids):
        for name, values in by_function.items():
            own = [v for v, source in zip(values, sources, strict=True) if source == index and v is not None]
            if own:
                out[f"agent/{agent_id}/reward/{name}"] = sum(own) / len(own)
    return out


# ---- the data ---------------------------------------------------------------------------------------------------
class DataStream:
    """The training problems in order, from position ``start`` on; ``position`` is how many the run has taken
    (saved in checkpoints: a resumed run continues there). A problem's position is its prompt id in the
    asynchronous mode.

    >>> data = DataStream("t", [Problem(str(i), "", "") for i in range(5)], start=1)
    >>> [p.id for p in data.take(2)], data.position, data.next_problem()
    (['1', '2'], 3, (3, Problem(id='3', prompt='', answer='', meta={})))
    """

    def __init__(self, task_name: str, problems: Iterable[Problem], *, start: int = 0) -> None:
        self._task_name = task_name
        self._problems = itertools.islice(problems, start, None)
        self._position = start

    @property
    def position(self) -> int:
        return self._position

    def take(self, n: int) -> list[Problem]:
        """The next ``n`` problems; an error naming the task when fewer are left."""
        batch = list(itertools.islice(self._problems, n))
        if len(batch) < n:
            raise RuntimeError(f"task {self._task_name!r} ran out of training problems")
        self._position += n
        return batch

    def next_problem(self) -> tuple[int, Problem]:
        """The next problem and its position in the stream."""
        position = self._position
        return position, self.take(1)[0]


# ---- the phases -------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Phases:
    """What both loops do around the workers' calls. ``score_texts`` scores answer texts against their problems
    (the task's scorer). Everything else the update needs from the config (minibatches, corrections, the
    adaptive cross window's state) the workers hold: ``Derived`` reaches them at construction."""

    agent_ids: list[str]
    sampling: SamplingParams  # every rollout's: G answers per prompt
    recompute: bool  # the workers recompute π_old after the rollout (rollout.old_logprobs)
    score_texts: Score
    warnings: RewardWarnings = dataclasses.field(default_factory=RewardWarnings)  # all-zero, outside [0, 1]

    @classmethod
    def build(cls, cfg: Config, derived: Derived, score_texts: Score) -> Phases:
        r = cfg.rollout
        return cls([a.id for a in cfg.agents], SamplingParams(n=derived.group_size, temperature=r.temperature,
                                                             top_p=r.top_p, max_new_tokens=r.max_new_tokens),
                   derived.recompute_old_logprobs, score_texts)

    def score(self, problems: list[Problem], answers: list[Trajectory], *, step: int
              ) -> tuple[TrajectoryPool, dict[str, float]]:
        """The answers with their rewards as a pool over ``problems`` (unscorable: reward None) and the counts
        ``reward/<kind>`` and ``agent/<id>/unscorable`` (with several reward functions, each one's mean per agent:
        ``reward_function_metrics``); ``step`` (1-based) names the step in warnings (also, once,
        all-zero rewards and rewards outside [0, 1]: ``reward_checks``). An error when no answer could be scored."""
        result = self.score_texts([t.text for t in answers], [problems[t.prompt_index] for t in answers])
        stats: dict[str, float] = {f"reward/{kind}": n for kind, n in result.counts().items()}
        for kind, message in result.first_message.items():
            logger.warning("step %d: %d answer(s) %s: %s", step, stats[f"reward/{kind}"],
                           "timed out" if kind == "timeout" else f"unscorable ({kind})", message)
        if answers and result.ok == 0:
            reasons = "; ".join(f"{n} {kind}: {result.first_message.get(kind, '')}" for kind, n in
                                result.counts().items() if n)  # no answer is ok here
            timeout = " or raise task.reward_timeout_s" if result.timeout else ""  # only when answers timed out
            raise InputError(f"task.reward: no answer of step {step} could be scored ({reasons}); "
                             f"fix the reward function{timeout}")
        # tokenizer-neutral: each worker keeps its own token ids and log-probs from rollout to update
        trajectories = [dataclasses.replace(t, reward=reward)
                        for t, reward in zip(answers, result.rewards, strict=True)]
        for index, agent_id in enumerate(self.agent_ids):
            stats[f"agent/{agent_id}/unscorable"] = sum(t.reward is None for t in trajectories if t.source == index)
        stats.update(reward_function_metrics([t.source for t in answers], result.by_function, self.agent_ids))
        self.warnings.check(trajectories, self.agent_ids, step)
        return TrajectoryPool(problems, trajectories), stats

    @staticmethod
    def update_request(pool: TrajectoryPool, omega_NN: torch.Tensor, *,
                       own_keys: list[tuple[int, int]] | None = None,
                       forget: list[tuple[int, int]] | None = None,
                       validation: tuple[tuple[bool, ...], ...] | None = None) -> UpdateRequest:
        """A worker's update request (the one place that builds it); ``own_keys`` and ``forget``: the
        asynchronous mode's keys of the learner's own answers in ``pool`` and of those that expired unused;
        ``validation``: the trust method's check before this step (per agent, per problem: right or not)."""
        return UpdateRequest(pool, omega_NN, None if own_keys is None else tuple(own_keys), tuple(forget or ()),
                             validation)

    def update_metrics(self, i: int, loss_metrics: dict[str, Any], timings: dict[str, float]) -> dict[str, float]:
        """Agent ``i``'s update metrics as ``agent/<id>/*`` (with the adaptive window, ``window_lower/<source>``:
        the ℓ_0 its worker used); its busy seconds and sub-phases into ``timings``."""
        agent_id = self.agent_ids[i]
        timings[f"timing/update/{agent_id}"] = loss_metrics.pop("busy_s")
        timings.update(sub_phase_timings(loss_metrics, agent_id))
        return {f"agent/{agent_id}/{k}": v for k, v in loss_metrics.items()}
