"""The sharding helpers one at a time (``hacrl.learner.sharding``), each on 2 gloo ranks forked from the test
process (a second each, no fresh interpreter): what FSDP2's layout leaves sharded or gathered after a forward
pass, gradients summed (not averaged) across ranks, the clipped norm of the whole gradient, the element
counts, the replicas' in-place gradient sum, a sharded checkpoint's model, optimizer and reference put back,
and the Hugging Face export. The whole sharded update against the unsharded one, LoRA and CPU offload:
``tests/integration/test_sharded.py`` (spawned processes, a minute)."""

from __future__ import annotations

import copy
import multiprocessing
import os
import traceback
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from hacrl.agents.agent import load_agent
from hacrl.agents.shards import decoder_layers, full_tensor, is_gathered
from hacrl.agents.tiny import tiny_agent_path
from hacrl.learner import sharding

WORLD = 2
TIMEOUT_S = 120


def run_ranks(fn, tmp_path: Path) -> list[dict]:
    """``fn(rank, group, tmp_path)`` on WORLD forked ranks of one gloo group; each rank's returned dict."""
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_rank_main, args=(fn, rank, tmp_path)) for rank in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(TIMEOUT_S)
    for p in procs:
        if p.is_alive():
            p.kill()
    errors = [(tmp_path / f"error{r}.txt") for r in range(WORLD)]
    assert not any(e.exists() for e in errors), "\n".join(e.read_text() for e in errors if e.exists())
    assert [p.exitcode for p in procs] == [0] * WORLD, "a rank hung or died"
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


def _rank_main(fn, rank: int, tmp_path: Path) -> None:
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=rank, world_size=WORLD)
        out = fn(rank, dist.group.WORLD, tmp_path)
        torch.save(out, tmp_path / f"rank{rank}.pt")
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - a forked rank reports to the test through a file, then exits
        (tmp_path / f"error{rank}.txt").write_text(traceback.format_exc())
        os._exit(1)
    os._exit(0)


def make_agent(reference: bool = True):
    torch.manual_seed(0)
    agent = load_agent("a", 0, tiny_agent_path("qwen2-char"))
    agent.model.double()
    if reference:
        agent.enable_reference()
    agent.configure_optimizer(lr=1e-3, weight_decay=0.01)
    return agent


def rank_ids(rank: int) -> torch.Tensor:
    """A different input on each rank (values and length)."""
    return (torch.arange(5 + 2 * rank) * (3 + rank) % 50 + 1)[None]


def is_dtensor(p) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(p, DTensor)


def full_grads(model) -> dict[str, torch.Tensor]:
    return {n: full_tensor(p.grad).clone() for n, p in model.named_parameters() if p.grad is not None}


# ---- mixed precision policy (no ranks) ------------------------------------------------------------

def test_mixed_precision_policy_casts_compute_and_reduces_in_float32():
    plain = sharding.mixed_precision_policy(None)
    assert (plain.param_dtype, plain.reduce_dtype) == (None, None)
    bf16 = sharding.mixed_precision_policy(torch.bfloat16)
    assert (bf16.param_dtype, bf16.reduce_dtype) == (torch.bfloat16, torch.float32)


@pytest.mark.model
def test_a_plain_model_is_left_alone_and_counts_whole_tensors():
    agent = make_agent(reference=False)
    model = agent.model
    sharding.gather_full(model)  # unsharded: nothing to gather, nothing set
    assert not is_gathered(model)
    sharding.reshard_full(model)
    numel = sum(p.numel() for p in model.parameters())
    assert sharding.local_numel(model.parameters()) == numel
    assert sharding.clip_grad_norm(model, 1.0) == 0.0  # no gradients yet
    assert sharding.optimizer_numel(agent.optimizer) == 0  # no state before the first step


# ---- the layout and the gradient sum --------------------------------------------------------------

def _layout(rank, group, tmp_path):
    from torch.distributed.fsdp import FSDPModule

    agent = make_agent()
    plain = copy.deepcopy(agent.model)  # the unsharded twin: the reference for gradients and norms
    whole = sharding.local_numel(agent.model.parameters())
    sharding.shard_agent(agent, group, offload=False, lr=2e-3, weight_decay=0.03)
    model, ref = agent.model, agent.ref_model
    layers = decoder_layers(model)
    out = {
        "whole": whole, "local": sharding.local_numel(model.parameters()),
        "units": [isinstance(m, FSDPModule) for m in [model, ref, *layers, *decoder_layers(ref)]],
        "optim": [(g["lr"], g["weight_decay"], all(is_dtensor(p) for p in g["params"]),
                   sum(1 for _ in g["params"])) for g in agent.optimizer.param_groups],
        "n_params": sum(1 for p in model.parameters() if p.requires_grad),
        "divide": [m._get_fsdp_state()._fsdp_param_group.gradient_divide_factor
                   for m in model.modules() if isinstance(m, FSDPModule)],
        # without offload: FSDP2's plain policy on every unit, and no compute device set
        "offload": {type(m._get_fsdp_state()._fsdp_param_group.offload_policy).__name__
                    for net in (model, ref) for m in net.modules() if isinstance(m, FSDPModule)},
        "compute_device": getattr(model, "compute_device", None),
    }
    # after a forward pass: the layers resharded, the root (embeddings, norm, head) still gathered for the
    # backward pass; the reference resharded everywhere (it never runs a backward pass)
    loss = model(input_ids=rank_ids(rank)).logits.double().pow(2).mean() * (1 + rank)
    out["after_forward"] = {"layer": is_dtensor(next(layers[0].parameters())),
                            "root": is_dtensor(model.get_input_embeddings().weight)}
    with torch.no_grad():
        ref(input_ids=rank_ids(rank))
    out["ref_after_forward"] = {"layer": is_dtensor(next(decoder_layers(ref)[0].parameters())),
                                "root": is_dtensor(ref.get_input_embeddings().weight)}
    loss.backward()
    got = full_grads(model)
    # the unsharded twin on both ranks' inputs, gradients added: the sharded gradient is their sum
    for r in range(WORLD):
        (plain(input_ids=rank_ids(r)).logits.double().pow(2).mean() * (1 + r)).backward()
    want = {n: p.grad.clone() for n, p in plain.named_parameters() if p.grad is not None}
    out["grad_keys"] = (sorted(got), sorted(want))
    out["grad_err"] = max(float((got[k] - want[k]).abs().max()) for k in want)
    want_norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in want.values()])))
    out["norm"] = (sharding.clip_grad_norm(model, 1e9), want_norm)
    out["clipped"] = (sharding.clip_grad_norm(model, 0.5 * want_norm), float(torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g) for g in full_grads(model).values()]))))
    agent.optimizer.step()
    out["optim_numel"] = sharding.optimizer_numel(agent.optimizer)
    return out


@pytest.mark.model
def test_sharding_splits_every_unit_sums_gradients_and_clips_the_whole_norm(tmp_path):
    outs = run_ranks(_layout, tmp_path)
    for rank, out in enumerate(outs):
        assert all(out["units"]), f"rank {rank}: every decoder layer and the root are FSDP units"
        # dim-0 shards: about half the elements each, the two halves the whole
        assert 0.4 * out["whole"] < out["local"] < 0.6 * out["whole"]
        (lr, wd, sharded, n), = out["optim"]
        assert (lr, wd, sharded, n) == (2e-3, 0.03, True, out["n_params"]), "AdamW rebuilt over the shards"
        assert set(out["divide"]) == {1.0}
        assert (out["offload"], out["compute_device"]) == ({"OffloadPolicy"}, None)
        assert out["after_forward"] == {"layer": True, "root": False}
        assert out["ref_after_forward"] == {"layer": True, "root": True}
        assert out["grad_keys"][0] == out["grad_keys"][1]
        assert out["grad_err"] < 1e-10, "the sharded gradient is the sum of the ranks' gradients"
        norm, want = out["norm"]
        assert norm == pytest.approx(want, rel=1e-10)
        assert out["clipped"][0] == pytest.approx(want, rel=1e-10)  # the norm before clipping is returned
        assert out["clipped"][1] == pytest.approx(0.5 * want, rel=1e-6)
        assert out["optim_numel"] == 2 * out["local"], "two AdamW moments per local element, no step counters"
    assert sum(o["local"] for o in outs) == outs[0]["whole"]


def _policies(rank, group, tmp_path):
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule

    sub = dist.new_group([0, 1])  # an agent's own group, not the default one its mesh would fall back to
    agent = make_agent()
    sharding.shard_agent(agent, sub, offload=True, lr=1e-3, weight_decay=0.0, compute_dtype=torch.bfloat16)
    out = {}
    for name, model in (("model", agent.model), ("ref", agent.ref_model)):
        # FSDP2 keeps each unit's policies on its parameter group (private, read here only to see them set)
        groups = [m._get_fsdp_state()._fsdp_param_group for m in model.modules() if isinstance(m, FSDPModule)]
        out[name] = {
            "offload": {(isinstance(g.offload_policy, CPUOffloadPolicy), getattr(g.offload_policy, "pin_memory", None))
                        for g in groups},
            "mp": {(g.mp_policy.param_dtype, g.mp_policy.reduce_dtype) for g in groups},
            "groups": {p.device_mesh.get_group().group_name for p in model.parameters()},
            "compute_device": getattr(model, "compute_device", None),
        }
    out["sub"] = sub.group_name
    logits = agent.model(input_ids=rank_ids(rank)).logits
    out["logits"] = logits.dtype
    # the float32 reduce-scatter on gloo: a plain SUM (gloo has no PREMUL_SUM, FSDP2's choice for float32)
    logits.float().pow(2).mean().backward()
    out["grads"] = all(p.grad is not None and bool(torch.isfinite(full_tensor(p.grad)).all())
                       for p in agent.model.parameters())
    return out


@pytest.mark.model
def test_offload_mixed_precision_and_the_agents_group_reach_every_unit_of_model_and_reference(tmp_path):
    for out in run_ranks(_policies, tmp_path):
        for name in ("model", "ref"):
            got = out[name]
            assert got["offload"] == {(True, False)}, f"{name}: CPU offload, no pinned memory without CUDA"
            assert got["mp"] == {(torch.bfloat16, torch.float32)}, name
            assert got["groups"] == {out["sub"]}, f"{name}: sharded over the agent's group"
            assert got["compute_device"] == torch.device("cpu"), name
        assert out["logits"] == torch.bfloat16  # the layers computed in bf16
        assert out["grads"]


# ---- gathering for generation ----------------------------------------------------------------------

def _gather(rank, group, tmp_path):
    agent = make_agent(reference=False)
    sharding.shard_agent(agent, group, offload=False, lr=1e-3, weight_decay=0.0)
    model = agent.model
    layer = decoder_layers(model)[0]
    out = {"before": is_gathered(model)}
    sharding.reshard_full(model)  # never gathered: nothing to do
    sharding.gather_full(model)
    sharding.gather_full(model)  # a second call changes nothing
    out["gathered"] = (is_gathered(model), any(is_dtensor(p) for p in model.parameters()))
    # ranks run different numbers of forward passes: with the weights gathered none of them is a collective
    logits = [model(input_ids=rank_ids(rank)).logits.detach() for _ in range(1 + 2 * rank)]
    out["logits"] = logits[0]
    out["still_gathered"] = not any(is_dtensor(p) for p in model.parameters())
    sharding.reshard_full(model)
    out["resharded"] = (is_gathered(model), all(is_dtensor(p) for p in model.parameters()))
    model(input_ids=rank_ids(rank))  # back to training's layout: layers reshard after forward, the root not
    out["after_forward"] = (is_dtensor(next(layer.parameters())), is_dtensor(model.get_input_embeddings().weight))
    model.reshard()
    with sharding.full_weights(model):
        out["inside"] = is_gathered(model)
    out["outside"] = is_gathered(model)
    return out


@pytest.mark.model
def test_gather_full_lets_ranks_generate_apart_and_reshard_full_restores_training_layout(tmp_path):
    plain = make_agent(reference=False).model
    for rank, out in enumerate(run_ranks(_gather, tmp_path)):
        assert out["before"] is False
        assert out["gathered"] == (True, False) and out["still_gathered"]
        with torch.no_grad():
            want = plain(input_ids=rank_ids(rank)).logits
        torch.testing.assert_close(out["logits"], want, rtol=1e-10, atol=1e-10)
        assert out["resharded"] == (False, True)
        assert out["after_forward"] == (True, False)
        assert (out["inside"], out["outside"]) == (True, False)


# ---- unsharded replicas ----------------------------------------------------------------------------

def _replicas(rank, group, tmp_path):
    agent = make_agent(reference=False)
    params = dict(agent.model.named_parameters())
    names = sorted(params)
    frozen, missing = names[0], names[1]
    params[frozen].requires_grad_(False)
    for i, name in enumerate(names[2:]):
        params[name].grad = torch.full_like(params[name], float((rank + 1) * (i + 1)))
    if rank == 1:  # a parameter only rank 1 has a gradient for: rank 0 adds zeros
        params[missing].grad = torch.full_like(params[missing], 5.0)
    sharding.sum_replica_gradients(agent.model, group)
    out = {"frozen": params[frozen].grad, "missing": params[missing].grad.clone(),
           "rest": [params[n].grad.unique().tolist() for n in names[2:]]}
    # over the group given, not the default one: a group of this rank alone leaves its gradients as they are
    alone = [dist.new_group([r]) for r in range(WORLD)][rank]
    sharding.sum_replica_gradients(agent.model, alone)
    out["alone"] = params[missing].grad.unique().tolist()
    return out


@pytest.mark.model
def test_replica_gradients_are_summed_in_place_and_a_missing_one_counts_as_zeros(tmp_path):
    for out in run_ranks(_replicas, tmp_path):
        assert out["frozen"] is None  # not trained: left without a gradient
        assert out["missing"].unique().tolist() == [5.0]
        assert out["rest"] == [[3.0 * (i + 1)] for i in range(len(out["rest"]))]  # (1 + 2) × (i + 1)
        assert out["alone"] == [5.0]


# ---- checkpoints and export ------------------------------------------------------------------------

def _checkpoint(rank, group, tmp_path):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    def full(model):
        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))

    path = tmp_path / "ckpt"
    agent = make_agent()
    sharding.shard_agent(agent, group, offload=False, lr=1e-3, weight_decay=0.0)
    (agent.model(input_ids=rank_ids(rank)).logits.double().pow(2).mean()).backward()
    agent.optimizer.step()
    with torch.no_grad():  # a reference unlike the fresh agent's, so that loading it shows
        for p in agent.ref_model.parameters():
            p.to_local().add_(0.25)
    out = {"has_before": sharding.has_sharded(path)}
    sharding.save_sharded(agent, path, group)
    sharding.export_pretrained(agent, tmp_path / "exports" / "step-1", rank)  # its parents made too
    out["has_after"] = sharding.has_sharded(path)
    saved = {"model": full(agent.model), "ref": full(agent.ref_model),
             "moments": [full_tensor(s["exp_avg"]) for s in agent.optimizer.state.values()]}
    fresh = make_agent()
    sharding.shard_agent(fresh, group, offload=False, lr=1e-3, weight_decay=0.0)
    sharding.load_sharded(fresh, path, group)
    loaded = {"model": full(fresh.model), "ref": full(fresh.ref_model),
              "moments": [full_tensor(s["exp_avg"]) for s in fresh.optimizer.state.values()]}
    out["model_err"] = max(float((saved["model"][k] - loaded["model"][k]).abs().max()) for k in saved["model"])
    out["ref_err"] = max(float((saved["ref"][k] - loaded["ref"][k]).abs().max()) for k in saved["ref"])
    out["ref_moved"] = max(float((saved["ref"][k] - saved["model"][k]).abs().max()) for k in saved["ref"])
    out["moments"] = (len(saved["moments"]), len(loaded["moments"]),
                      max(float((a - b).abs().max()) for a, b in zip(saved["moments"], loaded["moments"], strict=True)))
    out["weights"] = saved["model"]
    # an agent without a reference (none, or a LoRA base) saves and loads model and optimizer only
    bare, bare_fresh = make_agent(reference=False), make_agent(reference=False)
    for a in (bare, bare_fresh):
        sharding.shard_agent(a, group, offload=False, lr=1e-3, weight_decay=0.0)
    sharding.save_sharded(bare, tmp_path / "bare", group)
    sharding.load_sharded(bare_fresh, tmp_path / "bare", group)
    out["bare"] = sharding.has_sharded(tmp_path / "bare")
    dist.barrier(group)  # rank 0's export is written before any rank returns
    return out


@pytest.mark.model
def test_a_sharded_checkpoint_puts_back_model_optimizer_and_reference_and_exports_hugging_face(tmp_path):
    from transformers import AutoModelForCausalLM

    outs = run_ranks(_checkpoint, tmp_path)
    for out in outs:
        assert (out["has_before"], out["has_after"]) == (False, True)
        assert out["model_err"] == 0.0 and out["ref_err"] == 0.0
        assert out["ref_moved"] >= 0.25  # the reference saved was not the model's weights
        assert out["bare"]
        n_saved, n_loaded, err = out["moments"]
        assert n_saved == n_loaded > 0 and err == 0.0
    export = tmp_path / "exports" / "step-1"
    assert (export / "model.safetensors").is_file() and (export / "tokenizer_config.json").is_file()
    exported = AutoModelForCausalLM.from_pretrained(export)  # the dtype the export records: the agent's float64
    weights = outs[0]["weights"]
    state = exported.state_dict()
    assert set(weights) <= set(state)
    for k, v in weights.items():
        assert state[k].dtype == torch.float64, k
        torch.testing.assert_close(state[k], v, rtol=0, atol=0, msg=k)


def _export_mismatch(rank, group, tmp_path):
    agent = make_agent(reference=False)
    sharding.shard_agent(agent, group, offload=False, lr=1e-3, weight_decay=0.0)
    errors = []
    config = agent.model.config
    n, types = config.num_hidden_layers, list(getattr(config, "layer_types", None) or [])
    for layers in (n - 1, n + 2):  # the twin built from the config lacks the last layer / has two more
        config.num_hidden_layers = layers
        if types:
            config.layer_types = (types + types[-1:] * 2)[:layers]
        try:
            sharding.export_pretrained(agent, tmp_path / "export", rank)
            errors.append(None)
        except RuntimeError as exc:
            errors.append(str(exc))
    return {"errors": errors}


@pytest.mark.model
def test_an_export_that_does_not_match_the_model_is_refused_on_rank_0(tmp_path):
    outs = run_ranks(_export_mismatch, tmp_path)
    unexpected, missing = outs[0]["errors"]
    # keys of the model the twin lacks (unexpected), and keys of the twin the model lacks (missing, not a tied
    # head): each names the first three
    assert unexpected.startswith("agent a: export does not match the model ([], ['model.layers.")
    assert missing.startswith("agent a: export does not match the model (['model.layers.") and missing.endswith(", [])")
    assert unexpected.count("'model.layers.") == missing.count("'model.layers.") == 3
    assert outs[1]["errors"] == [None, None]  # only rank 0 builds and writes the export
    assert not (tmp_path / "export").exists()


def test_only_a_tied_head_may_be_missing_from_an_export():
    from types import SimpleNamespace

    tied, untied = (SimpleNamespace(config=SimpleNamespace(tie_word_embeddings=t)) for t in (True, False))
    unknown = SimpleNamespace(config=SimpleNamespace())  # a config that does not say: not tied
    assert sharding._tied(tied, "lm_head.weight") and sharding._tied(tied, "base_model.model.lm_head.weight")
    assert not sharding._tied(untied, "lm_head.weight") and not sharding._tied(unknown, "lm_head.weight")
    assert not sharding._tied(tied, "model.embed_tokens.weight")


def _export_head_once(rank, group, tmp_path):
    import torch.distributed.checkpoint.state_dict as dcp_state

    gather = dcp_state.get_model_state_dict

    def head_once(model, **kwargs):  # a gather that names a tied parameter once, under the embeddings' key
        state = gather(model, **kwargs)
        state.pop("lm_head.weight", None)  # (rank 0 alone receives the full state)
        return state

    agent = make_agent(reference=False)
    with torch.no_grad():
        want = agent.model(input_ids=rank_ids(0)).logits
    sharding.shard_agent(agent, group, offload=False, lr=1e-3, weight_decay=0.0)
    dcp_state.get_model_state_dict = head_once  # this forked rank's module alone
    sharding.save_sharded(agent, tmp_path / "ckpt", group)  # the worker's order: the shards, then the export
    sharding.export_pretrained(agent, tmp_path / "ckpt", rank)  # into the directory that holds them
    dist.barrier(group)
    return {"logits": want}


@pytest.mark.model
def test_an_export_beside_the_shards_ties_a_head_the_gathered_state_leaves_out(tmp_path):
    from transformers import AutoModelForCausalLM

    out = run_ranks(_export_head_once, tmp_path)[0]
    assert sharding.has_sharded(tmp_path / "ckpt")
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt")
    assert exported.config.tie_word_embeddings
    assert exported.lm_head.weight.data_ptr() == exported.model.embed_tokens.weight.data_ptr()
    with torch.no_grad():
        got = exported(input_ids=rank_ids(0)).logits
    torch.testing.assert_close(got, out["logits"], rtol=1e-12, atol=1e-12)  # float64: the same model


def _lora_export(rank, group, tmp_path):
    torch.manual_seed(0)
    spec = {"r": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": "all-linear"}
    agent = load_agent("a", 0, tiny_agent_path("qwen2-char"), lora=spec)
    for name, p in agent.model.named_parameters():  # B = 0 would make the adapter a no-op
        if "lora_B" in name:
            p.data.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    agent.enable_reference()
    agent.configure_optimizer(lr=1e-3)
    ids = rank_ids(0)
    with torch.no_grad():
        want = agent.model(input_ids=ids).logits
    sharding.shard_agent(agent, group, offload=False, lr=1e-3, weight_decay=0.0)
    sharding.export_pretrained(agent, tmp_path / "lora", rank)
    dist.barrier(group)
    return {"logits": want, "ids": ids}


@pytest.mark.model
def test_a_lora_agent_exports_its_adapter_and_a_merged_model(tmp_path):
    from transformers import AutoModelForCausalLM

    out = run_ranks(_lora_export, tmp_path)[0]
    export = tmp_path / "lora"
    assert (export / "adapter_config.json").is_file() and (export / "tokenizer_config.json").is_file()
    assert (export / "merged" / "tokenizer_config.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(export / "merged")
    with torch.no_grad():
        got = merged(input_ids=out["ids"]).logits
    torch.testing.assert_close(got, out["logits"], rtol=1e-5, atol=1e-5)  # the adapter merged in
