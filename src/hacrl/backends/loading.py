"""Loading one agent for its worker: the model (or a checkpoint's), LoRA adapter, precision, optimizer and
reference model as its ``AgentSpec`` says; a checkpoint file that cannot be read reported as one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hacrl.agents.agent import DTYPES, Agent, load_agent
from hacrl.agents.lr_schedule import SCHEDULER_FILE, agent_schedule
from hacrl.backends.devices import check_device, warn_slow_cpu_precision
from hacrl.backends.resolve import resolve_model_path
from hacrl.config import AgentSpec, Config
from hacrl.errors import DamagedCheckpoint, InputError


def load_worker_agent(cfg: Config, index: int, resume_from: Path | None) -> Agent:
    """Agent ``index`` of ``cfg``, from its model or from the checkpoint ``resume_from`` (weights, optimizer and
    its learning-rate schedule, reference; a LoRA agent as its base model plus the checkpoint's adapter)."""
    spec = cfg.agents[index]
    check_device(spec.device, f"agents.{spec.id}.device")
    warn_slow_cpu_precision(spec)
    field = f"agents.{spec.id}.model"
    try:
        path = resume_from / "agents" / spec.id if resume_from else resolve_model_path(spec.model, field)
        if spec.lora:
            resolve_model_path(spec.model, field)
    except FileNotFoundError as exc:  # an unknown builtin:<name>
        raise InputError(f"{field}: {exc}") from None
    lora = spec.lora.model_dump() if spec.lora else None
    # a LoRA agent resumes as its base model plus the checkpoint's adapter
    agent = load_answering_agent(spec, index, resolve_model_path(spec.model, field) if lora else path,
                                 max_new_tokens=cfg.rollout.max_new_tokens, lora=lora,
                                 adapter_path=path if lora and resume_from else None)
    if spec.gradient_checkpointing:
        from hacrl.agents.agent import enable_checkpointing

        enable_checkpointing(agent.model)  # non-reentrant, without transformers 5's FutureWarning
    agent.lr_schedule = agent_schedule(spec, cfg.trainer.steps)  # over the run's steps (epochs already counted)
    agent.configure_optimizer(lr=spec.lr, weight_decay=spec.weight_decay)
    if spec.kl_coef > 0:
        if resume_from and (path / "reference").is_dir():
            from transformers import AutoModelForCausalLM

            ref = from_checkpoint(path / "reference", lambda: AutoModelForCausalLM.from_pretrained(
                path / "reference", dtype=agent.model.dtype))
            agent.ref_model = ref.to(agent.device).eval().requires_grad_(False)
        else:
            agent.enable_reference()
    if resume_from:
        from_checkpoint(path / "optimizer.pt", lambda: agent.load_optimizer(path))
        from_checkpoint(path / SCHEDULER_FILE, lambda: agent.load_scheduler(path))  # after the optimizer
    return agent


def load_answering_agent(spec: AgentSpec, index: int, path: Path, *, max_new_tokens: int,
                         lora: dict[str, Any] | None = None, adapter_path: Path | None = None) -> Agent:
    """Agent ``index`` as ``spec`` has it answer (precision, device, prompt rendering, prompt and answer limits,
    autocast) from the model directory ``path``: the part of loading that training (``load_worker_agent``, which
    adds the optimizer and reference) and ``hacrl eval`` share, so an evaluation renders and generates as the
    run did. A LoRA checkpoint directory given as ``path`` loads as its merged copy."""
    agent = load_agent(
        spec.id, index, path, lora=lora, adapter_path=adapter_path,
        dtype=spec.dtype, device=spec.device, template=spec.template,
        system_prompt=spec.system_prompt, chat_template_kwargs=spec.chat_template_kwargs,
        max_prompt_tokens=spec.max_prompt_tokens,
        max_answer_tokens=spec.max_answer_tokens or max_new_tokens,
    )
    agent.source = spec.model
    if spec.autocast:
        agent.autocast_dtype = DTYPES[spec.autocast]
    return agent


def from_checkpoint(path: Path, load: Any) -> Any:
    """``load()``, with a file of the checkpoint that cannot be read reported as one line naming it."""
    try:
        return load()
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a cut-short zip, a bad header, a pickle error: a damaged file
        ckpt = path.parents[2] if path.parent.parent.name == "agents" else path
        lines = [x for x in str(exc).strip().splitlines() if x.strip()]
        raise DamagedCheckpoint(f"checkpoint {ckpt} is damaged: {path.relative_to(ckpt)} cannot be read "
                                f"({type(exc).__name__}: {lines[0][:160] if lines else ''}); resume from an "
                                f"earlier checkpoint (--resume <checkpoints/step-*>) or start over (--overwrite)"
                                ) from None


def quiet_transformers() -> None:
    """No progress bars or info lines from transformers in this process (a Ray actor's would interleave in the
    driver's output)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
