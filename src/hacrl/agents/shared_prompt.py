"""Answer log-probs with each prompt computed once: the training forward pass of a prompt group.

A learner trains on G own answers (and under HACPO (N−1)·G more) to every prompt. The plain forward pass
(``agent.token_logprobs``) runs prompt + answer for every row, so each prompt's tokens go through the
model G·N times. Here the distinct prompts of a micro-batch run once (left-padded, keeping their KV
cache, with gradients), the cache is indexed out to the rows, and only the answers run per row on top of
it. The log-probs and gradients are the same (a test holds them to the plain pass's in float64, where
they agree to ~1e-15, or ~1e-7 where SDPA picks another kernel) and each prompt's share of the forward
and backward compute is spent once per prompt instead of once per answer.

Used when the model's cache is a plain ``DynamicCache`` (no sliding-window or recurrent layers) and
gradient checkpointing is off (the two do not combine in ``transformers``); otherwise the plain pass.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass
class GroupedBatch:
    """Distinct prompts left-padded (``U`` of them), each row's answer right-padded after its prompt."""

    prompt_ids_UP: Tensor
    prompt_mask_UP: Tensor
    row_prompt_B: Tensor  # long [B]: which prompt each row answers
    answer_ids_BA: Tensor
    answer_mask_BA: Tensor  # bool [B, A]: the answer's tokens


def group_batch(prompts: list[list[int]], answers: list[list[int]], pad_id: int) -> GroupedBatch:
    index: dict[tuple[int, ...], int] = {}
    row_prompt = [index.setdefault(tuple(p), len(index)) for p in prompts]
    uniq = list(index)
    width = max(len(p) for p in uniq)
    prompt_ids = torch.full((len(uniq), width), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((len(uniq), width), dtype=torch.long)
    for u, p in enumerate(uniq):
        prompt_ids[u, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        prompt_mask[u, width - len(p) :] = 1
    length = max(1, max(len(a) for a in answers))
    answer_ids = torch.full((len(answers), length), pad_id, dtype=torch.long)
    answer_mask = torch.zeros((len(answers), length), dtype=torch.bool)
    for i, a in enumerate(answers):
        answer_ids[i, : len(a)] = torch.tensor(a, dtype=torch.long)
        answer_mask[i, : len(a)] = True
    return GroupedBatch(prompt_ids, prompt_mask, torch.tensor(row_prompt, dtype=torch.long), answer_ids, answer_mask)


def supports_shared_prompt(model: Any) -> bool:
    """Whether ``grouped_logprobs`` can run this model (otherwise use the plain pass)."""
    name = "is_activation_checkpointing" if hasattr(model, "is_activation_checkpointing") else "is_gradient_checkpointing"
    if getattr(model, name, False):
        return False
    config = getattr(model, "config", None)
    if config is None:
        return False
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if any(t != "full_attention" for t in getattr(text, "layer_types", None) or []):
        return False  # sliding-window, linear or recurrent layers keep other caches
    return not (getattr(text, "use_sliding_window", False) and getattr(text, "sliding_window", None))


def cache_kwargs(model: Any, cache: Any) -> dict[str, Any]:
    """The keyword that hands a KV cache to ``model``'s forward: ``cache`` in newer ``transformers``,
    ``past_key_values`` before (deprecated since 5.x)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else getattr(model, "model", model)
    return {"cache": cache} if "cache" in forward_parameters(type(base)) else {"past_key_values": cache}


@functools.cache
def forward_parameters(cls: type) -> frozenset[str]:
    """The keyword names of ``cls.forward`` (empty when it has none or no readable signature), read once
    per class: the training passes ask on every forward."""
    forward = getattr(cls, "forward", None)
    try:
        return frozenset(inspect.signature(forward).parameters) if forward is not None else frozenset()
    except (TypeError, ValueError):
        return frozenset()


def output_cache(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def grouped_logprobs(model: Any, batch: GroupedBatch) -> Tensor:
    """log π(answer token j | prompt, answer_<j), float32 [B, A], zero outside ``answer_mask_BA``."""
    from transformers import DynamicCache

    from hacrl.core.logprobs import selected_logprobs

    device = getattr(model, "compute_device", None) or next(model.parameters()).device  # offloaded FSDP shards
    prompt_mask = batch.prompt_mask_UP.to(device)
    prompt_pos = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    out = model(input_ids=batch.prompt_ids_UP.to(device), attention_mask=prompt_mask, position_ids=prompt_pos,
                use_cache=True, logits_to_keep=1, **cache_kwargs(model, cache))
    rows = batch.row_prompt_B.to(device)
    first_BV = out.logits[:, -1][rows]  # the last prompt token predicts answer token 0
    cache = output_cache(out)
    cache.batch_select_indices(rows)  # each row gets its prompt's keys and values (gradients flow back)
    answer_ids = batch.answer_ids_BA.to(device)
    answer_mask = batch.answer_mask_BA.to(device)
    attn = torch.cat([prompt_mask[rows], answer_mask.long()], dim=1)
    positions = prompt_mask.sum(-1)[rows][:, None] + torch.arange(answer_ids.shape[1], device=device)
    out = model(input_ids=answer_ids, attention_mask=attn, position_ids=positions, use_cache=True,
                **cache_kwargs(model, cache))
    # answer token 0 from the prompt's last logit, token j ≥ 1 from answer position j−1 (the last position
    # predicts nothing: its target is a placeholder), without concatenating the [B, A, V] logits
    first_B1 = selected_logprobs(first_BV[:, None], answer_ids[:, :1])
    targets_BA = torch.cat([answer_ids[:, 1:], answer_ids[:, :1]], dim=1)
    rest_BA = selected_logprobs(out.logits, targets_BA)[:, :-1]
    return torch.cat([first_B1, rest_BA], dim=1) * answer_mask
