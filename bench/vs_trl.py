"""Seconds per step: hacrl's ``gspo`` vs TRL's ``GRPOTrainer`` in GSPO mode, same model, prompts and sizes.

One command runs both sides, each in its own fresh subprocess (so neither inherits the other's allocator,
thread pool or warm caches), for every configuration and thread count, and prints s/step of each and the
ratio hacrl / TRL (goal: ≤ 0.8). Needs the bench's optional extra ``trl`` (``pip install trl``; measured
with trl 1.16.0); nothing is downloaded.

    python bench/vs_trl.py                       # 8x8x16 and 16x8x32, 10 timed steps, threads 2 and 1
    python bench/vs_trl.py --configs 8x8x16 --threads 2 --steps 20 --repeats 3

A configuration ``PxGxT`` is P prompts per step, G completions per prompt and T new tokens at most.

Same on both sides
    model      a random-init Qwen2 (hidden 128, intermediate 320, 3 layers, 4 heads, 2 KV heads, tied
               embeddings: 0.53M parameters with a 101-token vocabulary, 0.55M with 260) with hacrl's
               character tokenizer (``hacrl.agents.tiny.build_char_tokenizer``; one token per character,
               checked to decode text back unchanged), built once with ``hacrl.agents.tiny.build_model``
               and saved to a temporary directory that both sides load with ``from_pretrained``; fp32, CPU
    prompts    the first (warm-up + steps)·P problems of hacrl's ``add2`` training stream (seed 0), in order
               (TRL: ``shuffle_dataset=False``); all are 6 characters (``07+85=``), no template, no BOS
    sampling   temperature 1, top-p 1, top-k off, at most T new tokens (a random model rarely samples EOS,
               so nearly every completion has T tokens; the mean is printed as ``tok``)
    reward     ``add2``'s exact-match verifier (``task.reward``), called once per completion
    algorithm  GSPO: sequence-level ratio, group-normalised advantages, ε 3e-4 / 4e-4, no KL (β 0),
               TRL ``loss_type="grpo"`` (per-sequence mean; the default "dapo" weights by length)
    optimizer  ``torch.optim.AdamW`` (TRL ``optim="adamw_torch"``), lr 1e-6 constant, weight decay 0,
               betas (0.9, 0.999), grad-norm clip 1.0; ``--updates`` optimizer updates per generation
               (default 1: one update on all P·G completions in one forward/backward pass). hacrl:
               ``trainer.minibatch_size = P·G/updates``, ``micro_batch_size = P·G``. TRL:
               ``per_device_train_batch_size = P·G/updates`` (TRL counts completions),
               ``steps_per_generation = updates``, ``gradient_accumulation_steps = 1``, ``num_iterations = 1``
    off        TRL: bf16, gradient checkpointing, logging, saving, report_to, tqdm. hacrl: metrics sinks
               (``sinks=False``), sample files (``trainer.log_samples=0``), TensorBoard

One "step" is one generation round: P·G completions generated, scored and trained on with ``--updates``
optimizer updates. With updates=1, TRL skips its old-log-prob forward pass (old = current, ratio 1), and
hacrl takes π_old from the rollout's own scores (T=1, top-p 1), so neither runs an extra forward pass.
With updates>1 TRL runs one (no-grad) forward over the generation batch for π_old and hacrl still uses the
rollout scores (``--set rollout.old_logprobs=recompute`` makes hacrl do the same pass).

Timing: the first ``--warmup`` steps of each side are run and not timed. hacrl: wall time around
``Trainer.step()``: data, rollout (``model.generate`` with per-step scores + per-token log-prob
extraction), reward (decode + score), capability, and the update (view, advantages, forward, loss,
backward, clip, AdamW), plus its metrics. TRL: the interval between the ``on_step_end`` callbacks of the
last warm-up step and the last step, i.e. whole training-loop iterations: data loader, ``_prepare_inputs``
(tokenize, ``model.generate``, decode, reward, advantages, metric gathers), ``compute_loss`` (forward +
loss + metrics), backward, clip, AdamW, scheduler, the (disabled) log/save checks. Columns: ``generate``
is hacrl's rollout phase / TRL's ``_generate`` (of which ``hf.gen`` is time inside the decoding: hacrl's
sampling loop, TRL's ``model.generate``), ``reward`` hacrl's reward phase (decode + score) / TRL's
``_calculate_rewards``, ``fwd`` the training forward (hacrl: ``learner._forward`` in the update, each prompt
once per micro-batch; TRL: ``compute_loss``), ``bwd+opt`` the rest
of the update (backward, clip, AdamW, ...), ``other`` everything else in the step. ``s/step`` is the mean over
the timed steps (the ratio uses it), ``median`` the median step, ``cpu`` the process CPU seconds per step
(steadier than wall time on a shared machine at 1 thread; at 2+ threads it counts OpenMP spinning too),
``tok`` the mean completion length, ``idle`` the CPUs that other work left idle during the second before the
worker started (from /proc/stat). A cell whose thread count exceeds that gets a warning: on a busy machine,
and especially with more torch threads than idle cores, wall times mean little. The load average is printed
at the start and after each worker.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ARCH = "bench-qwen2-0.5m"
ARCH_KWARGS = {"hidden_size": 128, "intermediate_size": 320, "num_hidden_layers": 3, "num_attention_heads": 4,
               "num_key_value_heads": 2}
CLIP_LOW, CLIP_HIGH = 3e-4, 4e-4  # hacrl's GSPO defaults (algorithm.clip_low / clip_high)


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        p, g, t = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected PxGxT, e.g. 8x8x16") from None
    return p, g, t


def build_model_dir(path: Path, seed: int) -> tuple[int, int]:
    """Save the bench model + hacrl's character tokenizer to ``path``; returns (parameters, vocabulary).

    Checks that the tokenizer, reloaded the way both sides load it, decodes text back unchanged (a
    character tokenizer without a joining decoder puts spaces between characters, which would make every
    exact-match reward 0 and the two sides' work differ from a real run)."""
    from transformers import AutoTokenizer, Qwen2Config

    from hacrl.agents import tiny

    tiny.TINY_ARCHS.setdefault(ARCH, (Qwen2Config, ARCH_KWARGS))  # this process only; tiny.py is unchanged
    tok = tiny.build_char_tokenizer()
    model = tiny.build_model(ARCH, tok, seed=seed)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    loaded = AutoTokenizer.from_pretrained(path)
    sample = "07+85=92"
    ids = loaded(sample, add_special_tokens=False)["input_ids"]
    if len(ids) != len(sample) or loaded.decode(ids, skip_special_tokens=True) != sample:
        sys.exit(f"the reloaded character tokenizer does not round-trip {sample!r}: ids {ids}, "
                 f"decoded {loaded.decode(ids)!r}")
    return tiny.num_params(model), len(loaded)


def problems(n: int, seed: int) -> list[Any]:
    import itertools

    from hacrl.data.tasks import get_task

    return list(itertools.islice(get_task("add2").train_problems(seed), n))


class Clock:
    """Accumulates seconds per phase name; ``wrap`` times a callable into a phase."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)

    def wrap(self, name: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.totals[name] += time.perf_counter() - start
        return timed


def _common_setup(threads: int) -> None:
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    torch.set_num_threads(threads)


# ---------------------------------------------------------------- hacrl side

def run_hacrl(a: argparse.Namespace) -> dict[str, Any]:
    import torch

    from hacrl.config import load_config
    from hacrl.learner import update as learner
    from hacrl.rollout import hf as hf_engine
    from hacrl.trainer.trainer import Trainer, phase_times

    _common_setup(a.threads)
    p, g, t = a.shape
    overrides = [
        f"agents=[{{id: m, model: '{a.model_dir}', lr: {a.lr:.6e}}}]",  # YAML 1.1 floats need the dot
        "algorithm.name=gspo", f"algorithm.clip_low={CLIP_LOW}", f"algorithm.clip_high={CLIP_HIGH}",
        f"rollout.rollouts_per_prompt={g}", f"rollout.max_new_tokens={t}",
        "rollout.temperature=1.0", "rollout.top_p=1.0",
        f"trainer.batch_size={p}", f"trainer.minibatch_size={p * g // a.updates}",
        f"trainer.micro_batch_size={p * g}", f"trainer.threads={a.threads}", "trainer.log_samples=0",
        "trainer.eval_size=1", f"trainer.steps={a.warmup + a.steps}",
        f"run.seed={a.seed}", "run.tensorboard=false", *a.overrides,
    ]
    cfg = load_config("tiny-test", overrides=overrides)
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, Path(tmp), sinks=False)
        agent = trainer.agents[0]
        hf_engine._sample_loop = clock.wrap("hf.gen", hf_engine._sample_loop)  # the decoding loop
        agent.model.generate = clock.wrap("hf.gen", agent.model.generate)  # with --set sampler=generate
        learner._forward = clock.wrap("fwd", learner._forward)  # the update's forward only
        for _ in range(a.warmup):
            trainer.step()
        clock.totals.clear()
        phases: dict[str, float] = defaultdict(float)
        walls, tokens, updates = [], [], []
        cpu0 = time.process_time()
        for _ in range(a.steps):
            start = time.perf_counter()
            m = trainer.step()
            walls.append(time.perf_counter() - start)
            for name, v in phase_times(m).items():
                phases[name] += v
            tokens.append(m["agent/m/answer_tokens"])
            updates.append(m["agent/m/optimizer_steps"])
            ratio, clip = m.get("agent/m/self/ratio_mean"), m.get("agent/m/self/clip_frac")
        cpu = time.process_time() - cpu0
    n, wall = a.steps, sum(walls)
    gen, rew, upd, fwd = phases["rollout"], phases["reward"], phases["update"], clock.totals["fwd"]
    cols = {"generate": gen, "hf.gen": clock.totals["hf.gen"], "reward": rew, "fwd": fwd,
            "bwd+opt": upd - fwd, "other": wall - gen - rew - upd}
    return {"side": "hacrl", "s_per_step": wall / n, "median": statistics.median(walls),
            "cpu_per_step": cpu / n, "cols": {k: v / n for k, v in cols.items()}, "tokens": sum(tokens) / n,
            "updates": sum(updates) / n, "ratio_mean": ratio, "clip_frac": clip,
            "threads": torch.get_num_threads(),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


# ---------------------------------------------------------------- TRL side

def add2_exact(completions: list[str], answer: list[str], problem_id: list[str], prompts: list[str],
               **_: Any) -> list[float | None]:
    """hacrl's add2 verifier (exact match after stripping whitespace), one call per completion."""
    from hacrl.data.tasks import Problem, get_task

    task = _TASK.setdefault("add2", get_task("add2"))
    return [task.reward(c, Problem(i, pr, ans).as_sample())
            for c, ans, i, pr in zip(completions, answer, problem_id, prompts, strict=True)]


_TASK: dict[str, Any] = {}


def run_trl(a: argparse.Namespace) -> dict[str, Any]:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    _common_setup(a.threads)
    p, g, t = a.shape
    n, total = a.steps, a.warmup + a.steps  # generation rounds
    rows = [{"prompt": q.prompt, "answer": q.answer, "problem_id": q.id}
            for q in problems(total * p, a.seed)]
    clock = Clock()
    marks: dict[int, tuple[float, dict[str, float], float]] = {}
    window: list[float] = []
    last_metrics: dict[str, list[float]] = {}  # TRL clears its metrics in the final log() of train()
    holder: dict[str, Any] = {}

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.begin = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            marks[state.global_step] = (now, dict(clock.totals), time.process_time())
            if state.global_step > a.warmup * a.updates:
                window.append(now - self.begin)
            last_metrics.update({k: list(v) for k, v in holder["trainer"]._metrics["train"].items()})

    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(
            output_dir=tmp, use_cpu=True, seed=a.seed, bf16=False, fp16=False, gradient_checkpointing=False,
            learning_rate=a.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
            optim="adamw_torch", max_grad_norm=1.0,
            per_device_train_batch_size=p * g // a.updates, gradient_accumulation_steps=1,
            steps_per_generation=a.updates, num_iterations=1, num_generations=g, max_completion_length=t,
            temperature=1.0, top_p=1.0, top_k=0, shuffle_dataset=False, max_steps=total * a.updates,
            loss_type="grpo", importance_sampling_level="sequence", epsilon=CLIP_LOW, epsilon_high=CLIP_HIGH,
            beta=0.0, scale_rewards="group", mask_truncated_completions=False,
            logging_strategy="no", save_strategy="no", report_to="none", log_completions=False,
            disable_tqdm=True, dataloader_num_workers=0, dataloader_pin_memory=False,
        )
        model = AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(a.model_dir)
        trainer = GRPOTrainer(model=model, reward_funcs=add2_exact, args=args, processing_class=tok,
                              train_dataset=Dataset.from_list(rows), callbacks=[Timer()])
        holder["trainer"] = trainer
        for name, attr in (("prepare", "_prepare_inputs"), ("generate", "_generate"),
                           ("reward", "_calculate_rewards"), ("fwd", "compute_loss")):
            setattr(trainer, attr, clock.wrap(name, getattr(trainer, attr)))
        trainer.model.generate = clock.wrap("hf.gen", trainer.model.generate)
        trainer.train()
        completion_len = last_metrics.get("completions/mean_length", [])
        clip = last_metrics.get("clip_ratio/region_mean", [])[-n * a.updates:]
    first, last = a.warmup * a.updates, total * a.updates
    (t0, c0, cpu0), (t1, c1, cpu1) = marks[first], marks[last]
    d = {k: c1.get(k, 0.0) - c0.get(k, 0.0) for k in set(c0) | set(c1)}
    wall = t1 - t0
    per_round = [marks[s + a.updates][0] - marks[s][0] for s in range(first, last, a.updates)]
    cols = {"generate": d["generate"], "hf.gen": d["hf.gen"], "reward": d["reward"], "fwd": d["fwd"],
            "bwd+opt": wall - d["prepare"] - d["fwd"], "other": d["prepare"] - d["generate"] - d["reward"]}
    return {"side": "trl", "s_per_step": wall / n, "median": statistics.median(per_round),
            "cpu_per_step": (cpu1 - cpu0) / n, "cols": {k: v / n for k, v in cols.items()},
            "callback_window": sum(window) / n,
            "tokens": sum(completion_len[-n:]) / n if completion_len else float("nan"),
            "updates": a.updates, "clip_ratio": sum(clip) / len(clip) if clip else None,
            "threads": torch.get_num_threads(), "trl": trl.__version__,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


# ---------------------------------------------------------------- driver

def worker(a: argparse.Namespace) -> None:
    out = run_hacrl(a) if a.worker == "hacrl" else run_trl(a)
    print(json.dumps(out))


def spawn(side: str, a: argparse.Namespace, shape: tuple[int, int, int], threads: int,
          model_dir: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", side, "--shape", "x".join(map(str, shape)),
           "--threads", str(threads), "--steps", str(a.steps), "--warmup", str(a.warmup),
           "--updates", str(a.updates), "--lr", repr(a.lr), "--seed", str(a.seed), "--model-dir", model_dir]
    cmd += [x for o in a.overrides for x in ("--set", o)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error",
           "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"{side} worker failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def idle_cpus(seconds: float = 1.0) -> float | None:
    """CPUs left idle by everything else over ``seconds`` (from /proc/stat, while this bench waits)."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return (os.cpu_count() or 1) * (idle1 - idle0) / max(total1 - total0, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="8x8x16,16x8x32",
                    help="comma-separated PxGxT (prompts x G x new tokens)")
    ap.add_argument("--threads", default="2,1", help="comma-separated torch thread counts")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (generation rounds) per side")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps before timing, per side")
    ap.add_argument("--updates", type=int, default=1,
                    help="optimizer updates per generation round, both sides")
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs per side and cell (order alternates); medians compared")
    ap.add_argument("--goal", type=float, default=0.8, help="hacrl/TRL ratio to meet")
    ap.add_argument("--json", help="also write every result to this file")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="extra hacrl config override (key=value)")
    ap.add_argument("--worker", choices=["hacrl", "trl"], help=argparse.SUPPRESS)
    ap.add_argument("--shape", type=parse_shape, help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        a.threads = int(a.threads)
        worker(a)
        return
    shapes = [parse_shape(s) for s in a.configs.split(",")]
    thread_list = [int(x) for x in a.threads.split(",")]
    for p, _, _ in shapes:
        if p % a.updates:
            sys.exit(f"--updates {a.updates} must divide the prompts per step ({p}): "
                     "minibatches hold whole groups")
    try:
        import trl
    except ImportError:
        sys.exit("this bench needs TRL: pip install trl")
    import torch
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    results: list[dict[str, Any]] = []
    load_before = load()
    with tempfile.TemporaryDirectory() as tmp:
        n_params, vocab = build_model_dir(Path(tmp), a.seed)
        print(f"hacrl gspo vs TRL {trl.__version__} GRPOTrainer (importance_sampling_level=sequence, "
              f"loss_type=grpo); torch {torch.__version__}, transformers {transformers.__version__}, "
              f"Python {platform.python_version()}, {os.cpu_count()} CPUs")
        print(f"model: random-init Qwen2 {n_params:,} parameters, character vocabulary {vocab}, fp32, CPU; "
              f"lr {a.lr:g} "
              f"constant; {a.updates} optimizer update(s) per step on both sides; {a.warmup} warm-up + "
              f"{a.steps} timed steps per side, each side in its own process; load average (1/5/15 min) at "
              f"start {load_before}", flush=True)
        header = (f"{'PxGxT':<9} {'thr':>3} {'side':<6} {'s/step':>7} {'median':>7} {'cpu':>7} {'generate':>8} "
                  f"{'hf.gen':>7} {'reward':>7} {'fwd':>7} {'bwd+opt':>7} {'other':>7} {'tok':>5} "
                  f"{'RSS MB':>6} {'idle':>4} load after")
        summary = []
        for threads in thread_list:
            for shape in shapes:
                cell: dict[str, list[dict]] = {"hacrl": [], "trl": []}
                for r in range(a.repeats):
                    order = ("trl", "hacrl") if r % 2 == 0 else ("hacrl", "trl")
                    for side in order:
                        idle = idle_cpus()
                        res = spawn(side, a, shape, threads, tmp)
                        res.update(shape="x".join(map(str, shape)), threads_requested=threads, repeat=r,
                                   idle_cpus_before=idle, load=load())
                        cell[side].append(res)
                        results.append(res)
                print(header)
                med, cpu = {}, {}
                for side in ("trl", "hacrl"):
                    runs = cell[side]
                    med[side] = statistics.median(x["s_per_step"] for x in runs)
                    cpu[side] = statistics.median(x["cpu_per_step"] for x in runs)
                    for x in runs:
                        c = x["cols"]
                        idle = "?" if x["idle_cpus_before"] is None else f"{x['idle_cpus_before']:.1f}"
                        print(f"{x['shape']:<9} {x['threads']:>3} {side:<6} {x['s_per_step']:>7.3f} "
                              f"{x['median']:>7.3f} {x['cpu_per_step']:>7.3f} {c['generate']:>8.3f} "
                              f"{c['hf.gen']:>7.3f} {c['reward']:>7.4f} {c['fwd']:>7.3f} {c['bwd+opt']:>7.3f} "
                              f"{c['other']:>7.3f} {x['tokens']:>5.1f} {x['peak_rss_mb']:>6.0f} "
                              f"{idle:>4} "
                              f"{x['load']}")
                ratio = med["hacrl"] / med["trl"]
                verdict = "meets" if ratio <= a.goal else "misses"
                line = (f"{'x'.join(map(str, shape))} threads {threads}: hacrl {med['hacrl']:.3f} s/step, "
                        f"TRL {med['trl']:.3f} s/step, hacrl/TRL = {ratio:.2f} "
                        f"({verdict} the goal ≤ {a.goal}); "
                        f"CPU-time ratio {cpu['hacrl'] / cpu['trl']:.2f}")
                idles = [x["idle_cpus_before"] for x in cell["hacrl"] + cell["trl"]]
                if None not in idles and min(idles) < threads - 0.25:
                    line += (f" [warning: only {min(idles):.1f} idle CPUs before a worker for {threads} "
                             f"threads: contention-bound, do not read as a speed result]")
                print(line + "\n", flush=True)
                summary.append(line)
        print("summary:")
        for line in summary:
            print("  " + line)
        print(f"load average at end {load()}")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
