"""A sharded agent (FSDP2 over 2 gloo ranks, spawned processes) rolls out with the ``vllm`` engine on vLLM's
CPU build (marker ``vllm_cpu``; skipped where vllm is not installed): one engine per rank, built from the
gathered weights; after a sharded update the weights go into every rank's engine from the shards, one
decoder layer at a time (``rollout.vllm.weight_pieces``), and each engine's log-probs of fixed answers are
the trained model's (float32 tolerance of test_vllm_engine_cpu.py). The gathered tensors are counted while
they live (a finalizer on each tensor ``shards.full_tensor`` returns): their peak during a push is one
piece, the largest decoder layer, not the model.

Run: ``OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python -m pytest -m vllm_cpu
tests/rollout/test_vllm_sharded_cpu.py`` (after ``bash scripts/setup_vllm.sh``).
"""

from __future__ import annotations

import importlib.util
import os
import weakref

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = [
    pytest.mark.model,
    pytest.mark.vllm_cpu,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="needs vLLM's CPU build: bash scripts/setup_vllm.sh, then run in .venv-vllm"),
    pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-build tests; on a GPU run pytest -m gpu"),
    pytest.mark.timeout(600),
]

WORLD = 2
TOL = (1e-4, 1e-3)  # float32 (mean, max) |engine - training| per token, as test_vllm_engine_cpu.py
LORA = {"r": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": "all-linear"}


class LiveBytes:
    """Wraps ``shards.full_tensor``: bytes of the gathered tensors alive now, their peak, and the total."""

    def __init__(self, gather):
        self.gather, self.live, self.peak, self.total, self.calls = gather, 0, 0, 0, 0

    def __call__(self, p):
        t = self.gather(p)
        size = t.numel() * t.element_size()
        self.live += size
        self.peak, self.total, self.calls = max(self.peak, self.live), self.total + size, self.calls + 1
        weakref.finalize(t, self._freed, size)
        return t

    def _freed(self, size):
        self.live -= size

    def reset(self):
        self.peak, self.total, self.calls = self.live, 0, 0


def piece_bytes(model) -> list[int]:
    """Bytes of each piece a push gathers: a decoder layer each, every other parameter on its own."""
    from hacrl.learner.sharding import decoder_layers

    layers = {id(p): i for i, layer in enumerate(decoder_layers(model)) for p in layer.parameters()}
    sizes: dict[object, int] = {}
    for name, p in model.named_parameters():
        key = layers.get(id(p), name)
        sizes[key] = sizes.get(key, 0) + p.numel() * p.element_size()
    return list(sizes.values())


def fixed_answers(agent, n=4):
    from hacrl.data.tasks import get_task

    problems = get_task("add2").test_problems(n)
    prompts = [agent.render_prompt(p.prompt) for p in problems]
    answers = [agent.tokenizer(p.answer, add_special_tokens=False)["input_ids"] + [agent.eos_id] for p in problems]
    return prompts, answers


def engine_logps(engine, agent, prompts, answers) -> torch.Tensor:
    """The engine's log-probs of the fixed answers (vLLM's prompt log-probs of prompt + answer)."""
    import vllm

    params = vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)
    out = []
    for prompt, answer in zip(prompts, answers, strict=True):
        res = engine._llm(agent).generate([{"prompt_token_ids": prompt + answer}], params, use_tqdm=False)[0]
        out += [row[tok].logprob for row, tok in zip(res.prompt_logprobs[len(prompt):], answer, strict=True)]
    return torch.tensor(out)


@torch.no_grad()
def training_logps(agent, prompts, answers) -> torch.Tensor:
    """The trained model's log-probs of the same answers (the gathered forward pass, no collective)."""
    from hacrl.agents.agent import token_logprobs

    batch = agent.batch(prompts, answers)
    logp_BT = token_logprobs(agent.model, batch).float()
    return torch.cat([logp_BT[i][batch.answer_mask_BT[i]] for i in range(len(answers))])


def sharded_update(agent, group, rank):
    """One HACPO update on rows that make the answers likelier or not (each rank its half of the micro-batches)."""
    from hacrl.core import StepSettings
    from hacrl.learner.algorithms import ALGORITHMS
    from hacrl.learner.settings import LossSettings
    from hacrl.learner.update import update_learner
    from hacrl.learner.view import ViewRow

    settings = LossSettings(StepSettings(clip_low=0.2, clip_high=0.28, alpha=1.0, max_log_ratio=10.0,
                                         kl_coef=0.0, imitation_coef=1.0),
                            delta=0.2, delta_step=0.025, rollout_correction="off", rollout_correction_cap=2.0)
    prompts, answers = fixed_answers(agent)
    rows = [ViewRow(prompt_index=i, source=0, is_own=True, prompt_ids=p, answer_ids=a, old_logp_mean=-1.0,
                    old_token_logps=None, reward=float(i % 2), advantage=1.0 if i % 2 else -1.0)
            for i, (p, a) in enumerate(zip(prompts, answers, strict=True))]
    return update_learner(agent, [rows], ALGORITHMS.get("hacpo"), settings, micro_batch_size=2, grad_clip=10.0,
                          dp_group=group)


def _rank(rank, model_path, lora, init_file, out_dir):
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    group = dist.group.WORLD
    from hacrl.agents import shards
    from hacrl.agents.agent import load_agent
    from hacrl.learner import sharding
    from hacrl.rollout import get_engine

    torch.manual_seed(0)
    agent = load_agent("a", 0, model_path, lora=LORA if lora else None)
    if lora:  # B = 0: the update's first step would move B only a little; give the adapter a start
        for name, p in agent.model.named_parameters():
            if "lora_B" in name:
                p.data.normal_(0, 0.05, generator=torch.Generator().manual_seed(1))
    pieces = piece_bytes(agent.model)
    sharding.shard_agent(agent, group, offload=False, lr=2e-2 if lora else 1e-2, weight_decay=0.0)
    counter = LiveBytes(shards.full_tensor)
    shards.full_tensor = counter
    engine = get_engine("vllm", enforce_eager=True)
    prompts, answers = fixed_answers(agent)
    out = {"pieces": pieces}
    try:
        sharding.gather_full(agent.model)  # as the worker's rollout does: the engine is built from these
        out["before_engine"] = engine_logps(engine, agent, prompts, answers)
        out["before_trained"] = training_logps(agent, prompts, answers)
        sharding.reshard_full(agent.model)
        sharded_update(agent, group, rank)
        counter.reset()
        engine.sync_weights(agent)  # the worker's call after an update, the model left sharded
        out.update(peak=counter.peak, total=counter.total, calls=counter.calls, live_after=counter.live,
                   rebuilt=agent.id in engine._rebuild)
        sharding.gather_full(agent.model)
        out["after_engine"] = engine_logps(engine, agent, prompts, answers)
        out["after_trained"] = training_logps(agent, prompts, answers)
    finally:
        engine.close()
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    if dist.is_initialized():  # vLLM's in-process engine shutdown tears down the default group itself
        dist.destroy_process_group()


@pytest.mark.parametrize("arch, lora", [("qwen2-char", False), ("llama-bpe-head32", True)])
def test_every_replica_engine_follows_the_sharded_update_one_layer_at_a_time(tmp_path, arch, lora):
    from hacrl.agents.tiny import tiny_agent_path

    if arch == "qwen2-char":
        model_path = tiny_agent_path(arch)
    else:
        from test_vllm_engine_cpu import llama_bpe_head32

        model_path = llama_bpe_head32(tmp_path / arch)
    mp.spawn(_rank, args=(str(model_path), lora, str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    for res in ranks:
        torch.testing.assert_close(res["before_engine"], res["before_trained"], rtol=0, atol=TOL[1])
        # the update matters: far more than the tolerance ...
        assert (res["after_trained"] - res["before_trained"]).abs().max() > 100 * TOL[1]
        # ... and every replica's engine has it, in place (through the RPC, not a rebuilt engine)
        gap = (res["after_engine"] - res["after_trained"]).abs()
        assert gap.mean() < TOL[0] and gap.max() < TOL[1], gap
        assert not res["rebuilt"]
        # the push gathered every parameter once, and never held more than one piece of them at a time
        assert res["calls"] > 0 and res["total"] == sum(res["pieces"])
        assert res["peak"] <= max(res["pieces"]) < res["total"] / 2, (res["peak"], res["pieces"])
        assert res["live_after"] == 0
    torch.testing.assert_close(ranks[0]["after_trained"], ranks[1]["after_trained"], rtol=0, atol=1e-6)
    print(f"\n{arch}{' lora' if lora else ''}: push peak {ranks[0]['peak']} B of gathered tensors, largest piece "
          f"{max(ranks[0]['pieces'])} B, model {ranks[0]['total']} B; gap {gap.max().item():.2e} max")


@pytest.mark.timeout(960)
def test_hacrl_train_with_a_sharded_agent_on_vllm(tmp_path):
    """The worker's path on Ray: qwen-char sharded over 2 replicas, each with its engine; step 2 samples
    from the weights pushed after step 1, and the trainer's log-probs of them are the engine's."""
    import json
    import subprocess
    import sys

    pytest.importorskip("ray")
    from test_vllm_engine_cpu import llama_bpe_head32

    llama = llama_bpe_head32(tmp_path / "llama-bpe-h32")
    run = tmp_path / "run"
    sets = [f"agents.llama-bpe.model={llama}", "rollout.engine=vllm", "rollout.engine_options.enforce_eager=true",
            "trainer.steps=2", "trainer.eval_size=8", "backend.name=ray", "backend.num_cpus_per_agent=0.5",
            "agents.qwen-char.data_parallel=2", "agents.qwen-char.fsdp=true"]
    cmd = [sys.executable, "-m", "hacrl.cli", "train", "--preset", "tiny-test", "--output", str(run),
           *[a for s in sets for a in ("--set", s)]]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "in-place weight load failed" not in done.stderr
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    lines = [m for m in lines if "agent/qwen-char/reward" in m]
    assert [m["step"] for m in lines] == [1, 2]
    for m in lines:
        assert 0 <= m["agent/qwen-char/rollout/logp_gap_mean"] < TOL[0]
        assert m["agent/qwen-char/rollout/logp_gap_max"] < TOL[1]
