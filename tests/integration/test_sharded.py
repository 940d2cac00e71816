"""Sharded agents (FSDP2 over 2 gloo ranks on CPU, spawned processes): the sharded update takes the
unsharded step (float64), each rank holds half the parameters and optimizer state, a sharded checkpoint
resumes exactly and exports a standalone Hugging Face checkpoint, LoRA agents shard too."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hacrl.agents.agent import enable_checkpointing, load_agent
from hacrl.agents.tiny import tiny_agent_path
from hacrl.core import StepSettings
from hacrl.learner import sharding
from hacrl.learner.algorithms import ALGORITHMS
from hacrl.learner.settings import LossSettings
from hacrl.learner.update import update_learner
from hacrl.learner.view import ViewRow

WORLD = 2
SETTINGS = LossSettings(StepSettings(clip_low=0.2, clip_high=0.28, alpha=1.0, max_log_ratio=10.0,
                                     kl_coef=0.05, imitation_coef=1.0),
                        delta=0.2, delta_step=0.025, rollout_correction="off", rollout_correction_cap=2.0)


def make_agent(lora: bool):
    torch.manual_seed(0)
    spec = {"r": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": "all-linear"} if lora else None
    agent = load_agent("a", 0, tiny_agent_path("qwen2-char"), lora=spec)
    agent.model.double()
    if not lora:  # the full-weight case trains with gradient checkpointing (the plain forward pass), the LoRA
        # case without (the shared-prompt forward over a KV cache): both paths run sharded
        enable_checkpointing(agent.model)
    if lora:  # B = 0 would make the first step's adapter gradient one-sided; give B values
        for name, p in agent.model.named_parameters():
            if "lora_B" in name:
                p.data.normal_(0, 0.02, generator=torch.Generator().manual_seed(1))
    agent.enable_reference()
    agent.configure_optimizer(lr=1e-3, weight_decay=0.01)
    return agent


def make_minibatches(agent, step):
    """Two minibatches of 6 rows (own and cross, varied lengths, shared prompts): 3 micro-batches of 2,
    so rank 1 runs one micro-batch and one padding pass."""
    mbs = []
    for m in range(2):
        rows = []
        for i in range(6):
            prompt = agent.render_prompt(f"{10 + m + step}+{i // 3}=")
            answer, _ = agent.encode_answer(str(10 + m + i) + "7" * (i % 3), finished=i % 2 == 0)
            rows.append(ViewRow(prompt_index=i // 3, source=0 if i % 2 else 1, is_own=bool(i % 2), prompt_ids=prompt,
                                answer_ids=answer, old_logp_mean=-1.5 + 0.1 * i, old_token_logps=None,
                                reward=float(i % 2), advantage=(-1.0) ** i * (0.5 + 0.1 * i), omega=1.0 + 0.2 * i))
        mbs.append(rows)
    return mbs


def run_update(agent, step, dp_group=None):
    metrics = update_learner(agent, make_minibatches(agent, step), ALGORITHMS.get("hacpo"), SETTINGS,
                             micro_batch_size=2, grad_clip=0.5, dp_group=dp_group)
    return {k: v for k, v in metrics.items() if not k.startswith("busy_")}  # this rank's seconds


def full_state(agent):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    if not sharding.is_sharded(agent.model):
        return {k: v.detach().clone() for k, v in agent.model.state_dict().items()}
    return get_model_state_dict(agent.model, options=StateDictOptions(full_state_dict=True))


def _rank(rank, lora, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    group = dist.group.WORLD
    agent = make_agent(lora)
    before = sharding.local_numel(agent.model.parameters())
    # the LoRA case also runs FSDP2's CPUOffloadPolicy (on a CPU mesh it places nothing elsewhere, but the
    # offload code path — host-side optimizer step, compute_device — runs)
    sharding.shard_agent(agent, group, offload=lora, lr=1e-3, weight_decay=0.01)
    out = {"params_full": before, "params_local": sharding.local_numel(agent.model.parameters())}
    out["metrics1"] = run_update(agent, 0, group)
    out["optim_local"] = sharding.optimizer_numel(agent.optimizer)
    out["weights1"] = full_state(agent)
    with sharding.full_weights(agent.model):  # generation-style forwards, different lengths per rank
        ids = torch.arange(3 + rank)[None]
        out["logits_gathered"] = agent.model(input_ids=ids).logits.detach()
    ckpt = os.path.join(out_dir, "ckpt")
    sharding.save_sharded(agent, Path(ckpt), group)
    sharding.export_pretrained(agent, Path(ckpt), rank)
    out["metrics2"] = run_update(agent, 1, group)
    out["weights2"] = full_state(agent)
    # resume: a fresh agent, sharded, the checkpoint's shards put back, then the same second step
    resumed = make_agent(lora)
    sharding.shard_agent(resumed, group, offload=lora, lr=1e-3, weight_decay=0.01)
    sharding.load_sharded(resumed, Path(ckpt), group)
    out["resumed_metrics2"] = run_update(resumed, 1, group)
    out["resumed_weights2"] = full_state(resumed)
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def assert_same(a, b, what, atol=1e-12):
    assert a.keys() == b.keys(), what
    for k in a:
        torch.testing.assert_close(a[k].to(torch.float64), b[k].to(torch.float64), atol=atol, rtol=1e-10,
                                   msg=f"{what}: {k}")


@pytest.mark.model
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora-offload"])
def test_sharded_update_checkpoint_and_export(tmp_path, lora):
    if lora:
        pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM

    plain = make_agent(lora)
    expected1 = run_update(plain, 0)
    weights1 = full_state(plain)
    expected2 = run_update(plain, 1)
    weights2 = full_state(plain)
    mp.spawn(_rank, args=(lora, str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    for res in ranks:
        # the same loss metrics and the same updated weights as one unsharded process (float64)
        assert res["metrics1"].keys() == expected1.keys()
        for key, value in expected1.items():
            assert res["metrics1"][key] == pytest.approx(value, rel=1e-10, abs=1e-12), key
        assert_same(res["weights1"], weights1, "step 1")
        assert_same(res["weights2"], weights2, "step 2")
        for key, value in expected2.items():
            assert res["metrics2"][key] == pytest.approx(value, rel=1e-10, abs=1e-12), key
        # resumed from the sharded checkpoint: exactly the uninterrupted second step
        assert res["resumed_metrics2"] == res["metrics2"]
        assert_same(res["resumed_weights2"], res["weights2"], "resumed", atol=0)
    # each rank holds about half of the parameters and of the optimizer state
    total = ranks[0]["params_full"]
    trainable = sum(p.numel() for p in plain.model.parameters() if p.requires_grad)
    assert sum(r["params_local"] for r in ranks) == total
    assert sum(r["optim_local"] for r in ranks) == 2 * trainable
    for res in ranks:
        assert abs(res["params_local"] - total / WORLD) <= 0.02 * total
        assert abs(res["optim_local"] - trainable) <= 0.05 * trainable
    # the gathered forward (different lengths per rank, no collectives) is the plain model's
    with torch.no_grad():
        plain_after1 = make_agent(lora)
        plain_after1.model.load_state_dict(weights1)
        for r, res in enumerate(ranks):
            want = plain_after1.model(input_ids=torch.arange(3 + r)[None]).logits
            torch.testing.assert_close(res["logits_gathered"], want, atol=1e-12, rtol=1e-10)
    # the export is an ordinary Hugging Face checkpoint of the step-1 weights
    ckpt = tmp_path / "ckpt"
    assert (ckpt / "sharded" / ".metadata").is_file()
    standalone = AutoModelForCausalLM.from_pretrained(ckpt / "merged" if lora else ckpt, dtype=torch.float64)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        torch.testing.assert_close(standalone(input_ids=ids).logits, plain_after1.model(input_ids=ids).logits,
                                   atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize(("overrides", "message"), [
    (["agents.qwen-char.fsdp=true"], "set agents.qwen-char.data_parallel to 2 or more"),
    (["agents.qwen-char.cpu_offload=true"], "set agents.qwen-char.fsdp=true"),
])
def test_sharding_settings_are_checked_in_one_line(overrides, message):
    from hacrl.config import ConfigError, load_config

    with pytest.raises(ConfigError) as err:
        load_config("tiny-test", overrides=overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_sharded_agent_may_roll_out_with_vllm():
    from hacrl.config import load_config

    cfg = load_config("tiny-test", overrides=["backend.name=ray", "agents.qwen-char.data_parallel=2",
                                              "agents.qwen-char.fsdp=true", "rollout.engine=vllm"])
    assert cfg.agents[0].fsdp and cfg.rollout.engine == "vllm"  # the push from shards: tests/rollout/test_vllm_sharded_cpu.py
