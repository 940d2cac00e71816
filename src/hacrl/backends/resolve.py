"""What a config names, made concrete for one agent: the model's path (``builtin:``, a local directory or a
Hugging Face cache name), the rollout engine with its options, the seed of the agent's sampling stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hacrl.config import Config, ConfigError
from hacrl.rollout import get_engine


def resolve_model_path(spec: str, field: str = "model") -> Path:
    """``builtin:<name>`` → a pretrained model converted from a package's GGUF file (cached on first use,
    see ``hacrl.agents.gguf``) or a tiny agent shipped in the package; a local path that exists is that
    path; ``org/name[@revision]`` otherwise is a model in the Hugging Face cache (``hacrl.data.hub``,
    never downloaded); anything else is a directory (checked when it loads)."""
    if spec.startswith("builtin:"):
        from hacrl.agents.gguf import PRETRAINED, pretrained_path
        from hacrl.agents.tiny import tiny_agent_path

        name = spec.removeprefix("builtin:")
        return pretrained_path(name) if name in PRETRAINED else tiny_agent_path(name)
    path = Path(spec).expanduser()
    if not path.exists():
        from hacrl.data.hub import is_hub_name, resolve_hub_model

        if is_hub_name(spec):
            return resolve_hub_model(spec, field=field)
    return path


def make_engine(cfg: Config) -> Any:
    """The configured rollout engine; an unknown engine or option is a one-line ConfigError."""
    import inspect

    from hacrl.rollout import ENGINES

    r = cfg.rollout
    try:
        cls = ENGINES.get(r.engine)
    except KeyError as exc:
        raise ConfigError(f"rollout.engine: {exc.args[0]}") from None
    params = inspect.signature(cls).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        unknown = sorted(set(r.engine_options) - set(params))
        if unknown:
            raise ConfigError(f"rollout.engine_options.{unknown[0]}: not an option of the {r.engine} engine; "
                              f"valid: {', '.join(params) or 'none'}")
    try:
        return get_engine(r.engine, **r.engine_options)
    except ValueError as exc:  # an option's value the engine refuses
        raise ConfigError(str(exc)) from None


def agent_seed(run_seed: int, index: int) -> int:
    """The seed of agent ``index``'s sampling stream."""
    return (run_seed * 1_000_003 + 7919 * (index + 1)) % (2**63 - 1)
