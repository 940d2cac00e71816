"""``hacrl plan``: per agent and device, the memory a run will need (:mod:`hacrl.backends.plan`), before anything loads."""

from __future__ import annotations

import os
from typing import Any

from hacrl.backends.plan import GiB, known_shapes, plan, render
from hacrl.config import ConfigError


def add_plan_parser(sub: Any) -> None:
    p = sub.add_parser("plan", help="per agent and device: the memory a run will need, before anything loads")
    p.add_argument("--preset", help="a named preset (default tiny-model)")
    p.add_argument("--config", help="a YAML config file, layered on --preset when both are given")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value (repeatable), as for train")
    p.add_argument("--model-config", action="append", default=[], metavar="ID=PATH",
                   help="an agent's config.json (or its directory) by agent id or model string (repeatable); "
                        f"without it: the model directory's, or built-in shapes ({', '.join(known_shapes())})")
    p.add_argument("--device-memory", type=float, default=None, metavar="GIB",
                   help="memory of one device in GiB (default 80 with CUDA agents, else this machine's RAM)")
    p.add_argument("--max-replicas", type=int, default=8, help="largest data_parallel the suggestions may use")
    p.add_argument("--prompt-tokens", type=int, default=None, help="tokens per prompt (default each agent's "
                   "max_prompt_tokens, an upper bound)")


def cmd_plan(args: Any) -> int:
    from hacrl.config import load_config

    cfg = load_config(args.preset, args.config, args.overrides)
    configs = {}
    for item in args.model_config:
        key, sep, path = item.partition("=")
        if not sep or not key or not path:
            raise ConfigError(f"--model-config {item!r}: expected ID=PATH, e.g. "
                              f"{cfg.agents[0].id}=models/x/config.json")
        configs[key] = path
    unknown = sorted(set(configs) - {a.id for a in cfg.agents} - {a.model for a in cfg.agents})
    if unknown:
        raise ConfigError(f"--model-config {unknown[0]}=...: no agent has that id or model; ids: "
                          f"{', '.join(a.id for a in cfg.agents)}")
    if args.prompt_tokens is not None and args.prompt_tokens < 1:
        raise ConfigError("--prompt-tokens must be 1 or more")
    gib = args.device_memory
    if gib is None:
        cuda = any(a.device.startswith("cuda") for a in cfg.agents)
        gib = 80.0 if cuda else _host_gib()
    if gib <= 0:
        raise ConfigError("--device-memory must be a positive number of GiB, e.g. 80")
    plans = plan(cfg, model_configs=configs, device_memory_gib=gib, max_world=args.max_replicas,
                 prompt_tokens=args.prompt_tokens)
    title = args.preset or args.config or "tiny-model"
    print(render(plans, device_memory_gib=gib, title=title))
    return 0


def _host_gib() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GiB
    except (ValueError, OSError, AttributeError):
        return 16.0
