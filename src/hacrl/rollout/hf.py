"""The ``hf`` rollout engine: batched sampling with ``transformers``' ``generate``.

Prompts are left-padded, each repeated ``n`` times; generation stops at the agent's EOS or after
``max_new_tokens``. Per-token log-probs come from the processed scores (temperature and top-p applied),
so at temperature 1 / top-p 1 they equal the training forward pass's log-probs of the same tokens.

``generate(output_scores=True)`` keeps a [rows, vocab] tensor per generated token. When that would
exceed ``scores_budget_bytes`` (long answers, large vocabularies: 256 rows × 4096 tokens × 150k vocab is
~600 GB), scores are not kept; the log-probs are then computed by a forward pass over the finished
sequences in micro-batches — the temperature-1 policy's log-probs, which is what the trainer uses as
π_old (at other temperatures it recomputes them anyway).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from hacrl.rollout.base import ENGINES, Sample, SamplingParams


@ENGINES.register("hf")
class HFEngine:
    def __init__(self, batch_size: int = 256, scores_budget_bytes: int = 1 << 30, forward_batch: int = 16) -> None:
        self.batch_size = batch_size  # sequences per generate() call, bounds memory
        self.scores_budget_bytes = scores_budget_bytes
        self.forward_batch = forward_batch

    @torch.no_grad()
    def generate(self, agent: Any, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        rows = [(i, p) for i, p in enumerate(prompts) for _ in range(params.n)]
        out: list[Sample] = []
        for start in range(0, len(rows), self.batch_size):
            out.extend(self._generate_rows(agent, rows[start : start + self.batch_size], params))
        return out

    def _generate_rows(self, agent: Any, rows: list[tuple[int, list[int]]], params: SamplingParams) -> list[Sample]:
        model, tok = agent.model, agent.tokenizer
        pad_id, eos_id = int(tok.pad_token_id), agent.eos_id
        width = max(len(p) for _, p in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        attn = torch.zeros((len(rows), width), dtype=torch.long)
        for r, (_, p) in enumerate(rows):
            ids[r, width - len(p) :] = torch.tensor(p)
            attn[r, width - len(p) :] = 1
        gen_kwargs: dict[str, Any] = {"do_sample": False} if params.greedy else {
            "do_sample": True, "temperature": params.temperature, "top_p": params.top_p, "top_k": 0,
        }
        keep_scores = len(rows) * params.max_new_tokens * len(tok) * 4 <= self.scores_budget_bytes
        was_training = model.training
        model.eval()
        # mixed precision (agents.<id>.autocast): sample under the agent's autocast, as it trains
        autocast = agent.autocast() if hasattr(agent, "autocast") else contextlib.nullcontext()
        try:
            with autocast:
                res = model.generate(
                    input_ids=ids.to(agent.device), attention_mask=attn.to(agent.device),
                    max_new_tokens=params.max_new_tokens, pad_token_id=pad_id, eos_token_id=eos_id,
                    output_scores=keep_scores, return_dict_in_generate=True, **gen_kwargs,
                )
                new_ids_RT = res.sequences[:, width:].cpu()
                if keep_scores:
                    # scores: one [rows, V] per generated position, after temperature / top-p processing
                    scores_RTV = torch.stack(res.scores, dim=1).float()
                    logp_RT = (scores_RTV.gather(-1, new_ids_RT[..., None].to(scores_RTV.device)).squeeze(-1)
                               - torch.logsumexp(scores_RTV, dim=-1)).cpu()
                    del scores_RTV, res
                else:
                    logp_RT = self._forward_logprobs(agent, rows, new_ids_RT)
        finally:
            model.train(was_training)
        is_eos_RT = new_ids_RT == eos_id
        finished_R = is_eos_RT.any(dim=1)
        # length up to and including the first EOS, or every generated token
        length_R = torch.where(finished_R, is_eos_RT.int().argmax(dim=1) + 1, new_ids_RT.shape[1])
        ids_rows, logp_rows = new_ids_RT.tolist(), logp_RT.tolist()
        return [
            Sample(prompt_index, tuple(ids_rows[r][:n]), tuple(logp_rows[r][:n]), bool(done))
            for r, ((prompt_index, _), n, done) in enumerate(zip(rows, length_R.tolist(), finished_R.tolist()))
        ]

    def _forward_logprobs(self, agent: Any, rows: list[tuple[int, list[int]]], new_ids_RT: torch.Tensor) -> torch.Tensor:
        """Temperature-1 log-probs of the generated tokens by a forward pass, ``forward_batch`` rows at a time."""
        from hacrl.agents.agent import token_logprobs

        out = torch.zeros(new_ids_RT.shape, dtype=torch.float32)
        for start in range(0, len(rows), self.forward_batch):
            chunk = range(start, min(start + self.forward_batch, len(rows)))
            batch = agent.batch([rows[r][1] for r in chunk], [new_ids_RT[r].tolist() for r in chunk])
            logp_BT = token_logprobs(agent.model, batch).cpu()
            for i, r in enumerate(chunk):
                out[r] = logp_BT[i][batch.answer_mask_BT[i]]
        return out
