"""An agent's device, checked before it loads: a device this machine has, and a warning where a low precision
would run far slower than float32 on this CPU."""

from __future__ import annotations

import functools
import logging
import time

import torch

from hacrl.agents.agent import DTYPES
from hacrl.config import AgentSpec
from hacrl.errors import InputError

logger = logging.getLogger(__name__)


def check_device(device: str, field: str) -> None:
    """Refuse, with one line naming ``field``, a device torch does not know or this machine does not have."""
    try:
        d = torch.device(device)
    except (RuntimeError, ValueError):
        raise InputError(f"{field}={device!r}: not a torch device; use cpu, cuda, cuda:<n> or mps") from None
    if d.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            build = "" if torch.version.cuda else " (this torch is a CPU-only build)"
            raise InputError(f"{field}={device}: no CUDA device is available here{build}; use cpu")
        if d.index is not None and d.index >= count:
            raise InputError(f"{field}={device}: this machine has {count} CUDA device(s), cuda:0..cuda:{count - 1}; "
                             f"pick one of them")
    elif d.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"{field}={device}: MPS is not available here; use cpu")
    elif d.type not in ("cpu", "cuda", "mps"):
        backend = getattr(torch, d.type, None)
        if backend is None or not getattr(backend, "is_available", lambda: False)():
            raise InputError(f"{field}={device}: no {d.type} device is available here; use cpu")


def warn_slow_cpu_precision(spec: AgentSpec) -> str | None:
    """A CPU agent asked to compute in bfloat16 or float16 (``dtype`` or ``autocast``) on a CPU whose torch
    runs that dtype's matmuls far slower than float32 (no bf16/fp16 matmul instructions: an AVX2 CPU ran
    bf16 ~50× slower, see docs/real-models.md): log one warning line naming the fields and the fix, and
    return it (None when the dtype is fast here, or the agent is not on the CPU)."""
    if torch.device(spec.device).type != "cpu":
        return None
    low = [(f"agents.{spec.id}.{name}", value) for name, value in (("dtype", spec.dtype), ("autocast", spec.autocast),
                                                                   ("fsdp_mixed_precision", spec.fsdp_mixed_precision))
           if value in ("bfloat16", "float16")]
    if not low:
        return None
    slowdown = cpu_matmul_slowdown(low[0][1])
    if slowdown < 3.0:
        return None
    fields = " and ".join(f"{k}={v}" for k, v in low)
    line = (f"{fields}: {low[0][1]} matmuls run {slowdown:.0f}x slower than float32 on this CPU (torch CPU "
            f"capability {torch.backends.cpu.get_cpu_capability()}); on this CPU use dtype=float32 and autocast=null"
            + (" and fsdp_mixed_precision=null" if spec.fsdp_mixed_precision else ""))
    logger.warning(line)
    return line


@functools.cache
def cpu_matmul_slowdown(dtype: str) -> float:
    """Seconds of a [256, 256] × [256, 256] matmul in ``dtype`` over float32's on this CPU (best of 3, one
    thread; a few milliseconds where the dtype is slow, well under one where it is not)."""
    def best(dt: torch.dtype) -> float:
        a, b = torch.randn(256, 256).to(dt), torch.randn(256, 256).to(dt)
        a @ b  # warm-up: kernels chosen, memory touched
        times = []
        for _ in range(3):
            start = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - start)
        return min(times)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return best(DTYPES[dtype]) / max(best(torch.float32), 1e-9)
    finally:
        torch.set_num_threads(threads)
