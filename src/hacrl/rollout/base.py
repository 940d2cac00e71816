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
    seed: int | None = None  # engines that seed per request (vLLM) draw from it; ``hf`` uses the torch RNG


@dataclass(frozen=True)
class Sample:
    """One generated answer: token ids (EOS included when ``finished``) and their log-probs under the
    sampling distribution (temperature and top-p applied; at temperature 1 and top-p 1 these are the
    policy's own log-probs).

    ``behav_logps``: None as an engine returns it. When the worker recomputes π_old by the training forward
    pass, ``logps`` become that pass's and the engine's own go here (the behaviour policy's, for the rollout
    correction, ``hacrl.core.correction``)."""

    prompt_index: int
    token_ids: tuple[int, ...]
    logps: tuple[float, ...]
    finished: bool
    behav_logps: tuple[float, ...] | None = None


class RolloutEngine(Protocol):
    """An engine generates for one agent. Engines that keep their own copy of the weights (vLLM) also
    implement the optional hooks below; the worker calls them when present:

    - ``sleep(agent)`` / ``wake_up(agent)``: free / restore the engine's device memory around training,
      for agents that share a GPU between rollout and training; both idempotent. The worker calls
      ``sleep`` before its optimizer steps, ``wake_up`` after them and before any generation.
    - ``sync_weights(agent)``: after each update (engine awake), load the agent's trained weights.
    - ``close()``: release everything at the end of a run.
    """

    def generate(self, agent: Any, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        """Return ``params.n`` samples per prompt, ordered prompt-major."""
        ...


ENGINES: Registry = Registry("rollout engine")


def get_engine(name: str, **kwargs: Any) -> RolloutEngine:
    return ENGINES.get(name)(**kwargs)


def logprob_gap(engine: list[Sample], trained: list[Sample]) -> dict[str, float]:
    """How far the engine's per-token log-probs are from the training forward pass's, over all tokens:
    mean and max |Δ|, and the mean |exp(mean Δ) − 1| of the sequence-level ratio GSPO would see."""
    import torch

    total, count, worst, seq_dev, n = 0.0, 0, 0.0, 0.0, 0
    for a, b in zip(engine, trained, strict=True):
        if not a.logps:
            continue
        diff = torch.tensor(b.logps, dtype=torch.float64) - torch.tensor(a.logps, dtype=torch.float64)
        total += float(diff.abs().sum())
        count += diff.numel()
        worst = max(worst, float(diff.abs().max()))
        seq_dev += abs(float(torch.exp(diff.mean())) - 1.0)
        n += 1
    return {"logp_gap_mean": total / max(count, 1), "logp_gap_max": worst, "seq_ratio_dev": seq_dev / max(n, 1)}


def generate_answers(agent: Any, engine: RolloutEngine, prompts: list[str], params: SamplingParams, *,
                     batch_size: int, indices: range | None = None) -> list[Any]:
    """The agent's answers to ``prompts[i]`` for ``i`` in ``indices`` (default: all), ``batch_size`` prompts per
    engine call, as unscored ``Trajectory`` records (prompt index into ``prompts``, text, finished, log-prob sum,
    token count; no token ids), ``params.n`` per prompt, prompt-major. The one generation path of every
    evaluation: the trainer's workers (``AgentWorker.generate_answers``, on their share of the prompts) and
    ``hacrl eval`` (``hacrl.trainer.evaluation.evaluate_agent_problems``) both call it."""
    from hacrl.types import Trajectory

    indices = range(len(prompts)) if indices is None else indices
    out: list[Trajectory] = []
    for start in range(indices.start, indices.stop, batch_size):
        rendered = [agent.render_prompt(p) for p in prompts[start : min(start + batch_size, indices.stop)]]
        samples = engine.generate(agent, rendered, params)
        texts = agent.decode_answers([list(s.token_ids) for s in samples])
        out.extend(Trajectory(start + s.prompt_index, agent.index, text, s.finished, float(sum(s.logps)),
                              len(s.token_ids)) for s, text in zip(samples, texts, strict=True))
    return out
