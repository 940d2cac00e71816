"""Rewards: text -> float | None, by name or ``module:function``, scored in bounded time.

- :data:`REWARDS` - the registry: ``exact``, ``numeric`` (GSM8K last number), ``math`` (last
  ``\\boxed{}``, math-verify with a normalised-string fallback).
- :func:`get_reward` - resolve a registry name, ``package.module:function`` or ``path/to/file.py:function``.
- :class:`RewardScorer` - score a batch with per-answer time limits in worker processes (or inline),
  counting errors, None, NaN and timeouts in a :class:`ScoreResult`.

A reward is ``fn(completion: str, sample: dict) -> float | None``; ``sample["answer"]`` is the ground
truth. None means "unscorable, skip". Importing this package does not import math-verify.
"""

from hacrl.rewards import basic, math_reward  # noqa: F401  (registers the built-in rewards)
from hacrl.rewards.base import REWARDS, RewardFn, get_reward, spec_of
from hacrl.rewards.scorer import KINDS, RewardScorer, ScoreResult, call_reward, check_value

__all__ = ["KINDS", "REWARDS", "RewardFn", "RewardScorer", "ScoreResult", "call_reward", "check_value",
           "get_reward", "spec_of"]
