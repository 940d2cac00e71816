"""FSDP2 bf16 mixed precision on CUDA (``agents.<id>.fsdp_mixed_precision: bfloat16``, NCCL): the layers
compute in bf16 over float32 master shards, the loss and gradient stay within bf16 rounding of float32's,
an lr 1e-6 step moves the float32 masters, and the weights gathered for generation take 2 bytes a
parameter (half of float32's: what ``hacrl plan`` counts).

Run: ``pytest -m gpu tests/gpu/test_cuda_mixed_precision.py -q`` (skipped without CUDA; ``bash bench/gpu_check.sh``
runs it). Ranks: min(2, GPUs), one GPU each, NCCL; on a one-GPU machine a mesh of one, which still runs
the policy's casts, bf16 compute and float32 masters (not the reduce-scatter across ranks: the CPU test,
tests/integration/test_mixed_precision.py, holds that over 2 Gloo ranks). ``HACRL_TEST_DEVICE=cpu`` runs
the same tests on 2 Gloo ranks (how they are kept working without a GPU; the memory test needs CUDA).

Tolerances: as the CPU test's (measured there: loss 7e-4 relative, gradient 1.3e-2 relative in norm,
cosine 0.99994), with the same bounds: CUDA's bf16 matmuls accumulate in float32 as the CPU's do.
float32 matmuls are kept off TF32 (torch's default) so the reference is float32. Memory: the gathered
weights' bytes over 2 per parameter, bound [0.98, 1.1] (one all-gather buffer per unit; the allocator
rounds each up to 512 bytes); float32 (no policy) 4 per parameter, bound [1.96, 2.2] of the bf16 unit.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hacrl.agents.agent import load_agent, token_logprobs
from hacrl.agents.tiny import tiny_agent_path
from hacrl.learner import sharding

DEVICE = os.environ.get("HACRL_TEST_DEVICE", "cuda")
pytestmark = [
    pytest.mark.model,
    pytest.mark.gpu,
    pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA device"),
]
LR = 1e-6
LOSS_RTOL, GRAD_RTOL, GRAD_COS = 1e-2, 0.05, 0.999


def _world() -> int:
    return 2 if DEVICE == "cpu" else min(2, torch.cuda.device_count())


def _device(rank: int) -> torch.device:
    return torch.device("cpu") if DEVICE == "cpu" else torch.device(f"cuda:{rank}")


def _init(rank: int, world: int, init_file: str) -> torch.device:
    device = _device(rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=f"file://{init_file}",
                            rank=rank, world_size=world)
    return device


def _agent(device: torch.device):
    torch.manual_seed(0)
    agent = load_agent("a", 0, tiny_agent_path("qwen2-char"), device=str(device))  # float32 weights
    agent.configure_optimizer(lr=LR)
    return agent


def _loss(agent, rank: int, world: int) -> torch.Tensor:
    """Minus the answers' summed log-probs over 8 rows / 8 (rank r of W: rows r, r+W, ...), backward done."""
    prompts = [agent.render_prompt(f"{10 + i}+{i % 3}=") for i in range(8)]
    answers = [agent.encode_answer(str(10 + 2 * i) + "1" * (i % 4), finished=True)[0] for i in range(8)]
    batch = agent.batch(prompts[rank::world], answers[rank::world])
    loss = -token_logprobs(agent.model, batch).sum() / len(prompts)
    loss.backward()
    return loss.detach()


def _full(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().float().cpu().clone()


def _numerics_rank(rank: int, world: int, init_file: str, out_dir: str) -> None:
    device = _init(rank, world, init_file)
    agent = _agent(device)
    sharding.shard_agent(agent, dist.group.WORLD, offload=False, lr=LR, weight_decay=0.0,
                         compute_dtype=torch.bfloat16)
    seen: dict[str, torch.dtype] = {}
    proj = sharding.decoder_layers(agent.model)[0].self_attn.q_proj
    hook = proj.register_forward_hook(lambda m, args, out: seen.update(weight=m.weight.dtype, input=args[0].dtype))
    loss = _loss(agent, rank, world)
    hook.remove()
    dist.all_reduce(loss)
    out = {"loss": float(loss), "compute": seen, "grads": {n: _full(p.grad) for n, p in agent.model.named_parameters()},
           "dtypes": {str(t.dtype) for p in agent.model.parameters() for t in (p, p.grad)},
           "before": {n: _full(p) for n, p in agent.model.named_parameters()}}
    agent.optimizer.step()
    out["after"] = {n: _full(p) for n, p in agent.model.named_parameters()}
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def test_bf16_mixed_precision_on_the_device_stays_near_float32_and_moves_the_masters(tmp_path) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    plain = _agent(_device(0))
    want_loss = float(_loss(plain, 0, 1))
    want = {n: _full(p.grad) for n, p in plain.model.named_parameters()}
    before = {n: _full(p) for n, p in plain.model.named_parameters()}
    plain.optimizer.step()
    after = {n: _full(p) for n, p in plain.model.named_parameters()}
    world = _world()
    mp.spawn(_numerics_rank, args=(world, str(tmp_path / "init"), str(tmp_path)), nprocs=world, join=True)
    for r in range(world):
        res = torch.load(tmp_path / f"rank{r}.pt", weights_only=False)
        assert res["compute"] == {"weight": torch.bfloat16, "input": torch.bfloat16}
        assert res["dtypes"] == {"torch.float32"}  # master shards and their gradients
        assert res["loss"] == pytest.approx(want_loss, rel=LOSS_RTOL)
        g = torch.cat([res["grads"][n].flatten() for n in want]).double()
        g32 = torch.cat([w.flatten() for w in want.values()]).double()
        assert float((g - g32).norm() / g32.norm()) < GRAD_RTOL
        assert float(torch.nn.functional.cosine_similarity(g, g32, dim=0)) > GRAD_COS
        delta = torch.cat([(res["after"][n] - res["before"][n]).flatten() for n in before])
        delta32 = torch.cat([(after[n] - before[n]).flatten() for n in before])
        moved = delta32.abs() > LR / 2
        assert moved.float().mean() > 0.9
        assert (delta[moved].abs() > LR / 2).float().mean() > 0.98
        w0 = torch.cat([res["before"][n].flatten() for n in before])[moved]
        w1 = torch.cat([res["after"][n].flatten() for n in before])[moved]
        assert (w0.bfloat16() == w1.bfloat16()).float().mean() > 0.95  # what bf16 weights would have lost


def _memory_rank(rank: int, world: int, init_file: str, out_dir: str) -> None:
    """Bytes the gathered weights add, under the bf16 policy and without one, for a 4-layer model of
    ~30M parameters built on the device (random init, no files)."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    device = _init(rank, world, init_file)
    cfg = Qwen2Config(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
                      num_key_value_heads=4, vocab_size=32000, tie_word_embeddings=False)
    out = {}
    for name, compute in (("bf16", torch.bfloat16), ("fp32", None)):
        torch.manual_seed(0)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(cfg)
        params = sum(p.numel() for p in model.parameters())
        sharding.shard_module(model, dist.group.WORLD, device, offload=False, root_reshard=False,
                              compute_dtype=compute)
        torch.cuda.synchronize(device)
        start = torch.cuda.memory_allocated(device)
        sharding.gather_full(model)
        torch.cuda.synchronize(device)
        out[name] = (torch.cuda.memory_allocated(device) - start) / params
        sharding.reshard_full(model)
        del model
        torch.cuda.empty_cache()
    torch.save(out, os.path.join(out_dir, f"mem{rank}.pt"))
    dist.destroy_process_group()


@pytest.mark.skipif(DEVICE != "cuda", reason="allocator statistics need CUDA")
def test_bf16_gathered_weights_take_two_bytes_a_parameter(tmp_path) -> None:
    world = _world()
    mp.spawn(_memory_rank, args=(world, str(tmp_path / "init"), str(tmp_path)), nprocs=world, join=True)
    for r in range(world):
        per_param = torch.load(tmp_path / f"mem{r}.pt")
        print(f"rank {r}: gathered bytes per parameter {per_param}")
        assert 0.98 * 2 <= per_param["bf16"] <= 1.1 * 2
        assert 1.96 <= per_param["fp32"] / per_param["bf16"] <= 2.2
