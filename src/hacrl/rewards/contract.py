"""Reward contracts: hacrl's per-answer call, TRL's batched call, verl's ``compute_score``; several rewards
summed with weights.

A reward function is called under one of three contracts (:data:`CONTRACTS`):

- ``hacrl``: ``fn(completion: str, sample: dict) -> float | None``, once per answer (:mod:`hacrl.rewards`).
- ``trl``: TRL's ``GRPOTrainer`` contract, ``fn(completions, **kwargs) -> list[float | None]``, once per
  batch of answers. ``prompts`` and ``completions`` are lists; every other field of the answers' samples
  (a data set's columns: ``solution``, ``difficulty``, ...; hacrl's ``answer``, ``problem_id``, ``row``)
  comes as a keyword holding one value per answer. A function without ``**kwargs`` gets only the keywords
  it names. Rows whose prompt was a list of chat messages make the call *conversational*, as in TRL:
  ``prompts`` are the message lists and each completion is ``[{"role": "assistant", "content": text}]``.
  TRL's ``completion_ids``, ``trainer_state``, ``log_extra`` and ``log_metric`` are not passed (answers
  come from models with different tokenizers; hacrl logs rewards itself).
- ``verl``: verl's ``compute_score(data_source, solution_str, ground_truth, extra_info)``, once per answer,
  by keyword (only the ones the function takes); ``ground_truth`` is the sample's ``answer``, ``extra_info``
  the row's ``extra_info`` column over the sample's fields. A returned dict gives its ``"score"``. verl's batch
  form, ``compute_score(data_sources, solution_strs, ground_truths, extra_infos)`` (its batch reward manager's),
  is called once per batch of answers with those lists and returns one score (or dict) per answer.

An ``async def`` reward (TRL accepts them) is run to its end with ``asyncio.run`` on each call.

``auto`` (the default) reads the signature (:func:`detect_contract`): a parameter named ``completions`` (or a
first one named ``prompts``) is ``trl``, one named ``solution_str`` (or ``solution_strs``) is ``verl``, anything else ``hacrl``; a
function marked with :func:`trl_reward` / :func:`verl_reward` (or given ``task.reward_contract``) is what
it says. :class:`RewardSet` calls one or several rewards and combines them as TRL's ``reward_weights`` do:
the weighted sum of the rewards that scored the answer (None: the function could not score it); an answer
no function could score is None; each function's own value comes back beside the sum (:meth:`RewardSet.score_each`,
for the per-function metrics ``agent/<id>/reward/<name>``, named by :attr:`RewardSet.names`). A call that breaks the contract (wrong arguments, a list from a per-answer
function, a float or a list of the wrong length from a batched one, a keyword the rows lack) is an error
whose message starts with :data:`CONTRACT_ERROR`; :meth:`hacrl.rewards.RewardScorer.check` turns it into
one line at start.

>>> def accuracy(completions, solution, **kwargs):
...     return [1.0 if c.strip() == s else 0.0 for c, s in zip(completions, solution)]
>>> detect_contract(accuracy)
'trl'
>>> rs = RewardSet.build([accuracy, "exact"], weights=[0.5, 2.0])
>>> rs.score_batch(["4", "5"], [{"answer": "4", "solution": "4"}, {"answer": "4", "solution": "4"}])
[('ok', 2.5, None), ('ok', 0.0, None)]
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hacrl.rewards.base import REWARDS, check_value, get_reward, spec_of

CONTRACTS = ("auto", "hacrl", "trl", "verl")
CONTRACT_ERROR = "contract:"
_ATTR = "hacrl_contract"
_MAX = 500
#: sample fields that are hacrl's bookkeeping, not a row's columns: not passed as TRL keywords
_PRIVATE = frozenset({"prompt", "chat_prompt", "templated"})

Outcome = tuple[str, "float | None", "str | None"]  # (kind, reward or None, message or None), as check_value


def trl_reward(fn: Callable) -> Callable:
    """Mark ``fn`` as a batched TRL reward (for a signature :func:`detect_contract` cannot read)."""
    setattr(fn, _ATTR, "trl")
    return fn


def verl_reward(fn: Callable) -> Callable:
    """Mark ``fn`` as a verl ``compute_score`` (for a signature :func:`detect_contract` cannot read)."""
    setattr(fn, _ATTR, "verl")
    return fn


def _signature(fn: Callable) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def detect_contract(fn: Callable) -> str:
    """``hacrl``, ``trl`` or ``verl`` for ``fn``: its mark, else its parameter names (see module doc).

    >>> detect_contract(lambda completion, sample: 1.0), detect_contract(lambda prompts, completions, **kw: [])
    ('hacrl', 'trl')
    >>> detect_contract(lambda data_source, solution_str, ground_truth, extra_info=None: 0.0)
    'verl'
    """
    marked = getattr(fn, _ATTR, None)
    if marked in CONTRACTS[1:]:
        return marked
    sig = _signature(fn)
    if sig is None:
        return "hacrl"
    names = [p.name for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD and p.kind is not p.VAR_POSITIONAL]
    if "completions" in names or (names and names[0] == "prompts"):
        return "trl"
    if "solution_str" in names or "solution_strs" in names:
        return "verl"
    return "hacrl"


def _contract_error(name: str, what: str, fix: str) -> Outcome:
    return "error", None, f"{CONTRACT_ERROR} reward {name} {what}; fix: {fix}"[:_MAX]


def _is_number(value: Any) -> bool:
    import numbers

    return isinstance(value, numbers.Real) or value is None


@dataclass
class Reward:
    """One reward function and the contract it is called under; ``name`` (its spec) names it in messages."""

    fn: Callable
    contract: str
    name: str

    # ---- per-answer contracts -------------------------------------------------------------------
    def _one(self, completion: str, sample: dict[str, Any]) -> Outcome:

        try:
            if self.contract == "verl":
                value = _call(self.fn, **self._verl_kwargs(completion, sample))
                if isinstance(value, dict):
                    value = value.get("score")
            else:
                value = _call(self.fn, completion, sample)
        except TypeError as exc:
            if not self._binds(completion, sample):
                return self._bad_call(exc)
            return "error", None, f"TypeError: {exc}"[:_MAX]
        except Exception as exc:  # noqa: BLE001 - whatever the reward raises counts as an error, not a crash
            return "error", None, f"{type(exc).__name__}: {exc}"[:_MAX]
        if isinstance(value, (list, tuple)) or getattr(value, "ndim", 0):  # a list, or an array (not a scalar)
            return _contract_error(self.name, f"returned {type(value).__name__}, expected a float per answer "
                                   f"({self.contract} contract)", "if it scores a batch as TRL's rewards do, name "
                                   "its first parameter `completions` or set task.reward_contract=trl")
        return check_value(value)

    def _verl_kwargs(self, completion: str, sample: dict[str, Any], every: bool = False) -> dict[str, Any]:
        extra = {k: v for k, v in sample.items() if k not in _PRIVATE}
        if isinstance(sample.get("extra_info"), dict):
            extra.update(sample["extra_info"])
        given = {"data_source": sample.get("data_source"), "solution_str": completion,
                 "ground_truth": sample.get("answer"), "extra_info": extra}
        sig = _signature(self.fn)
        if every or sig is None or any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            return given
        return {k: v for k, v in given.items() if k in sig.parameters}

    def _binds(self, completion: str, sample: dict[str, Any]) -> bool:
        sig = _signature(self.fn)
        if sig is None:
            return True
        try:
            if self.contract == "verl":
                sig.bind(**self._verl_kwargs(completion, sample))
            else:
                sig.bind(completion, sample)
        except TypeError:
            return False
        return True

    def _bad_call(self, exc: Exception) -> Outcome:
        how = {"hacrl": "fn(completion, sample)", "verl": "compute_score(data_source, solution_str, ground_truth, "
               "extra_info)", "trl": "fn(completions, **kwargs)"}[self.contract]
        other = "a TRL reward: name its first parameter `completions`, or set task.reward_contract=trl" \
            if self.contract == "hacrl" else "task.reward_contract to the contract it follows"
        return _contract_error(self.name, f"cannot be called as {how} ({exc})", f"give it that signature, or if "
                               f"it is {other}")

    # ---- the batched (TRL) contract ---------------------------------------------------------------
    def _trl_kwargs(self, completions: list[str], samples: list[dict[str, Any]]) -> dict[str, Any]:
        chat = bool(samples) and all(isinstance(s.get("chat_prompt"), list) for s in samples)
        keys = list(dict.fromkeys(k for s in samples for k in s if k not in _PRIVATE))
        given: dict[str, Any] = {k: [s.get(k) for s in samples] for k in keys}
        if chat:
            given["prompts"] = [s["chat_prompt"] for s in samples]
            given["completions"] = [[{"role": "assistant", "content": c}] for c in completions]
        else:
            given["prompts"] = [s.get("prompt") for s in samples]
            given["completions"] = list(completions)
        sig = _signature(self.fn)
        if sig is None:
            return given
        # a named parameter the rows lack is a missing column, **kwargs or not (TRL's `ground_truth` on a
        # data set whose column is `solution`): named here, not a TypeError on every answer of every step
        missing = [p.name for p in sig.parameters.values() if p.default is p.empty and p.name not in given
                   and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if missing:
            raise _MissingKeyword(missing[0], sorted(k for k in given if k not in ("prompts", "completions")))
        if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            return given
        return {k: v for k, v in given.items() if k in sig.parameters}

    def _batch(self, completions: list[str], samples: list[dict[str, Any]]) -> list[Outcome]:

        n = len(completions)
        contract = "TRL's batched contract" if self.contract == "trl" else "verl's batched compute_score"
        try:
            kwargs = self._trl_kwargs(completions, samples) if self.contract == "trl" else \
                self._verl_batch_kwargs(completions, samples)
            values = _call(self.fn, **kwargs)
        except _MissingKeyword as exc:
            return [_contract_error(self.name, f"needs the keyword {exc.name!r}, which the rows do not have "
                                    f"(they have: {', '.join(exc.have)})", f"add a {exc.name!r} column to the data, "
                                    f"name the parameter after one the rows have, or give it a default")] * n
        except Exception as exc:  # noqa: BLE001 - the whole batch is unscorable; the step goes on
            return [("error", None, f"{type(exc).__name__}: {exc}"[:_MAX])] * n
        if _is_number(values) or isinstance(values, (str, bytes, dict)):
            return [_contract_error(self.name, f"returned {type(values).__name__}, expected a list of {n} floats "
                                    f"(one per completion: {contract})", "return a list, or if it "
                                    "scores one answer as fn(completion, sample), set task.reward_contract=hacrl")] * n
        try:
            values = list(values)
        except TypeError:
            return [_contract_error(self.name, f"returned {type(values).__name__}, expected a list of {n} floats",
                                    "return one float (or None) per completion")] * n
        if len(values) != n:
            return [_contract_error(self.name, f"returned {len(values)} values for {n} completions",
                                    "return one float (or None) per completion, in order")] * n
        return [check_value(v.get("score") if isinstance(v, dict) else v) for v in values]

    def _verl_batch_kwargs(self, completions: list[str], samples: list[dict[str, Any]]) -> dict[str, Any]:
        """verl's batch reward manager's call: the per-answer keywords as lists, named in the plural."""
        per = [self._verl_kwargs(c, s, every=True) for c, s in zip(completions, samples)]
        given = {f"{k}s": [p[k] for p in per] for k in ("data_source", "solution_str", "ground_truth", "extra_info")}
        sig = _signature(self.fn)
        if sig is None or any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            return given
        return {k: v for k, v in given.items() if k in sig.parameters}

    @property
    def batched(self) -> bool:
        """Called once per batch: TRL's contract, and verl's batch form (``solution_strs``)."""
        if self.contract == "trl":
            return True
        sig = _signature(self.fn) if self.contract == "verl" else None
        return sig is not None and "solution_strs" in sig.parameters

    def score_batch(self, completions: list[str], samples: list[dict[str, Any]]) -> list[Outcome]:
        if self.batched:
            return self._batch(completions, samples)
        return [self._one(c, s) for c, s in zip(completions, samples)]


class _MissingKeyword(Exception):
    def __init__(self, name: str, have: list[str]) -> None:
        super().__init__(name)
        self.name, self.have = name, have


@dataclass
class RewardSet:
    """One or more :class:`Reward` with weights; ``batched`` when any is a TRL reward (then it is called
    once per batch of answers, else once per answer)."""

    rewards: list[Reward]
    weights: list[float]

    @classmethod
    def build(cls, fns: str | Callable | Sequence[str | Callable], *, weights: Sequence[float] | None = None,
              contract: str = "auto") -> RewardSet:
        """Resolve specs (:func:`~hacrl.rewards.base.get_reward`) and callables; ValueError names the fix.
        ``contract`` other than ``auto`` applies to every function but the registered ones (hacrl's own)."""
        items = [fns] if isinstance(fns, str) or callable(fns) else list(fns)
        if not items:
            raise ValueError("no reward given; name at least one")
        if contract not in CONTRACTS:
            raise ValueError(f"reward contract {contract!r} is not one of {', '.join(CONTRACTS)}")
        if weights is None:
            weights = [1.0] * len(items)
        if len(weights) != len(items):
            raise ValueError(f"{len(weights)} reward weights for {len(items)} rewards; give one weight per reward")
        if not all(isinstance(w, (int, float)) and math.isfinite(w) for w in weights):
            raise ValueError(f"reward weights must be finite numbers, got {list(weights)}")
        rewards = []
        for item in items:
            fn = get_reward(item) if isinstance(item, str) else item
            if not callable(fn):
                raise ValueError(f"reward must be a spec string or a callable, got {type(item).__name__}")
            name = item.strip() if isinstance(item, str) else (spec_of(fn) or getattr(fn, "__qualname__", repr(fn)))
            registered = isinstance(item, str) and item.strip() in REWARDS  # hacrl's own: always per answer
            rewards.append(Reward(fn, detect_contract(fn) if contract == "auto" or registered else contract, name))
        return cls(rewards, [float(w) for w in weights])

    @property
    def batched(self) -> bool:
        return any(r.batched for r in self.rewards)

    @property
    def names(self) -> list[str]:
        """Each function's name in the metrics (``agent/<id>/reward/<name>``), as TRL names them: its
        ``__name__`` (a registered reward: its registry name), a repeated name numbered ``_2``, ``_3``, ..."""
        names: list[str] = []
        for reward in self.rewards:
            base = reward.name if reward.name in REWARDS else _function_name(reward.fn)
            name, k = base, 2
            while name in names:
                name, k = f"{base}_{k}", k + 1
            names.append(name)
        return names

    def score_batch(self, completions: list[str], samples: list[dict[str, Any]]) -> list[Outcome]:
        """One outcome per answer: the weighted sum of the rewards that scored it (see module doc)."""
        return [outcome for outcome, _ in self.score_each(completions, samples)]

    def score_each(self, completions: list[str], samples: list[dict[str, Any]]
                   ) -> list[tuple[Outcome, tuple[float | None, ...]]]:
        """Per answer, its outcome (:meth:`score_batch`) and, with several functions, each one's own value in
        order (None: it did not score the answer); ``()`` with a single function."""
        per = [r.score_batch(completions, samples) for r in self.rewards]
        if len(per) == 1:
            outcomes = per[0] if self.weights[0] == 1.0 else [_combine([o], self.weights) for o in per[0]]
            return [(outcome, ()) for outcome in outcomes]
        return [(_combine([p[i] for p in per], self.weights), tuple(p[i][1] for p in per))
                for i in range(len(completions))]

    def score_one(self, completion: str, sample: dict[str, Any]) -> Outcome:
        return self.score_batch([completion], [sample])[0]


def _call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, run to its end when it is a coroutine (TRL accepts ``async def`` rewards)."""
    value = fn(*args, **kwargs)
    if inspect.iscoroutine(value):
        import asyncio

        value = asyncio.run(value)
    return value


def _function_name(fn: Callable) -> str:
    """A function's ``__name__`` (a ``functools.partial``'s function's; a callable object's class name)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__name__", None) or type(fn).__name__


def _combine(outcomes: list[Outcome], weights: list[float]) -> Outcome:
    """TRL's weighted sum over the functions that scored an answer; an error or NaN wins (it is a bug)."""
    for kind, _, message in outcomes:
        if kind in ("error", "nan"):
            return kind, None, message
    scored = [(w, v) for (kind, v, _), w in zip(outcomes, weights) if kind == "ok" and v is not None]
    if not scored:
        return "none", None, "every reward returned None"
    return "ok", float(sum(w * v for w, v in scored)), None
