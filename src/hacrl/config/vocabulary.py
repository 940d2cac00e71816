"""TRL's and verl's config names answered with hacrl's key, for the one-line error of an unknown key.

A TRL user writes ``lr_scheduler_type: cosine`` or ``num_generations: 8`` (TRL's ``GRPOConfig`` and its
``TrainingArguments``), a verl user ``actor_rollout_ref.actor.optim.lr=1e-6`` or ``data.train_batch_size=256``
(verl's Hydra paths). hacrl refuses unknown keys; this map turns the refusal into the key that does that job
(docs/usage.md has the table): ``config: unknown key 'lr_scheduler_type'; `lr_scheduler_type` is TRL's name:
hacrl's key is agents.<id>.lr_schedule …``.

:data:`TRL_KEYS` is looked up by a key's last name. :data:`VERL_KEYS` by the longest tail of its dotted path
(``actor.optim.lr`` in ``actor_rollout_ref.actor.optim.lr``), a bare name last. A value is the hacrl key, with
a note after it; one that starts with :data:`NO_KEY` says why hacrl has none.
"""

from __future__ import annotations

from typing import Any

NO_KEY = "no key: "

#: TRL's GRPOConfig and TrainingArguments names → hacrl's key
TRL_KEYS: dict[str, str] = {
    "learning_rate": "agents.<id>.lr (per agent: each model keeps its own rate)",
    "lr_scheduler_type": "agents.<id>.lr_schedule (constant, linear, cosine or constant_with_warmup; per agent)",
    "warmup_ratio": "agents.<id>.warmup_ratio (per agent; needs a schedule other than constant)",
    "warmup_steps": "agents.<id>.warmup_steps (per agent; needs a schedule other than constant)",
    "weight_decay": "agents.<id>.weight_decay",
    "num_train_epochs": "trainer.num_train_epochs (steps counted from the training set's size)",
    "max_steps": "trainer.steps",
    "save_steps": "trainer.checkpoint_every",
    "save_strategy": "trainer.checkpoint_every (steps between checkpoints; 0: only at the end)",
    "save_total_limit": "trainer.keep_last",
    "eval_steps": "trainer.eval_every",
    "eval_strategy": "trainer.eval_every (steps between evaluations; 0: only before and after)",
    "evaluation_strategy": "trainer.eval_every (steps between evaluations; 0: only before and after)",
    "logging_steps": NO_KEY + "every step is logged (metrics.jsonl and the trackers; -q quiets the progress line)",
    "logging_strategy": NO_KEY + "every step is logged (metrics.jsonl and the trackers)",
    "num_generations": "rollout.rollouts_per_prompt (G, answers per prompt per agent)",
    "beta": "agents.<id>.kl_coef (k3 KL to the initial weights)",
    "epsilon": "algorithm.clip_low (own answers' ε_low; the clip is sequence-level, as in GSPO)",
    "epsilon_high": "algorithm.clip_high",
    "max_completion_length": "rollout.max_new_tokens",
    "max_prompt_length": "agents.<id>.max_prompt_tokens",
    "loss_type": "algorithm.name (hacpo, gspo, grpo, imitation, …)",
    "importance_sampling_level": "algorithm.name (gspo: sequence level; grpo: token level)",
    "report_to": "run.loggers",
    "run_name": "run.name",
    "gradient_accumulation_steps": "trainer.micro_batch_size (sequences per forward/backward pass; "
                                   "accumulation over a minibatch is automatic)",
    "per_device_train_batch_size": "trainer.batch_size (prompts per step; each agent answers each G times)",
    "output_dir": "--output on the command line (or run.output_dir)",
    "seed": "run.seed",
    "model_name_or_path": "agents.<id>.model",
    "reward_funcs": "task.reward",
    "reward_weights": "task.reward_weights",
    "use_vllm": "rollout.engine: vllm",
    "gradient_checkpointing": "agents.<id>.gradient_checkpointing",
    "bf16": "agents.<id>.autocast: bfloat16 (bf16 forward passes over float32 weights)",
    "max_grad_norm": "agents.<id>.grad_clip",
    "temperature": "rollout.temperature",
    "top_p": "rollout.top_p",
}

#: verl's Hydra paths (the tail that names them) and names → hacrl's key
VERL_KEYS: dict[str, str] = {
    "actor.optim.lr": "agents.<id>.lr (per agent: each model keeps its own rate)",
    "optim.lr_warmup_steps": "agents.<id>.warmup_steps (per agent; needs a schedule other than constant)",
    "optim.lr_warmup_steps_ratio": "agents.<id>.warmup_ratio (per agent; needs a schedule other than constant)",
    "optim.warmup_style": "agents.<id>.lr_schedule (constant, linear, cosine or constant_with_warmup; per agent)",
    "optim.lr_scheduler_type": "agents.<id>.lr_schedule (constant, linear, cosine or constant_with_warmup; "
                               "per agent)",
    "optim.weight_decay": "agents.<id>.weight_decay",
    "actor.grad_clip": "agents.<id>.grad_clip",
    "actor.use_kl_loss": "agents.<id>.kl_coef (> 0 turns the KL on)",
    "actor.kl_loss_coef": "agents.<id>.kl_coef",
    "fsdp_config.param_offload": "agents.<id>.cpu_offload (with agents.<id>.fsdp)",
    "fsdp_config.mixed_precision": "agents.<id>.autocast: bfloat16 (bf16 forward passes over float32 weights)",
    "rollout.n": "rollout.rollouts_per_prompt (G, answers per prompt per agent)",
    "rollout.name": "rollout.engine (hf or vllm)",
    "rollout.response_length": "rollout.max_new_tokens",
    "model.path": "agents.<id>.model",
    "model.enable_gradient_checkpointing": "agents.<id>.gradient_checkpointing",
    "model.lora_rank": "agents.<id>.lora.r",
    "model.lora_alpha": "agents.<id>.lora.alpha",
    "model.target_modules": "agents.<id>.lora.target_modules",
    "data.train_batch_size": "trainer.batch_size (prompts per step)",
    "data.max_response_length": "rollout.max_new_tokens",
    "data.max_prompt_length": "agents.<id>.max_prompt_tokens",
    "data.train_files": "task.train_path (with task.kind: dataset)",
    "data.val_files": "task.test_path",
    "data.prompt_key": "task.question_field",
    "algorithm.adv_estimator": "algorithm.name (hacpo, gspo, grpo, imitation, …)",
    "kl_ctrl.kl_coef": "agents.<id>.kl_coef (k3 KL to the initial weights, per agent)",
    "algorithm.use_kl_in_reward": "agents.<id>.kl_coef (a KL loss term, not a reward penalty)",
    "trainer.total_training_steps": "trainer.steps",
    "trainer.total_epochs": "trainer.num_train_epochs (steps counted from the training set's size)",
    "trainer.save_freq": "trainer.checkpoint_every",
    "trainer.test_freq": "trainer.eval_every",
    "trainer.max_actor_ckpt_to_keep": "trainer.keep_last",
    "trainer.logger": "run.loggers",
    "trainer.project_name": "run.project",
    "trainer.experiment_name": "run.name",
    "trainer.default_local_dir": "--output on the command line (or run.output_dir)",
    "trainer.n_gpus_per_node": "agents.<id>.num_gpus or backend.num_gpus_per_agent (GPUs per agent's Ray actor)",
    "custom_reward_function.path": "task.reward (file.py:function)",
    "custom_reward_function.name": "task.reward (file.py:function)",
    # bare names, where the path around them is not verl's
    "lr": "agents.<id>.lr",
    "n": "rollout.rollouts_per_prompt (G, answers per prompt per agent)",
    "kl_coef": "agents.<id>.kl_coef",
    "clip_ratio_low": "algorithm.clip_low",
    "clip_ratio_high": "algorithm.clip_high",
    "max_response_length": "rollout.max_new_tokens",
    "logger": "run.loggers",
    "train_batch_size": "trainer.batch_size (prompts per step)",
    "ppo_mini_batch_size": "trainer.minibatch_size (sequences per optimizer step)",
    "ppo_micro_batch_size_per_gpu": "trainer.micro_batch_size",
    "total_training_steps": "trainer.steps",
    "grad_clip": "agents.<id>.grad_clip",
    "policy_loss": "algorithm.name (hacpo, gspo, grpo, imitation, …)",
}


def foreign_key(path: list[str]) -> tuple[str, str, str] | None:
    """(the name as written, whose it is, hacrl's key) for a dotted key ``path``: a verl path's tail first
    (the longest), then TRL's name, then a bare verl name; None when neither uses it.

    >>> foreign_key(["actor_rollout_ref", "actor", "optim", "lr"])[:2]
    ('actor_rollout_ref.actor.optim.lr', "verl's")
    >>> foreign_key(["trainer", "lr_scheduler_type"])[1:]
    ("TRL's", 'agents.<id>.lr_schedule (constant, linear, cosine or constant_with_warmup; per agent)')
    >>> foreign_key(["trainer", "stepz"]) is None
    True
    """
    tails = [".".join(path[i:]) for i in range(len(path) - 1)]  # the longest first, two names or more
    for tail in tails:
        if tail in VERL_KEYS:
            return ".".join(path), "verl's", VERL_KEYS[tail]
    name = path[-1] if path else ""
    if name in TRL_KEYS:
        return name, "TRL's", TRL_KEYS[name]
    if name in VERL_KEYS:
        return name, "verl's", VERL_KEYS[name]
    return None


def describe(written: str, whose: str, key: str) -> str:
    """The answer to one foreign name, for the error line.

    >>> describe("beta", "TRL's", "agents.<id>.kl_coef")
    "`beta` is TRL's name: hacrl's key is agents.<id>.kl_coef"
    """
    if key.startswith(NO_KEY):
        return f"`{written}` is {whose} name; hacrl has no key for it: {key.removeprefix(NO_KEY)}"
    return f"`{written}` is {whose} name: hacrl's key is {key}"


def leaves(loc: list[Any], value: Any) -> list[list[str]]:
    """The dotted key paths under an unknown key ``loc`` holding ``value`` (a section of mappings gives one per
    leaf; a key written with dots is split at them).

    >>> leaves(["data"], {"train_batch_size": 8, "x": {"y": 1}})
    [['data', 'train_batch_size'], ['data', 'x', 'y']]
    >>> leaves(["trainer.save_freq"], 5)
    [['trainer', 'save_freq']]
    """
    path = [p for part in loc if isinstance(part, str) for p in part.split(".")]
    if not isinstance(value, dict) or not value:
        return [path]
    return [leaf for k, v in value.items() if isinstance(k, str) for leaf in leaves([*path, k], v)]
