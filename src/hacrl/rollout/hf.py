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
        new_ids = res.sequences[:, width:].cpu()
        # scores: one [rows, V] per generated position, after temperature / top-p processing
        logp_steps = [torch.log_softmax(s.float(), dim=-1).cpu() for s in res.scores]
        samples = []
        for r, (prompt_index, _) in enumerate(rows):
            tokens, logps, finished = [], [], False
            for t in range(new_ids.shape[1]):
                tok_id = int(new_ids[r, t])
                tokens.append(tok_id)
                logps.append(float(logp_steps[t][r, tok_id]))
                if tok_id == eos_id:
                    finished = True
                    break
            samples.append(Sample(prompt_index, tuple(tokens), tuple(logps), finished))
        return samples
