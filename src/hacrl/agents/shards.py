"""Reading a sharded (FSDP2) agent's weights whole, for whoever needs them beside the learner: the rollout
engines push them into vLLM a decoder layer at a time (``hacrl.rollout.vllm.weight_pieces``), the plan counts
the layers. Sharding a model, its collectives for training and its checkpoints are ``hacrl.learner.sharding``;
these functions sit below it (the agents layer) so that the rollout layer reads shards without importing the
learner.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn


def is_sharded(model: Any) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks (one FSDP unit each): the classes a Hugging Face model lists in
    ``_no_split_modules``, else the children of its ``ModuleList``s."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(base, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        layers = [c for m in model.modules() if isinstance(m, nn.ModuleList) for c in m]
    return layers


def is_gathered(model: Any) -> bool:
    """Whether ``hacrl.learner.sharding.gather_full`` holds the full weights (no collective in a forward pass)."""
    return bool(getattr(model, "_hacrl_gathered", False))


def full_tensor(p: torch.Tensor) -> torch.Tensor:
    """The whole of parameter ``p``: a sharded one (``DTensor``) all-gathered — a collective, every rank of
    its mesh calls it — a plain one (unsharded, or its unit gathered by ``sharding.gather_full``) as it is."""
    from torch.distributed.tensor import DTensor

    if not isinstance(p, DTensor):
        return p.detach()
    local = p.to_local()
    if local.device.type != p.device_mesh.device_type:  # cpu_offload: the shard lives in host memory
        local = local.to(p.device_mesh.device_type)
        p = DTensor.from_local(local, p.device_mesh, p.placements, shape=p.shape, stride=p.stride())
    return p.full_tensor().detach()


def full_pieces(model: nn.Module) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """The model's whole parameters (its ``named_parameters`` names) one piece at a time: a decoder layer
    (one FSDP unit) per piece, each parameter outside them (embeddings, final norm, LM head) a piece of its
    own, gathered with :func:`full_tensor` just before the piece is yielded; a tied parameter comes once,
    under each of its names (``lm_head.weight`` beside ``model.embed_tokens.weight``: vLLM's in-place
    reload needs both). Nothing here keeps a piece once the caller asks for the next one, so a caller that
    drops it holds at most one piece of gathered tensors. Collective for a sharded model: every rank must
    iterate to the end, in step."""
    owners = {id(p): prefix for prefix, layer in _named_layers(model) for p in layer.parameters()}
    aliases: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(p), []).append(name)
    piece: list[tuple[str, torch.Tensor]] = []
    key = None
    for name, p in model.named_parameters():
        owner = owners.get(id(p), name)
        if piece and owner != key:
            yield piece
            piece = []  # dropped before the next piece is gathered
        key = owner
        full = full_tensor(p)
        piece += [(alias, full) for alias in aliases[id(p)]]
        del full
    if piece:
        yield piece


def _named_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    layers = {id(m) for m in decoder_layers(model)}
    return [(n, m) for n, m in model.named_modules() if id(m) in layers]
