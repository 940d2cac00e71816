"""Lock-step against asynchronous (``trainer.mode=async``) on a pair whose step costs differ at least 2× (issue #25,
part 6): idle share, updates per agent and held-out greedy accuracy at equal wall-clock time and at equal steps.

The pair is ``tiny-size``'s: ``small`` (builtin:qwen2-char-small, 0.31M parameters) is the fast agent; the slow one
is ``large`` (builtin:qwen2-char, 4 layers) deepened here by ``--extra-layers`` identity layers — copies of its
last layer with the attention and MLP output projections zeroed, so the deep model computes exactly the shipped
model's function (checked on the spot) at about twice its cost, and the new layers train from there. Ray, one CPU
and one torch thread per agent (``ray.init(num_cpus=agents)`` in this process; the driver — scoring, the pool —
shares the machine with them in both modes).

Per seed, one lock-step run then one asynchronous run, both from the same weights and prompt stream:

- lock-step: ``--steps`` N steps; W = the sum of their wall seconds (evaluations excluded);
- async (``async.bound``, ``async.group_wait_s`` from the flags): trained until its own training clock reaches W
  (evaluations excluded; the calls in flight then finish — a cut, as the loop's checkpoints do), every agent
  evaluated there (*equal wall-clock*); and each agent evaluated when its version first reaches N, going on
  after the cut if the slow one had not (*equal steps*);
- held-out greedy accuracy on ``--eval-size`` problems per agent before training and at those points, problem by
  problem; idle share = 1 − the agent's worker busy seconds (its rollouts' and updates' ``busy_s``) over the
  training wall time, per agent, as hacrl logs it (``agent/<id>/async/idle_frac``) — measured the same way in
  both modes, evaluation pauses excluded from both.

The step cost of each agent is measured in the lock-step runs (rollout and update busy seconds per step). The
accuracy table pairs async − lock-step per seed (mean ± se, t-test: ``hacrl.report.stats.paired_difference``)
and per (seed, problem) (95% bootstrap interval: ``paired_bootstrap``, as ``hacrl compare``).

    python bench/async_pace.py --seeds 3 --steps 40 --output results/async-pace
    python bench/async_pace.py --seeds 1 --steps 2 --eval-size 8 --backend local --output /tmp/pace  # smoke
    python bench/async_pace.py --tables results/async-pace/async_pace.json --only-seeds 0,1,2  # re-tabulate

Writes ``<output>/async_pace.json`` (every raw number: per seed, mode and agent the timings, versions, idle shares,
per-problem rewards) and prints the step costs, the idle-share table and the accuracy table. Results:
docs/results/async.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FAST, SLOW = "small", "large"


# ---- the pair -------------------------------------------------------------------------------------------

def build_deep_model(dst: Path, extra_layers: int) -> dict[str, Any]:
    """builtin:qwen2-char with ``extra_layers`` identity layers appended (attention o_proj and MLP down_proj of
    each new layer zero: the residual stream passes through unchanged); checks the logits equal the original's."""
    import torch
    from transformers import AutoModelForCausalLM

    from hacrl.backends.resolve import resolve_model_path

    src = resolve_model_path("builtin:qwen2-char")
    base = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    config = base.config
    n = config.num_hidden_layers
    config.num_hidden_layers = n + extra_layers
    if getattr(config, "layer_types", None):
        config.layer_types = list(config.layer_types) + [config.layer_types[-1]] * extra_layers
    deep = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = base.state_dict()
    last = {k.removeprefix(f"model.layers.{n - 1}."): v for k, v in state.items()
            if k.startswith(f"model.layers.{n - 1}.")}
    for i in range(n, n + extra_layers):
        for k, v in last.items():
            zero = k.startswith(("self_attn.o_proj.", "mlp.down_proj."))
            state[f"model.layers.{i}.{k}"] = torch.zeros_like(v) if zero else v.clone()
    deep.load_state_dict(state, strict=True)
    ids = torch.randint(0, config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        if not torch.allclose(deep(ids).logits, base(ids).logits, atol=1e-5):
            raise RuntimeError("the deepened model does not compute the shipped model's function")
    deep.save_pretrained(dst)
    for f in src.iterdir():
        if f.name.startswith(("tokenizer", "generation_config")):
            shutil.copy(f, dst / f.name)
    params = [sum(p.numel() for p in m.parameters()) for m in (base, deep)]
    return {"layers": [n, n + extra_layers], "params": params}


def make_config(args: argparse.Namespace, model_dir: Path, seed: int, mode: str) -> Any:
    from hacrl.config import load_config

    sets = [f"agents.{SLOW}.model={model_dir}", f"run.seed={seed}", f"trainer.mode={mode}",
            f"backend.name={args.backend}", "backend.num_cpus_per_agent=1", "trainer.threads=1",
            f"trainer.steps={args.steps}", "trainer.eval_every=0", "trainer.checkpoint_every=0",
            f"trainer.eval_size={args.eval_size}", "run.tensorboard=false",
            f"async.bound={args.bound}", f"async.group_wait_s={args.group_wait}", *args.overrides]
    return load_config("tiny-size", None, sets)


# ---- one run of each mode -------------------------------------------------------------------------------

class Clock:
    """Training seconds: wall time since start minus the evaluation pauses. An agent evaluated mid-run pauses
    the clock but not its partner's call in flight: ``agent_wall(k)`` is the wall time minus k's own pauses,
    the time k's worker could have trained, which its idle share is measured against."""

    def __init__(self, n: int) -> None:
        self.start, self.paused, self.own = time.perf_counter(), 0.0, [0.0] * n

    def __call__(self) -> float:
        return time.perf_counter() - self.start - self.paused

    def agent_wall(self, k: int) -> float:
        return time.perf_counter() - self.start - self.own[k]

    def pause(self, k: int, seconds: float) -> None:
        self.paused += seconds
        self.own[k] += seconds


def evaluate(t: Any, k: int, clock: Clock | None = None) -> dict[str, Any]:
    """Agent k's greedy answers to the held-out problems, scored: accuracy and the rewards in the order of
    ``t.eval_problems`` (the ids are written once, in the JSON's ``eval_ids``). The seconds it takes are taken
    off ``clock``."""
    from hacrl.rollout import SamplingParams
    from hacrl.trainer.evaluation import score_answers

    start = time.perf_counter()
    params = SamplingParams(n=1, max_new_tokens=t.cfg.rollout.max_new_tokens, greedy=True)
    handle = t.backend.submit_generate_answers(k, [p.prompt for p in t.eval_problems], params)
    _, answers = t.backend.wait_any([handle])
    res, records = score_answers(t.agent_ids[k], t.eval_problems, answers, t.score)
    if clock is not None:
        clock.pause(k, time.perf_counter() - start)
    return {"acc": res.greedy_acc, "rewards": list(records.reward)}


def run_lockstep(cfg: Any, run_dir: Path) -> dict[str, Any]:
    from hacrl.trainer.trainer import Trainer

    run_dir.mkdir(parents=True)
    t = Trainer(cfg, run_dir, sinks=False)
    try:
        start = {a: evaluate(t, k) for k, a in enumerate(t.agent_ids)}
        steps, wall = [], 0.0
        for _ in range(cfg.trainer.steps):
            t0 = time.perf_counter()
            m = t.step()
            wall += time.perf_counter() - t0
            steps.append({"wall": time.perf_counter() - t0, **{
                f"{phase}/{a}": m[f"timing/{phase}/{a}"] for phase in ("rollout", "update") for a in t.agent_ids}})
        final = {a: evaluate(t, k) for k, a in enumerate(t.agent_ids)}
        ids = [p.id for p in t.eval_problems]
    finally:
        t.close()
    busy = {a: sum(s[f"rollout/{a}"] + s[f"update/{a}"] for s in steps) for a in t.agent_ids}
    return {"wall_s": wall, "steps": steps, "start": start, "busy_s": busy, "eval_ids": ids,
            "agents": {a: {"idle": 1 - busy[a] / wall, "updates_at_wall": cfg.trainer.steps,
                           "updates": cfg.trainer.steps, "at_wall": final[a], "at_steps": final[a]}
                       for a in t.agent_ids}}


def run_async(cfg: Any, run_dir: Path, wall_budget: float) -> dict[str, Any]:
    """Trained until the training clock reaches ``wall_budget`` (every agent evaluated at that cut) and until
    every agent has made ``trainer.steps`` updates (each evaluated when it gets there)."""
    from hacrl.trainer.trainer import Trainer

    n_steps = cfg.trainer.steps
    run_dir.mkdir(parents=True)
    t = Trainer(cfg, run_dir, sinks=False)
    out: dict[str, Any] = {"agents": {a: {} for a in t.agent_ids}, "updates": []}
    try:
        loop, clock = t.async_loop(), Clock(len(t.agent_ids))
        loop.started = time.perf_counter()

        def on_update(_step: int, k: int, line: dict[str, float]) -> None:
            a = t.agent_ids[k]
            out["updates"].append({"agent": a, "clock": clock(), "version": loop.versions[k], **{
                key: v for key, v in line.items() if key.startswith((f"agent/{a}/async/", f"agent/{a}/staleness/"))
                or key in (f"timing/rollout/{a}", f"timing/update/{a}")}})
            if loop.versions[k] == n_steps:
                out["agents"][a].update(at_steps=evaluate(t, k, clock), clock_at_steps=clock())

        loop.run_until(lambda: clock() >= wall_budget, on_update)
        busy = [a.busy for a in loop.agents]
        out["wall_s"], out["busy_s"] = clock(), dict(zip(t.agent_ids, busy, strict=True))
        walls = [clock.agent_wall(k) for k in range(len(t.agent_ids))]
        out["eval_pauses_s"] = list(clock.own)  # mid-run evaluations before the cut (equal steps)
        for k, a in enumerate(t.agent_ids):
            out["agents"][a].update(idle=1 - busy[k] / walls[k], wall_s=walls[k],
                                    updates_at_wall=loop.versions[k], at_wall=evaluate(t, k, clock))
        if min(loop.versions) < n_steps:  # the slow agent goes on to trainer.steps
            loop.resume_calls()
            loop.run_until(lambda: min(loop.versions) >= n_steps, on_update)
        for k, a in enumerate(t.agent_ids):
            out["agents"][a]["updates"] = loop.versions[k]
        out["pool"] = loop.pool.accounting()
    finally:
        t.close()
    return out


# ---- the tables -----------------------------------------------------------------------------------------

def _ms(values: list[float], fmt: str = ".3f") -> str:
    from hacrl.report.stats import mean_sd

    mean, sd = mean_sd(values)
    return "n/a" if mean is None else format(mean, fmt) + ("" if sd is None else f" ± {format(sd, fmt)}")


def step_costs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per agent the mean rollout and update busy seconds per step (lock-step) and per round (async), over
    seeds; the slow/fast ratios of lock-step's."""
    out: dict[str, Any] = {"lockstep": {}, "async": {}}
    for a in (FAST, SLOW):
        steps = [s for r in runs for s in r["lockstep"]["steps"]]
        rounds = [u for r in runs for u in r["async"]["updates"] if u["agent"] == a]
        out["lockstep"][a] = {ph: sum(s[f"{ph}/{a}"] for s in steps) / len(steps) for ph in ("rollout", "update")}
        out["async"][a] = {ph: sum(u[f"timing/{ph}/{a}"] for u in rounds) / len(rounds)
                           for ph in ("rollout", "update")}
        for mode in ("lockstep", "async"):
            out[mode][a]["step"] = out[mode][a]["rollout"] + out[mode][a]["update"]
    lock = out["lockstep"]
    out["ratio"] = {ph: lock[SLOW][ph] / lock[FAST][ph] for ph in ("rollout", "update", "step")}
    return out


def accuracy_rows(runs: list[dict[str, Any]], ids: list[str]) -> list[dict[str, Any]]:
    """Per agent and comparison point, lock-step and async accuracies over seeds and async − lock-step paired
    by seed (t-test) and by (seed, problem) (bootstrap interval)."""
    from hacrl.report.stats import paired_bootstrap, paired_difference

    rows = []
    for a in (FAST, SLOW):
        for point in ("at_wall", "at_steps"):
            lock = [r["lockstep"]["agents"][a][point] for r in runs]
            asy = [r["async"]["agents"][a].get(point) for r in runs]
            pairs = [(x, y) for x, y in zip(asy, lock, strict=True) if x is not None]
            st = paired_difference([x["acc"] for x, _ in pairs], [y["acc"] for _, y in pairs])
            iv = paired_bootstrap([dict(zip(ids, x["rewards"], strict=True)) for x, _ in pairs],
                                  [dict(zip(ids, y["rewards"], strict=True)) for _, y in pairs])
            rows.append({"agent": a, "point": point, "start": [r["lockstep"]["start"][a]["acc"] for r in runs],
                         "lockstep": [y["acc"] for _, y in pairs], "async": [x["acc"] for x, _ in pairs],
                         "seeds": st, "interval": {k: iv[k] for k in ("mean", "lo", "hi", "pairs", "p")}})
    return rows


def print_tables(runs: list[dict[str, Any]], costs: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    from hacrl.report.pace import async_pace

    print(f"\nstep cost: mean busy s per step (lock-step) and per round (async), {len(runs)} seed(s):")
    for mode in ("lockstep", "async"):
        for a in (FAST, SLOW):
            c = costs[mode][a]
            print(f"  {mode:<9} {a:<6} rollout {c['rollout']:.3f}  update {c['update']:.3f}  step {c['step']:.3f}")
    r = costs["ratio"]
    print(f"  lock-step {SLOW}/{FAST}: rollout {r['rollout']:.2f}x  update {r['update']:.2f}x  step {r['step']:.2f}x")
    print("\nidle share and updates (mean ± sd over seeds; W = lock-step's training wall time):")
    print(f"{'mode':<9} {'agent':<6} {'idle share':>14} {'updates at W':>14} {'updates':>9} "
          f"{'staleness mean/max':>19} {'wall s':>16}")
    for mode in ("lockstep", "async"):
        for a in (FAST, SLOW):
            ag = [r[mode]["agents"][a] for r in runs]
            stale = "—"
            if mode == "async":  # over every update of every seed, weighted by the answers taken
                pace = async_pace(dict(enumerate(u for r in runs for u in r["async"]["updates"] if u["agent"] == a)),
                                  a, [FAST, SLOW])
                stale = f"{pace['staleness_mean'] or 0:.2f} / {pace['staleness_max'] or 0:.0f}"
            print(f"{mode:<9} {a:<6} {_ms([x['idle'] * 100 for x in ag], '.1f') + ' %':>14} "
                  f"{_ms([x['updates_at_wall'] for x in ag], '.1f'):>14} {_ms([x['updates'] for x in ag], '.0f'):>9} "
                  f"{stale:>19} {_ms([r[mode]['wall_s'] for r in runs], '.1f'):>16}")
    print("\nheld-out greedy accuracy, async − lock-step (per seed: mean ± se, t-test p; per seed × problem: "
          "95% bootstrap interval):")
    print(f"{'agent':<6} {'point':<12} {'start':>7} {'lock-step':>15} {'async':>15} {'Δ (seeds)':>16} {'p':>6} "
          f"{'Δ [95% interval]':>26}")
    for row in rows:
        st, iv = row["seeds"], row["interval"]
        d = "n/a" if st["mean"] is None else f"{st['mean']:+.3f}" + ("" if st["se"] is None else f" ± {st['se']:.3f}")
        p = "n/a" if st["p"] is None else f"{st['p']:.2g}"
        ci = "n/a" if iv["mean"] is None else f"{iv['mean']:+.3f} [{iv['lo']:+.3f}, {iv['hi']:+.3f}]"
        point = {"at_wall": "equal wall", "at_steps": "equal steps"}[row["point"]]
        print(f"{row['agent']:<6} {point:<12} {_ms(row['start'], '.3f').split(' ')[0]:>7} {_ms(row['lockstep']):>15} "
              f"{_ms(row['async']):>15} {d:>16} {p:>6} {ci:>26}")


# ---- main -----------------------------------------------------------------------------------------------

def environment() -> dict[str, Any]:
    import torch

    names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
             if line.startswith("model name")] if Path("/proc/cpuinfo").is_file() else []
    return {"cpu": names[0] if names else platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "load_before": os.getloadavg(), "python": platform.python_version(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=40, help="lock-step steps N (and the equal-steps point)")
    p.add_argument("--extra-layers", type=int, default=4, help="identity layers added to the slow agent")
    p.add_argument("--eval-size", type=int, default=500, help="held-out problems per evaluation")
    p.add_argument("--bound", type=int, default=1, help="async.bound")
    p.add_argument("--group-wait", default="0", help="async.group_wait_s (null: wait for partners in flight)")
    p.add_argument("--backend", default="ray", choices=("ray", "local"))
    p.add_argument("--set", dest="overrides", action="append", default=[], help="more config overrides")
    p.add_argument("--output", type=Path, help="directory for async_pace.json")
    p.add_argument("--tables", type=Path, help="print the tables of a saved async_pace.json instead (no training)")
    p.add_argument("--only-seeds", help="with --tables: the seeds to tabulate, e.g. 0,1,2")
    args = p.parse_args(argv)
    if args.tables:
        saved = json.loads(args.tables.read_text())
        keep = None if args.only_seeds is None else {int(x) for x in args.only_seeds.split(",")}
        runs = [r for r in saved["runs"] if keep is None or r["seed"] in keep]
        print(f"{saved['command']}\nseeds {[r['seed'] for r in runs]} of {args.tables}")
        print_tables(runs, step_costs(runs), accuracy_rows(runs, saved["eval_ids"]))
        return
    if args.output is None:
        p.error("--output is required (or --tables to print a saved run's tables)")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)
    env = environment()
    command = shlex.join(["python", "bench/async_pace.py", *(sys.argv[1:] if argv is None else argv)])
    if args.backend == "ray":
        import ray

        # one CPU per agent (the pair); the Trainer's Ray backend uses this runtime
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "qwen2-char-deep"
        deep = build_deep_model(model_dir, args.extra_layers)
        print(f"slow agent: qwen2-char {deep['layers'][0]} → {deep['layers'][1]} layers, {deep['params'][0]:,} → "
              f"{deep['params'][1]:,} parameters (same function at the start)", flush=True)
        for seed in range(args.seeds):
            lock = run_lockstep(make_config(args, model_dir, seed, "lockstep"), Path(tmp) / f"lock-{seed}")
            asy = run_async(make_config(args, model_dir, seed, "async"), Path(tmp) / f"async-{seed}", lock["wall_s"])
            runs.append({"seed": seed, "lockstep": lock, "async": asy})
            ids = lock.pop("eval_ids")
            print(f"seed {seed}: lock-step W {lock['wall_s']:.1f} s, updates "
                  f"{[lock['agents'][a]['updates'] for a in (FAST, SLOW)]}; async at W: "
                  f"{[asy['agents'][a]['updates_at_wall'] for a in (FAST, SLOW)]}", flush=True)
    costs, rows = step_costs(runs), accuracy_rows(runs, ids)
    env["load_after"] = os.getloadavg()
    print(f"\n{command}\nCPU {env['cpu']} ({env['cpus']} CPUs, torch capability {env['cpu_capability']}), backend "
          f"{args.backend} with 1 CPU and 1 torch thread per agent; load average before {env['load_before'][0]:.2f}, "
          f"after {env['load_after'][0]:.2f}")
    print_tables(runs, costs, rows)
    args.output.mkdir(parents=True, exist_ok=True)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    record = {"command": command, "settings": settings, "environment": env, "deep_model": deep,
              "step_costs": costs, "accuracy": rows, "eval_ids": ids, "runs": runs}
    (args.output / "async_pace.json").write_text(json.dumps(record, indent=1))
    print(f"\nraw numbers: {args.output / 'async_pace.json'}")


if __name__ == "__main__":
    main()
