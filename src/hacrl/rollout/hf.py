"""The ``hf`` rollout engine: batched sampling from a ``transformers`` causal LM.

Prompts are left-padded, each repeated ``n`` times; generation stops at the agent's EOS or after
``max_new_tokens``. Per-token log-probs are those of the sampling distribution (temperature and top-p
applied), so at temperature 1 / top-p 1 they equal the training forward pass's log-probs of the same
tokens.

Two samplers give the same tokens from the same random state (a test holds them equal):

- ``loop`` (default): a plain decoding loop over the model's KV cache — temperature, then top-p, then
  ``torch.multinomial`` on the softmax, as ``generate`` does — that keeps only the sampled tokens'
  log-probs (memory: rows × steps floats). It samples the policy and nothing else: a model's
  ``generation_config.json`` (repetition penalty, top-k, min-p, ...) is not applied.
- ``generate``: ``transformers``' ``generate(output_scores=True)``, which keeps a [rows, vocab] tensor per
  generated token. When that would exceed ``scores_budget_bytes`` (256 rows × 4096 tokens × 150k vocab
  is ~600 GB), scores are not kept and the log-probs come from a forward pass over the finished
  sequences — the temperature-1 policy's, which is what the trainer uses as π_old (at other
  temperatures it recomputes them anyway).

Greedy decoding (evaluation) drops rows that reached EOS from the batch and their KV cache
(``compact_finished``, default on; once a quarter of the rows still decoded are done), so one long answer
no longer makes every finished row of its batch run to ``max_new_tokens``. Rows are independent, so the
answers are those decoded without it up to the float rounding of a smaller batch, as with any other batch
size (a test holds the tokens equal and the log-probs to 1e-5). Sampled rollouts never compact: their
random draws would land on other rows.

A LoRA agent (peft) decodes through a *merged copy* (``merge_lora``, default on): a plain model whose
linear weights are W + s·B·A, refreshed from the adapter before every call. Decoding a few rows at a
time a LoRA linear layer makes three matmul calls (W, A, B) where the merged one makes one: the
``smollm2-state`` rollout took 11.6 s instead of 14.1 (``bench/real_step.py``, docs/real-models.md). It
costs one copy of the base weights in memory; the copy is the same function as the adapter model up to
float rounding of the merge (sampled answers' log-probs agree with the training pass to 1e-5 in float32;
a test holds it).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from hacrl.rollout.base import ENGINES, Sample, SamplingParams


class MergedLoRA:
    """A plain copy of a peft LoRA model whose linear weights are kept equal to W + s·B·A."""

    def __init__(self, peft_model: Any) -> None:
        import copy

        from peft.tuners.lora import LoraLayer

        self.model = copy.deepcopy(peft_model).merge_and_unload().eval().requires_grad_(False)
        prefix = "base_model.model."
        self.pairs = [(layer, self.model.get_submodule(name.removeprefix(prefix)))
                      for name, layer in peft_model.named_modules() if isinstance(layer, LoraLayer)]

    @torch.no_grad()
    def refresh(self) -> None:
        for layer, target in self.pairs:
            weight = layer.get_base_layer().weight
            delta = sum((layer.get_delta_weight(a) for a in layer.active_adapters if a in layer.lora_A),
                        torch.zeros((), dtype=torch.float32, device=weight.device))
            target.weight.copy_(weight.float() + delta.float())  # one rounding, into the copy's dtype


@ENGINES.register("hf")
class HFEngine:
    def __init__(self, batch_size: int = 256, scores_budget_bytes: int = 1 << 30, forward_batch: int = 16,
                 sampler: str = "loop", merge_lora: bool = True, compact_finished: bool = True) -> None:
        if sampler not in ("loop", "generate"):
            raise ValueError(f"rollout.engine_options.sampler must be loop or generate, got {sampler!r}")
        for name, value in (("merge_lora", merge_lora), ("compact_finished", compact_finished)):
            if not isinstance(value, bool):
                raise ValueError(f"rollout.engine_options.{name} must be true or false, got {value!r}")
        self.batch_size = batch_size  # sequences per call, bounds memory
        self.scores_budget_bytes = scores_budget_bytes
        self.forward_batch = forward_batch
        self.sampler = sampler
        self.merge_lora = merge_lora
        self.compact_finished = compact_finished  # greedy decoding drops finished rows from the batch
        self._merged: dict[int, MergedLoRA] = {}  # id(agent.model) -> its merged copy

    @torch.no_grad()
    def generate(self, agent: Any, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        rows = [(i, p) for i, p in enumerate(prompts) for _ in range(params.n)]
        out: list[Sample] = []
        for start in range(0, len(rows), self.batch_size):
            out.extend(self._generate_rows(agent, rows[start : start + self.batch_size], params))
        return out

    def decoding_model(self, agent: Any) -> Any:
        """The model to decode with: the agent's own, or for a LoRA agent its refreshed merged copy."""
        from torch.distributed.fsdp import FSDPModule

        from hacrl.agents.lora import is_lora

        if not (self.merge_lora and is_lora(agent.model)) or isinstance(agent.model, FSDPModule):
            return agent.model
        merged = self._merged.get(id(agent.model))
        if merged is None:
            merged = self._merged[id(agent.model)] = MergedLoRA(agent.model)
        merged.refresh()
        return merged.model

    def _generate_rows(self, agent: Any, rows: list[tuple[int, list[int]]], params: SamplingParams) -> list[Sample]:
        model, tok = self.decoding_model(agent), agent.tokenizer
        pad_id, eos_id = int(tok.pad_token_id), agent.eos_id
        width = max(len(p) for _, p in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        attn = torch.zeros((len(rows), width), dtype=torch.long)
        for r, (_, p) in enumerate(rows):
            ids[r, width - len(p) :] = torch.tensor(p)
            attn[r, width - len(p) :] = 1
        was_training = model.training
        model.eval()
        # mixed precision (agents.<id>.autocast): sample under the agent's autocast, as it trains
        autocast = agent.autocast() if hasattr(agent, "autocast") else contextlib.nullcontext()
        try:
            with autocast:
                if self.sampler == "loop":
                    new_ids_RT, logp_RT = _sample_loop(model, ids.to(agent.device), attn.to(agent.device), params,
                                                       eos_id=eos_id, pad_id=pad_id, compact=self.compact_finished)
                else:
                    new_ids_RT, logp_RT = self._generate(agent, rows, ids, attn, params)
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

    def _generate(self, agent: Any, rows: list[tuple[int, list[int]]], ids: torch.Tensor, attn: torch.Tensor,
                  params: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
        """``transformers``' generate: (new token ids [R, T], their log-probs [R, T]) on the CPU."""
        tok = agent.tokenizer
        gen_kwargs: dict[str, Any] = {"do_sample": False} if params.greedy else {
            "do_sample": True, "temperature": params.temperature, "top_p": params.top_p, "top_k": 0,
        }
        keep_scores = len(rows) * params.max_new_tokens * len(tok) * 4 <= self.scores_budget_bytes
        res = self.decoding_model(agent).generate(
            input_ids=ids.to(agent.device), attention_mask=attn.to(agent.device),
            max_new_tokens=params.max_new_tokens, pad_token_id=int(tok.pad_token_id), eos_token_id=agent.eos_id,
            output_scores=keep_scores, return_dict_in_generate=True, **gen_kwargs,
        )
        new_ids_RT = res.sequences[:, ids.shape[1] :].cpu()
        if not keep_scores:
            return new_ids_RT, self._forward_logprobs(agent, rows, new_ids_RT)
        # scores: one [rows, V] per generated position, after temperature / top-p processing
        scores_RTV = torch.stack(res.scores, dim=1).float()
        logp_RT = (scores_RTV.gather(-1, new_ids_RT[..., None].to(scores_RTV.device)).squeeze(-1)
                   - torch.logsumexp(scores_RTV, dim=-1)).cpu()
        return new_ids_RT, logp_RT

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


def _process(logits_RV: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Temperature, then top-p (the smallest set of tokens whose probability reaches top_p, at least one),
    as ``transformers``' TemperatureLogitsWarper and TopPLogitsWarper."""
    scores = logits_RV / params.temperature if params.temperature != 1.0 else logits_RV
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False)
        cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= 1 - params.top_p
        remove[..., -1:] = False
        scores = scores.masked_fill(remove.scatter(1, order, remove), float("-inf"))
    return scores


def _sample_loop(model: Any, ids_RP: torch.Tensor, attn_RP: torch.Tensor, params: SamplingParams, *,
                 eos_id: int, pad_id: int, compact: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode up to ``max_new_tokens`` over the KV cache; rows that reached EOS get ``pad_id`` (log-prob 0).
    Returns (token ids [R, T], their log-probs under the processed distribution [R, T]) on the CPU.

    Greedy with ``compact``: once a quarter of the rows still decoded have reached EOS, they leave the batch
    (``compact_rows``), so a batch whose answers differ in length stops paying for the finished ones. Sampling
    never compacts: its random draws would fall on other rows than before."""
    from transformers import DynamicCache

    from hacrl.agents.shared_prompt import cache_kwargs, output_cache

    rows, device = ids_RP.shape[0], ids_RP.device
    position_L1 = (attn_RP.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids_RP, attention_mask=attn_RP, position_ids=position_L1, use_cache=True,
                logits_to_keep=1, **cache_kwargs(model, DynamicCache()))
    position_L1, attn_LP = position_L1[:, -1:], attn_RP
    live_L = torch.arange(rows, device=device)  # the batch row of each row still decoded
    done_L = torch.zeros(rows, dtype=torch.bool, device=device)
    tokens_RT = torch.full((rows, params.max_new_tokens), pad_id, dtype=torch.long, device=device)
    logp_RT = torch.zeros((rows, params.max_new_tokens), dtype=torch.float32, device=device)
    compact = compact and params.greedy
    for step in range(params.max_new_tokens):
        logits_LV = out.logits[:, -1].float()
        if not bool(torch.isfinite(logits_LV).all()):  # diverged weights: say so, not multinomial's error
            raise FloatingPointError(f"non-finite logits at answer token {step}")
        if params.greedy:
            next_L = logits_LV.argmax(dim=-1)
            logp_LV = torch.log_softmax(logits_LV, dim=-1)
        else:
            scores_LV = _process(logits_LV, params)
            next_L = torch.multinomial(scores_LV.softmax(dim=-1), num_samples=1).squeeze(1)
            logp_LV = torch.log_softmax(scores_LV, dim=-1)
        token_L = torch.where(done_L, pad_id, next_L)
        tokens_RT[live_L, step] = token_L
        logp_RT[live_L, step] = torch.where(done_L, 0.0, logp_LV.gather(1, next_L[:, None]).squeeze(1))
        done_L = done_L | (token_L == eos_id)
        if bool(done_L.all()) or step == params.max_new_tokens - 1:
            break
        cache = output_cache(out)
        if compact and 4 * int(done_L.sum()) >= len(done_L):
            keep_L = (~done_L).nonzero()[:, 0]
            if compact_rows(cache, keep_L):
                live_L, done_L, token_L = live_L[keep_L], done_L[keep_L], token_L[keep_L]
                attn_LP, position_L1 = attn_LP[keep_L], position_L1[keep_L]
        attn_LP = torch.cat([attn_LP, attn_LP.new_ones((len(live_L), 1))], dim=1)
        position_L1 = position_L1 + 1
        out = model(input_ids=token_L[:, None], attention_mask=attn_LP, position_ids=position_L1,
                    use_cache=True, **cache_kwargs(model, cache))
    return tokens_RT[:, : step + 1].cpu(), logp_RT[:, : step + 1].cpu()


def compact_rows(cache: Any, keep_L: torch.Tensor) -> bool:
    """Keep only rows ``keep_L`` of a KV cache, in place; False (cache untouched) for a cache whose layers
    hold more than keys and values per row (linear-attention states, quantized layers): those stay whole."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer) for layer in layers):
        return False
    cache.batch_select_indices(keep_L)
    return True
