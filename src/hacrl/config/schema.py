"""The config tree's sections (pydantic, frozen, unknown keys refused) and the values derived from them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hacrl.errors import InputError
from hacrl.types import HELD_OUT_SEED


class ConfigError(InputError):
    """A bad config: the message is one line naming the field and the fix."""


class _Section(BaseModel):
    # inf and nan are refused: a learning rate of .inf is a typo, not a setting
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, v: Any, info: Any) -> Any:
        """``--set trainer.steps=true`` is not 1: a number field takes no boolean."""
        field = cls.model_fields.get(info.field_name) if info.field_name else None
        if isinstance(v, bool) and field is not None and _is_number(field.annotation):
            raise ValueError("a number is expected, not a boolean")
        return v


def _is_number(annotation: Any) -> bool:
    """``int``, ``float`` or an optional one (not ``bool``, ``Any`` or a union with other types)."""
    import typing

    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    return all(a in (int, float) for a in args)


class LoraSpec(_Section):
    r: int = Field(8, ge=1, description="LoRA rank")
    alpha: float = Field(16.0, gt=0, description="LoRA scaling numerator (scale = alpha / r)")
    dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout; keep 0 so training log-probs match π_old")
    target_modules: list[str] | str = Field("all-linear", description="module names, or 'all-linear'")


class AgentSpec(_Section):
    id: str = Field(description="unique agent name, used in metrics and checkpoint paths")
    model: str = Field(description="model directory, org/name[@revision] from the Hugging Face cache, or "
                       "builtin:<name> for a shipped model")
    lr: float = Field(1e-6, gt=0, description="AdamW learning rate")
    lr_schedule: Literal["constant", "linear", "cosine", "constant_with_warmup"] = Field(
        "constant", description="the rate over the run, TRL's lr_scheduler_type (transformers' get_scheduler, "
        "advanced once per training step): constant lr, a linear or cosine decay to 0 at trainer.steps after the "
        "warm-up, or constant_with_warmup")
    warmup_steps: int = Field(0, ge=0, description="training steps of linear warm-up from 0 to lr (TRL's "
                              "warmup_steps; wins when > 0)")
    warmup_ratio: float = Field(0.0, ge=0, le=1, description="warm-up as a share of trainer.steps, rounded up, "
                                "when warmup_steps is 0 (TRL's warmup_ratio)")
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0, description="max gradient norm per optimizer step")
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    autocast: Literal["bfloat16"] | None = Field(
        None, description="compute forward passes in this dtype over the weights' own (mixed precision: float32 "
        "weights and AdamW, bfloat16 matmuls)")
    device: str = "cpu"
    template: Literal["auto", "chat", "plain"] = Field("auto", description="prompt rendering")
    system_prompt: str | None = None
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    kl_coef: float = Field(0.0, ge=0, description="β of the k3 KL to the initial weights, own answers only")
    max_prompt_tokens: int = Field(1024, gt=0)
    max_answer_tokens: int | None = Field(None, gt=0, description="training-view limit; default rollout.max_new_tokens")
    lora: LoraSpec | None = Field(None, description="train LoRA adapters only (peft); KL reference = adapters off")
    gradient_checkpointing: bool = Field(False, description="recompute each layer's activations in the backward "
                                         "pass: far less memory for long answers, ~30% more compute")
    data_parallel: int = Field(1, ge=1, description="ray backend: replicas of this agent training data-parallel "
                               "(one actor each, num_cpus/num_gpus per replica)")
    fsdp: bool = Field(False, description="shard parameters, gradients and AdamW state (and a full-weight KL "
                       "reference) over the data_parallel replicas with PyTorch FSDP2, 1/W each")
    cpu_offload: bool = Field(False, description="fsdp: keep the shards, their gradients and the optimizer step "
                              "in host memory (FSDP2 CPUOffloadPolicy)")
    fsdp_mixed_precision: Literal["bfloat16"] | None = Field(
        None, description="fsdp: FSDP2 mixed precision (MixedPrecisionPolicy): parameters all-gathered and "
        "computed in bfloat16 (half the gathered memory and traffic), gradients reduced in float32, float32 "
        "master shards and AdamW state (needs dtype=float32; unsharded agents: autocast)")
    num_cpus: float | None = Field(None, ge=0, description="ray backend: CPUs of this agent's actor "
                                   "(default backend.num_cpus_per_agent)")
    num_gpus: float | None = Field(None, ge=0, description="ray backend: GPUs of this agent's actor "
                                   "(default backend.num_gpus_per_agent)")

    @field_validator("id")
    @classmethod
    def _id_ok(cls, v: str) -> str:
        if not v or not all(c.isalnum() or c in "-_." for c in v):
            raise ValueError(f"{v!r} must be non-empty letters, digits, '-', '_' or '.'")
        return v

    @model_validator(mode="after")
    def _warmup_has_a_schedule(self) -> AgentSpec:
        """TRL's ``constant`` ignores a warm-up silently; here a warm-up without a schedule that has one is an error."""
        if self.lr_schedule == "constant" and (self.warmup_steps or self.warmup_ratio):
            key = "warmup_steps" if self.warmup_steps else "warmup_ratio"
            raise ValueError(f"{key}={getattr(self, key)} needs a schedule with a warm-up; set "
                             f"agents.{self.id}.lr_schedule=constant_with_warmup (or linear, cosine)")
        return self


class TaskConfig(_Section):
    kind: Literal["builtin", "dataset", "reasoning-gym"] = Field(
        "builtin", description="builtin procedural task, local dataset files, or a reasoning-gym generator")
    name: str = Field("add2", description="builtin task or reasoning-gym dataset name (see `hacrl presets`); "
                      "a dataset's defaults to its file's name")
    train_path: str | None = Field(None, description="dataset: jsonl/json/parquet file, saved HF dataset dir, "
                                   "or org/name[@revision][:split] from the Hugging Face cache")
    test_path: str | None = Field(None, description="dataset: held-out file (default: a fraction of train)")
    test_benchmark: str | None = Field(None, description="dataset: read test_path with this benchmark's reader")
    question_field: str = Field("question", description="dataset: field of the question (dotted paths work)")
    answer_field: str = Field("answer", description="dataset: field of the ground-truth answer")
    prompt_template: str | None = Field(None, description="must contain {question}; default: the paper's")
    max_prompt_chars: int | None = Field(None, gt=0, description="longer prompts are skipped and counted")
    test_fraction: float = Field(0.05, gt=0, lt=1, description="dataset without test_path: held-out share")
    size: int = Field(10_000, ge=1, description="reasoning-gym: training items")
    test_size: int = Field(500, ge=1, description="reasoning-gym: held-out problems (distinct questions)")
    test_seed: int = Field(HELD_OUT_SEED, ge=0, description="seed of the held-out problems (reasoning-gym item "
                           "seeds test_seed+i; a dataset's held-out fraction and order): fixed, not run.seed, so "
                           "every seed is evaluated on the same problems")
    fewshot: int = Field(0, ge=0, description="k worked examples in the task's answer format before every prompt, "
                         "drawn once from the train side")
    options: dict[str, Any] = Field(default_factory=dict, description="reasoning-gym: dataset options")
    reward: str | list[str] | None = Field(
        None, description="reward name, module:function or file.py:function, or a list of them (summed with "
        "reward_weights); default: the task's verifier")
    reward_weights: list[float] | None = Field(
        None, description="one weight per `reward` (TRL's reward_weights: the weighted sum); default: all 1")
    reward_contract: Literal["auto", "hacrl", "trl", "verl"] = Field(
        "auto", description="how `reward` is called: hacrl fn(completion, sample), trl fn(completions, **columns) "
        "-> list (batched), verl compute_score(data_source, solution_str, ground_truth, extra_info); auto: read "
        "from each function's signature")
    reward_timeout_s: float | None = Field(
        10.0, gt=0, description="per-answer time limit of a `reward` spec (worker processes; a batched call gets it "
        "per answer it scores); null: score inline")

    @model_validator(mode="after")
    def _weights_match(self) -> TaskConfig:
        if isinstance(self.reward, list) and not self.reward:
            raise ValueError("reward: an empty list; name at least one reward, or leave reward out")
        if self.reward_weights is not None:
            n = len(self.reward) if isinstance(self.reward, list) else 1
            if self.reward is None or len(self.reward_weights) != n:
                raise ValueError(f"reward_weights has {len(self.reward_weights)} weights for {n if self.reward else 0} "
                                 f"rewards; give one weight per task.reward entry")
        return self


class RolloutConfig(_Section):
    engine: str = "hf"
    rollouts_per_prompt: int = Field(8, ge=1, description="G: answers per prompt per agent")
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(64, gt=0)
    old_logprobs: Literal["auto", "rollout", "recompute"] = Field(
        "auto", description="π_old source: rollout log-probs (exact at T=1, top-p 1) or a fresh forward pass"
    )
    engine_options: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments of the engine (vllm: gpu_memory_utilization, "
        "max_model_len, enable_sleep_mode, ...)")


# ε_low, ε_high of own-answer clipping when the config leaves algorithm.clip_low / clip_high out (or null):
# GSPO's sequence-ratio radii (the paper's 3e-4 / 4e-4) for every algorithm but token-level grpo (DAPO's).
CLIP_DEFAULTS: dict[str, tuple[float, float]] = {"grpo": (0.2, 0.28)}
# λ of the NLL term (algorithm.imitation_coef) where an algorithm's default is not 1: SGT's 0.1 (second-hand, GRAFT)
IMITATION_COEF_DEFAULTS: dict[str, float] = {"sgt": 0.1}
SEQUENCE_CLIP_DEFAULT = (3e-4, 4e-4)


def _off_mode(v: Any) -> Any:
    """A mode field's value as written: YAML reads a bare ``off`` (``--set algorithm.rollout_correction=off``)
    as false, which for these fields means the mode ``off``."""
    return "off" if v is False else v


class AlgorithmConfig(_Section):
    name: str = Field("hacpo", description="hacpo, gspo, gspo2x, gspo-x<N>, naive, imitation, grpo, a hacpo-* "
                      "variant, naive-recompute, sgt, luffy, ftis, gated-group or trust (docs/methods.md)")
    # the defaults below are hacpo's; _algorithm_clip_defaults puts in the named algorithm's when they are left out
    clip_low: float = Field(SEQUENCE_CLIP_DEFAULT[0], ge=0, lt=1, description="ε_low of own-answer clipping; "
                            "default: the algorithm's, 3e-4 (GSPO, the paper), grpo 0.2")
    clip_high: float = Field(SEQUENCE_CLIP_DEFAULT[1], ge=0, description="ε_high of own-answer clipping; "
                             "default: the algorithm's, 4e-4 (GSPO, the paper), grpo 0.28")
    alpha: float = Field(1.0, ge=0, description="exponential importance-sampling exponent α")
    delta: float = Field(0.2, ge=0, le=1, description="cross clip starts at [1-δ, 1]")
    delta_step: float = Field(0.025, ge=0, description="per-minibatch tightening of the cross lower bound")
    capability_window: int = Field(5, ge=1, description="K: steps averaged into an agent's capability")
    max_log_ratio: float = Field(10.0, gt=0)
    cross_window: Literal["fixed", "adaptive"] = Field(
        "fixed", description="fixed: the paper's [1-δ, 1]; adaptive: each learner widens ℓ_0 per source agent until "
        "window_target of that source's cross answers lie inside (never narrower than 1-δ; hacrl.core.window)")
    window_target: float = Field(0.75, gt=0, le=1, description="adaptive window: share of a source's cross answers "
                                 "to hold inside [ℓ_0, 1]")
    window_floor: float = Field(0.1, gt=0, lt=1, description="adaptive window: the lowest ℓ_0")
    window_smoothing: float = Field(0.5, gt=0, le=1, description="adaptive window: weight of the newest step in the "
                                    "geometric average of ℓ_0 across steps (1: the last step only)")
    imitation_coef: float = Field(1.0, ge=0, description="imitation, sgt: λ of the supervised term, the mean over a "
                                  "minibatch's verified-correct (reward >= 1) answers of other agents of their "
                                  "token-mean NLL, added to GSPO on the learner's own answers; default: the "
                                  "algorithm's, 1 (imitation), 0.1 (sgt)")
    # the ingredients of docs/methods.md (hacrl.learner.algorithms.compose); null: the named algorithm's own
    share_prompts: Literal["all", "learner_failed", "learner_failed_partner_solved",
                           "learner_failed_partner_mixed"] | None = Field(
        None, description="prompts whose partner answers the learner sees: all, or only those where all its own "
        "answers failed (and a partner solved it / a partner's group is mixed); default: the algorithm's")
    partner_answers: Literal["group", "correct", "one_correct"] | None = Field(
        None, description="which partner answers of a shared prompt: the whole group, the verified-correct ones, "
        "or one correct one per prompt; default: the algorithm's")
    partner_old: Literal["author", "learner", "none"] | None = Field(
        None, description="π_old of a partner answer: its author's rollout log-prob, the learner's own pre-update "
        "log-prob (ratio 1 at the first minibatch), or none (no ratio); default: the algorithm's or the weight's")
    partner_weight: Literal["hacpo", "ratio", "nll", "truncated_is", "gate", "shaping", "trust"] | None = Field(
        None, description="a partner answer's weight: hacpo's window, GSPO's clip as own (ratio), λ·NLL, "
        "min(s, is_cap), GRAFT's gate 1[s > gate_threshold]·min(s, 1), LUFFY's π/(π+γ), or GSPO's clip times the "
        "learner's trust τ in that partner, cut below s = trust_floor^τ (trust); default: the algorithm's")
    advantage: Literal["hacpo", "hacpo_capped", "group", "group_mean", "own", "partner", "trust"] | None = Field(
        None, description="the advantage: hacpo's capability-aware one (hacpo_capped: ω ≤ 1 in its baseline), "
        "the joint group's (group_mean: no std), "
        "the learner's own group's (0 on partner answers), each author's own group's, or the joint group's with "
        "each partner weighted by the learner's trust (trust); default: the algorithm's")
    negatives: Literal["keep", "drop", "veto"] | None = Field(
        None, description="the partner loss's negative partner answers: keep, drop all, or drop those with "
        "KL = −log s > veto_kl; default: the algorithm's")
    is_cap: float = Field(2.0, gt=0, description="partner_weight=truncated_is: the cap C of min(s, C)")
    gate_threshold: float = Field(0.8, ge=0, description="partner_weight=gate: s must exceed it to pass the gate")
    shaping_gamma: float = Field(0.1, gt=0, description="partner_weight=shaping: γ of f(π) = π/(π + γ)")
    trust_every: int = Field(5, ge=1, description="trust: steps between two validation checks (the first before "
                             "step 1)")
    trust_val_size: int = Field(256, ge=8, description="trust: problems of the training split in the validation "
                                "slice, the same for every seed (hacrl.core.trust)")
    trust_floor: float = Field(0.1, gt=0, lt=1, description="trust: the ratio floor at full trust; a partner "
                               "answer with s below trust_floor^τ gives no gradient")
    trust_z: float = Field(2.0, ge=0, description="trust: the paired test's z (losses − wins ≥ z·√(losses + wins) "
                           "on the slice is harm)")
    trust_min_drop: float = Field(0.02, ge=0, lt=1, description="trust: the smallest net share of the slice lost "
                                  "that counts as harm")
    trust_regain: float = Field(0.25, ge=0, le=1, description="trust: τ added after each check without harm")
    trust_cut: float = Field(0.0, ge=0, description="trust: a partner whose answers' mean ratio s over the learner's "
                             "first trust_cut_steps updates (r̄) is below this is distrusted for good (τ 0: the "
                             "learner trains alone); 0 turns the cut off (hacrl.core.trust)")
    trust_cut_steps: int = Field(10, ge=1, description="trust_cut: the updates r̄ is averaged over (a run of no more "
                                 "steps than this makes no cut)")
    trust_cut_to: Literal["alone", "hacpo"] = Field(
        "alone", description="trust_cut: what a learner does once every partner of it is cut: trains alone on its "
        "own answers (alone) or on the whole pool with HACPO's four corrections (hacpo)")
    trust_budget: bool = Field(False, description="trust: move the rollout budget each step toward the learner "
                               "that can use least of its partners' answers (τ × the share its floor kept), the "
                               "N·G answers a prompt of the pooled methods in all (hacrl.core.trust.rollout_budget)")
    trust_budget_min: float = Field(0.5, gt=0, le=1, description="trust_budget: the share of G every agent writes "
                                    "at least")
    trust_mean: Literal["all", "trained"] = Field(
        "all", description="trust: the partner loss's mean over every row of a micro-batch (all, as naive) or over "
        "the rows that train (trained: own rows, and partner rows by their weight where the floor keeps them), so "
        "cut or distrusted partner answers do not shrink the learner's own step")
    trust_baseline: Literal["tau", "usable"] = Field(
        "tau", description="trust: each partner's weight in the joint group's baseline: its τ (tau), or τ × the share "
        "of its answers the ratio floor kept in the learner's previous update (usable), so answers that do not train "
        "leave the baseline too (1 before the first update)")
    veto_kl: float = Field(0.1, ge=0, description="negatives=veto: the largest per-token KL (−log s) a negative "
                           "partner answer may have")
    rollout_correction: Literal["auto", "off", "truncate", "mask", "masked-is"] = Field(
        "auto", description="own answers: weight each one's loss by w = exp(mean log π_old − mean log π_engine), "
        "its trainer-pass over engine log-probs (hacrl.core.correction): truncate min(w, cap); mask 1 inside "
        "[1/cap, cap], 0 outside; masked-is w inside, 0 outside; auto: truncate with the vllm engine, off with hf "
        "(its log-probs are the training model's own). Where π_old is the engine's (not recomputed), w = 1")
    rollout_correction_cap: float = Field(2.0, ge=1, description="rollout correction: the cap C of the "
                                          "length-normalised weight (2: a mean gap of 0.69 nats per token)")

    _off_is_not_false = field_validator("rollout_correction", mode="before")(_off_mode)

    @model_validator(mode="before")
    @classmethod
    def _algorithm_clip_defaults(cls, data: Any) -> Any:
        """Fill a missing (or null) clip radius with the algorithm's default, so config.yaml shows the value used."""
        if not isinstance(data, dict):
            return data
        name = data.get("name", "hacpo")
        low, high = CLIP_DEFAULTS.get(name, SEQUENCE_CLIP_DEFAULT) if isinstance(name, str) else SEQUENCE_CLIP_DEFAULT
        coef = IMITATION_COEF_DEFAULTS.get(name, 1.0) if isinstance(name, str) else 1.0
        return {**data, "clip_low": low if data.get("clip_low") is None else data["clip_low"],
                "clip_high": high if data.get("clip_high") is None else data["clip_high"],
                "imitation_coef": coef if data.get("imitation_coef") is None else data["imitation_coef"]}

    @model_validator(mode="after")
    def _window_floor_below_ceiling(self) -> AlgorithmConfig:
        if self.window_floor > 1.0 - self.delta:
            raise ValueError(f"window_floor={self.window_floor} is above 1 - delta = {1.0 - self.delta:g}: "
                             "set algorithm.window_floor below it (or a smaller delta)")
        return self


class TrainerConfig(_Section):
    steps: int = Field(20, ge=1, description="training steps of batch_size prompts; null: counted from "
                       "num_train_epochs")
    num_train_epochs: float | None = Field(
        None, gt=0, description="stop after this many passes over the training set (TRL's name): steps = "
        "ceil(epochs × training problems / batch_size), counted when the task is built (a dataset or "
        "reasoning-gym task; a builtin one draws problems without end); an explicit steps must agree")
    batch_size: int = Field(16, ge=1, description="prompts per step")
    minibatch_size: int | None = Field(None, ge=1, description="sequences per optimizer step; default B·G/2 "
                                          "(G: rollout.rollouts_per_prompt) for every algorithm")
    micro_batch_size: int = Field(64, ge=1, description="sequences per forward/backward pass")
    shared_prompt_forward: bool = Field(True, description="training forward runs each prompt once per micro-batch "
                                        "and its answers on its KV cache (same log-probs, less compute)")
    eval_every: int = Field(0, ge=0, description="evaluate every E steps (0: only before and after)")
    eval_size: int = Field(500, ge=1, description="held-out problems per evaluation")
    eval_k: int = Field(0, ge=0, description="also sample k answers per held-out problem of the task at the rollout "
                        "temperature and top-p: avg@k and pass@k in eval.jsonl (0: greedy only)")
    eval_benchmarks: dict[str, str] = Field(
        default_factory=dict, description="also evaluate on benchmark files, NAME: PATH (e.g. math500: data/m.jsonl), "
        "with the paper's prompt and the math reward; eval_size problems of each")
    eval_budget: int = Field(0, ge=0, description="also evaluate greedy answers to the task's held-out problems "
                             "with this longer answer budget (tokens), before training and at the end: records "
                             "with budget=N in eval.jsonl and eval_problems.jsonl, which separate a model that "
                             "learned to stop from one that learned to solve (0: off)")
    start_eval_cache: str | None = Field(None, description="a directory shared by runs that start alike (a "
                                         "comparison's runs): the greedy evaluation before training is computed "
                                         "once and copied into every run with the same agents, weights, task and "
                                         "evaluation settings (never with eval_k > 0)")
    eval_texts: int = Field(32, ge=0, description="greedy answer texts kept per agent and suite in "
                            "eval_problems.jsonl (those of the first N problems; rewards, lengths and EOS of all)")
    checkpoint_every: int = Field(0, ge=0, description="checkpoint every C steps (0: only at the end)")
    keep_last: int = Field(2, ge=1, description="checkpoints kept")
    log_samples: int = Field(4, ge=0, description="prompts whose answers are written to samples/ per step")
    threads: int | None = Field(None, ge=1, description="torch CPU threads (default: torch's choice)")
    mode: Literal["lockstep", "async"] = Field(
        "lockstep", description="lockstep: every agent waits for the slowest at every phase; async: each agent "
        "trains at its own pace and shares its answers through a pool (settings in async.*, docs/async.md)")

    @model_validator(mode="before")
    @classmethod
    def _null_steps_is_unset(cls, data: Any) -> Any:
        """``steps: null`` leaves the count to ``num_train_epochs`` (a preset's steps can be cleared so)."""
        if isinstance(data, dict) and "steps" in data and data["steps"] is None:
            return {k: v for k, v in data.items() if k != "steps"}
        return data

    @property
    def steps_known(self) -> bool:
        """Whether ``steps`` is the run's count already: not left to ``num_train_epochs`` (see
        :func:`with_epoch_steps`, which sets it once the task is built)."""
        return self.num_train_epochs is None or "steps" in self.model_fields_set


class BackendConfig(_Section):
    name: Literal["local", "ray"] = Field("local", description="local: every agent in this process; "
                                          "ray: one Ray actor per agent")
    address: str | None = Field(None, description="ray: cluster address ('auto' to join a running one); "
                                "default: start a local instance")
    num_cpus_per_agent: float = Field(1.0, ge=0, description="ray: CPUs reserved per agent actor")
    num_gpus_per_agent: float = Field(0.0, ge=0, description="ray: GPUs per agent actor (fractions share a GPU)")
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] | None = Field(
        None, description="ray: reserve all agents' resources at once in a placement group with this strategy")


class AsyncConfig(_Section):
    """The asynchronous mode's settings (``trainer.mode=async``, docs/async.md)."""

    bound: int = Field(1, ge=0, description="async: the largest staleness, in the learner's own updates, of an "
                       "answer an update may use (0: every answer is used at the first update that could take it)")
    group_wait_s: float | None = Field(
        None, ge=0, description="async: seconds an agent waits, after its rollout, for partners' answers still in "
        "flight to the same prompts, so that the joint group forms (null: until they arrive; 0: never waits)")
    staleness_correction: Literal["off", "truncate", "mask", "masked-is"] = Field(
        "truncate", description="async: own answers written by an older version of the learner train with a "
        "ratio to the learner now and this weight of the version now over the one that wrote them (as "
        "algorithm.rollout_correction: truncate min(w, cap), mask, masked-is, off)")
    staleness_cap: float = Field(2.0, ge=1, description="async: the cap C of the staleness weight (2: a mean gap "
                                 "of 0.69 nats per token)")

    _off_is_not_false = field_validator("staleness_correction", mode="before")(_off_mode)


class RunConfig(_Section):
    name: str | None = Field(None, description="run directory name under output_dir; default: preset-time")
    output_dir: str = "runs"
    seed: int = 0
    loggers: list[Literal["jsonl", "tensorboard", "wandb", "trackio"]] | None = Field(
        None, description="metric sinks (metrics.jsonl is always written); default: jsonl, plus tensorboard when "
        "installed. A listed one that is not installed stops the run with the pip command")
    project: str = Field("hacrl", description="wandb / trackio project name")
    tensorboard: bool | None = Field(None, description="older switch: false leaves TensorBoard out; true asks for it "
                                     "when run.loggers is unset (one warning line at start when it is not installed)")


class Config(_Section):
    # ``async`` is a Python keyword: the field is ``async_``, read and written as ``async``
    model_config = ConfigDict(**_Section.model_config, validate_by_name=True, validate_by_alias=True,
                              serialize_by_alias=True)

    run: RunConfig = Field(default_factory=RunConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    agents: list[AgentSpec]
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    backend: BackendConfig = Field(default_factory=BackendConfig)
    async_: AsyncConfig = Field(default_factory=AsyncConfig, alias="async")

    @model_validator(mode="after")
    def _check(self) -> Config:
        ids = [a.id for a in self.agents]
        if not ids:
            raise ValueError("agents: at least one agent is needed")
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"agents: duplicate id {dupes[0]!r}; give every agent a unique id")
        if (self.rollout.engine_options.get("enable_sleep_mode") and self.backend.name != "ray"
                and len(self.agents) > 1):
            raise ValueError("rollout.engine_options.enable_sleep_mode: vLLM allows one sleeping engine per process; "
                             "use backend.name=ray (one process per agent) or turn sleep mode off")
        for a in self.agents:
            if a.data_parallel > 1 and self.backend.name != "ray":
                raise ValueError(f"agents.{a.id}.data_parallel={a.data_parallel} needs backend.name=ray")
            if a.fsdp and a.data_parallel < 2:
                raise ValueError(f"agents.{a.id}.fsdp shards over the agent's replicas; set "
                                 f"agents.{a.id}.data_parallel to 2 or more (and backend.name=ray)")
            if a.cpu_offload and not a.fsdp:
                raise ValueError(f"agents.{a.id}.cpu_offload offloads FSDP shards; set agents.{a.id}.fsdp=true")
            if a.fsdp_mixed_precision and not a.fsdp:
                raise ValueError(f"agents.{a.id}.fsdp_mixed_precision is FSDP2's policy for sharded agents; set "
                                 f"agents.{a.id}.fsdp=true (an unsharded agent: agents.{a.id}.autocast=bfloat16)")
            if a.fsdp_mixed_precision and a.dtype != "float32":
                raise ValueError(f"agents.{a.id}.fsdp_mixed_precision keeps float32 master weights, not {a.dtype}; "
                                 f"set agents.{a.id}.dtype=float32")
            if a.fsdp_mixed_precision and a.autocast:
                raise ValueError(f"agents.{a.id}.fsdp_mixed_precision already computes in bfloat16; "
                                 f"set agents.{a.id}.autocast=null")
            if self.trainer.mode == "async" and a.data_parallel > 1:
                raise ValueError(f"trainer.mode=async with agents.{a.id}.data_parallel={a.data_parallel} is not "
                                 f"built yet; set agents.{a.id}.data_parallel=1 or trainer.mode=lockstep")
        return self

    @model_validator(mode="after")
    def _warmups_fit(self) -> Config:
        if self.trainer.steps_known:
            check_warmups(self.agents, self.trainer.steps)
        return self


def check_warmups(agents: list[AgentSpec], steps: int) -> None:
    """A warm-up longer than the run is a mistake (the rate never reaches ``lr``); raises ValueError."""
    for a in agents:
        if a.warmup_steps > steps:
            raise ValueError(f"agents.{a.id}.warmup_steps={a.warmup_steps} is more than the run's {steps} "
                             f"trainer.steps (the rate would never reach lr); lower it, or set "
                             f"agents.{a.id}.warmup_ratio instead")


def epoch_steps(epochs: float, num_train: int, batch_size: int) -> int:
    """Training steps of ``epochs`` passes over ``num_train`` problems at ``batch_size`` per step, rounded up.
    The stream of problems runs on from one pass into the next (``DataStream``), so unlike TRL (which counts a
    pass's last, partial batch as a step) exactly ``epochs × num_train`` prompts are asked for, then at most
    ``batch_size - 1`` more to fill the last step. ``epochs`` is read as written (0.1 is a tenth, not its float).

    >>> epoch_steps(1, 100, 16), epoch_steps(2, 100, 16), epoch_steps(0.5, 100, 16), epoch_steps(0.1, 30, 3)
    (7, 13, 4, 1)
    """
    return max(1, math.ceil(Fraction(str(epochs)) * num_train / batch_size))


def with_epoch_steps(cfg: Config, num_train: int | None, task: str) -> Config:
    """``cfg`` with ``trainer.steps`` counted from ``trainer.num_train_epochs`` over the task's ``num_train``
    training problems (:func:`epoch_steps`); ``cfg`` itself without epochs. The trainer calls it once the task
    is built, so config.yaml, the workers' schedules and the loop see one count. ``num_train`` None: the task
    ``task`` draws problems without end and has no epochs. Raises ConfigError."""
    t = cfg.trainer
    if t.num_train_epochs is None:
        return cfg
    if num_train is None:
        raise ConfigError(f"trainer.num_train_epochs: task {task!r} draws new problems without end, so it has no "
                          f"epochs; set trainer.steps instead (or use a dataset or reasoning-gym task)")
    steps = epoch_steps(t.num_train_epochs, num_train, t.batch_size)
    if "steps" in t.model_fields_set and t.steps != steps:
        raise ConfigError(f"trainer.steps={t.steps} and trainer.num_train_epochs={t.num_train_epochs:g} disagree: "
                          f"{t.num_train_epochs:g} passes over {num_train} training problems at {t.batch_size} per "
                          f"step are {steps} steps; set one of them (trainer.steps=null leaves it to the epochs)")
    try:
        check_warmups(cfg.agents, steps)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return cfg.model_copy(update={"trainer": t.model_copy(update={"steps": steps})})


@dataclass(frozen=True)
class Derived:
    """Values computed from the config once (never written back into it)."""

    group_size: int  # answers per prompt per agent actually sampled (2G for gspo2x)
    rows_per_prompt: int  # rows of one prompt in a learner's view
    minibatch_size: int  # sequences per optimizer step
    num_minibatches: int  # optimizer steps per learner per training step
    rollout_correction: str  # algorithm.rollout_correction with auto resolved (rollout_correction_mode)
    recompute_old_logprobs: bool  # rollout.old_logprobs with auto resolved (recompute_old_logprobs)


def default_minibatch(batch_size: int, rollouts_per_prompt: int, rows_per_prompt: int) -> int:
    """About B·G/2 answers per optimizer step for every algorithm, G the base rollouts per prompt (the
    paper's 512 = 128·8/2), in whole prompt groups: so gspo2x makes as many updates per step as 2-agent
    hacpo (4) and gspo half as many. The number of prompts per minibatch is the divisor of B whose
    answers come closest to B·G/2 (ties: the larger).

    >>> default_minibatch(16, 8, 16), default_minibatch(16, 8, 8), default_minibatch(16, 8, 24)
    (64, 64, 48)
    """
    target = batch_size * rollouts_per_prompt / 2
    divisors = [d for d in range(1, batch_size + 1) if batch_size % d == 0]
    prompts = min(divisors, key=lambda d: (abs(d * rows_per_prompt - target), -d))
    return prompts * rows_per_prompt


def derive(cfg: Config, *, shares_pool: bool, rollout_multiplier: int, needs_groups: bool) -> Derived:
    """Check the combination of sections and compute derived values; raises ConfigError. The trainer calls it
    once and hands the result to every worker (``hacrl.backends.make_backend``)."""
    g = cfg.rollout.rollouts_per_prompt * rollout_multiplier
    n = len(cfg.agents)
    if needs_groups and g * (n if shares_pool else 1) < 2:
        raise ConfigError(f"rollout.rollouts_per_prompt={cfg.rollout.rollouts_per_prompt}: group methods need "
                          f"at least 2 answers per prompt; set it to 2 or more")
    rows_per_prompt = g * (n if shares_pool else 1)
    rows = cfg.trainer.batch_size * rows_per_prompt
    mb = cfg.trainer.minibatch_size or default_minibatch(cfg.trainer.batch_size, cfg.rollout.rollouts_per_prompt,
                                                        rows_per_prompt)
    if mb % rows_per_prompt or rows % mb:
        raise ConfigError(
            f"trainer.minibatch_size={mb}: must be a multiple of the {rows_per_prompt} answers per prompt and "
            f"divide the {rows} sequences each learner trains on per step; pick e.g. {rows // 2 if rows // 2 % rows_per_prompt == 0 else rows}"
        )
    return Derived(group_size=g, rows_per_prompt=rows_per_prompt, minibatch_size=mb, num_minibatches=rows // mb,
                   rollout_correction=rollout_correction_mode(cfg), recompute_old_logprobs=recompute_old_logprobs(cfg))


def rollout_correction_mode(cfg: Config) -> str:
    """``algorithm.rollout_correction`` with ``auto`` resolved: ``truncate`` with the ``vllm`` engine, whose
    log-probs are the temperature-1 policy's (vLLM's default raw log-probs) from kernels other than the training
    pass's; ``off`` otherwise: ``hf`` samples with the training model itself, and vLLM's ``processed_logprobs``
    at a temperature or top-p other than 1 are another distribution (the weight would measure the temperature,
    not the engine). An explicit mode is kept as given.

    >>> from hacrl.config import build_config
    >>> base = {"agents": [{"id": "a", "model": "m"}]}
    >>> rollout_correction_mode(build_config({**base, "rollout": {"engine": "vllm"}}))
    'truncate'
    >>> rollout_correction_mode(build_config(base)), rollout_correction_mode(build_config(
    ...     {**base, "algorithm": {"rollout_correction": "mask"}}))
    ('off', 'mask')
    """
    mode = cfg.algorithm.rollout_correction
    if mode != "auto":
        return mode
    r = cfg.rollout
    tempered = r.engine_options.get("logprobs_mode") == "processed_logprobs" and (r.temperature != 1.0
                                                                                 or r.top_p != 1.0)
    return "truncate" if r.engine == "vllm" and not tempered else "off"


def recompute_old_logprobs(cfg: Config) -> bool:
    """Whether π_old comes from a training-pass recomputation after the rollout (``rollout.old_logprobs`` with
    ``auto`` resolved). The ``hf`` engine's log-probs are π_old exactly only at temperature 1, top-p 1 and full
    precision: under autocast, low-precision weights or FSDP mixed precision, decoding and the training pass run
    different kernels, and a rounding gap of 1e-3 in the sequence ratio already exceeds GSPO's clip radii
    (3e-4 / 4e-4); vLLM's log-probs always come from other kernels.

    >>> from hacrl.config import build_config
    >>> base = {"agents": [{"id": "a", "model": "m"}]}
    >>> recompute_old_logprobs(build_config(base)), recompute_old_logprobs(build_config(
    ...     {**base, "rollout": {"temperature": 0.7}}))
    (False, True)
    """
    r = cfg.rollout
    if r.old_logprobs != "auto":
        return r.old_logprobs == "recompute"
    mixed = any(a.autocast or a.fsdp_mixed_precision or a.dtype != "float32" for a in cfg.agents)
    return not (r.engine == "hf" and r.temperature == 1.0 and r.top_p == 1.0 and not mixed)
