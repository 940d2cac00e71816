"""A worker's data-parallel group (``agents[i].data_parallel = W``, Ray only): its address, joining it (and
sharding the agent over it with FSDP), each rank's share of the prompts, the exchange of the ranks' answers, and
a digest of the weights the replicas must agree on.

W workers hold replicas of one agent and form a ``torch.distributed`` group (NCCL on GPUs, Gloo on CPUs). Rank
r answers its contiguous share of the prompts from its own random stream; the ranks exchange their own answers'
tokens so each can build the whole view; in the update each rank runs every W-th micro-batch and gradients are
summed before every optimizer step, so the replicas stay identical (``learner.update_learner``).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import torch

from hacrl.agents.agent import DTYPES, Agent
from hacrl.config import AgentSpec
from hacrl.rollout.base import Sample


def rendezvous_address() -> str:
    """Rank 0: a ``tcp://host:port`` address for the data-parallel group."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        port = sock.getsockname()[1]
    return f"tcp://{_node_ip()}:{port}"


def join_group(agent: Agent, spec: AgentSpec, address: str, rank: int, world: int, resume_from: Path | None) -> Any:
    """Join the agent's data-parallel group (every rank calls it at the same time) and return it; with FSDP, shard
    the agent now that the group exists, a sharded checkpoint's shards going back in."""
    import torch.distributed as dist

    backend = "nccl" if agent.device.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=address, rank=rank, world_size=world)
    group = dist.group.WORLD
    if spec.fsdp:
        from hacrl.learner import sharding

        mixed = spec.fsdp_mixed_precision
        sharding.shard_agent(agent, group, offload=spec.cpu_offload, lr=spec.lr, weight_decay=spec.weight_decay,
                             compute_dtype=DTYPES[mixed] if mixed else None)
        ckpt = resume_from / "agents" / spec.id if resume_from else None
        if ckpt is not None and sharding.has_sharded(ckpt):
            sharding.load_sharded(agent, ckpt, group)
    return group


def my_share(n: int, rank: int, world: int) -> range:
    """Rank ``rank``'s contiguous share of ``n`` prompts.

    >>> [my_share(5, r, 2) for r in range(2)], my_share(1, 1, 2)
    ([range(0, 3), range(3, 5)], range(1, 1))
    """
    per = -(-n // world)
    return range(min(n, rank * per), min(n, (rank + 1) * per))


def gather_samples(samples: list[Sample], group: Any, world: int) -> list[Sample]:
    """Every rank's answers, in rank order (each rank trains on the whole view); ``samples`` without a group."""
    if group is None:
        return samples
    import torch.distributed as dist

    parts: list[Any] = [None] * world
    dist.all_gather_object(parts, samples, group=group)
    return [s for part in parts for s in part]


def weights_digest(model: torch.nn.Module) -> str:
    """A hash of the weights (replicas of one agent must agree; sharded: the full weights, every rank calls it)."""
    import hashlib

    from hacrl.learner.sharding import gather_full

    h = hashlib.sha256()
    gather_full(model)
    for name, p in model.named_parameters():
        h.update(name.encode())
        # a copy: numpy() pins a tensor's storage, which FSDP must free when it reshards
        h.update(p.detach().cpu().flatten().clone().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _node_ip() -> str:
    try:
        import ray

        return str(ray.util.get_node_ip_address())
    except Exception:  # noqa: BLE001 - outside Ray: this host
        return "127.0.0.1"
