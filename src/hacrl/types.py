"""Tokenizer-neutral data that moves between agents: problems and trajectories.

A ``Trajectory`` holds text and scalars only (plus the source's own token ids, which only the source
itself reuses), so it can cross process and node boundaries cheaply and be re-tokenized by any learner.
It is the one record of an answer outside the engines and the learner: a worker returns its answers as
trajectories without a reward, the trainer scores them into the step's pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The default ``task.test_seed``: held-out problems are drawn from it, not from ``run.seed`` (see
# ``hacrl.data.splits``); here, at the bottom layer, so that the config and the data share one value.
HELD_OUT_SEED = 1_000_000_000


@dataclass(frozen=True)
class Problem:
    """One prompt of a verifiable task: ``prompt`` is the question text, ``answer`` the ground truth."""

    id: str
    prompt: str
    answer: str
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def as_sample(self) -> dict[str, Any]:
        """The ``sample`` every reward function receives (``fn(completion, sample) -> float | None``): the
        problem's meta fields, then ``prompt``, ``answer`` (the ground truth) and ``problem_id``.

        >>> Problem("add2/07+85", "07+85=", "92", {"a": 7}).as_sample()
        {'a': 7, 'prompt': '07+85=', 'answer': '92', 'problem_id': 'add2/07+85'}
        """
        return {**self.meta, "prompt": self.prompt, "answer": self.answer, "problem_id": self.id}


@dataclass(frozen=True)
class Trajectory:
    """One sampled answer, as every agent can read it.

    Attributes:
        prompt_index: index of the prompt within the step's batch (the answer's advantage group).
        source: index of the agent that wrote the answer.
        text: the answer text, decoded without special tokens.
        finished: the source stopped with its EOS token (so the answer is complete).
        logp_sum: sum of the source's rollout-time token log-probs over its answer tokens.
        num_tokens: number of the source's answer tokens (EOS included when ``finished``).
        reward: the verifier's score; None if unscorable, or not scored yet.
        token_ids: the source's own answer token ids: empty in transit, filled back in by the source's own
            worker for its update.
        token_logps: the source's rollout-time per-token log-probs (for token-level losses), likewise.
        behav_logp_sum: the sum of the engine's own log-probs of the answer tokens where ``logp_sum`` is not the
            engine's (π_old recomputed by the source's training pass): the behaviour policy of the rollout
            correction (``hacrl.core.correction``). None: ``logp_sum`` is the engine's, behaviour and π_old are
            one pass. Likewise filled in by the source's own worker only.
        version_gap: the asynchronous mode (docs/async.md), on an answer handed back to its author's update: the
            author's version now minus the version that wrote it (``PoolTake.trajectory_pool`` sets it; the
            staleness correction reads it from the learner's row); 0 everywhere else.
    """

    prompt_index: int
    source: int
    text: str
    finished: bool
    logp_sum: float
    num_tokens: int
    reward: float | None = None
    token_ids: tuple[int, ...] = ()
    token_logps: tuple[float, ...] = ()
    behav_logp_sum: float | None = None
    version_gap: int = 0

    @property
    def logp_mean(self) -> float:
        return self.logp_sum / max(self.num_tokens, 1)
