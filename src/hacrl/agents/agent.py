"""An agent: one Hugging Face causal LM with its tokenizer, prompt rendering, optimizer (with its learning-rate
schedule, ``hacrl.agents.lr_schedule``) and optional frozen reference model. It computes token log-probs of
padded batches and builds its own training view of the shared pool: its own answers as generated, other agents'
answers re-tokenized from their text.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from hacrl.agents.lr_schedule import LRSchedule, load_scheduler, save_scheduler
from hacrl.errors import InputError

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# rendered prompts kept per agent, least recently used dropped first: a step's prompts and the held-out sets
# stay cached, while a run over a large data set does not keep every prompt it ever saw (100,000 prompts of
# ~500 tokens held ~1.8 GB as lists of ints)
PROMPT_CACHE_SIZE = 4096


@dataclass
class TokenBatch:
    """A right-padded batch of prompt+answer sequences; ``answer_mask_BT`` marks the answer tokens whose
    log-probs are taken (position t predicts token t+1, so the mask is shifted like the targets)."""

    input_ids_BL: Tensor
    attention_mask_BL: Tensor
    answer_mask_BT: Tensor  # T = L - 1


def pad_batch(prompts: list[list[int]], answers: list[list[int]], pad_id: int) -> TokenBatch:
    """Right-pad ``prompt + answer`` rows; positions then start at 0 for every row, as in generation."""
    rows = [p + a for p, a in zip(prompts, answers, strict=True)]
    length = max(2, max(len(r) for r in rows))
    ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), length), dtype=torch.long)
    ans = torch.zeros((len(rows), length - 1), dtype=torch.bool)
    for i, (p, a) in enumerate(zip(prompts, answers, strict=True)):
        n = len(p) + len(a)
        ids[i, :n] = torch.tensor(p + a, dtype=torch.long)
        attn[i, :n] = 1
        # target token j (j >= 1) is predicted at position j-1
        ans[i, len(p) - 1 : n - 1] = True
    return TokenBatch(ids, attn, ans)


def token_logprobs(model: torch.nn.Module, batch: TokenBatch) -> Tensor:
    """log π(token_{t+1} | tokens_≤t), float32 [B, L-1], zero where not an answer.

    Lean: the model computes logits only from the first answer position of the batch on
    (``logits_to_keep``, where the model takes it), and the chosen tokens' log-probs are read from them in
    chunks (``hacrl.core.selected_logprobs``), never through a float32 log-softmax over every position."""
    from hacrl.core.logprobs import selected_logprobs

    # an FSDP model with offloaded shards computes elsewhere than its parameters live (hacrl.learner.sharding)
    device = getattr(model, "compute_device", None) or next(model.parameters()).device
    mask_BT = batch.answer_mask_BT.to(device)
    length = batch.input_ids_BL.shape[1]
    answer_positions = mask_BT.any(dim=0).nonzero()
    first = int(answer_positions[0]) if len(answer_positions) else length - 2
    keep = length - first  # logits of positions first .. L-1 (the last one predicts nothing)
    extra = {"logits_to_keep": keep} if keep < length and accepts_logits_to_keep(model) else {}
    out = model(input_ids=batch.input_ids_BL.to(device), attention_mask=batch.attention_mask_BL.to(device),
                use_cache=False, **extra)
    logits_BKV = out.logits
    start = length - logits_BKV.shape[1]  # position of the first logit kept (0 without logits_to_keep)
    targets_BK = torch.cat([batch.input_ids_BL[:, start + 1 :], batch.input_ids_BL[:, :1]], dim=1).to(device)
    logp_BK = selected_logprobs(logits_BKV, targets_BK)[:, :-1]  # the last position predicts nothing
    logp_BT = torch.nn.functional.pad(logp_BK, (start, 0))
    return logp_BT * mask_BT


def accepts_logits_to_keep(model: Any) -> bool:
    """Whether ``model``'s forward takes ``logits_to_keep`` (Hugging Face causal LMs since 4.50)."""
    from hacrl.agents.shared_prompt import forward_parameters

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "logits_to_keep" in forward_parameters(type(base))


def enable_checkpointing(model: Any) -> None:
    """Recompute each layer's activations in the backward pass, non-reentrant (works with frozen inputs,
    LoRA, and keeps the RNG-free forward exact). transformers 5.x names it ``activation_checkpointing_enable``
    (its older name warns on every call: a FutureWarning); 4.x has only ``gradient_checkpointing_enable``."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


class Agent:
    """One policy of the collaboration.

    Args:
        agent_id: unique name.
        index: position in the agent order (the ``source`` id of its trajectories).
        model: a ``transformers`` causal LM.
        tokenizer: its tokenizer; must have an EOS token (a missing pad token is set to EOS).
        template: "auto" (chat template when the tokenizer has one), "chat", or "plain".
        system_prompt: optional system message for chat templates.
        chat_template_kwargs: extra arguments to ``apply_chat_template`` (e.g. enable_thinking=False).
        max_prompt_tokens, max_answer_tokens: limits of the training view (longer cross answers are truncated).
    """

    def __init__(
        self,
        agent_id: str,
        index: int,
        model: Any,
        tokenizer: Any,
        *,
        template: str = "auto",
        system_prompt: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        max_prompt_tokens: int = 1024,
        max_answer_tokens: int = 1024,
        source: str = "",
    ) -> None:
        self.id = agent_id
        self.index = index
        self.model = model
        self.tokenizer = tokenizer
        self.source = source
        if tokenizer.eos_token_id is None:
            raise InputError(f"agents.{agent_id}.model: the tokenizer has no EOS token; set eos_token in its "
                             f"tokenizer_config.json")
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        if template not in ("auto", "chat", "plain"):
            raise InputError(f"agents.{agent_id}.template must be auto, chat or plain, got {template!r}")
        has_chat = bool(getattr(tokenizer, "chat_template", None))
        if template == "chat" and not has_chat:
            raise InputError(f"agents.{agent_id}.template=chat but the tokenizer has no chat template; use plain")
        self.use_chat = has_chat if template == "auto" else template == "chat"
        self.system_prompt = system_prompt
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.max_prompt_tokens = max_prompt_tokens
        self.max_answer_tokens = max_answer_tokens
        self.optimizer: torch.optim.Optimizer | None = None
        self.lr_schedule: LRSchedule | None = None  # None: constant, no scheduler
        self.scheduler: Any = None  # lr_schedule's scheduler on the optimizer (torch's LRScheduler)
        self.ref_model: Any = None
        self.autocast_dtype: torch.dtype | None = None  # mixed precision: forward passes in this dtype
        self._prompt_cache: OrderedDict[str, list[int]] = OrderedDict()  # most recently used last

    # ---- set-up -------------------------------------------------------------------------------
    def configure_optimizer(self, *, lr: float, weight_decay: float = 0.0, betas=(0.9, 0.999)) -> None:
        """AdamW over the trainable parameters, with ``lr_schedule``'s scheduler on it (set ``lr_schedule``
        first; it stays on the agent because FSDP sharding builds the optimizer again)."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=betas)
        self.scheduler = self.lr_schedule.build(self.optimizer) if self.lr_schedule is not None else None

    @property
    def lr(self) -> float:
        """The learning rate of the next optimizer step."""
        assert self.optimizer is not None
        return float(self.optimizer.param_groups[0]["lr"])

    def step_lr(self) -> None:
        """A training step is done: the schedule's next rate (constant: nothing changes)."""
        if self.lr_schedule is not None:
            self.lr_schedule.advance(self.scheduler)

    def enable_reference(self) -> None:
        """Keep a frozen copy of the current weights as the KL reference (a LoRA agent: its base with the
        adapter disabled, no copy)."""
        from hacrl.agents.lora import AdapterDisabledReference, is_lora

        if is_lora(self.model):
            self.ref_model = AdapterDisabledReference(self.model)
            return
        self.ref_model = copy.deepcopy(self.model).eval()
        for p in self.ref_model.parameters():
            p.requires_grad_(False)

    def autocast(self) -> Any:
        """The context every forward pass of this agent runs in: ``torch.autocast`` when mixed precision
        is on (float32 weights and optimizer, bfloat16 matmuls), else nothing."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    @property
    def device(self) -> torch.device:
        return getattr(self.model, "compute_device", None) or next(self.model.parameters()).device

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def num_trainable(self) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    @property
    def is_lora(self) -> bool:
        from hacrl.agents.lora import is_lora

        return is_lora(self.model)

    # ---- text <-> tokens ----------------------------------------------------------------------
    def render_prompt(self, prompt: str) -> list[int]:
        """Token ids of the prompt as this agent sees it (chat template or plain text)."""
        cached = self._prompt_cache.get(prompt)
        if cached is not None:
            self._prompt_cache.move_to_end(prompt)
            return cached
        if self.use_chat:
            messages = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else [])
            messages.append({"role": "user", "content": prompt})
            ids = self.tokenizer.apply_chat_template(
                messages, tokenize=True, add_generation_prompt=True, **self.chat_template_kwargs
            )
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            ids = list(ids)
        else:
            text = f"{self.system_prompt}\n{prompt}" if self.system_prompt else prompt
            ids = list(self.tokenizer(text, add_special_tokens=True)["input_ids"])
        if not ids:
            raise ValueError(f"agents[{self.id}]: prompt {prompt[:40]!r} renders to no tokens")
        ids = ids[-self.max_prompt_tokens :]
        self._prompt_cache[prompt] = ids
        if len(self._prompt_cache) > PROMPT_CACHE_SIZE:
            self._prompt_cache.popitem(last=False)
        return ids

    def decode_answers(self, token_ids: list[list[int]]) -> list[str]:
        return self.tokenizer.batch_decode(token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def encode_answer(self, text: str, finished: bool) -> tuple[list[int], bool]:
        """Re-tokenize another agent's answer text; EOS is appended when the source had stopped.

        Returns (token ids, truncated)."""
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []
        if finished:
            ids.append(self.eos_id)
        truncated = len(ids) > self.max_answer_tokens
        return ids[: self.max_answer_tokens], truncated

    # ---- log-probs ----------------------------------------------------------------------------
    def batch(self, prompts: list[list[int]], answers: list[list[int]]) -> TokenBatch:
        return pad_batch(prompts, answers, int(self.tokenizer.pad_token_id))

    # ---- persistence --------------------------------------------------------------------------
    def save(self, path: Path, *, with_optimizer: bool = True) -> None:
        """Weights + tokenizer (+ optimizer and its scheduler, + reference). A LoRA agent saves its adapter and a
        merged, standalone copy in ``merged/``; its reference is the base model, so none is saved."""
        path.mkdir(parents=True, exist_ok=True)
        if self.is_lora:
            from hacrl.agents.lora import save_lora

            save_lora(self.model, path, self.tokenizer)
        else:
            self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        if with_optimizer and self.optimizer is not None:
            torch.save(self.optimizer.state_dict(), path / "optimizer.pt")
            self.save_scheduler(path)
        if self.ref_model is not None and not self.is_lora:
            self.ref_model.save_pretrained(path / "reference")

    def load_optimizer(self, path: Path) -> None:
        opt_file = path / "optimizer.pt"
        if self.optimizer is not None and opt_file.exists():
            self.optimizer.load_state_dict(torch.load(opt_file, map_location=self.device, weights_only=True))

    def save_scheduler(self, path: Path) -> None:
        """The schedule's state into ``path/scheduler.pt`` (constant: no file)."""
        if self.lr_schedule is not None:
            save_scheduler(self.scheduler, self.lr_schedule, path)

    def load_scheduler(self, path: Path) -> None:
        """The schedule's state from the checkpoint directory ``path``, its rate into the optimizer."""
        if self.lr_schedule is not None:
            load_scheduler(self.scheduler, self.lr_schedule, path, self.id)


def load_agent(
    agent_id: str,
    index: int,
    model_path: str | Path,
    *,
    dtype: str = "float32",
    device: str = "cpu",
    lora: dict[str, Any] | None = None,
    adapter_path: str | Path | None = None,
    **kwargs: Any,
) -> Agent:
    """Load an agent from a Hugging Face model directory (weights + tokenizer).

    ``lora`` (``r``, ``alpha``, ``dropout``, ``target_modules``) wraps the model with fresh LoRA adapters;
    ``adapter_path`` puts a saved adapter back on it instead (resume). A LoRA checkpoint directory given
    as ``model_path`` loads its merged copy (``merged/``).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hacrl.agents import lora as lora_lib

    path = Path(model_path)
    if not path.is_dir():
        raise InputError(f"agents.{agent_id}.model: {path} is not a directory; give a Hugging Face model directory")
    if lora_lib.is_adapter_dir(path):
        path = lora_lib.merged_dir(path, f"agents.{agent_id}.model")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception on a damaged tokenizer.json
        raise InputError(f"agents.{agent_id}.model: no usable tokenizer in {path} ({_first_line(exc)})") from None
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype])
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"agents.{agent_id}.model: {path} is not a causal LM checkpoint ({_first_line(exc)})") from None
    except Exception as exc:  # noqa: BLE001 - safetensors' or torch's error on a damaged weights file
        files = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin"))
        raise InputError(f"agents.{agent_id}.model: {files[0] if len(files) == 1 else path} cannot be read "
                         f"({type(exc).__name__}: {_first_line(exc)}); the weights are damaged or cut short: "
                         f"copy them again") from None
    model.to(device)
    if adapter_path is not None:
        model = lora_lib.load_adapter(model, adapter_path)
    elif lora is not None:
        model = lora_lib.apply_lora(model, **lora)
    return Agent(agent_id, index, model, tokenizer, source=str(path), **kwargs)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
