"""Rewards: text -> float | None, by name or ``module:function``, scored in bounded time.

- :data:`REWARDS` - the registry: ``exact``, ``numeric`` (GSM8K last number), ``math`` (last
  ``\\boxed{}``, math-verify with a normalised-string fallback).
- :func:`get_reward` - resolve a registry name, ``package.module:function`` or ``path/to/file.py:function``.
- :class:`RewardScorer` - score a batch with per-answer time limits in worker processes (or inline),
  counting errors, None, NaN and timeouts in a :class:`ScoreResult`.

Importing this package does not import math-verify.

**The contract.** Every reward (the registered ones, a user's ``module:function`` or ``file.py:function``
named by ``task.reward``, a task's own verifier) is called as ``fn(completion, sample) -> float | None``
(:data:`~hacrl.rewards.base.RewardFn`), for training answers, the evaluations in eval.jsonl and ``hacrl eval`` alike:

``completion`` (str)
    One agent's answer as text: the tokens it generated after the prompt, decoded without special tokens
    (no EOS, no chat markup), not stripped. Every agent's answer arrives as text, whatever its tokenizer.

``sample`` (dict)
    The problem's :meth:`hacrl.types.Problem.as_sample`: its metadata fields first, then ``prompt``,
    ``answer`` and ``problem_id``, so these three win over a metadata field of the same name.

    - ``answer``: the ground truth as a string, as the data has it (GSM8K: the whole solution,
      ``"... #### 72"``).
    - ``prompt``: the question inside ``task.prompt_template``, as the agents get it before any chat
      template.
    - ``problem_id``: a stable id: ``add2/07+85``, ``<file stem>/<row>`` for a data file (or its
      ``id_field``), ``basic_arithmetic/test/3``.
    - metadata, by ``task.kind``. ``builtin``: the task's own fields (``add2``: ``a``, ``b``, ``op``) and
      ``split`` (``"train"`` or ``"test"``). ``dataset``: ``row`` (the row's index in its file) and
      ``question`` (before the template); a question given as chat messages adds ``templated`` and
      ``system``; every column of the row comes first (a data set's ``solution``, ``difficulty``,
      verl's ``data_source``, ``extra_info``), hacrl's own fields win over a column of the same name. ``reasoning-gym``: ``split``, ``question`` and ``metadata`` (the generator's own dict).
      Benchmarks (``trainer.eval_benchmarks``, ``hacrl eval --benchmark``, scored with ``math``): the
      reader's fields, ``question`` and ``benchmark``.

returns (float or None)
    1.0 for a correct answer, 0.0 for a wrong one: an agent's capability P̂ (hence ω) is its mean
    reward and ``agent/<id>/accuracy`` counts rewards >= 1; partial credit works, kept in [0, 1]. None
    means "cannot score this one": the answer stays in the samples log but is left out of every group,
    capability and loss; it is not a wrong answer. Raising, NaN or inf, a non-number and running past
    ``task.reward_timeout_s`` count as unscorable too, and the step goes on.

A reward of your own, called as the trainer calls it:

>>> from hacrl.types import Problem
>>> def ends_with_answer(completion, sample):
...     return float(completion.strip().endswith(sample["answer"]))
>>> sample = Problem("add2/07+85", "07+85=", "92", {"a": 7, "b": 85, "op": "+", "split": "test"}).as_sample()
>>> sample["problem_id"], ends_with_answer("so 92", sample), ends_with_answer("93", sample)
('add2/07+85', 1.0, 0.0)

TRL's batched contract (``fn(completions, **columns) -> list``) and verl's ``compute_score`` work as well,
and several rewards combine with weights: :mod:`hacrl.rewards.contract`. docs/howto-reward.md walks through
writing, naming and testing one.
"""
from hacrl.rewards import basic, math_reward  # noqa: F401  (registers the built-in rewards)
from hacrl.rewards.base import REWARDS, RewardFn, get_reward, register_python, spec_of
from hacrl.rewards.contract import CONTRACTS, RewardSet, detect_contract, trl_reward, verl_reward
from hacrl.rewards.scorer import KINDS, RewardScorer, ScoreResult, call_reward, check_value

__all__ = ["CONTRACTS", "KINDS", "REWARDS", "RewardFn", "RewardScorer", "RewardSet", "ScoreResult", "call_reward",
           "check_value", "detect_contract", "get_reward", "register_python", "spec_of", "trl_reward", "verl_reward"]
