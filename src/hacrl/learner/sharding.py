"""Sharded agents: one agent's W data-parallel replicas shard its parameters, gradients and AdamW state
with PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``) instead of each holding all of them.

Layout (``agents.<id>.fsdp: true``, ``data_parallel: W``): every decoder layer is one FSDP unit and the
rest of the model (embeddings, final norm, LM head) the root unit, all sharded over the agent's W ranks
(gloo on CPU, NCCL on GPU). A rank keeps 1/W of every parameter (dim-0 shards, ``DTensor``), of its
gradient and of AdamW's two moments; a layer's full weights exist only while it computes (all-gathered
in forward and again in backward, reduce-scattered gradients after). A full-weight agent's frozen KL
reference is sharded the same way; a LoRA agent's reference is its base with the adapter off (no copy),
and only the adapter's parameters have gradients and optimizer state. ``cpu_offload`` keeps the shards,
their gradients and the optimizer step in host memory (FSDP2's ``CPUOffloadPolicy``).
``fsdp_mixed_precision: bfloat16`` adds FSDP2's ``MixedPrecisionPolicy(param_dtype=bfloat16,
reduce_dtype=float32)`` to every unit (policy and reference alike): the float32 shards are cast to bf16
before each all-gather (half the gathered memory and traffic), the layers compute in bf16 (their saved
activations are bf16), each unit's bf16 gradient is cast to float32 before the reduce-scatter, and the
shards, their gradients and AdamW's moments stay float32: the master weights an lr of 1e-6 still moves
(``tests/integration/test_mixed_precision.py``). Generation's gathered weights are bf16 too. Unlike
``autocast``, a layer's ops take bf16 tensors (where the model's code upcasts, as Qwen's RMSNorm does,
it still does); the log-probs are read from the bf16 logits in float32 chunks (``hacrl.core.logprobs``).

Departures from a textbook FSDP loop, each forced by how hacrl trains:

- Ranks run different micro-batches (round-robin, possibly one fewer on some ranks). Every forward and
  backward is a collective under FSDP, so a rank short of a micro-batch runs a *padding pass*: a real
  micro-batch with its loss multiplied by 0 (zero gradient, the same collectives); its metrics are
  dropped. Gradients are reduce-scattered after every micro-batch and summed (divide factor 1), so the
  step equals one process's step on the whole minibatch (tested in float64 against the unsharded one).
- Generation (the ``hf`` engine, π_old recomputation, evaluation) runs different prompts and lengths on
  each rank, so it cannot issue per-layer collectives. :func:`gather_full` all-gathers every unit once
  (each rank then holds the full weights, as ``summon_full_params`` would) and generation runs with no
  collective at all; the worker gathers when it wakes its engine (before rollout and evaluation, and
  after the update for the ``hf`` engine) and reshards with :func:`reshard_full` before training and
  saving. The ``vllm`` engine has a copy of its own: after the update the worker leaves the model
  sharded and the engine's weight push reads it through :func:`hacrl.agents.shards.full_pieces`, one
  decoder layer (one FSDP unit) all-gathered at a time (``DTensor.full_tensor``, every rank in step),
  pushed into that rank's engine and dropped before the next (``tests/rollout/test_vllm_sharded_cpu.py``
  counts the bytes).
- Checkpoints: :func:`save_sharded` writes model, optimizer and reference shards with
  ``torch.distributed.checkpoint`` (``sharded/``, every rank its part) and :func:`export_pretrained`
  gathers the weights on rank 0 into an ordinary Hugging Face checkpoint beside it (LoRA: adapter plus
  ``merged/``), which is what ``from_pretrained``, ``hacrl eval`` and a resume's model load read.

The unsharded replicas (``fsdp: false``) keep plain modules and sum their gradients in place with one
``all_reduce`` per parameter (:func:`sum_replica_gradients`): no second, flat copy of the gradients.

Tests: ``tests/learner/test_sharding.py`` (each helper on 2 forked gloo ranks, seconds) and
``tests/integration/test_sharded.py`` (the whole sharded update, checkpoint and export against the unsharded
ones, LoRA and CPU offload; spawned processes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hacrl.agents.shards import decoder_layers, is_sharded

SHARDED_DIR = "sharded"


def _mesh(group: Any, device: torch.device) -> Any:
    from torch.distributed.device_mesh import DeviceMesh

    return DeviceMesh.from_group(group, device.type)


def mixed_precision_policy(compute: torch.dtype | None) -> Any:
    """FSDP2's policy for ``compute`` (``agents.<id>.fsdp_mixed_precision``): parameters all-gathered and
    computed in ``compute``, gradients cast to float32 before they are reduce-scattered, the sharded
    parameters (the master weights AdamW steps) left in their own dtype. ``None``: no policy (the
    parameters' own dtype throughout)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if compute is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32)


def shard_module(model: nn.Module, group: Any, device: torch.device, *, offload: bool, root_reshard: bool,
                 compute_dtype: torch.dtype | None = None) -> None:
    """``fully_shard`` every decoder layer, then the root, over ``group``; gradients summed across ranks;
    with ``compute_dtype`` FSDP2's mixed precision (:func:`mixed_precision_policy`)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, OffloadPolicy, fully_shard

    mesh = _mesh(group, device)
    policy = CPUOffloadPolicy(pin_memory=device.type == "cuda") if offload else OffloadPolicy()
    mp = mixed_precision_policy(compute_dtype)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, offload_policy=policy, mp_policy=mp, reshard_after_forward=True)
    fully_shard(model, mesh=mesh, offload_policy=policy, mp_policy=mp, reshard_after_forward=root_reshard)
    if offload:  # the shards live in host memory; inputs go where the layers compute
        model.compute_device = device  # type: ignore[assignment]  # an attribute of ours on the module
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)  # sum, not mean: each rank's loss is its share of the minibatch
            m.set_force_sum_reduction_for_comms(True)  # plain SUM (gloo has no PREMUL_SUM for float32)


def shard_agent(agent: Any, group: Any, *, offload: bool, lr: float, weight_decay: float,
                compute_dtype: torch.dtype | None = None) -> None:
    """Shard ``agent``'s model (and a full-weight reference copy) over ``group`` and rebuild its AdamW
    over the sharded parameters (so its state is sharded too); ``compute_dtype``: bf16 mixed precision
    for both (float32 master shards, gradients and AdamW state)."""
    from hacrl.agents.lora import AdapterDisabledReference

    device = agent.device
    shard_module(agent.model, group, device, offload=offload, root_reshard=False, compute_dtype=compute_dtype)
    if agent.ref_model is not None and not isinstance(agent.ref_model, AdapterDisabledReference):
        shard_module(agent.ref_model, group, device, offload=offload, root_reshard=True, compute_dtype=compute_dtype)
    agent.configure_optimizer(lr=lr, weight_decay=weight_decay)


def _fsdp_modules(model: nn.Module) -> list[Any]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def gather_full(model: Any) -> None:
    """All-gather every FSDP unit once (in the same order on every rank) and keep the full weights until
    :func:`reshard_full`: forward passes then issue no collective, so ranks may generate different
    prompts and lengths. A no-op for an unsharded or already gathered model."""
    if not is_sharded(model) or getattr(model, "_hacrl_gathered", False):
        return
    model.set_reshard_after_forward(False)
    for m in _fsdp_modules(model):
        m.unshard()
    model._hacrl_gathered = True


def reshard_full(model: Any) -> None:
    """Back to 1/W of the weights per rank after :func:`gather_full` (no collective)."""
    if not is_sharded(model) or not getattr(model, "_hacrl_gathered", False):
        return
    for m in _fsdp_modules(model):
        m.reshard()
    model.set_reshard_after_forward(True)
    model.set_reshard_after_forward(False, recurse=False)  # the root stays gathered from forward to backward
    model._hacrl_gathered = False


@contextlib.contextmanager
def full_weights(model: Any) -> Iterator[None]:
    """:func:`gather_full` inside, :func:`reshard_full` on exit."""
    gather_full(model)
    try:
        yield
    finally:
        reshard_full(model)


def sum_replica_gradients(model: nn.Module, group: Any) -> None:
    """Unsharded replicas: sum every trainable parameter's gradient across ``group`` in place (one
    asynchronous ``all_reduce`` per tensor, no flat copy); a rank without a gradient adds zeros."""
    works = []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        works.append(dist.all_reduce(p.grad, op=dist.ReduceOp.SUM, group=group, async_op=True))
    for w in works:
        w.wait()


def clip_grad_norm(model: nn.Module, max_norm: float) -> float:
    """``clip_grad_norm_`` over (possibly sharded, ``DTensor``) gradients: the norm of the whole gradient."""
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return 0.0
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    return float(norm)


def local_numel(tensors: Any) -> int:
    """Elements this rank holds of ``tensors`` (a ``DTensor`` counts its local shard)."""
    total = 0
    for t in tensors:
        total += (t.to_local() if hasattr(t, "to_local") else t).numel()
    return total


def optimizer_numel(optimizer: torch.optim.Optimizer) -> int:
    """Elements of the optimizer's tensor state held by this rank (AdamW: two moments per parameter)."""
    return local_numel(v for s in optimizer.state.values() for v in s.values()
                       if isinstance(v, torch.Tensor) and v.dim() > 0)


# ---- checkpoints ------------------------------------------------------------------------------------

def _states(agent: Any) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    from hacrl.agents.lora import AdapterDisabledReference

    model_sd, optim_sd = get_state_dict(agent.model, agent.optimizer)
    states = {"model": model_sd, "optim": optim_sd}
    if agent.ref_model is not None and not isinstance(agent.ref_model, AdapterDisabledReference):
        states["ref"] = get_model_state_dict(agent.ref_model)
    return states


def save_sharded(agent: Any, path: Path, group: Any) -> None:
    """Model, optimizer (and reference) shards into ``path/sharded`` (collective: every rank calls it)."""
    import torch.distributed.checkpoint as dcp

    dcp.save(_states(agent), checkpoint_id=str(path / SHARDED_DIR), process_group=group)


def load_sharded(agent: Any, path: Path, group: Any) -> None:
    """Put the shards saved by :func:`save_sharded` back (collective); the model must be sharded the
    same way (the same W)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    states = _states(agent)
    dcp.load(states, checkpoint_id=str(path / SHARDED_DIR), process_group=group)
    set_state_dict(agent.model, agent.optimizer, model_state_dict=states["model"], optim_state_dict=states["optim"])
    if "ref" in states:
        set_model_state_dict(agent.ref_model, states["ref"])


def has_sharded(path: Path) -> bool:
    return (path / SHARDED_DIR / ".metadata").is_file()


def export_pretrained(agent: Any, path: Path, rank: int) -> None:
    """Gather the full weights (collective) and, on rank 0, write an ordinary Hugging Face checkpoint
    of the agent into ``path`` (a LoRA agent: adapter and ``merged/``), with its tokenizer."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    full = get_model_state_dict(agent.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank != 0:
        return
    plain = _plain_twin(agent)
    missing, unexpected = plain.load_state_dict(full, strict=False, assign=True)
    if unexpected or any(not _tied(plain, k) for k in missing):
        raise RuntimeError(f"agent {agent.id}: export does not match the model ({missing[:3]}, {unexpected[:3]})")
    plain.tie_weights()
    path.mkdir(parents=True, exist_ok=True)
    from hacrl.agents.lora import is_lora, save_lora

    if is_lora(plain):
        save_lora(plain, path, agent.tokenizer)
    else:
        plain.save_pretrained(path)
    agent.tokenizer.save_pretrained(path)


def _tied(model: nn.Module, key: str) -> bool:
    return key.endswith("lm_head.weight") and bool(getattr(model.config, "tie_word_embeddings", False))


def _plain_twin(agent: Any) -> Any:  # a PreTrainedModel (or a PEFT model) on the meta device
    """An unsharded, weightless (meta) copy of the agent's architecture (with the same LoRA adapters). Its
    dtype is the one of the weights :func:`export_pretrained` assigns into it; a LoRA model answers
    ``config`` with its base model's."""
    from transformers import AutoModelForCausalLM

    from hacrl.agents.lora import is_lora

    model = agent.model
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(model.config)
        if is_lora(model):
            import peft

            plain = peft.get_peft_model(plain, model.peft_config["default"])
    return plain
