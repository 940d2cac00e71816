"""Per-phase time and peak memory of one training step: hacpo vs gspo vs gspo×2, side by side.

Each algorithm runs in its own subprocess (so peak RSS is its own), on the same preset, seed and thread
count; the first step is a warm-up and is not timed. The algorithms run ``--repeats`` times, interleaved
(hacpo, gspo, gspo2x, hacpo, ...), and the table shows each one's median run, so a slow spell of a
shared machine does not land on one algorithm only. Prints the ratios HACPO/GSPO and HACPO/GSPO×2 (the
goal: HACPO ≤ 0.75 × GSPO×2 per step, since it samples half as much) and their range over the repeats.

    python bench/step_time.py [--preset tiny-model] [--steps 4] [--threads 1] [--repeats 3] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def worker(preset: str, algo: str, steps: int, threads: int, overrides: list[str]) -> None:
    import torch
    from transformers.utils import logging as hf_logging

    from hacrl.config import load_config
    from hacrl.trainer.trainer import Trainer, phase_times

    hf_logging.disable_progress_bar()
    torch.set_num_threads(threads)
    cfg = load_config(preset, overrides=[f"algorithm.name={algo}", f"trainer.threads={threads}", *overrides])
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, Path(tmp), sinks=False)
        trainer.step()  # warm-up
        totals: dict[str, float] = {}
        start = time.perf_counter()
        for _ in range(steps):
            for name, v in phase_times(trainer.step()).items():
                totals[name] = totals.get(name, 0.0) + v
        wall = (time.perf_counter() - start) / steps
    per_step = {k: v / steps for k, v in totals.items()}
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"algo": algo, "wall": wall, "phases": per_step, "peak_rss_mb": peak_mb}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="tiny-model")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--algos", default="hacpo,gspo,gspo2x")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.preset, args.worker, args.steps, args.threads, args.overrides)
        return
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    algos = args.algos.split(",")
    runs: dict[str, list[dict]] = {a: [] for a in algos}
    for _ in range(args.repeats):
        for algo in algos:
            cmd = [sys.executable, __file__, "--worker", algo, "--preset", args.preset, "--steps", str(args.steps),
                   "--threads", str(args.threads)] + [x for o in args.overrides for x in ("--set", o)]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
            runs[algo].append(json.loads(out.strip().splitlines()[-1]))
    results = {a: sorted(rs, key=lambda r: r["wall"])[len(rs) // 2] for a, rs in runs.items()}  # the median run
    phases = sorted({k for r in results.values() for k in r["phases"]})
    print(f"preset {args.preset}, {args.steps} timed steps after 1 warm-up, torch threads {args.threads}, "
          f"median of {args.repeats} interleaved runs")
    print(f"{'algo':<8} {'s/step':>8} " + " ".join(f"{ph:>12}" for ph in phases) + f" {'peak RSS MB':>12}")
    for algo, r in results.items():
        print(f"{algo:<8} {r['wall']:>8.3f} " + " ".join(f"{r['phases'].get(ph, 0.0):>12.3f}" for ph in phases)
              + f" {r['peak_rss_mb']:>12.0f}")
    if "hacpo" in results:
        for other in ("gspo", "gspo2x"):
            if other in results:
                time_ratio = results["hacpo"]["wall"] / results[other]["wall"]
                mem_ratio = results["hacpo"]["peak_rss_mb"] / results[other]["peak_rss_mb"]
                each = [a["wall"] / b["wall"] for a, b in zip(runs["hacpo"], runs[other])]
                print(f"hacpo / {other}: time {time_ratio:.2f}x (repeats {min(each):.2f}-{max(each):.2f}), "
                      f"peak memory {mem_ratio:.2f}x")


if __name__ == "__main__":
    main()
