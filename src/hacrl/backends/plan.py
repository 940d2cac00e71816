"""Memory plan: what every device of a run will hold, estimated before anything loads.

``hacrl plan --preset NAME`` (or ``--config``) reads each agent's ``config.json`` only — from its model
directory (a Hub name's snapshot in the local Hub cache, a converted builtin's cache directory), from
``--model-config ID=PATH``, or from the shapes of the public models the project names, shipped as data
(``hacrl/assets/model_shapes``: every shipped preset plans on a machine without its models) — builds the
architecture on the meta device (no memory, no weights) to count its parameters, and prints per agent and
per device (one replica) the bytes of:

- weights, gradients and AdamW's two moments (in the weights' dtype; LoRA: gradients and moments of the
  adapter only), each 1/W with ``fsdp``, in host memory with ``cpu_offload``; with ``fsdp`` also the
  units gathered while they compute (the root — embeddings, LM head — and two decoder layers);
  ``fsdp_mixed_precision: bfloat16`` keeps the shards, gradients and moments float32 (the master weights)
  and gathers and computes in bf16: gathered units, activations, logits, the ``hf`` KV cache and the
  weights gathered for generation at 2 bytes a value;
- the KL reference (a full copy for a full-weight agent with ``kl_coef > 0``; none for LoRA);
- activations of one micro-batch of ``micro_batch_size`` rows of prompt + answer tokens, kept for the
  backward pass: per token and layer 6·hidden + 4·q + 2·kv + 4·intermediate values (the norms' inputs and
  outputs, attention's q, k, v and output, the gated MLP's four intermediates; +3·(q + kv) with
  Qwen3's q/k norms), and with gradient checkpointing one hidden vector per token and layer plus one
  layer's activations recomputed in the backward pass;
- logits: only answer positions get logits (the lean log-prob pass), held with their gradient:
  2 · rows · answer tokens · vocabulary values plus one float32 chunk of at most 64 MiB;
- the rollout: the ``hf`` engine's KV cache for up to 256 rows at a time, or the ``vllm`` engine's
  ``gpu_memory_utilization`` share of the device (not during training with ``enable_sleep_mode``); sharded,
  also the full weights gathered for generation (``hf``) or for the π_old pass (``vllm``, whose weight
  push after the update gathers one layer at a time: below the rollout peak).

A device *overflows* when the training or the rollout peak exceeds ``--device-memory``; the plan then
lists settings that make it fit (checkpointing, micro-batch 1, fsdp over W replicas, cpu_offload, LoRA).
Estimates, not measurements: checked against measured peaks on CPU for the tiny agents (a test) and
SmolLM2-135M (docs/real-models.md), where they agree within 25%.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from hacrl.config import AgentSpec, Config, ConfigError

GiB = float(2**30)
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
CHUNK_BYTES = 64 * 2**20  # hacrl.core.logprobs.DEFAULT_CHUNK_BYTES
HF_ROWS = 256  # the hf engine's rows per generate call


@dataclass(frozen=True)
class Shape:
    """What the plan needs of an architecture (counted on the meta device)."""

    name: str
    source: str
    arch: str
    params: int
    layer_params: int  # the largest decoder layer
    root_params: int  # everything outside the decoder layers (embeddings, LM head, final norm)
    layers: int
    hidden: int
    intermediate: int
    q_dim: int
    kv_dim: int
    vocab: int
    qk_norm: bool
    linears: tuple[tuple[str, int, int], ...]  # (module name, in, out) of every Linear but the LM head


def _shape_files() -> dict[str, Path]:
    out = {}
    for f in resources.files("hacrl.assets.model_shapes").iterdir():
        if f.name.endswith(".json"):
            for name in json.loads(f.read_text()).get("_hacrl_matches", []):
                out[name] = Path(str(f))
    return out


def known_shapes() -> list[str]:
    return sorted(_shape_files())


def _config_file(spec: AgentSpec, overrides: dict[str, str]) -> tuple[Path, str]:
    """The config.json describing ``spec``'s model and where it came from; no weights are read."""
    given = overrides.get(spec.id) or overrides.get(spec.model)
    if given:
        p = Path(given).expanduser()
        p = p / "config.json" if p.is_dir() else p
        if not p.is_file():
            raise ConfigError(f"--model-config {spec.id}={given}: no such config.json")
        return p, str(p)
    directory = _model_dir(spec)
    if directory is not None and (directory / "config.json").is_file():
        return directory / "config.json", str(directory)
    key = shape_key(spec.model)
    known = _shape_files()
    if key in known:
        return known[key], f"built-in shapes of {key} (hacrl/assets/model_shapes)"
    raise ConfigError(f"agents.{spec.id}.model: no config.json at {spec.model} and no built-in shapes for {key!r} "
                      f"(known: {', '.join(sorted(known))}); give --model-config {spec.id}=path/to/config.json")


def shape_key(model: str) -> str:
    """The name a model spec is looked up by in the shipped shapes: its last path part, lower case,
    without ``builtin:`` or ``@revision``.

    >>> shape_key("Qwen/Qwen3-0.6B@main"), shape_key("builtin:smollm2-135m-instruct"), shape_key("models/Qwen3-4B/")
    ('qwen3-0.6b', 'smollm2-135m-instruct', 'qwen3-4b')
    """
    return model.removeprefix("builtin:").rstrip("/").split("@")[0].split("/")[-1].lower()


def _model_dir(spec: AgentSpec) -> Path | None:
    """The model directory if it exists here (a Hub name: its snapshot in the local Hub cache), without
    converting or downloading anything."""
    if spec.model.startswith("builtin:"):
        from hacrl.agents.gguf import PRETRAINED, model_dir
        from hacrl.agents.tiny import tiny_agent_path

        name = spec.model.removeprefix("builtin:")
        if name in PRETRAINED:
            return model_dir(name)
        try:
            return tiny_agent_path(name)
        except FileNotFoundError:
            return None
    p = Path(spec.model).expanduser()
    if p.is_dir():
        return p
    from hacrl.data.hub import is_hub_name, resolve_hub_model
    from hacrl.errors import InputError

    try:
        return resolve_hub_model(spec.model) if is_hub_name(spec.model) else None
    except InputError:  # not cached here: the shipped shapes may know it
        return None


def model_shape(spec: AgentSpec, overrides: dict[str, str] | None = None) -> Shape:
    """Count ``spec``'s model on the meta device from its config.json alone."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from hacrl.learner.sharding import decoder_layers

    path, source = _config_file(spec, overrides or {})
    raw = json.loads(path.read_text())
    fields = {k: v for k, v in raw.items() if not k.startswith("_hacrl")}
    try:
        config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"agents.{spec.id}: {path} is not a model config.json this transformers knows "
                          f"({exc})") from None
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads, kv_heads = text.num_attention_heads, getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    layers = decoder_layers(model)
    per_layer = [sum(p.numel() for p in m.parameters()) for m in layers]
    total = sum(p.numel() for p in model.parameters())
    linears = tuple((n, m.in_features, m.out_features) for n, m in model.named_modules()
                    if isinstance(m, torch.nn.Linear) and m is not model.get_output_embeddings())
    qk_norm = any(n.endswith("q_norm") for n, _ in model.named_modules())
    return Shape(spec.model, source, type(model).__name__, total, max(per_layer, default=0),
                 total - sum(per_layer), len(layers), text.hidden_size, text.intermediate_size, heads * head_dim,
                 kv_heads * head_dim, text.vocab_size, qk_norm, linears)


def lora_params(shape: Shape, r: int, targets: list[str] | str) -> int:
    """Adapter parameters: r·(in + out) for every targeted Linear (``all-linear``: all but the LM head)."""
    def hit(name: str) -> bool:
        return targets == "all-linear" or any(name.split(".")[-1] == t for t in targets)
    return sum(r * (i + o) for name, i, o in shape.linears if hit(name))


@dataclass(frozen=True)
class Setting:
    """The knobs the plan varies for one agent."""

    world: int
    fsdp: bool
    offload: bool
    lora_r: int | None
    lora_targets: Any
    checkpointing: bool
    micro: int
    dtype: str
    act_dtype: str  # activations: the weights' dtype, or bfloat16 under autocast or fsdp mixed precision
    kl: bool
    engine: str  # rollout.engine
    hf_rows: int  # hf engine: rows per generate call (engine_options.batch_size)
    engine_util: float  # vllm: gpu_memory_utilization
    sleep: bool  # vllm: enable_sleep_mode (the engine's memory is free during training)
    mixed: bool = False  # fsdp_mixed_precision: bf16 gathered weights and compute over float32 shards


def setting_of(spec: AgentSpec, cfg: Config) -> Setting:
    opts = cfg.rollout.engine_options
    return Setting(spec.data_parallel, spec.fsdp, spec.cpu_offload, spec.lora.r if spec.lora else None,
                   spec.lora.target_modules if spec.lora else "all-linear", spec.gradient_checkpointing,
                   cfg.trainer.micro_batch_size, spec.dtype,
                   spec.autocast or spec.fsdp_mixed_precision or spec.dtype, spec.kl_coef > 0,
                   cfg.rollout.engine, int(opts.get("batch_size", HF_ROWS)),
                   float(opts.get("gpu_memory_utilization", 0.9)), bool(opts.get("enable_sleep_mode", False)),
                   spec.fsdp_mixed_precision is not None)


def estimate(shape: Shape, s: Setting, *, prompt: int, answer: int, rollout_rows: int,
             device_bytes: float) -> dict[str, float]:
    """Bytes per device (one replica) of each component, the two phase peaks and host memory;
    ``rollout_rows`` is the answers one replica generates per step."""
    b, ab = BYTES[s.dtype], BYTES[s.act_dtype]
    gb = ab if s.mixed else b  # bytes of a gathered (unsharded) weight
    shard = s.world if s.fsdp else 1
    trainable = lora_params(shape, s.lora_r, s.lora_targets) if s.lora_r else shape.params
    params = shape.params + (trainable if s.lora_r else 0)
    state = {
        "weights": params * b / shard,
        "gradients": trainable * b / shard,
        "optimizer": 2 * trainable * b / shard,
        "reference": shape.params * b / shard if s.kl and not s.lora_r else 0.0,
    }
    host = sum(state.values()) if s.offload else 0.0
    device_state = {k: (0.0 if s.offload else v) for k, v in state.items()}
    gathered = (shape.root_params + 2 * shape.layer_params) * gb if s.fsdp else 0.0
    tokens = s.micro * (prompt + answer)
    h, q, kv, i = shape.hidden, shape.q_dim, shape.kv_dim, shape.intermediate
    per_token_layer = 6 * h + 4 * q + 2 * kv + 4 * i + (3 * (q + kv) if shape.qk_norm else 0)
    full_acts = tokens * shape.layers * per_token_layer * ab
    ckpt_acts = tokens * (shape.layers * h + per_token_layer) * ab
    acts = ckpt_acts if s.checkpointing else full_acts
    logits = 2 * s.micro * answer * shape.vocab * ab + min(CHUNK_BYTES, s.micro * answer * shape.vocab * 4)
    rows = min(rollout_rows, s.hf_rows)
    kv_cache = rows * ((prompt + answer) * shape.layers * 2 * kv * ab + shape.vocab * 4) if s.engine == "hf" else 0.0
    rollout_full = shape.params * gb if s.fsdp else 0.0  # sharded: the full weights, gathered for generation
    engine_mem = s.engine_util * device_bytes if s.engine != "hf" else 0.0
    resident = sum(device_state.values())
    train = resident + gathered + acts + logits + (0.0 if s.sleep else engine_mem)
    roll = resident + rollout_full + kv_cache + engine_mem
    return {**device_state, "gathered": gathered, "activations": acts, "activations_full": full_acts,
            "activations_ckpt": ckpt_acts, "logits": logits, "kv_cache": kv_cache, "rollout_full": rollout_full,
            "engine": engine_mem, "train_peak": train, "rollout_peak": roll, "host": host}


@dataclass(frozen=True)
class PlanInputs:
    prompt: int  # tokens of a prompt (the agent's max_prompt_tokens, or --prompt-tokens)
    answer: int  # tokens of an answer (max_answer_tokens or rollout.max_new_tokens)
    answers_per_step: int  # answers an agent generates per step (all replicas together)


@dataclass
class AgentPlan:
    spec: AgentSpec
    shape: Shape
    setting: Setting
    inputs: PlanInputs
    est: dict[str, float]
    fixes: list[tuple[str, dict[str, float]]]
    gpus: float = 0.0  # Ray: GPUs the agent's replicas hold together (data_parallel x GPUs per actor)


def _inputs(cfg: Config, spec: AgentSpec, prompt_tokens: int | None) -> PlanInputs:
    from hacrl.learner.algorithms import resolve

    try:  # a config the trainer would refuse is still planned, at G answers per prompt
        multiplier = resolve(cfg.algorithm).rollout_multiplier
    except (KeyError, ValueError):
        multiplier = 1
    return PlanInputs(prompt_tokens or spec.max_prompt_tokens, spec.max_answer_tokens or cfg.rollout.max_new_tokens,
                      cfg.trainer.batch_size * cfg.rollout.rollouts_per_prompt * multiplier)


def _run(shape: Shape, s: Setting, p: PlanInputs, device_bytes: float) -> dict[str, float]:
    return estimate(shape, s, prompt=p.prompt, answer=p.answer, rollout_rows=-(-p.answers_per_step // s.world),
                    device_bytes=device_bytes)


def _changes(cfg: Config, index: int, old: Setting, new: Setting) -> list[str]:
    """The ``--set`` assignments that turn ``old`` into ``new`` (an id with a dot is addressed by index)."""
    spec = cfg.agents[index]
    a = f"agents.{index if '.' in spec.id else spec.id}"
    out = []
    if new.fsdp != old.fsdp:
        out.append(f"{a}.fsdp=true")
    if new.world != old.world:
        out.append(f"{a}.data_parallel={new.world}")
        if cfg.backend.name != "ray":
            out += ["backend.name=ray", f"{a}.device=cuda", "backend.num_gpus_per_agent=1"]
    if new.offload != old.offload:
        out.append(f"{a}.cpu_offload=true")
    if new.mixed != old.mixed:
        out.append(f"{a}.fsdp_mixed_precision=bfloat16")
    if new.lora_r != old.lora_r:
        out.append(f"{a}.lora.r={new.lora_r}")
    if new.checkpointing != old.checkpointing:
        out.append(f"{a}.gradient_checkpointing=true")
    if new.micro != old.micro:
        out.append(f"trainer.micro_batch_size={new.micro}")
    if new.engine != old.engine:
        out += [f"rollout.engine={new.engine}", f"rollout.engine_options.gpu_memory_utilization={new.engine_util}",
                "rollout.engine_options.enable_sleep_mode=true"]
    elif new.hf_rows != old.hf_rows:
        out.append(f"rollout.engine_options.batch_size={new.hf_rows}")
    return out


def _cost(old: Setting, new: Setting) -> int:
    """How much a change asks of the user: sharding, offload, checkpointing, micro-batch and the rollout
    engine and mixed precision count 1 each; LoRA (training other weights) counts 2."""
    return ((new.fsdp, new.world) != (old.fsdp, old.world)) + (new.offload != old.offload) + (new.mixed != old.mixed) \
        + 2 * (new.lora_r != old.lora_r) + (new.checkpointing != old.checkpointing) + (new.micro != old.micro) \
        + ((new.engine, new.hf_rows) != (old.engine, old.hf_rows))


def _candidates(s: Setting, max_world: int) -> list[Setting]:
    """Settings that lower a device's peak, least invasive first."""
    lean = replace(s, checkpointing=True, micro=1)
    out = [replace(s, checkpointing=True), replace(s, micro=1), lean]
    worlds = [w for w in (2, 4, 8, 16, 32) if w <= max_world and (w > s.world or not s.fsdp)]
    out += [replace(s, fsdp=True, world=w) for w in worlds]
    out += [replace(lean, fsdp=True, world=w) for w in worlds]
    out += [replace(lean, fsdp=True, world=w, offload=True) for w in worlds]
    if s.dtype == "float32" and s.act_dtype == "float32":  # bf16 compute over float32 master shards
        out += [replace(c, mixed=True, act_dtype="bfloat16") for c in [s, *out] if c.fsdp]
    out += [replace(lean, lora_r=8, lora_targets="all-linear")]
    if s.engine == "hf":  # generation: fewer rows per call, or vLLM sleeping through the update
        rollout = [replace(s, hf_rows=r) for r in (64, 16, 4) if r < s.hf_rows]
        rollout += [replace(s, engine="vllm", engine_util=u, sleep=True) for u in (0.3, 0.5)]
        out += [replace(c, engine=r.engine, hf_rows=r.hf_rows, engine_util=r.engine_util, sleep=r.sleep)
                for r in rollout for c in [s, *out]]  # training-only changes stay candidates too
    seen: list[Setting] = []
    for c in out:
        if c != s and c not in seen:
            seen.append(c)
    return seen


def plan(cfg: Config, *, model_configs: dict[str, str] | None = None, device_memory_gib: float = 80.0,
         max_world: int = 8, prompt_tokens: int | None = None) -> list[AgentPlan]:
    """One :class:`AgentPlan` per agent; ``fixes`` lists up to three settings that fit when it overflows."""
    device_bytes = device_memory_gib * GiB
    plans = []
    for index, spec in enumerate(cfg.agents):
        shape = model_shape(spec, model_configs)
        s = setting_of(spec, cfg)
        inputs = _inputs(cfg, spec, prompt_tokens)
        est = _run(shape, s, inputs, device_bytes)
        fixes: list[tuple[str, dict[str, float]]] = []
        if max(est["train_peak"], est["rollout_peak"]) > device_bytes:
            fitting = []
            for alt in _candidates(s, max_world):
                alt_est = _run(shape, alt, inputs, device_bytes)
                peak = max(alt_est["train_peak"], alt_est["rollout_peak"])
                if peak <= device_bytes:
                    fitting.append((_cost(s, alt), -peak, " ".join(_changes(cfg, index, s, alt)), alt_est))
            # the smallest change first; among equals the one that leaves the least memory unused
            fixes = [(label, e) for _, _, label, e in sorted(fitting, key=lambda f: f[:2])[:3]]
        per_actor = spec.num_gpus if spec.num_gpus is not None else cfg.backend.num_gpus_per_agent
        gpus = spec.data_parallel * per_actor if cfg.backend.name == "ray" else 0.0
        plans.append(AgentPlan(spec, shape, s, inputs, est, fixes, gpus))
    return plans


ROWS = [("weights", "weights"), ("gathered", "gathered FSDP units"), ("gradients", "gradients"),
        ("optimizer", "optimizer (AdamW)"), ("reference", "reference (KL)"),
        ("activations_full", "activations, no checkpointing"), ("activations_ckpt", "activations, checkpointing"),
        ("logits", "logits (answer positions)"), ("kv_cache", "rollout KV cache (hf)"),
        ("rollout_full", "gathered weights for rollout"), ("engine", "vLLM engine"),
        ("train_peak", "training peak"), ("rollout_peak", "rollout peak"), ("host", "host memory (offload)")]


def _gib(x: float) -> str:
    """GiB with two decimals (one past 10 GiB); under 0.1 GiB in MiB, marked M."""
    if x == 0:
        return "-"
    return f"{x / 2**20:.1f}M" if x < 0.1 * GiB else f"{x / GiB:.2f}" if x < 10 * GiB else f"{x / GiB:.1f}"


def render(plans: list[AgentPlan], *, device_memory_gib: float, title: str) -> str:
    """The plan as a table (GiB per device, one column per agent) and the fixes of overflowing agents."""
    width = max(14, *(len(p.spec.id) + 2 for p in plans))
    head = f"{'per device, GiB':<32}" + "".join(f"{p.spec.id:>{width}}" for p in plans)
    lines = [f"hacrl plan: {title}; device memory {device_memory_gib:.1f} GiB (estimates)", "", head]

    def row(label: str, values: list[str]) -> None:
        lines.append(f"{label:<32}" + "".join(f"{v:>{width}}" for v in values))

    row("model", [p.shape.arch.removesuffix("ForCausalLM") for p in plans])
    row("parameters", [f"{p.shape.params / 1e9:.2f}B" if p.shape.params >= 1e8 else f"{p.shape.params / 1e6:.2f}M"
                       for p in plans])
    row("replicas (data_parallel)", [f"{p.setting.world}{' fsdp' if p.setting.fsdp else ''}"
                                     f"{'-bf16' if p.setting.mixed else ''}" for p in plans])
    short = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
    row("weights / activations dtype", [f"{short[p.setting.dtype]}/{short[p.setting.act_dtype]}" for p in plans])
    row("micro-batch x tokens", [f"{p.setting.micro}x({p.inputs.prompt}+{p.inputs.answer})" for p in plans])
    for key, label in ROWS:
        values = [_gib(p.est[key]) for p in plans]
        if any(v != "-" for v in values):
            row(label, values)
    device_bytes = device_memory_gib * GiB
    row("fits", ["yes" if max(p.est["train_peak"], p.est["rollout_peak"]) <= device_bytes else
                 f"NO +{(max(p.est['train_peak'], p.est['rollout_peak']) - device_bytes) / GiB:.1f}" for p in plans])
    lines.append("")
    if any(p.gpus for p in plans):
        lines.append("GPUs (Ray): " + " + ".join(f"{p.spec.id} {p.gpus:g}" for p in plans)
                     + f" = {sum(p.gpus for p in plans):g}")
    for p in plans:
        lines.append(f"{p.spec.id}: shapes from {p.shape.source}")
    if any(p.inputs.prompt == p.spec.max_prompt_tokens for p in plans):
        lines.append("prompts counted at max_prompt_tokens, an upper bound: pass --prompt-tokens N (your data's "
                     "longest rendered prompt) for a closer estimate")
    for p in plans:
        peak = max(p.est["train_peak"], p.est["rollout_peak"])
        if peak <= device_bytes:
            continue
        lines.append(f"{p.spec.id} overflows {device_memory_gib:.1f} GiB by {(peak - device_bytes) / GiB:.1f} GiB; "
                     + ("it fits with:" if p.fixes else "no single setting here makes it fit"))
        for label, est in p.fixes:
            lines.append(f"  --set {label.replace(' ', ' --set ')}   (training {est['train_peak'] / GiB:.1f}, "
                         f"rollout {est['rollout_peak'] / GiB:.1f} GiB per device)")
    return "\n".join(lines)



# ---- checking the estimate -----------------------------------------------------------------------------

def measure_update_peak(agent: Any, rows: list[Any], *, micro_batch_size: int,
                        kl_coef: float = 0.0) -> dict[str, float]:
    """Peak bytes of live CPU tensors during one optimizer step of ``agent`` on ``rows``, after a first
    step so that AdamW's moments exist (the steady state), to hold :func:`estimate` against. The profiler
    records the step's allocations; the weights, reference and optimizer state present before it are
    added. Returns ``peak`` and ``resident`` in bytes."""
    from torch.profiler import ProfilerActivity, profile

    from hacrl.config import AlgorithmConfig
    from hacrl.learner.algorithms import ALGORITHMS
    from hacrl.learner.settings import loss_settings
    from hacrl.learner.sharding import optimizer_numel
    from hacrl.learner.update import update_learner

    settings = loss_settings(AlgorithmConfig(clip_low=0.2, clip_high=0.28), kl_coef=kl_coef,
                             rollout_correction="off")

    def step() -> None:
        update_learner(agent, [rows], ALGORITHMS.get("gspo"), settings, micro_batch_size=micro_batch_size,
                       grad_clip=1.0, shared_prompt=False)

    step()
    agent.optimizer.zero_grad(set_to_none=True)
    models = [agent.model] + ([agent.ref_model] if agent.ref_model is not None else [])
    size = next(agent.model.parameters()).element_size()
    resident = sum(p.numel() * p.element_size() for m in models for p in m.parameters()) \
        + optimizer_numel(agent.optimizer) * size
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return {"peak": float(resident + peak), "resident": float(resident)}
