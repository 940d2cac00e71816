"""Local vs Ray backend, side by side: seconds per step and how much the agents' work overlapped.

Each backend trains the same preset with the same seed in its own subprocess, every agent on one torch
thread (the Ray backend: an actor with one CPU per agent), and the first step is a warm-up. Prints
s/step, the rollout and update phase times, and the overlap of each phase — the agents' busy seconds
summed over the phase's wall seconds (1: one after the other; N: N agents at once) — and checks that
both backends logged the same metrics (timings aside).

    python bench/backends.py [--preset tiny-model] [--steps 4] [--set key=value ...]

Needs the ``ray`` extra and as many idle cores as agents for the overlap to show.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def worker(preset: str, backend: str, steps: int, overrides: list[str]) -> None:
    from transformers.utils import logging as hf_logging

    from hacrl.config import load_config
    from hacrl.trainer.trainer import Trainer

    hf_logging.disable_progress_bar()
    cfg = load_config(preset, overrides=[f"backend.name={backend}", "trainer.threads=1",
                                         "backend.num_cpus_per_agent=1", *overrides])
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        trainer = Trainer(cfg, Path(tmp), sinks=False)
        ready = time.perf_counter() - start
        try:
            trainer.step()  # warm-up
            records, walls = [], []
            for _ in range(steps):
                t0 = time.perf_counter()
                records.append(trainer.step())
                walls.append(time.perf_counter() - t0)
        finally:
            trainer.close()
    mean = {k: sum(r[k] for r in records) / steps for k in records[0] if k.startswith("timing/")}
    same = [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in records]
    print(json.dumps({"backend": backend, "ready_s": ready, "s_per_step": sum(walls) / steps, "timing": mean,
                      "metrics": same}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="tiny-model")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.preset, args.worker, args.steps, args.overrides)
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    results = {}
    for backend in ("local", "ray"):
        cmd = [sys.executable, __file__, "--worker", backend, "--preset", args.preset, "--steps", str(args.steps),
               *[x for o in args.overrides for x in ("--set", o)]]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
        results[backend] = json.loads(out.strip().splitlines()[-1])
    print(f"preset {args.preset}, {args.steps} timed steps after 1 warm-up, 1 torch thread per agent, "
          f"{os.cpu_count()} CPUs")
    print(f"{'backend':<8} {'start s':>8} {'s/step':>8} {'rollout':>8} {'overlap':>8} {'update':>8} {'overlap':>8}")
    for name, r in results.items():
        t = r["timing"]
        print(f"{name:<8} {r['ready_s']:>8.1f} {r['s_per_step']:>8.3f} {t['timing/rollout']:>8.3f} "
              f"{t['timing/rollout_overlap']:>8.2f} {t['timing/update']:>8.3f} {t['timing/update_overlap']:>8.2f}")
    ratio = results["ray"]["s_per_step"] / results["local"]["s_per_step"]
    same = results["ray"]["metrics"] == results["local"]["metrics"]
    print(f"ray / local: {ratio:.2f}x time per step; same metrics: {same}")


if __name__ == "__main__":
    main()
