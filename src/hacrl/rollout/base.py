"""The rollout protocol: given an agent and rendered prompts, return sampled answers with the
sampling policy's per-token log-probs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from hacrl.registry import Registry


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    greedy: bool = False


@dataclass(frozen=True)
class Sample:
    """One generated answer: token ids (EOS included when ``finished``) and their log-probs under the
    sampling distribution (temperature and top-p applied; at temperature 1 and top-p 1 these are the
    policy's own log-probs)."""

    prompt_index: int
    token_ids: tuple[int, ...]
    logps: tuple[float, ...]
    finished: bool


class RolloutEngine(Protocol):
    def generate(self, agent: Any, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        """Return ``params.n`` samples per prompt, ordered prompt-major."""
        ...


ENGINES: Registry = Registry("rollout engine")


def get_engine(name: str, **kwargs: Any) -> RolloutEngine:
    return ENGINES.get(name)(**kwargs)
