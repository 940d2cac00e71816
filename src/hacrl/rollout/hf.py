"""The ``hf`` rollout engine: batched sampling with ``transformers``' ``generate``.

Prompts are left-padded, each repeated ``n`` times; generation stops at the agent's EOS or after
``max_new_tokens``. Per-token log-probs come from the processed scores (temperature and top-p applied),
so at temperature 1 / top-p 1 they equal the training forward pass's log-probs of the same tokens.
"""

from __future__ import annotations

from typing import Any

import torch

from hacrl.rollout.base import ENGINES, Sample, SamplingParams


@ENGINES.register("hf")
class HFEngine:
    def __init__(self, batch_size: int = 256) -> None:
        self.batch_size = batch_size  # sequences per generate() call, bounds memory

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
        was_training = model.training
        model.eval()
        try:
            res = model.generate(
                input_ids=ids.to(agent.device), attention_mask=attn.to(agent.device),
                max_new_tokens=params.max_new_tokens, pad_token_id=pad_id, eos_token_id=eos_id,
                output_scores=True, return_dict_in_generate=True, **gen_kwargs,
            )
        finally:
            model.train(was_training)
        new_ids_RT = res.sequences[:, width:].cpu()
        # scores: one [rows, V] per generated position, after temperature / top-p processing
        scores_RTV = torch.stack(res.scores, dim=1).float()
        logp_RT = (scores_RTV.gather(-1, new_ids_RT[..., None].to(scores_RTV.device)).squeeze(-1)
                   - torch.logsumexp(scores_RTV, dim=-1)).cpu()
        is_eos_RT = new_ids_RT == eos_id
        finished_R = is_eos_RT.any(dim=1)
        # length up to and including the first EOS, or every generated token
        length_R = torch.where(finished_R, is_eos_RT.int().argmax(dim=1) + 1, new_ids_RT.shape[1])
        ids_rows, logp_rows = new_ids_RT.tolist(), logp_RT.tolist()
        return [
            Sample(prompt_index, tuple(ids_rows[r][:n]), tuple(logp_rows[r][:n]), bool(done))
            for r, ((prompt_index, _), n, done) in enumerate(zip(rows, length_R.tolist(), finished_R.tolist()))
        ]
