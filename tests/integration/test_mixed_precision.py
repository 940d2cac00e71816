"""FSDP2 mixed precision (``agents.<id>.fsdp_mixed_precision: bfloat16``) over 2 Gloo ranks on CPU: the
layers compute in bfloat16, the shards, their gradients and AdamW's state stay float32; the loss and
the gradient stay within bf16 rounding of the float32 ones; and an update of lr 1e-6, far below a bf16
weight's resolution, moves the float32 master weights as the float32 step does.

Tolerances. bf16 keeps 8 mantissa bits (relative rounding 2^-9 ≈ 2e-3 per value), compounded through the
layers; a wrong reduction (a mean for a sum, a dropped rank) or a gradient of the wrong weights is off by
O(1). Measured here (the tiny ``qwen2-char``, 1 thread, deterministic): the summed log-prob loss 25.839 vs
float32's 25.821 (7e-4 relative; bound 1e-2); the whole gradient 1.3e-2 relative in norm, cosine 0.99994
(bounds 0.05, 0.999); the worst tensor with a gradient above 1e-3 of the whole, a k_proj bias, 7.6e-2
(bound 0.2); the update's metrics: sequence-ratio means within 0.9% (cross 1.0139 vs 1.0224), pg_loss
-0.09882 vs -0.09845, grad_norm 3.4392 vs 3.4401, every clip fraction equal (bound 3% relative or 1e-3).
The lr 1e-6 step: 98.9% of the weights move under float32; of those, 99.7% of the float32 masters move by
more than lr/2 (bound 98%), 98.7% the same way (bound 95%), and 98.9% are unchanged once rounded to bf16
(bound 95%): what bf16 weights would have lost.

Run: ``OMP_NUM_THREADS=1 python -m pytest -q tests/integration/test_mixed_precision.py``.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hacrl.agents.agent import load_agent, token_logprobs
from hacrl.agents.tiny import tiny_agent_path
from hacrl.core import StepSettings
from hacrl.learner import sharding
from hacrl.learner.algorithms import ALGORITHMS
from hacrl.learner.settings import LossSettings
from hacrl.learner.update import update_learner
from hacrl.learner.view import ViewRow

WORLD = 2
LR = 1e-6
SETTINGS = LossSettings(StepSettings(clip_low=0.2, clip_high=0.28, alpha=1.0, max_log_ratio=10.0,
                                     kl_coef=0.05, imitation_coef=1.0),
                        delta=0.2, delta_step=0.025, rollout_correction="off", rollout_correction_cap=2.0)
LOSS_RTOL, GRAD_RTOL, GRAD_COS, LAYER_RTOL, METRIC_RTOL, METRIC_ATOL = 1e-2, 0.05, 0.999, 0.2, 3e-2, 1e-3


def make_agent():
    torch.manual_seed(0)
    agent = load_agent("a", 0, tiny_agent_path("qwen2-char"))  # float32 weights
    agent.enable_reference()
    agent.configure_optimizer(lr=LR)
    return agent


def rows(agent, old=None):
    """Six rows (own and cross, answers of 3-5 tokens over two prompts); the minibatch is all six. ``old``:
    the rows' π_old mean log-probs (default -2)."""
    out = []
    for i in range(6):
        prompt = agent.render_prompt(f"{12 + i // 3}+{i // 3}=")
        answer, _ = agent.encode_answer(str(20 + 7 * i) + "3" * (i % 3), finished=i % 2 == 0)
        out.append(ViewRow(prompt_index=i // 3, source=0 if i % 2 else 1, is_own=bool(i % 2), prompt_ids=prompt,
                           answer_ids=answer, old_logp_mean=old[i] if old else -2.0, old_token_logps=None,
                           reward=float(i % 2), advantage=(-1.0) ** i * (0.5 + 0.1 * i), omega=1.0 + 0.2 * i))
    return out


def full(t):
    """The whole tensor of a (possibly sharded, ``DTensor``) parameter or gradient, detached."""
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().clone()


def loss_and_grads(agent, rank=0, world=1):
    """The summed answer log-prob of ``rows`` (every answer token weighted 1/rows) and its gradient per
    parameter, rank r of W taking rows r, r+W, ... (FSDP sums the ranks' gradients); the dtypes the first
    decoder layer's q_proj saw in forward (weight, input)."""
    seen = {}
    layer = sharding.decoder_layers(agent.model)[0]
    hook = layer.self_attn.q_proj.register_forward_hook(
        lambda m, args, out: seen.update(weight=m.weight.dtype, input=args[0].dtype))
    r = rows(agent)
    mine = r[rank::world]
    batch = agent.batch([x.prompt_ids for x in mine], [x.answer_ids for x in mine])
    agent.optimizer.zero_grad(set_to_none=True)
    loss = -token_logprobs(agent.model, batch).sum() / len(r)
    loss.backward()
    if world > 1:  # the whole batch's loss, for the record
        loss = loss.detach().clone()
        dist.all_reduce(loss)
    hook.remove()
    grads = {n: full(p.grad) for n, p in agent.model.named_parameters()}
    out = {"loss": float(loss.detach()), "grads": grads, "compute": seen,
           "grad_dtypes": {str(p.grad.dtype) for p in agent.model.parameters()}}
    agent.optimizer.zero_grad(set_to_none=True)
    return out


def old_logps(agent):
    """π_old of each row near the float32 model's own mean log-prob (sequence ratios within 0.9-1.1: inside
    the cross window, some own ratios clipped, so the update has a gradient through every path)."""
    r = rows(agent)
    batch = agent.batch([x.prompt_ids for x in r], [x.answer_ids for x in r])
    with torch.no_grad():
        logp = token_logprobs(agent.model, batch)
    means = logp.sum(1) / batch.answer_mask_BT.sum(1)
    return [float(m) + 0.04 * (i - 2.5) for i, m in enumerate(means)]


def step(agent, old, group=None):
    metrics = update_learner(agent, [rows(agent, old)], ALGORITHMS.get("hacpo"), SETTINGS, micro_batch_size=2,
                             grad_clip=1.0, dp_group=group)
    return {k: v for k, v in metrics.items() if not k.startswith("busy_")}


def _rank(rank, old, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    group = dist.group.WORLD
    agent = make_agent()
    sharding.shard_agent(agent, group, offload=False, lr=LR, weight_decay=0.0, compute_dtype=torch.bfloat16)
    out = loss_and_grads(agent, rank, WORLD)
    out["master_dtypes"] = {str(p.dtype) for p in agent.model.parameters()}
    out["ref_master_dtypes"] = {str(p.dtype) for p in agent.ref_model.parameters()}
    out["before"] = {n: full(p) for n, p in agent.model.named_parameters()}
    out["metrics"] = step(agent, old, group)
    out["optim_dtypes"] = {str(v.dtype) for s in agent.optimizer.state.values() for v in s.values() if v.dim() > 0}
    out["after"] = {n: full(p) for n, p in agent.model.named_parameters()}
    with sharding.full_weights(agent.model):  # generation's gathered weights: the compute dtype
        out["gathered_dtypes"] = {str(p.dtype) for p in agent.model.parameters()}
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


@pytest.mark.model
def test_bf16_mixed_precision_stays_near_float32_and_moves_the_float32_masters(tmp_path):
    plain = make_agent()
    want = loss_and_grads(plain)
    old = old_logps(plain)
    before = {n: p.detach().clone() for n, p in plain.model.named_parameters()}
    want_metrics = step(plain, old)
    after = {n: p.detach().clone() for n, p in plain.model.named_parameters()}
    mp.spawn(_rank, args=(old, str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    for res in ranks:
        # bf16 compute over float32 shards; float32 gradients (reduced in float32), AdamW state and masters
        assert res["compute"] == {"weight": torch.bfloat16, "input": torch.bfloat16}
        assert res["gathered_dtypes"] == {"torch.bfloat16"}
        assert res["master_dtypes"] == res["ref_master_dtypes"] == res["grad_dtypes"] == {"torch.float32"}
        assert res["optim_dtypes"] == {"torch.float32"}
        # the loss and its gradient within bf16 rounding of float32's
        assert res["loss"] == pytest.approx(want["loss"], rel=LOSS_RTOL)
        g = torch.cat([res["grads"][n].flatten() for n in want["grads"]])
        g32 = torch.cat([w.flatten() for w in want["grads"].values()])
        assert rel(g, g32) < GRAD_RTOL
        assert float(torch.nn.functional.cosine_similarity(g.double(), g32.double(), dim=0)) > GRAD_COS
        for n, w in want["grads"].items():
            if w.norm() > 1e-3 * g32.norm():
                assert rel(res["grads"][n], w) < LAYER_RTOL, n
        assert res["metrics"].keys() == want_metrics.keys()
        for key, value in want_metrics.items():
            assert res["metrics"][key] == pytest.approx(value, rel=METRIC_RTOL, abs=METRIC_ATOL), key
        # the masters before the step are the float32 weights, unrounded
        for n in before:
            torch.testing.assert_close(res["before"][n], before[n], atol=0, rtol=0)
        # a 1e-6 update: the float32 masters move as the float32 step moves its weights (AdamW's first step
        # is ±lr for every element with a gradient) ...
        delta = torch.cat([(res["after"][n] - res["before"][n]).flatten() for n in before])
        delta32 = torch.cat([(after[n] - before[n]).flatten() for n in before])
        moved = delta32.abs() > LR / 2
        assert moved.float().mean() > 0.9
        assert (delta[moved].abs() > LR / 2).float().mean() > 0.98
        assert (torch.sign(delta[moved]) == torch.sign(delta32[moved])).float().mean() > 0.95
        # ... where bf16 weights could not: rounded to bf16, nearly every moved weight is where it was
        w0 = torch.cat([res["before"][n].flatten() for n in before])[moved]
        w1 = torch.cat([res["after"][n].flatten() for n in before])[moved]
        assert (w0.bfloat16() == w1.bfloat16()).float().mean() > 0.95
    torch.testing.assert_close(ranks[0]["after"], ranks[1]["after"], atol=0, rtol=0)  # replicas agree


@pytest.mark.parametrize(("overrides", "message"), [
    (["agents.qwen-char.fsdp_mixed_precision=bfloat16"], "set agents.qwen-char.fsdp=true"),
    (["backend.name=ray", "agents.qwen-char.data_parallel=2", "agents.qwen-char.fsdp=true",
      "agents.qwen-char.fsdp_mixed_precision=bfloat16", "agents.qwen-char.dtype=bfloat16"],
     "set agents.qwen-char.dtype=float32"),
    (["backend.name=ray", "agents.qwen-char.data_parallel=2", "agents.qwen-char.fsdp=true",
      "agents.qwen-char.fsdp_mixed_precision=bfloat16", "agents.qwen-char.autocast=bfloat16"],
     "set agents.qwen-char.autocast=null"),
    (["agents.qwen-char.fsdp_mixed_precision=float16"], "agents.qwen-char.fsdp_mixed_precision: Input should be 'bfloat16'"),
])
def test_mixed_precision_settings_are_checked_in_one_line(overrides, message):
    from hacrl.config import ConfigError, load_config

    with pytest.raises(ConfigError) as err:
        load_config("tiny-test", overrides=overrides)
    assert message in str(err.value) and "\n" not in str(err.value)
