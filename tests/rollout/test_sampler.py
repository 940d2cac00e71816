"""The hf engine's own decoding loop draws the same tokens, with the same log-probs, as transformers'
generate from the same random state (sampling at T=1, with temperature and top-p, and greedy)."""

from __future__ import annotations

import pytest
import torch

from hacrl.agents.agent import load_agent
from hacrl.agents.tiny import tiny_agent_path
from hacrl.rollout.base import SamplingParams
from hacrl.rollout.hf import HFEngine


@pytest.mark.model
@pytest.mark.parametrize("name", ["qwen2-char-early", "llama-bpe"])
@pytest.mark.parametrize("params", [
    SamplingParams(n=4, max_new_tokens=6),
    SamplingParams(n=4, max_new_tokens=6, temperature=0.7, top_p=0.9),
    SamplingParams(n=1, max_new_tokens=6, greedy=True),
], ids=["t1", "t0.7-top0.9", "greedy"])
def test_the_decoding_loop_samples_what_generate_samples(name, params):
    agent = load_agent("a", 0, tiny_agent_path(name))
    # prompts of different lengths (left padding), some answered past EOS within 6 tokens
    prompts = [agent.render_prompt(q) for q in ("7+8=", "12+34=", "3+4+5=", "99+1=", "")[:4]]
    torch.manual_seed(3)
    loop = HFEngine(sampler="loop").generate(agent, prompts, params)
    torch.manual_seed(3)
    ref = HFEngine(sampler="generate").generate(agent, prompts, params)
    assert [(s.prompt_index, s.token_ids, s.finished) for s in loop] == \
        [(s.prompt_index, s.token_ids, s.finished) for s in ref]
    for a, b in zip(loop, ref):
        torch.testing.assert_close(torch.tensor(a.logps), torch.tensor(b.logps), atol=1e-5, rtol=0)
    assert any(s.finished for s in loop) and len({s.token_ids for s in loop}) > 1


def test_an_unknown_sampler_is_refused():
    with pytest.raises(ValueError, match="sampler"):
        HFEngine(sampler="beam")


@pytest.mark.model
@pytest.mark.parametrize("name", ["qwen2-char-early", "llama-bpe"])
def test_greedy_answers_are_the_same_when_finished_rows_leave_the_batch(name, monkeypatch):
    from hacrl.rollout import hf

    agent = load_agent("a", 0, tiny_agent_path(name))
    # prompts of different lengths (left padding) whose answers end after 1 to 12 tokens, or not at all
    prompts = [agent.render_prompt(q) for a in range(16) for q in (f"{a}+{7 * a}=", f"{a * 13}+", f"x{a}=")]
    kept: list[int] = []
    real = hf.compact_rows
    monkeypatch.setattr(hf, "compact_rows", lambda cache, keep_L: kept.append(len(keep_L)) or real(cache, keep_L))
    for params in (SamplingParams(n=1, max_new_tokens=12, greedy=True),
                   SamplingParams(n=2, max_new_tokens=12)):
        torch.manual_seed(5)
        fast = HFEngine().generate(agent, prompts, params)
        torch.manual_seed(5)
        slow = HFEngine(compact_finished=False).generate(agent, prompts, params)
        assert [(s.prompt_index, s.token_ids, s.finished) for s in fast] == \
            [(s.prompt_index, s.token_ids, s.finished) for s in slow]
        # a smaller batch rounds its matmuls differently (in the 7th digit), as any change of batch does
        for a, b in zip(fast, slow):
            torch.testing.assert_close(torch.tensor(a.logps), torch.tensor(b.logps), atol=1e-5, rtol=0)
        assert any(s.finished for s in fast) and len({len(s.token_ids) for s in fast}) >= 3
        if params.greedy:  # finished rows left the batch, in steps of at least a quarter
            assert kept and all(b <= 0.75 * a for a, b in zip([len(prompts), *kept], kept))
            kept.clear()
    assert not kept  # sampling never compacts


def test_compact_finished_must_be_a_boolean():
    with pytest.raises(ValueError, match="compact_finished"):
        HFEngine(compact_finished="yes")
