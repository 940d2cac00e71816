"""``hacrl eval``: each agent of a run, or each model given, alone on a task's held-out split and benchmarks."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from hacrl.config import ConfigError
from hacrl.errors import InputError
from hacrl.run.files import write_atomic


def add_eval_parser(sub: Any) -> None:
    e = sub.add_parser("eval", help="evaluate each agent alone on a task's held-out split and/or benchmarks")
    e.add_argument("--run", help="a run directory: evaluates its latest checkpoint's agents")
    e.add_argument("--model", action="append", default=[], help="a model directory or builtin:<name> (repeatable)")
    e.add_argument("--task", help="builtin task name (default without --benchmark: the run's task, or add2)")
    e.add_argument("--reward", action="append", default=[], metavar="SPEC",
                   help="score the task with this reward, as task.reward takes it: a name (exact, numeric, math), "
                        "module:function or file.py:function (repeatable: their weighted sum; default: the run's "
                        "task.reward, or the task's verifier)")
    e.add_argument("--reward-weights", metavar="W,W,...", help="one weight per --reward (default: all 1)")
    e.add_argument("--reward-contract", default=None, choices=["auto", "hacrl", "trl", "verl"],
                   help="how --reward is called (task.reward_contract; default: the run's, or auto)")
    e.add_argument("--benchmark", action="append", default=[], metavar="NAME=PATH",
                   help="a local benchmark file or directory, NAME one of math500, math, gsm8k, aime2025, amc2023, "
                        "minerva, olympiadbench (repeatable); the paper's prompt, scored with the math reward")
    e.add_argument("--n", type=int, default=500, help="held-out task problems; at most this many per benchmark")
    e.add_argument("--k", type=int, default=0, help="also sample k answers per problem: avg@k and pass@k")
    e.add_argument("--seed", type=int, default=0, help="seed of the sampled answers (--k): the same seed, the same "
                   "avg@k and pass@k")
    e.add_argument("--max-new-tokens", type=int, default=None, help="default: the run's, or 64")
    e.add_argument("--reward-timeout", type=float, default=10.0, help="seconds per answer of the math reward")
    e.add_argument("--batch-size", type=int, default=64, help="sequences per generate call")
    e.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="for --model")
    e.add_argument("--device", default="cpu", help="for --model")
    e.add_argument("--chat-template-kwargs", help="for --model, JSON, e.g. '{\"enable_thinking\": false}'")
    e.add_argument("--json", action="store_true", help="print JSON records instead of tables")
    e.add_argument("--json-out", metavar="PATH", help="also write the records and tables as JSON to PATH")


def cmd_eval(args: argparse.Namespace) -> int:
    """Each agent alone on a task's held-out split and/or local benchmark files: a markdown table per metric
    (agents x benchmarks, plus the mean over benchmarks), optionally JSON."""
    import torch

    from hacrl.backends.loading import load_answering_agent
    from hacrl.rollout import get_engine
    from hacrl.trainer.evaluation import METRICS, evaluate_agent, markdown_table, suite_tables

    if args.n < 1 or args.k < 0 or args.batch_size < 1 or args.reward_timeout <= 0:
        raise ConfigError("eval: --n and --batch-size must be >= 1, --k >= 0 and --reward-timeout > 0")
    json_out = Path(args.json_out) if args.json_out else None
    if json_out is not None and not json_out.parent.is_dir():
        raise ConfigError(f"--json-out {json_out}: directory {json_out.parent} does not exist")
    models, run_cfg = _eval_models(args)
    suites = _eval_suites(args, run_cfg)  # read every file before loading any model: bad input fails fast
    max_new = args.max_new_tokens or (run_cfg or {}).get("rollout", {}).get("max_new_tokens") or 64
    engine = get_engine("hf")
    records: list[dict[str, Any]] = []
    try:
        for i, (agent_id, path, spec) in enumerate(models):
            try:  # as training loads it to answer: rendering, limits, precision, autocast (backends.loading)
                agent = load_answering_agent(spec, i, path, max_new_tokens=max_new)
            except InputError as exc:
                if i < len(models) - len(args.model):
                    raise  # an agent of --run: agents.<id>.model names it
                raise InputError(str(exc).replace(f"agents.{agent_id}.model:", f"--model {args.model[i - len(models)]}:",
                                                  1)) from None
            for name, problems, scorer in suites:
                torch.manual_seed(args.seed)  # each agent and suite samples from the same seeded stream
                start = time.perf_counter()
                res = evaluate_agent(agent, problems, scorer.score_problems, engine, max_new_tokens=max_new, k=args.k,
                                     batch_size=args.batch_size)
                records.append({"benchmark": name, **res.as_dict()})
                print(f"eval: {agent_id} on {name}: greedy {res.greedy_acc:.3f} over {res.n} problems "
                      f"({time.perf_counter() - start:.0f}s)", file=sys.stderr, flush=True)
            del agent
    finally:
        for _, _, scorer in suites:
            scorer.close()
    names = [name for name, _, _ in suites]
    tables = suite_tables(records, names)
    if json_out is not None:  # with the provenance a run records (hacrl.run.provenance): code, libraries, device
        from hacrl.run.provenance import collect

        write_atomic(json_out, json.dumps({
            "agents": [m[0] for m in models], "benchmarks": [{"name": n, "n": len(p)} for n, p, _ in suites],
            "k": args.k, "max_new_tokens": max_new, "results": records, "tables": tables,
            "provenance": collect()}, indent=2) + "\n")
    if args.json:
        print(json.dumps(records, indent=2))
    else:
        print("\n\n".join(markdown_table(table, names, METRICS[m].format(k=args.k)) for m, table in tables.items()))
    return 0


def _eval_models(args: argparse.Namespace) -> tuple[list[tuple[str, Path, Any]], dict | None]:
    """(agent id, model directory, its ``AgentSpec``) per agent, and the run's config if any: a run's agents with
    every field the run trained them with, a ``--model`` with the command line's settings."""
    from hacrl.backends.devices import check_device
    from hacrl.backends.resolve import resolve_model_path
    from hacrl.config import AgentSpec
    from hacrl.run.checkpoint import passed_over, read_manifest, unusable_why, usable_checkpoint

    models: list[tuple[str, Path, AgentSpec]] = []
    run_cfg = None
    if args.run:
        run = Path(args.run)
        if not run.is_dir():
            raise ConfigError(f"--run {run}: no such directory; give a run directory (hacrl train --output)")
        found, damaged = usable_checkpoint(run / "checkpoints")
        if found is None:
            why = unusable_why(damaged, "no complete checkpoint")
            raise ConfigError(f"--run {run}: {why} under {run / 'checkpoints'}; evaluate a run that saved one")
        for line in passed_over(damaged, found, "evaluating"):
            print(line, file=sys.stderr)
        run_cfg = _run_config(run)
        step, steps = read_manifest(found).get("step"), run_cfg["trainer"]["steps"]
        print(f"eval: --run {run}: the latest intact checkpoint, {found.name} (step {step} of {steps}"
              f"{', the end of training' if step == steps else ''})", file=sys.stderr)
        for a in run_cfg["agents"]:
            check_device(a.get("device", "cpu"), f"--run {run}: agents.{a['id']}.device")
        # the run's validated agents (every field); a LoRA agent's checkpoint directory loads as its merged copy
        models += [(a["id"], found / "agents" / a["id"], AgentSpec.model_validate(a)) for a in run_cfg["agents"]]
    try:
        chat_kwargs = json.loads(args.chat_template_kwargs) if args.chat_template_kwargs else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--chat-template-kwargs: not valid JSON ({exc.msg}); "
                          f"e.g. '{{\"enable_thinking\": false}}'") from None
    if args.model:
        check_device(args.device, "--device")
    for spec in args.model:
        name = spec[8:] if spec.startswith("builtin:") else Path(spec).name
        try:
            path = resolve_model_path(spec)
        except FileNotFoundError as exc:
            raise ConfigError(f"--model {spec}: {exc}") from None
        models.append((name, path, AgentSpec(id=name, model=spec, dtype=args.dtype, device=args.device,
                                             chat_template_kwargs=chat_kwargs)))
    if not models:
        raise ConfigError("eval: give --run DIR or at least one --model")
    return models, run_cfg


def _run_config(run: Path) -> dict[str, Any]:
    """A run directory's config.yaml as a validated tree; one line naming the file when it is missing or broken."""
    from hacrl.config import load_config

    path = run / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"--run {run}: no config.yaml (not a run directory, or one killed before it started); "
                          f"evaluate its models with --model {run}/checkpoints/step-*/agents/<id>")
    try:
        cfg = load_config(path=path)
    except ConfigError as exc:
        raise ConfigError(f"--run {run}: config.yaml is not a usable run config ({exc}); restore it from the "
                          f"run's command, or evaluate with --model") from None
    return cfg.model_dump(mode="json")


def _eval_suites(args: argparse.Namespace, run_cfg: dict | None) -> list[tuple[str, list[Any], Any]]:
    """(name, problems, scorer) for the task (``--task``, or the run's task without ``--benchmark``) and each
    ``--benchmark NAME=PATH`` (the paper's prompt template, the math reward under a time limit)."""
    from dataclasses import replace

    from hacrl.data.benchmarks import canonical_name, load_benchmark
    from hacrl.data.datasets import PAPER_TEMPLATE
    from hacrl.rewards import RewardScorer

    suites: list[tuple[str, list[Any], Any]] = []
    if args.task or not args.benchmark:
        suites.append(_task_suite(args, run_cfg))
    elif args.reward:
        raise ConfigError("--reward scores a task's held-out split, and benchmarks are scored with the math reward; "
                          "add --task NAME, or leave --reward out")
    if args.benchmark:  # graded by the math reward: say once if math-verify is missing
        from hacrl.config import TaskConfig
        from hacrl.rewards.math_reward import warn_if_no_math_verify

        warn_if_no_math_verify(TaskConfig(), benchmarks=True)
    for item in args.benchmark:
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ConfigError(f"--benchmark {item!r}: expected NAME=PATH, e.g. math500=data/math500.jsonl")
        key = canonical_name(name.strip())
        if any(key == s[0] for s in suites):
            raise ConfigError(f"--benchmark {item!r}: {key} is given twice")
        try:
            problems = load_benchmark(key, path.strip())[: args.n]
        except InputError as exc:
            raise ConfigError(f"--benchmark {item}: {exc}") from None
        problems = [replace(p, prompt=PAPER_TEMPLATE.replace("{question}", p.prompt)) for p in problems]
        suites.append((key, problems, RewardScorer("math", timeout_s=args.reward_timeout)))
    return suites


def _task_suite(args: argparse.Namespace, run_cfg: dict | None) -> tuple[str, list[Any], Any]:
    """The held-out split of ``--task`` (a builtin task) or of the run's task, scored as training scores it."""
    from hacrl.config import TaskConfig
    from hacrl.data.factory import build_task, task_scorer

    if args.task or run_cfg is None:
        task_cfg = TaskConfig(name=args.task or "add2")
        seed, max_new = 0, 64
    else:
        task_cfg = TaskConfig.model_validate(run_cfg["task"])
        seed, max_new = run_cfg["run"]["seed"], run_cfg["rollout"]["max_new_tokens"]
    task_cfg = _with_reward(task_cfg, args)
    task = build_task(task_cfg, seed=seed, max_new_tokens=max_new)
    problems = task.test_problems(args.n)
    if run_cfg is not None and not args.task:
        trained = len(task.test_problems(run_cfg["trainer"]["eval_size"]))
        if trained != len(problems):  # both are the first N of the same held-out list
            print(f"eval: {task.name}: the first {len(problems)} held-out problems (--n {args.n}); training's "
                  f"evaluations (eval.jsonl) used the first {trained} (trainer.eval_size), so the accuracies may "
                  f"differ; --n {trained} scores the same problems", file=sys.stderr)
    try:
        return task.name, problems, task_scorer(task, task_cfg)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("task.reward:", "--reward:", 1) if args.reward else str(exc)) from None


def _with_reward(task_cfg: Any, args: argparse.Namespace) -> Any:
    """``task_cfg`` scored with ``--reward`` (+ ``--reward-weights``, ``--reward-contract``) where given; one line
    naming the flag when they do not fit together."""
    from pydantic import ValidationError

    from hacrl.config import TaskConfig

    if not args.reward and (args.reward_weights or args.reward_contract):
        raise ConfigError("--reward-weights and --reward-contract go with --reward; give --reward SPEC")
    if not args.reward:
        return task_cfg
    try:
        weights = [float(w) for w in args.reward_weights.split(",")] if args.reward_weights else None
    except ValueError:
        raise ConfigError(f"--reward-weights {args.reward_weights!r}: give numbers separated by commas, "
                          f"e.g. 1.0,0.1") from None
    update = {"reward": args.reward[0] if len(args.reward) == 1 else list(args.reward), "reward_weights": weights,
              "reward_contract": args.reward_contract or task_cfg.reward_contract}
    try:
        return TaskConfig.model_validate({**task_cfg.model_dump(), **update})
    except ValidationError as exc:
        msg = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise ConfigError(f"--reward: {msg}".replace("task.reward entry", "--reward")) from None
