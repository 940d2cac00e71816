"""The CUDA paths that need neither vLLM nor Ray: the ``hf`` engine's log-probs against the training
pass (float32 and bf16 autocast), gradient checkpointing, and trainer steps with both tiny agents on CUDA.

Run: ``pytest -m gpu tests/gpu/test_cuda.py -q`` (skipped without CUDA; ``bash bench/gpu_check.sh`` runs
it). ``HACRL_TEST_DEVICE=cpu`` runs the same tests on the CPU (how they are kept working on machines
without a GPU).

Tolerances. float32: the engine's log-probs come from ``generate``'s incremental (KV-cache) passes, the
training pass's from one forward over the whole sequence; both float32 on the same weights, they differ by
reduction order only (~1e-6 per log-prob; ≤ 1e-3 with TF32). bf16 autocast: both sides round matmul
inputs to 8 mantissa bits (relative ~4e-3 per logit on logits of size ~10), so per-token gaps of a few
1e-2 are normal; the bound (mean 0.05, max 0.5) catches a wrong position or weight (0.1-10), not kernel
noise. These bounds are reasoned, not yet measured on a GPU (none was available when they were written).
"""

from __future__ import annotations

import os

import pytest
import torch

from hacrl.agents.agent import Agent, enable_checkpointing, load_agent, token_logprobs
from hacrl.agents.tiny import tiny_agent_path
from hacrl.data.tasks import get_task
from hacrl.rollout import Sample, SamplingParams, get_engine

DEVICE = os.environ.get("HACRL_TEST_DEVICE", "cuda")
pytestmark = [
    pytest.mark.model,
    pytest.mark.gpu,
    pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _agent(name: str = "qwen2-char", autocast: bool = False) -> Agent:
    agent = load_agent("a", 0, tiny_agent_path(name), device=DEVICE)
    if autocast:
        agent.autocast_dtype = torch.bfloat16
    return agent


def _prompts(agent: Agent, n: int = 8) -> list[list[int]]:
    return [agent.render_prompt(p.prompt) for p in get_task("add2").test_problems(n)]


@torch.no_grad()
def _gap(agent: Agent, prompts: list[list[int]], samples: list[Sample]) -> torch.Tensor:
    batch = agent.batch([prompts[s.prompt_index] for s in samples], [list(s.token_ids) for s in samples])
    with agent.autocast():
        logp_BT = token_logprobs(agent.model.eval(), batch).float().cpu()
    theirs = torch.cat([logp_BT[i][batch.answer_mask_BT[i]] for i in range(len(samples))])
    ours = torch.tensor([lp for s in samples for lp in s.logps])
    assert ours.shape == theirs.shape and ours.numel() > 0
    return (ours - theirs).abs()


@pytest.mark.parametrize("name", ["qwen2-char", "llama-bpe"])
def test_hf_engine_logprobs_match_the_training_pass_fp32(name: str) -> None:
    agent = _agent(name)
    prompts = _prompts(agent)
    samples = get_engine("hf").generate(agent, prompts, SamplingParams(n=4, max_new_tokens=8, seed=0))
    gap = _gap(agent, prompts, samples)
    assert gap.mean() < 1e-3 and gap.max() < 1e-2, (float(gap.mean()), float(gap.max()))


def test_hf_engine_under_bf16_autocast_stays_near_the_training_pass() -> None:
    agent = _agent(autocast=True)
    prompts = _prompts(agent)
    samples = get_engine("hf").generate(agent, prompts, SamplingParams(n=4, max_new_tokens=8, seed=0))
    gap = _gap(agent, prompts, samples)
    assert gap.mean() < 0.05 and gap.max() < 0.5, (float(gap.mean()), float(gap.max()))


def test_gradient_checkpointing_gives_the_same_gradients() -> None:
    grads = []
    for checkpointing in (False, True):
        agent = _agent("llama-bpe")
        if checkpointing:
            enable_checkpointing(agent.model)
        agent.model.train()
        prompts = _prompts(agent, 4)
        answer = agent.tokenizer("42", add_special_tokens=False)["input_ids"]
        batch = agent.batch(prompts, [answer] * len(prompts))
        token_logprobs(agent.model, batch).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in agent.model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-6)


def test_trainer_steps_with_both_agents_on_the_device(tmp_path) -> None:
    from hacrl.config import load_config
    from hacrl.trainer.trainer import Trainer

    cfg = load_config("tiny-test", overrides=[
        f"agents.qwen-char.device={DEVICE}", f"agents.llama-bpe.device={DEVICE}",
        "agents.llama-bpe.autocast=bfloat16",
        "agents.qwen-char.gradient_checkpointing=true", "trainer.steps=2", "trainer.eval_size=8",
        "run.loggers=[jsonl]"])
    (tmp_path / "run").mkdir()
    trainer = Trainer(cfg, tmp_path / "run")
    before = [next(a.model.parameters()).detach().clone() for a in trainer.agents]
    try:
        metrics = [trainer.step() for _ in range(2)]
        after = [next(a.model.parameters()).detach() for a in trainer.agents]
    finally:
        trainer.close()
    assert all(not torch.equal(b, a) for b, a in zip(before, after, strict=True))
    for m in metrics:
        assert all(torch.isfinite(torch.tensor(v)) for k, v in m.items() if k.endswith("loss"))
    # autocast: π_old is recomputed by the training pass and the gap to the rollout's is logged
    assert metrics[-1]["agent/llama-bpe/rollout/logp_gap_mean"] < 0.05
