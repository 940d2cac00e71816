"""LoRA agents with ``peft`` (extra ``hacrl[lora]``): only the adapter weights train.

- :func:`apply_lora` wraps a causal LM with ``get_peft_model``; the base weights are frozen, so the
  optimizer (built from parameters that require grad) holds the adapter only.
- :class:`AdapterDisabledReference` is the KL reference of a LoRA agent: the same module run inside
  ``model.disable_adapter()``, i.e. the frozen base weights. It replaces the deep copy a full
  fine-tuning agent keeps, so a LoRA agent with KL costs no second copy of the model.
- :func:`save_lora` writes the adapter (``PeftModel.save_pretrained``: ``adapter_config.json`` +
  ``adapter_model.safetensors``) and a merged, standalone copy under ``merged/`` (``merge_and_unload``
  on a deep copy, so the training model is untouched and no unmerge rounding creeps in).
  :func:`load_adapter` puts a saved adapter back on the base model exactly (trainable), for resume.
- :func:`is_adapter_dir` / :func:`merged_dir`: a LoRA checkpoint directory given where a plain model
  directory is expected resolves to its ``merged/`` copy.
- :func:`finetune_lora`: a short supervised pass (teacher forcing) on a LoRA agent, to make a copy of a
  model at a later training state (``builtin:smollm2-135m-instruct-ft``, see ``hacrl.agents.gguf``).

Departure from full fine-tuning: the LoRA dropout (default 0) applies in the training forward pass
but not during rollout, so any dropout > 0 makes the training log-probs differ from π_old; keep it 0
for the sequence ratio to start at exactly 1.

Run: ``python -m pytest tests/agents/test_lora.py``.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from hacrl.errors import InputError

__all__ = ["AdapterDisabledReference", "apply_lora", "finetune_lora", "is_adapter_dir", "is_lora",
           "load_adapter", "merged_dir", "save_lora"]

ADAPTER_CONFIG = "adapter_config.json"
MERGED = "merged"


def _peft() -> Any:
    try:
        import peft
    except ImportError:
        raise InputError("LoRA agents need the 'peft' package; install it with: pip install 'hacrl[lora]' "
                         "(or pip install peft)") from None
    return peft


def is_lora(model: Any) -> bool:
    """True for a ``peft`` model (a LoRA agent's model)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def apply_lora(model: Any, *, r: int = 8, alpha: float = 16.0, dropout: float = 0.0,
               target_modules: list[str] | str = "all-linear") -> Any:
    """Wrap ``model`` with fresh LoRA adapters (B = 0: the wrapped model computes what ``model`` did)."""
    peft = _peft()
    config = peft.LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules,
                             bias="none", task_type="CAUSAL_LM")
    try:
        with _quiet_peft():
            return peft.get_peft_model(model, config)
    except ValueError as exc:
        raise InputError(f"lora.target_modules={target_modules!r}: {str(exc).splitlines()[0][:200]}; "
                         f"name linear layers of the model, e.g. ['q_proj', 'v_proj'], or 'all-linear'") from None


def load_adapter(model: Any, adapter_dir: str | Path) -> Any:
    """``model`` with the adapter saved in ``adapter_dir`` (as :func:`save_lora` wrote it), trainable."""
    peft = _peft()
    path = Path(adapter_dir)
    if not (path / ADAPTER_CONFIG).is_file():
        raise InputError(f"{path} holds no LoRA adapter ({ADAPTER_CONFIG} missing)")
    with _quiet_peft():
        return peft.PeftModel.from_pretrained(model, path, is_trainable=True)


@contextlib.contextmanager
def _quiet_peft() -> Iterator[None]:
    """peft asks the model ``is_gradient_checkpointing``, which transformers 5 deprecates with a FutureWarning
    on every LoRA agent a run builds: silenced here, for that message and that call only."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def save_lora(model: Any, path: Path, tokenizer: Any = None, *, merged: bool = True) -> None:
    """The adapter into ``path`` and, with ``merged``, a standalone merged checkpoint into ``path/merged``."""
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    if merged:
        full = copy.deepcopy(model).merge_and_unload()
        full.save_pretrained(path / MERGED)
        if tokenizer is not None:
            tokenizer.save_pretrained(path / MERGED)
        del full


def is_adapter_dir(path: Path) -> bool:
    return (path / ADAPTER_CONFIG).is_file()


def merged_dir(path: Path, what: str) -> Path:
    """The merged copy inside a LoRA checkpoint directory ``path``; ``what`` names it in the error."""
    merged = path / MERGED
    if not (merged / "config.json").is_file():
        raise InputError(f"{what}: {path} is a LoRA adapter without a merged copy ({MERGED}/ missing); give "
                         f"the base model and set lora, or a checkpoint saved by hacrl")
    return merged


class AdapterDisabledReference:
    """The frozen base of a LoRA model as a KL reference: calls run inside ``disable_adapter()``.

    It shares every weight with the training model (no copy); the base weights never train, so it
    stays the initial policy for the whole run and across resumes.
    """

    def __init__(self, model: Any) -> None:
        self.model = model

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        return self.model.parameters()

    def get_base_model(self) -> Any:
        """The transformers model inside, as peft's own method: what its forward accepts (the KV cache's
        keyword, ``logits_to_keep``) is read from it, not from this wrapper."""
        return self.model.get_base_model()

    def eval(self) -> AdapterDisabledReference:
        return self

    def __call__(self, **kwargs: Any) -> Any:
        was_training = self.model.training
        self.model.eval()  # as the deep-copied reference of a full fine-tuning agent: no dropout
        try:
            with self.model.disable_adapter():
                return self.model(**kwargs)
        finally:
            self.model.train(was_training)


def finetune_lora(agent: Any, pairs: list[tuple[str, str]], *, epochs: int = 1, batch_size: int = 8,
                  lr: float = 1e-3, seed: int = 0) -> list[float]:
    """A short supervised pass over (prompt, answer) pairs on a LoRA agent: teacher forcing on the prompt
    as the agent renders it, loss = mean negative log-prob of the answer tokens and EOS. Returns the
    loss of each optimizer step. Used to make a copy of a model at a later training state.
    """
    import random

    from hacrl.agents.agent import token_logprobs

    if not is_lora(agent.model):
        raise ValueError(f"agent {agent.id} has no LoRA adapter to fine-tune")
    params = [p for p in agent.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    order, losses = list(range(len(pairs))), []
    rng = random.Random(seed)
    agent.model.train()
    for _ in range(epochs):
        rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            chunk = [pairs[i] for i in order[start : start + batch_size]]
            batch = agent.batch([agent.render_prompt(q) for q, _ in chunk],
                                [agent.encode_answer(a, finished=True)[0] for _, a in chunk])
            logp_BT = token_logprobs(agent.model, batch)
            loss = -logp_BT.sum() / batch.answer_mask_BT.sum()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            losses.append(float(loss.detach()))
    agent.model.eval()
    return losses
