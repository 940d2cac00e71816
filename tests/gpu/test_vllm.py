"""The ``vllm`` rollout engine on a CUDA GPU with the shipped tiny agents (fp32 on both sides).

Run: ``pytest -m gpu tests/gpu/test_vllm.py -q`` (needs ``pip install 'hacrl[vllm]'``). Skipped without
CUDA or vllm. Every engine uses ``enforce_eager`` (no CUDA graphs / compilation: faster to build, the
numbers below don't depend on it) and a small slice of the GPU, and is closed after its test.

Log-prob tolerance: the engine's log-probs are vLLM's raw (temperature-1) log-softmax, the trainer's are
``token_logprobs`` of the HF forward pass, both in fp32 on the same weights. They differ only by kernel
arithmetic (attention backend, GEMM reduction order, possibly TF32 matmuls in vLLM): ~1e-6 relative
per logit in fp32, ~1e-3 with TF32, on logits of magnitude ~10, i.e. at most ~1e-2 on a log-prob. A
weight or position bug moves log-probs by 0.1-10. So: mean |gap| < 1e-2 and max |gap| < 5e-2.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from hacrl.agents.agent import Agent, load_agent, token_logprobs
from hacrl.agents.tiny import tiny_agent_path
from hacrl.data.tasks import get_task
from hacrl.rollout import Sample, SamplingParams, get_engine

pytestmark = [
    pytest.mark.model,
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs the vllm extra"),
]

MEAN_TOL, MAX_TOL = 1e-2, 5e-2
ENGINE = {"gpu_memory_utilization": 0.05, "enforce_eager": True}


@pytest.fixture
def engine_factory():
    engines = []

    def make(**options):
        engines.append(get_engine("vllm", **{**ENGINE, **options}))
        return engines[-1]

    yield make
    for engine in engines:
        engine.close()


def _agent(name: str = "qwen2-char", agent_id: str = "a", index: int = 0, **kwargs) -> Agent:
    return load_agent(agent_id, index, tiny_agent_path(name), device="cuda", **kwargs)


def _prompts(agent: Agent, n: int = 8) -> list[list[int]]:
    return [agent.render_prompt(p.prompt) for p in get_task("add2").test_problems(n)]


@torch.no_grad()
def _forward_logps(agent: Agent, prompts: list[list[int]], samples: list[Sample]) -> list[list[float]]:
    batch = agent.batch([prompts[s.prompt_index] for s in samples], [list(s.token_ids) for s in samples])
    logp_BT = token_logprobs(agent.model.eval(), batch).cpu()
    return [logp_BT[i][batch.answer_mask_BT[i]].tolist() for i in range(len(samples))]


def _gaps(agent: Agent, prompts: list[list[int]], samples: list[Sample]) -> torch.Tensor:
    ours = torch.tensor([lp for s in samples for lp in s.logps])
    theirs = torch.tensor([lp for row in _forward_logps(agent, prompts, samples) for lp in row])
    assert ours.shape == theirs.shape and ours.numel() > 0
    return (ours - theirs).abs()


def _assert_close_to_forward(agent: Agent, prompts: list[list[int]], samples: list[Sample]) -> None:
    gap = _gaps(agent, prompts, samples)
    assert gap.mean() < MEAN_TOL and gap.max() < MAX_TOL, (float(gap.mean()), float(gap.max()))


def test_samples_are_ordered_stop_at_eos_and_match_the_training_forward(engine_factory):
    agent, engine = _agent(), engine_factory()
    prompts, params = _prompts(agent), SamplingParams(n=3, max_new_tokens=12, seed=0)
    samples = engine.generate(agent, prompts, params)
    assert [s.prompt_index for s in samples] == [i for i in range(len(prompts)) for _ in range(3)]
    for s in samples:
        assert len(s.token_ids) == len(s.logps) > 0
        assert agent.eos_id not in s.token_ids[:-1]
        assert s.finished == (s.token_ids[-1] == agent.eos_id)
        assert s.finished or len(s.token_ids) == params.max_new_tokens
        assert all(lp <= 1e-5 for lp in s.logps)  # log-probs (up to rounding)
    assert any(s.finished for s in samples)  # the warm-started agent answers add2 and stops
    _assert_close_to_forward(agent, prompts, samples)
    # temperature does not change what is returned: raw (temperature-1) log-probs
    hot = engine.generate(agent, prompts, SamplingParams(n=2, temperature=1.7, max_new_tokens=12, seed=1))
    _assert_close_to_forward(agent, prompts, hot)


def test_greedy_matches_the_hf_engine(engine_factory):
    agent, engine = _agent(), engine_factory()
    prompts, params = _prompts(agent, 16), SamplingParams(n=1, max_new_tokens=12, greedy=True)
    ours = [s.token_ids for s in engine.generate(agent, prompts, params)]
    theirs = [s.token_ids for s in get_engine("hf").generate(agent, prompts, params)]
    assert sum(a == b for a, b in zip(ours, theirs)) >= 15  # a near-tie may flip one argmax in fp32


@torch.no_grad()
def _perturb(model: torch.nn.Module, *, only: str = "", scale: float = 0.05) -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, p in model.named_parameters():
        if only in name:
            p.add_(torch.randn(p.shape, generator=gen, device=p.device) * scale * (p.abs().mean() + 1e-3))


def test_sync_weights_follows_the_trained_weights(engine_factory):
    agent, engine = _agent(), engine_factory()
    prompts, greedy = _prompts(agent), SamplingParams(n=1, max_new_tokens=12, greedy=True)
    before = engine.generate(agent, prompts, greedy)
    _perturb(agent.model, scale=0.5)
    stale = _gaps(agent, prompts, before)
    assert stale.max() > 10 * MAX_TOL  # the change matters: the old log-probs no longer fit
    engine.sync_weights(agent)
    assert agent.id not in engine._rebuild  # the in-place path worked on this vLLM version
    after = engine.generate(agent, prompts, greedy)
    _assert_close_to_forward(agent, prompts, after)
    hf = get_engine("hf").generate(agent, prompts, greedy)
    assert sum(a.token_ids == b.token_ids for a, b in zip(after, hf)) >= len(prompts) - 1


def test_sync_weights_merges_lora(engine_factory):
    lora = {"r": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": "all-linear"}
    agent, engine = _agent(lora=lora), engine_factory()
    prompts, params = _prompts(agent), SamplingParams(n=2, max_new_tokens=12, seed=0)
    before = engine.generate(agent, prompts, params)
    _assert_close_to_forward(agent, prompts, before)
    _perturb(agent.model, only="lora_B", scale=100.0)  # B starts at 0: give the adapter an effect
    assert _gaps(agent, prompts, before).max() > 10 * MAX_TOL
    engine.sync_weights(agent)
    assert agent.id not in engine._rebuild
    _assert_close_to_forward(agent, prompts, engine.generate(agent, prompts, params))


def test_same_seed_same_samples(engine_factory):
    agent, engine = _agent(), engine_factory()
    prompts = _prompts(agent)
    a = engine.generate(agent, prompts, SamplingParams(n=4, max_new_tokens=12, seed=123))
    b = engine.generate(agent, prompts, SamplingParams(n=4, max_new_tokens=12, seed=123))
    c = engine.generate(agent, prompts, SamplingParams(n=4, max_new_tokens=12, seed=124))
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    assert [s.token_ids for s in a] != [s.token_ids for s in c]
    # the n samples of one prompt are not copies of each other
    assert any(len({s.token_ids for s in a[i * 4 : i * 4 + 4]}) > 1 for i in range(len(prompts)))


def test_two_agents_share_one_engine(engine_factory):
    agents = [_agent("qwen2-char", "a", 0), _agent("llama-bpe", "b", 1)]
    engine = engine_factory()
    params = SamplingParams(n=2, max_new_tokens=12, seed=0)
    for agent in agents:
        prompts = _prompts(agent)
        _assert_close_to_forward(agent, prompts, engine.generate(agent, prompts, params))


def test_sleep_frees_memory_and_wake_up_restores_the_engine(engine_factory):
    agent, engine = _agent(), engine_factory(enable_sleep_mode=True)
    prompts, greedy = _prompts(agent), SamplingParams(n=1, max_new_tokens=12, greedy=True)
    first = engine.generate(agent, prompts, greedy)
    free_awake = torch.cuda.mem_get_info()[0]
    engine.sleep(agent)
    free_asleep, total = torch.cuda.mem_get_info()
    # the KV cache, most of the engine's gpu_memory_utilization share, is released
    assert free_asleep - free_awake > 0.5 * ENGINE["gpu_memory_utilization"] * total
    engine.wake_up(agent)
    assert [s.token_ids for s in engine.generate(agent, prompts, greedy)] == [s.token_ids for s in first]
    engine.sleep(agent)
    _perturb(agent.model, scale=0.5)  # "training" while the engine sleeps
    engine.sync_weights(agent)  # wakes it, then loads the new weights
    _assert_close_to_forward(agent, prompts, engine.generate(agent, prompts, greedy))
