"""The one typed config tree: loaded from YAML or a named preset, overridden with ``--set a.b=c``,
validated with one-line errors that name the bad key, and saved resolved to ``run_dir/config.yaml``.

Values derived from others (the default minibatch size, the effective group size of ``gspo2x``) are
computed in ``derive()``, never written back into the parsed config.

``schema``: the sections and the derived values; ``load``: presets, files, overrides and their errors;
``resume``: which settings may differ between a run and its continuation.
"""

from __future__ import annotations

from hacrl.config.load import (
    apply_override,
    build_config,
    config_fields,
    config_problems,
    config_without_errors,
    dataset_name,
    dump_config,
    load_config,
    merge_trees,
    preset_names,
    preset_text,
)
from hacrl.config.resume import LEGACY_BEHAVIOUR, RESUME_NEUTRAL, resume_conflict, training_differences
from hacrl.config.schema import (
    CLIP_DEFAULTS,
    HELD_OUT_SEED,
    SEQUENCE_CLIP_DEFAULT,
    AgentSpec,
    AlgorithmConfig,
    AsyncConfig,
    BackendConfig,
    Config,
    ConfigError,
    Derived,
    LoraSpec,
    RolloutConfig,
    RunConfig,
    TaskConfig,
    TrainerConfig,
    default_minibatch,
    derive,
    recompute_old_logprobs,
    rollout_correction_mode,
    with_epoch_steps,
)

__all__ = [
    "CLIP_DEFAULTS", "HELD_OUT_SEED", "LEGACY_BEHAVIOUR", "RESUME_NEUTRAL", "SEQUENCE_CLIP_DEFAULT",
    "AgentSpec", "AlgorithmConfig", "AsyncConfig", "BackendConfig", "Config", "ConfigError", "Derived", "LoraSpec",
    "RolloutConfig", "RunConfig", "TaskConfig", "TrainerConfig",
    "apply_override", "build_config", "config_fields", "dataset_name", "default_minibatch", "derive",
    "config_problems", "config_without_errors", "dump_config", "load_config", "merge_trees", "preset_names", "preset_text", "recompute_old_logprobs",
    "resume_conflict", "rollout_correction_mode", "training_differences", "with_epoch_steps",
]
