"""Soak: a few hundred steps of a tiny preset, recording after every step the resident memory, open file
descriptors and threads of every process the run has: the trainer, its reward worker processes and, on
Ray, each agent's actor and Ray's own raylet and GCS server. Prints each process's slope (MiB per 100
steps, a least-squares line over the steps after the warm-up) and writes the series as JSON.

The run is a real ``Trainer.train`` (metrics.jsonl, TensorBoard, samples, evaluations every
``--eval-every`` steps, checkpoints every ``--checkpoint-every``), with the reward given as a spec
(``task.reward=numeric``) so that it is scored in worker processes under ``task.reward_timeout_s``
rather than inline. A flat line is what a healthy run shows; a leak of ~1 KiB per answer would show
as several MiB per 100 steps.

    python bench/soak.py --backend local --steps 300 --out soak-local.json
    python bench/soak.py --backend ray --steps 200 --out soak-ray.json
    python bench/soak.py --backend ray --steps 200 --set agents.qwen-char.data_parallel=2   # replicas
    python bench/soak.py ... --set trainer.batch_size=8      # any config override

Figures and their reading: docs/robustness.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

RAY_DAEMONS = ("raylet", "gcs_server")


def sample(proc: psutil.Process) -> dict[str, float] | None:
    """Resident memory (MiB), open file descriptors and threads of one process; None once it is gone."""
    try:
        with proc.oneshot():
            return {"rss_mib": proc.memory_info().rss / 2**20, "fds": proc.num_fds(), "threads": proc.num_threads()}
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def actor_processes(trainer: Any) -> dict[str, psutil.Process]:
    """Ray: every agent's actors, ``actor/<id>`` (``actor/<id>#<rank>`` with data parallel), asked once."""
    if trainer.cfg.backend.name != "ray":
        return {}
    import ray

    found = {}
    for group in trainer.backend.groups:
        for info in ray.get([actor.info.remote() for actor in group]):
            rank = f"#{info['rank']}" if info["world"] > 1 else ""
            found[f"actor/{info['id']}{rank}"] = psutil.Process(info["pid"])
    return found


def processes(trainer: Any, actors: dict[str, psutil.Process]) -> dict[str, psutil.Process]:
    """The run's processes by role: the trainer, reward workers (by slot: a restarted worker keeps its
    slot), agent actors (Ray), Ray's daemons (descendants of this process named raylet / gcs_server)."""
    me = psutil.Process()
    found = {"trainer": me}
    for i, pid in enumerate(trainer.scorer.pids):
        found[f"reward-worker-{i}"] = psutil.Process(pid)
    if actors:
        found.update(actors)
        for child in me.children(recursive=True):
            try:
                name = child.name()
            except psutil.Error:
                continue
            if name in RAY_DAEMONS:
                found[f"ray/{name}"] = child
    return found


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (0 with fewer than two points)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0


def summarise(series: dict[str, dict[str, list[float]]], warmup: int) -> dict[str, dict[str, float]]:
    """Per process: RSS slope in MiB per 100 steps after ``warmup``, and first/last/max of each measure."""
    out = {}
    for role, s in series.items():
        keep = [i for i, step in enumerate(s["step"]) if step > warmup]
        steps = [s["step"][i] for i in keep]
        row: dict[str, float] = {"rss_slope_mib_per_100": 100 * slope(steps, [s["rss_mib"][i] for i in keep]),
                                 "fds_slope_per_100": 100 * slope(steps, [s["fds"][i] for i in keep])}
        for key in ("rss_mib", "fds", "threads"):
            row[f"{key}_first"], row[f"{key}_last"], row[f"{key}_max"] = s[key][0], s[key][-1], max(s[key])
        out[role] = row
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers.utils import logging as hf_logging

    from hacrl.config import load_config
    from hacrl.trainer.trainer import Trainer

    hf_logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    overrides = [f"backend.name={args.backend}", f"trainer.steps={args.steps}", f"trainer.threads={args.threads}",
                 f"trainer.eval_every={args.eval_every}", f"trainer.checkpoint_every={args.checkpoint_every}",
                 f"trainer.eval_size={args.eval_size}", "task.reward=numeric", "task.reward_timeout_s=10",
                 "backend.num_cpus_per_agent=0.5", *args.overrides]
    cfg = load_config(args.preset, overrides=overrides)
    series: dict[str, dict[str, list[float]]] = {}
    step_times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="hacrl-soak-") as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        trainer = Trainer(cfg, run_dir)
        actors = actor_processes(trainer)
        last = time.perf_counter()

        def record(step: int, _metrics: dict[str, float]) -> None:
            nonlocal last
            now = time.perf_counter()
            step_times.append(now - last)
            last = now
            for role, proc in processes(trainer, actors).items():
                measured = sample(proc)
                if measured is None:
                    continue
                s = series.setdefault(role, {"step": [], "pid": [], "rss_mib": [], "fds": [], "threads": []})
                s["step"].append(step)
                s["pid"].append(proc.pid)
                for key, value in measured.items():
                    s[key].append(value)
            if step % 25 == 0:
                rss = {r: round(s["rss_mib"][-1]) for r, s in series.items() if s["step"][-1] == step}
                print(f"step {step}: {sum(step_times[-25:]) / len(step_times[-25:]):.2f} s/step, RSS MiB {rss}",
                      file=sys.stderr, flush=True)

        start = time.perf_counter()
        trainer.train(progress=record)
        wall = time.perf_counter() - start
    return {
        "backend": args.backend, "preset": args.preset, "steps": args.steps, "overrides": overrides,
        "warmup": args.warmup, "threads": args.threads, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu": platform.processor() or platform.machine(), "logical_cpus": os.cpu_count(),
        "torch": torch.__version__, "wall_s": wall, "median_step_s": sorted(step_times)[len(step_times) // 2],
        "summary": summarise(series, args.warmup), "series": series,
    }


def report(result: dict[str, Any]) -> str:
    head = (f"soak: {result['backend']} backend, {result['preset']}, {result['steps']} steps in "
            f"{result['wall_s']:.0f} s (median {result['median_step_s']:.2f} s/step), {result['threads']} torch "
            f"thread(s), CPU capability {result['cpu_capability']}; slopes over steps > {result['warmup']}")
    columns = (f"{'process':<24} {'RSS MiB first→last (max)':>26} {'MiB/100 steps':>14} {'fds first→last':>15} "
               f"{'threads':>10}")
    lines = [head, columns]
    for role, r in result["summary"].items():
        lines.append(f"{role:<24} {r['rss_mib_first']:>9.1f} → {r['rss_mib_last']:>6.1f} ({r['rss_mib_max']:>6.1f}) "
                     f"{r['rss_slope_mib_per_100']:>+14.2f} {r['fds_first']:>7.0f} → {r['fds_last']:<5.0f} "
                     f"{r['threads_first']:>4.0f} → {r['threads_last']:<3.0f}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["local", "ray"], default="local")
    p.add_argument("--preset", default="tiny-test")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=50, help="steps left out of the slopes (allocator, caches warm up)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-size", type=int, default=20)
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--out", type=Path, help="write the series and summary as JSON here")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    args = p.parse_args()
    if args.warmup >= args.steps:
        p.error(f"--warmup {args.warmup} leaves no steps of {args.steps} to fit a slope to")
    result = run(args)
    print(report(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
        print(f"soak: series in {args.out}")


if __name__ == "__main__":
    main()
