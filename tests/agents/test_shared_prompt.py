"""The grouped training forward (each prompt once, its KV cache indexed out to the rows) gives the plain
forward pass's answer log-probs and gradients."""

from __future__ import annotations

import pytest
import torch

from hacrl.agents.agent import enable_checkpointing, load_agent, token_logprobs
from hacrl.agents.shared_prompt import group_batch, grouped_logprobs, supports_shared_prompt
from hacrl.agents.tiny import tiny_agent_path

pytestmark = pytest.mark.model


@pytest.mark.parametrize("name", ["qwen2-char", "llama-bpe"])
def test_grouped_logprobs_and_gradients_equal_the_plain_pass(name):
    torch.manual_seed(0)
    agent = load_agent("a", 0, tiny_agent_path(name))
    # float64: the two passes then agree to ~1e-15 except where SDPA picks another kernel (~1e-7); a
    # logic error (a wrong position, mask or cache row) shows as 1e-2 or more
    model = agent.model.double().train()
    assert supports_shared_prompt(model)
    prompts_text = ["7+8=", "12+34=", "1+2+3+4+5="]  # prompts of different lengths
    answers_text = ["15", "46", "1", "", "46 46", "15", "9999", "0"]
    prompts, answers = [], []
    for i, text in enumerate(answers_text):  # rows in mixed order, groups of different sizes
        prompts.append(agent.render_prompt(prompts_text[i % 3]))
        ids, _ = agent.encode_answer(text, finished=i % 2 == 0)
        answers.append(ids)
    weights = torch.randn(len(answers), 16, dtype=torch.float64)

    plain = agent.batch(prompts, answers)
    logp_plain = token_logprobs(model, plain)
    got_plain = [logp_plain[i][plain.answer_mask_BT[i]] for i in range(len(answers))]
    (sum((g * weights[i, : len(g)]).sum() for i, g in enumerate(got_plain))).backward()
    grads_plain = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()

    grouped = group_batch(prompts, answers, int(agent.tokenizer.pad_token_id))
    assert grouped.prompt_ids_UP.shape[0] == 3  # each distinct prompt once
    logp_grouped = grouped_logprobs(model, grouped)
    got_grouped = [logp_grouped[i][grouped.answer_mask_BA[i]] for i in range(len(answers))]
    (sum((g * weights[i, : len(g)]).sum() for i, g in enumerate(got_grouped))).backward()

    for a, b in zip(got_plain, got_grouped):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
    assert (logp_grouped[~grouped.answer_mask_BA] == 0).all()
    for n, p in model.named_parameters():
        scale = float(grads_plain[n].abs().max())
        assert float((p.grad - grads_plain[n]).abs().max()) <= 1e-6 * scale, n


def test_gradient_checkpointing_falls_back_to_the_plain_pass():
    agent = load_agent("a", 0, tiny_agent_path("qwen2-char"))
    enable_checkpointing(agent.model)
    assert not supports_shared_prompt(agent.model)


@pytest.mark.parametrize("name", ["qwen2-char", "llama-bpe"])
def test_lean_token_logprobs_equal_the_full_log_softmax(name):
    """``token_logprobs`` keeps only answer positions' logits (``logits_to_keep``) and reads the chosen
    tokens in chunks; in float64 its values and gradients equal a float64 log-softmax over every position."""
    from hacrl.agents.agent import accepts_logits_to_keep

    torch.manual_seed(0)
    agent = load_agent("a", 0, tiny_agent_path(name))
    model = agent.model.double().train()
    assert accepts_logits_to_keep(model)
    prompts = [agent.render_prompt(p) for p in ["12+34=", "1+2+3+4+5=", "7+8="]]
    answers = [agent.encode_answer(t, finished=True)[0] for t in ["46", "15 15", ""]]
    batch = agent.batch(prompts, answers)
    weights = torch.randn(batch.answer_mask_BT.shape, dtype=torch.float64)

    out = model(input_ids=batch.input_ids_BL, attention_mask=batch.attention_mask_BL, use_cache=False)
    want = torch.log_softmax(out.logits[:, :-1], -1).gather(-1, batch.input_ids_BL[:, 1:, None]).squeeze(-1)
    want = want * batch.answer_mask_BT
    (want * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()

    got = token_logprobs(model, batch)
    (got * weights).sum().backward()
    torch.testing.assert_close(got, want, atol=1e-10, rtol=0)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], atol=1e-10 * max(1.0, float(grads[n].abs().max())), rtol=0)
