"""π_old as the learner's training forward pass sees it: the token log-probs of answers an engine sampled,
recomputed by the agent's own model (temperature ≠ 1, top-p < 1, low precision, or another engine: see
``hacrl.config.recompute_old_logprobs``), and π_prox of the asynchronous mode's stale own answers."""

from __future__ import annotations

import torch

from hacrl.agents.agent import Agent, token_logprobs
from hacrl.rollout.base import Sample


@torch.no_grad()
def recompute_logprobs(agent: Agent, rendered: list[list[int]], samples: list[Sample],
                       micro_batch_size: int) -> list[Sample]:
    """``samples`` with their log-probs under ``agent``'s training pass (``rendered[s.prompt_index]`` their
    prompts' tokens), ``micro_batch_size`` answers a pass; the engine's own log-probs move to ``behav_logps``
    (the rollout correction's behaviour policy)."""
    out = []
    for start in range(0, len(samples), micro_batch_size):
        chunk = samples[start : start + micro_batch_size]
        batch = agent.batch([rendered[s.prompt_index] for s in chunk], [list(s.token_ids) for s in chunk])
        with agent.autocast():
            logp_BT = token_logprobs(agent.model, batch).cpu()
        for i, s in enumerate(chunk):
            lp = tuple(logp_BT[i][batch.answer_mask_BT[i]].tolist())
            out.append(Sample(s.prompt_index, s.token_ids, lp, s.finished, behav_logps=s.logps))
    return out


def prox_logprobs(agent: Agent, prompt_ids: list[list[int]], answer_ids: list[list[int]],
                  micro_batch_size: int) -> list[tuple[float, ...]]:
    """π_prox of answers: their token log-probs under ``agent``'s pass now (``correct_stale_rows``' input)."""
    samples = [Sample(i, tuple(a), (), True) for i, a in enumerate(answer_ids)]
    return [s.logps for s in recompute_logprobs(agent, prompt_ids, samples, micro_batch_size)]
