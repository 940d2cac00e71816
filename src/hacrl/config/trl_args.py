"""TRL's ``GRPOConfig`` names, as the Python trainer takes them (``HACRLTrainer(args={...})``), turned into hacrl's
config values, so a TRL script keeps its config as written.

TRL trains one model; its per-model settings (``learning_rate``, ``lr_scheduler_type``, ``warmup_*``,
``weight_decay``, ``max_grad_norm``, ``beta``, ``max_prompt_length``, ``gradient_checkpointing``) go on every
agent. Counts follow TRL's rules: ``max_steps`` > 0 wins over ``num_train_epochs`` (its -1 default leaves the
count to the epochs, which clear the preset's ``trainer.steps``); ``per_device_train_batch_size`` counts
completions, so the prompts of a step are ``per_device_train_batch_size × gradient_accumulation_steps /
num_generations`` (one process); ``warmup_steps`` below 1 is a share of the run (transformers' rule since
``warmup_ratio`` was deprecated). ``logging_*`` are accepted: every step is logged. Any other TRL name gets the
one-line answer of :mod:`hacrl.config.vocabulary` (hacrl's key, to give in ``overrides``); a name TRL does not
have either, a spelling hint. Names left out keep hacrl's values (the preset's), not TRL's defaults.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hacrl.config.schema import AgentSpec, ConfigError
from hacrl.config.vocabulary import TRL_KEYS, describe

AGENT = "agents.<id>."  # a key set on every agent

#: TRL's name → hacrl's key, the value as it is
KEYS: dict[str, str] = {
    "learning_rate": AGENT + "lr",
    "warmup_ratio": AGENT + "warmup_ratio",
    "weight_decay": AGENT + "weight_decay",
    "max_grad_norm": AGENT + "grad_clip",
    "beta": AGENT + "kl_coef",
    "max_prompt_length": AGENT + "max_prompt_tokens",
    "gradient_checkpointing": AGENT + "gradient_checkpointing",
    "num_generations": "rollout.rollouts_per_prompt",
    "max_completion_length": "rollout.max_new_tokens",
    "temperature": "rollout.temperature",
    "top_p": "rollout.top_p",
    "seed": "run.seed",
    "run_name": "run.name",
    "save_steps": "trainer.checkpoint_every",
    "save_total_limit": "trainer.keep_last",
    "eval_steps": "trainer.eval_every",
}
#: read by the rules below (counts, batch, schedule, loggers) or handed back (output_dir, reward_weights)
RULES = frozenset({"lr_scheduler_type", "warmup_steps", "num_train_epochs", "max_steps",
                   "per_device_train_batch_size", "gradient_accumulation_steps", "report_to", "output_dir",
                   "reward_weights"})
LOGGING = frozenset({"logging_steps", "logging_strategy", "logging_first_step"})  # every step is logged
TRACKERS = ("tensorboard", "wandb", "trackio")


@dataclass(frozen=True)
class TRLSettings:
    """What ``args`` set: config values (a nested tree), fields of every agent, and the two the trainer's own
    arguments also take."""

    tree: dict[str, Any] = field(default_factory=dict)
    agent: dict[str, Any] = field(default_factory=dict)
    output_dir: str | None = None
    reward_weights: list[float] | None = None


def trl_settings(args: Mapping[str, Any], *, rollouts_per_prompt: int) -> TRLSettings:
    """``args`` (TRL's ``GRPOConfig`` names) as hacrl's values; ``rollouts_per_prompt``: G when ``args`` has no
    ``num_generations`` (the config's). Raises ConfigError naming the first name hacrl cannot take.

    >>> s = trl_settings({"learning_rate": 1e-5, "max_steps": 20, "num_generations": 4,
    ...                   "per_device_train_batch_size": 16}, rollouts_per_prompt=8)
    >>> s.agent, s.tree
    ({'lr': 1e-05}, {'rollout': {'rollouts_per_prompt': 4}, 'trainer': {'steps': 20, 'batch_size': 4}})
    """
    for name in args:
        if name not in KEYS and name not in RULES and name not in LOGGING:
            raise ConfigError(_unknown(name))
    flat = {KEYS[name]: value for name, value in args.items() if name in KEYS}
    g = args.get("num_generations", rollouts_per_prompt)
    flat.update({**_schedule(args), **_counts(args), **_batch(args, g), **_loggers(args.get("report_to"))})
    tree: dict[str, Any] = {}
    for key, value in flat.items():
        if not key.startswith(AGENT):
            section, name = key.split(".")
            tree.setdefault(section, {})[name] = value
    agent = {key.removeprefix(AGENT): value for key, value in flat.items() if key.startswith(AGENT)}
    weights = args.get("reward_weights")
    output_dir = args.get("output_dir")
    return TRLSettings(tree, agent, None if output_dir is None else str(output_dir),
                       None if weights is None else [float(w) for w in weights])


def _unknown(name: str) -> str:
    if name in TRL_KEYS:
        return "args: " + describe(name, "TRL's", TRL_KEYS[name]) + "; set that key in overrides"
    close = difflib.get_close_matches(name, [*KEYS, *RULES, *LOGGING], n=1)
    hint = f"did you mean {close[0]!r}?" if close else \
        "args takes TRL's GRPOConfig names (docs/python-api.md); hacrl's keys go in overrides"
    return f"args: unknown name {name!r}; {hint}"


def _schedule(args: Mapping[str, Any]) -> dict[str, Any]:
    """``lr_scheduler_type`` among hacrl's schedules; ``warmup_steps`` a count, or below 1 a share."""
    out: dict[str, Any] = {}
    if "lr_scheduler_type" in args:
        kind, built = args["lr_scheduler_type"], typing.get_args(AgentSpec.model_fields["lr_schedule"].annotation)
        if kind not in built:
            raise ConfigError(f"args: lr_scheduler_type={kind!r} is not one of hacrl's: {', '.join(built)}")
        out[AGENT + "lr_schedule"] = kind
    steps = args.get("warmup_steps")
    if isinstance(steps, float) and 0 < steps < 1:
        out[AGENT + "warmup_ratio"] = steps
    elif steps is not None:
        out[AGENT + "warmup_steps"] = steps
    return out


def _counts(args: Mapping[str, Any]) -> dict[str, Any]:
    """TRL's rule: ``max_steps`` > 0 is the count; else ``num_train_epochs``, clearing a preset's steps."""
    max_steps = args.get("max_steps")
    if isinstance(max_steps, int) and not isinstance(max_steps, bool) and max_steps <= 0:
        max_steps = None  # TRL's -1: the epochs count
    if max_steps is not None:
        return {"trainer.steps": max_steps}
    if args.get("num_train_epochs") is not None:
        return {"trainer.num_train_epochs": args["num_train_epochs"], "trainer.steps": None}
    return {}


def _batch(args: Mapping[str, Any], g: Any) -> dict[str, Any]:
    """Prompts per step from TRL's completions per step: per device × accumulation / ``g`` (one process)."""
    per_device, accumulation = args.get("per_device_train_batch_size"), args.get("gradient_accumulation_steps", 1)
    if per_device is None:
        if "gradient_accumulation_steps" in args:
            raise ConfigError("args: gradient_accumulation_steps needs per_device_train_batch_size (the prompts of a "
                              "step are their product / num_generations); give both, or trainer.batch_size in "
                              "overrides")
        return {}
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (per_device, accumulation, g)):
        raise ConfigError(f"args: per_device_train_batch_size={per_device!r}, gradient_accumulation_steps="
                          f"{accumulation!r} and num_generations={g!r} must be positive whole numbers")
    completions = per_device * accumulation
    if completions % g:
        raise ConfigError(f"args: per_device_train_batch_size={per_device} × gradient_accumulation_steps="
                          f"{accumulation} completions are not whole groups of num_generations={g} (TRL's rule); "
                          f"make their product a multiple of {g}")
    return {"trainer.batch_size": completions // g}


def _loggers(report_to: Any) -> dict[str, Any]:
    """``report_to`` as ``run.loggers`` (metrics.jsonl is always written): none, all (hacrl's default), names."""
    if report_to is None or report_to == "all":
        return {}
    names = [report_to] if isinstance(report_to, str) else list(report_to)
    names = [n for n in names if n != "none"]
    wrong = [n for n in names if n not in TRACKERS]
    if wrong:
        raise ConfigError(f"args: report_to={wrong[0]!r}: hacrl reports to {', '.join(TRACKERS)} (run.loggers), "
                          f"and always to metrics.jsonl; give those, 'none' or 'all'")
    return {"run.loggers": ["jsonl", *names]}
