"""The hf engine decodes a LoRA agent through a merged copy (W + s·B·A): the same policy as the adapter
model (log-probs of the sampled answers equal the training forward pass's), refreshed after updates."""

from __future__ import annotations

import pytest
import torch

from hacrl.agents.agent import load_agent, token_logprobs
from hacrl.agents.tiny import tiny_agent_path
from hacrl.rollout import SamplingParams, get_engine

pytest.importorskip("peft")

LORA = {"r": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": "all-linear"}


def _gap(agent, prompts, samples) -> float:
    batch = agent.batch([prompts[s.prompt_index] for s in samples], [list(s.token_ids) for s in samples])
    with torch.no_grad():
        logp_BT = token_logprobs(agent.model.eval(), batch)
    worst = 0.0
    for i, s in enumerate(samples):
        trained = logp_BT[i][batch.answer_mask_BT[i]]
        worst = max(worst, float((trained - torch.tensor(s.logps)).abs().max()))
    return worst


@pytest.mark.model
def test_merged_copy_decodes_the_adapter_policy_and_follows_updates():
    torch.manual_seed(0)
    agent = load_agent("a", 0, tiny_agent_path("qwen2-char"), lora=LORA)
    with torch.no_grad():  # a non-zero adapter, so merged ≠ base
        for name, p in agent.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    prompts = [agent.render_prompt(p) for p in ["12+34=", "7+8=", "55+45="]]
    engine = get_engine("hf")
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=6, seed=0)
    samples = engine.generate(agent, prompts, params)
    assert engine.decoding_model(agent) is not agent.model
    assert _gap(agent, prompts, samples) < 1e-5

    base = get_engine("hf", merge_lora=False)
    torch.manual_seed(1)
    plain = base.generate(agent, prompts, params)
    torch.manual_seed(1)
    merged = engine.generate(agent, prompts, params)
    assert [s.token_ids for s in plain] == [s.token_ids for s in merged]  # same policy, same draws

    with torch.no_grad():  # an "update": the merged copy must follow it
        for name, p in agent.model.named_parameters():
            if "lora_A" in name:
                p.add_(0.1)
    samples = engine.generate(agent, prompts, params)
    assert _gap(agent, prompts, samples) < 1e-5


def test_merge_lora_option_is_checked():
    with pytest.raises(ValueError, match="merge_lora"):
        get_engine("hf", merge_lora="yes")
