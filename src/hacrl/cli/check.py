"""``hacrl train --check``: every problem a run would meet, listed in one pass before anything loads.

A training stops at its first problem, and at real sizes each one costs minutes of loading: a config with a
bad key, data that is not cached, a missing extra, a device the machine lacks, a Ray cluster without the GPUs,
a reward whose contract is broken. The pre-flight runs each check on its own, so one failure does not hide the
next, and prints them all:

- config: every validation error (not only the first), and what is derived from it (minibatches); the other
  checks then run with the keys in error left at their defaults, and the header says so;
- extras: the packages the config needs (ray, vllm, peft, math-verify, the loggers);
- devices: each agent's device on this machine;
- models: each agent's model resolves to a directory with a config.json (no weights are read);
- ray: the GPUs and CPUs the agents' actors ask for against this machine's (a cluster given by address is not
  queried here);
- data and reward: the task's files and fields, ``trainer.num_train_epochs`` counted into steps as training
  counts them (a task without epochs, steps that disagree, a warm-up longer than the counted run), its held-out
  split, benchmark files, and the reward's contract (called once on the first training row, as training does
  before any model loads).

``hacrl train`` itself stops at the same Ray resource shortfall before Ray starts
(:func:`hacrl.backends.ray_actors.machine_shortfall`). Exit code 0 when nothing was found, 2 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable

from hacrl.config import Config, config_problems, config_without_errors

Check = Callable[[Config], list[str]]


def _extras(cfg: Config) -> list[str]:
    need: list[tuple[str, str, str]] = []  # (module, extra, why)
    if cfg.backend.name == "ray":
        need.append(("ray", "ray", "backend.name=ray"))
    if cfg.rollout.engine == "vllm":
        need.append(("vllm", "vllm", "rollout.engine=vllm"))
    need += [("peft", "lora", f"agents.{a.id}.lora") for a in cfg.agents if a.lora]
    rewards = cfg.task.reward if isinstance(cfg.task.reward, list) else [cfg.task.reward]
    if "math" in rewards or cfg.trainer.eval_benchmarks:
        need.append(("math_verify", "math", "the math reward (without it a string fallback grades)"))
    out = [f"{why} needs {module}: pip install 'hacrl[{extra}]'" for module, extra, why in dict.fromkeys(need)
           if importlib.util.find_spec(module) is None]
    from hacrl.run.trackers import resolve_loggers

    try:
        resolve_loggers(cfg.run)
    except Exception as exc:  # noqa: BLE001 - each check reports its own failure as a line
        out.append(str(exc))
    return out


def _devices(cfg: Config) -> list[str]:
    from hacrl.backends.devices import check_device

    out = []
    for a in cfg.agents:
        try:
            check_device(a.device, f"agents.{a.id}.device")
        except Exception as exc:  # noqa: BLE001
            out.append(str(exc))
    return out


def _models(cfg: Config) -> list[str]:
    from hacrl.backends.resolve import resolve_model_path

    out = []
    for a in cfg.agents:
        field = f"agents.{a.id}.model"
        try:
            path = resolve_model_path(a.model, field)
        except Exception as exc:  # noqa: BLE001
            out.append(str(exc) if field in str(exc) else f"{field}: {exc}")
            continue
        if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
            out.append(f"{field}: {path} is not a model directory (no config.json); give a Hugging Face model "
                       f"directory, org/name from the local cache, or builtin:<name>")
    return out


def _ray(cfg: Config) -> list[str]:
    if cfg.backend.name != "ray":
        return []
    from hacrl.backends.ray_actors import RayBackend, machine_shortfall

    out, resources = [], []
    for i in range(len(cfg.agents)):
        try:
            resources.append(RayBackend._resources(cfg, i))
        except Exception as exc:  # noqa: BLE001
            out.append(str(exc))
            resources.append((0.0, 0.0))
    if cfg.backend.address:
        return out  # a running cluster's resources are its own: not queried by the pre-flight
    return out + machine_shortfall(cfg, resources)


def _derived(cfg: Config) -> list[str]:
    from hacrl.learner.algorithms import derive_for

    derive_for(cfg)
    return []


def _reward_import(cfg: Config) -> list[str]:
    """Each reward spec imports (the contract needs the data too: the next check)."""
    from hacrl.rewards.base import get_reward

    out = []
    for spec in (cfg.task.reward if isinstance(cfg.task.reward, list) else [cfg.task.reward]):
        if spec is not None:
            try:
                get_reward(spec)
            except Exception as exc:  # noqa: BLE001
                out.append(f"task.reward: {exc}")
    return out


def _data_and_reward(cfg: Config) -> list[str]:
    from hacrl.data.factory import build_task, task_scorer, with_task_epochs
    from hacrl.trainer.evaluation import load_benchmarks

    out: list[str] = []
    task = build_task(cfg.task, seed=cfg.run.seed, max_new_tokens=cfg.rollout.max_new_tokens)
    try:  # trainer.num_train_epochs counted as training counts it, once the task is built
        with_task_epochs(cfg, task)
    except Exception as exc:  # noqa: BLE001
        out.append(str(exc))
    try:
        task.test_problems(cfg.trainer.eval_size)
    except Exception as exc:  # noqa: BLE001
        out.append(f"trainer.eval_size={cfg.trainer.eval_size}: {exc}")
    try:
        for _, scorer in load_benchmarks(cfg).values():
            scorer.close()
    except Exception as exc:  # noqa: BLE001
        out.append(str(exc))
    task_scorer(task, cfg.task).close()  # a broken reward contract raises here, as at the start of training
    return out


CHECKS: list[tuple[str, Check]] = [("config", _derived), ("extras", _extras), ("devices", _devices),
                                   ("models", _models), ("ray", _ray), ("reward", _reward_import),
                                   ("data and reward", _data_and_reward)]


def preflight(cfg: Config) -> tuple[list[tuple[str, str]], list[str]]:
    """(check, problem) for every problem ``cfg`` would meet, each check run whatever the others found, and the
    checks that stopped at a problem (what came after it in that check did not run)."""
    found: list[tuple[str, str]] = []
    stopped: list[str] = []
    for name, check in CHECKS:
        try:
            found += [(name, p) for p in check(cfg)]
        except Exception as exc:  # noqa: BLE001 - a check that fails is a problem to list, not a traceback
            found.append((name, str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
            stopped.append(name)
    return found, stopped


def _checked(stopped: list[str], dropped: int | None) -> str:
    """What was checked, for the header: every check (those that stopped at a problem said so), after config
    errors with the keys in error at their defaults, or (``dropped`` None) the config alone."""
    if dropped is None:
        return "config checked; not the others: the config does not load"
    names = [f"{name} up to its first problem" if name in stopped else name for name, _ in CHECKS]
    if not dropped:
        return f"{', '.join(names)} checked"
    rest = ", ".join(n for (name, _), n in zip(CHECKS, names) if name != "config")
    keys = f"{dropped} key{'s' if dropped > 1 else ''}"
    return f"config checked; then, with the {keys} in error at their defaults, {rest}"


def cmd_check(args: argparse.Namespace, load: Callable[[], Config]) -> int:
    """Print every problem of the run ``args`` describes (``load()`` builds its config) and return 0 or 2.
    Config errors do not hide the rest: the other checks run on the config with the keys in error left at
    their defaults (:func:`hacrl.config.config_without_errors`), and the header says what was checked."""
    given = not (args.resume and not args.preset and not args.config)  # else: the run's own config.yaml
    errors = [("config", p) for p in config_problems(args.preset, args.config, args.overrides)] if given else []
    cfg: Config | None = None
    dropped: int | None = 0
    try:
        cfg, dropped = config_without_errors(args.preset, args.config, args.overrides) if errors else (load(), 0)
    except Exception as exc:  # noqa: BLE001 - a run config that cannot be read is the one problem
        errors = [("config", str(exc))]
    found = errors
    stopped: list[str] = []
    if cfg is None:
        dropped = None
    else:
        checked, stopped = preflight(cfg)
        found = errors + checked
    if not found:
        print(f"hacrl train --check: no problem found ({', '.join(name for name, _ in CHECKS)})")
        return 0
    print(f"hacrl train --check: {len(found)} problem{'s' if len(found) > 1 else ''} ({_checked(stopped, dropped)}):",
          file=sys.stderr)
    for name, problem in found:
        print(f"  [{name}] {problem}", file=sys.stderr)
    return 2
