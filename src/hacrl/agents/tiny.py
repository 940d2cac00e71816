"""Tiny tokenizers and causal LMs, built locally, for the embedded default (no hub access needed).

- :func:`build_char_tokenizer`: one token per character (byte), as a merge-free ``Qwen2Tokenizer``.
- :func:`build_bpe_tokenizer`: a small BPE trained with ``tokenizers`` on task text, digits always
  split individually (``Digits(individual_digits=True)``) while other symbols and words may merge,
  byte fallback for anything outside printable ASCII.
- :func:`build_model`: a Qwen2-style or Llama-style causal LM of 0.3M–2M parameters from
  :data:`TINY_ARCHS`, made with ``AutoModelForCausalLM.from_config``.
- :func:`warm_start`: a short supervised phase (teacher forcing on prompt + answer + EOS, loss on
  answer and EOS tokens only) that brings a model to a *partial* accuracy, so RL has room to work;
  :func:`zero_digit_curriculum` gets it there several times faster on the addition tasks.
- :func:`greedy_accuracy`: batched, left-padded greedy evaluation on a task's held-out problems.
- :func:`tiny_agent_path` and :data:`TINY_PAIRS`: the warm-started agents shipped in
  ``hacrl/assets/tiny/`` (made by ``scripts/make_tiny_agents.py``), one pair per kind of
  heterogeneity in the paper: *state*, *size* and *model*; and the mechanism study's agents, generated
  into :func:`tiny_cache_dir` by ``scripts/make_mechanism_agents.py`` (never shipped), from the streams
  :func:`corrupted_trace_stream` (``add2-trace`` with its traces' digits redrawn at a rate ρ,
  :func:`corrupt_trace`) and :func:`operator_stream` (``mixed`` with a set share of one operator).

The tiny models use a plain template, no chat template: the prompt text, then the answer, then EOS.
Tokenize prompt and answer separately (``add_special_tokens=False``) and concatenate; for these
tokenizers that equals tokenizing the joined text (no token straddles the prompt/answer boundary).

    >>> from hacrl.agents.tiny import TINY_PAIRS, tiny_agent_path
    >>> from transformers import AutoModelForCausalLM, AutoTokenizer
    >>> path = tiny_agent_path(TINY_PAIRS["model"][0])
    >>> model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
"""

from __future__ import annotations

import json
import logging
import math
import os
import pathlib
import random
import string
from collections.abc import Callable, Iterable, Iterator
from importlib import resources
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

from hacrl.data.tasks import TASKS, Problem, Task

logger = logging.getLogger(__name__)

__all__ = [
    "TINY_ARCHS",
    "TINY_PAIRS",
    "build_bpe_tokenizer",
    "build_char_tokenizer",
    "build_model",
    "corrupt_trace",
    "corrupted_trace_stream",
    "greedy_accuracy",
    "generate_greedy",
    "operator_stream",
    "tiny_agent_path",
    "tiny_cache_dir",
    "warm_start",
    "zero_digit_curriculum",
]

# ---------------------------------------------------------------- shipped agents

TINY_PAIRS: dict[str, tuple[str, str]] = {
    # same architecture and tokenizer, different training state (two snapshots of one warm-start run)
    "state": ("qwen2-char-early", "qwen2-char"),
    # same family and tokenizer, different size
    "size": ("qwen2-char-small", "qwen2-char"),
    # different architecture family and tokenizer
    "model": ("qwen2-char", "llama-bpe"),
}


MECHANISM_SCRIPT = "scripts/make_mechanism_agents.py"


def tiny_cache_dir() -> pathlib.Path:
    """Where generated (not shipped) tiny agents live: ``$HACRL_CACHE/tiny``, ``$HACRL_CACHE`` defaulting to
    ``~/.cache/hacrl`` (as the converted models' ``hacrl.agents.gguf.cache_dir``)."""
    return pathlib.Path(os.environ.get("HACRL_CACHE") or "~/.cache/hacrl").expanduser() / "tiny"


def tiny_agent_path(name: str) -> pathlib.Path:
    """The directory of the tiny agent ``name`` (loadable with ``from_pretrained``): a shipped one in
    ``hacrl/assets/tiny/``, else one generated into :func:`tiny_cache_dir` (the mechanism study's agents, made
    by ``scripts/make_mechanism_agents.py``). Neither: a one-line ``FileNotFoundError`` that says how to make it."""
    root = resources.files("hacrl") / "assets" / "tiny"
    path = pathlib.Path(str(root / name))
    if (path / "config.json").is_file():
        return path
    cached = tiny_cache_dir() / name
    if name and "/" not in name and (cached / "config.json").is_file():
        return cached
    names = sorted(p.parent.name for p in pathlib.Path(str(root)).glob("*/config.json"))
    raise FileNotFoundError(f"no tiny agent {name!r}: not shipped in {root} (shipped: {names or '(none)'}; made by "
                            f"scripts/make_tiny_agents.py) nor made in {cached.parent}; make it with "
                            f"`python {MECHANISM_SCRIPT} --only {name}`")


# ---------------------------------------------------------------- tokenizers

PAD, EOS, BOS, UNK = "<|pad|>", "<|eos|>", "<|bos|>", "<|unk|>"
SPECIAL_TOKENS = [PAD, EOS, BOS, UNK]
# printable ASCII plus newline and tab: the BPE's base alphabet (other characters fall back to bytes)
ALPHABET = [c for c in string.printable if c not in "\r\x0b\x0c"]


def _byte_symbols() -> list[str]:
    """GPT-2's byte → printable-character map (what ``ByteLevel`` uses), in byte order."""
    keep = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """Character-level tokenizer for the Qwen2-style agents: a ``Qwen2Tokenizer`` with no merges, so
    every byte is one token (each ASCII character: one token, id 4 + its code) and any text round-trips
    exactly. 4 special tokens + 256 bytes = 260 tokens; no BOS is added.

    Why a Qwen2Tokenizer: for a checkpoint whose ``model_type`` is ``qwen2``, transformers 5's
    ``AutoTokenizer`` rebuilds the tokenizer as ``Qwen2Tokenizer`` (byte-level BPE from the saved vocab
    and merges) whatever ``tokenizer_config.json`` says, so a custom pipeline would be silently
    replaced on load (spaces and newlines were dropped). This one is rebuilt identically.

    >>> tok = build_char_tokenizer()
    >>> ids = tok("07+85=92", add_special_tokens=False)["input_ids"]
    >>> len(ids), tok.decode(ids)
    (8, '07+85=92')
    """
    from transformers import Qwen2Tokenizer

    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS + _byte_symbols())}
    return Qwen2Tokenizer(vocab=vocab, merges=[], unk_token=UNK, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                          padding_side="left", model_max_length=512)


# Short natural-language templates so the BPE learns word merges too (the tasks' prompts are bare
# arithmetic, which splits into single characters and digits anyway).
_TEMPLATES = [
    "What is {a} plus {b}?", "What is {a} minus {b}?", "What is {a} times {b}?", "The answer is {c}.",
    "Compute {a} + {b} and give the answer.", "Question: {a} + {b} = ?\nAnswer: {c}",
    "Add the two numbers {a} and {b}.", "Subtract {b} from {a}.", "Multiply {a} by {b}.",
    "Let me think step by step. The sum of {a} and {b} is {c}.",
]


def task_corpus(task_names: Iterable[str] = ("add2", "add3", "mul1x3", "mixed"), *, per_task: int = 2000,
                seed: int = 0) -> list[str]:
    """Training text for the BPE: prompts and answers of training problems (as separate strings, the
    way they are tokenized) plus simple English templates around numbers."""
    rng = random.Random(seed)
    texts: list[str] = []
    for name in task_names:
        stream = TASKS.get(name)().train_problems(seed)
        for _ in range(per_task):
            p = next(stream)
            texts += [p.prompt, p.answer]
    for _ in range(per_task):
        a, b = rng.randrange(1000), rng.randrange(1000)
        texts.append(rng.choice(_TEMPLATES).format(a=a, b=b, c=a + b))
    return texts


def build_bpe_tokenizer(corpus: Iterable[str] | None = None, *, vocab_size: int = 192) -> PreTrainedTokenizerFast:
    """A small Llama-2-style BPE: spaces become ``▁`` (Metaspace), digits are split one by one, other
    characters merge freely, characters outside printable ASCII fall back to ``<0xNN>`` byte tokens,
    so any text round-trips exactly. ``vocab_size`` counts the learned part; 256 byte tokens follow.

    >>> tok = build_bpe_tokenizer()
    >>> text = "Question: 07 + 85 = ?\\nAnswer: 92 ☃"
    >>> tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    True
    """
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True),
        pre_tokenizers.Digits(individual_digits=True),
    ])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=ALPHABET + ["▁"], min_frequency=2, show_progress=False)
    tok.train_from_iterator(task_corpus() if corpus is None else corpus, trainer)
    # rebuild the model with byte fallback: the learned vocab, then <0x00>..<0xFF>
    learned = json.loads(tok.to_str())["model"]
    vocab = dict(learned["vocab"])
    vocab.update({f"<0x{b:02X}>": len(vocab) + b for b in range(256)})
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learned["merges"]]
    tok.model = models.BPE(vocab=vocab, merges=merges, unk_token=UNK, byte_fallback=True)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS, bos_token=BOS, unk_token=UNK,
                                   padding_side="left", model_max_length=512)


TOKENIZERS: dict[str, Callable[[], PreTrainedTokenizerFast]] = {
    "char": build_char_tokenizer,
    "bpe": build_bpe_tokenizer,
}

# ---------------------------------------------------------------- models

# name -> (config class, config keyword arguments). Initialised wider than the HF default (0.02),
# which in our trials left these narrow models longer on the plateau before the units digit.
# Warm-start learning rates that worked scale like 1/width: 1e-2 at 64, 6e-3 at 96, 4e-3 at 128
# (1e-2 at width 128 did not learn in 800 steps).
TINY_ARCHS: dict[str, tuple[type, dict[str, Any]]] = {
    "qwen2-small": (Qwen2Config, dict(hidden_size=64, intermediate_size=320, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2, initializer_range=0.1)),
    "qwen2-base": (Qwen2Config, dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                                     num_attention_heads=4, num_key_value_heads=2, initializer_range=0.07)),
    "llama-base": (LlamaConfig, dict(hidden_size=96, intermediate_size=256, num_hidden_layers=4,
                                     num_attention_heads=4, num_key_value_heads=4, initializer_range=0.08)),
}


def build_model(arch: str, tokenizer: PreTrainedTokenizerFast, *, seed: int = 0) -> PreTrainedModel:
    """A randomly initialised tiny causal LM ``arch`` (see :data:`TINY_ARCHS`) sized to ``tokenizer``."""
    config_cls, kwargs = TINY_ARCHS[arch]
    defaults = dict(max_position_embeddings=256, tie_word_embeddings=True)
    config = config_cls(
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id, **{**defaults, **kwargs},
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def num_params(model: torch.nn.Module) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def agent_description(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, *, arch: str,
                      tokenizer_name: str) -> dict[str, Any]:
    """What a warm-started tiny agent's manifest says of the model and its tokenizer (in this order): the
    scripts that make them (``scripts/make_tiny_agents.py``, ``scripts/make_mechanism_agents.py``) share it."""
    return {"model_type": model.config.model_type, "arch": arch, "arch_kwargs": TINY_ARCHS[arch][1],
            "params": num_params(model), "tokenizer": tokenizer_name, "tokenizer_class": type(tokenizer).__name__,
            "vocab_size": len(tokenizer), "dtype": "float32"}


def save_agent(path: pathlib.Path, model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast,
               manifest: dict[str, Any]) -> None:
    """Write a tiny agent to ``path`` afresh: the model, its tokenizer and ``manifest.json``."""
    import shutil

    if path.exists():
        shutil.rmtree(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


# ---------------------------------------------------------------- supervised warm start


def sft_batch(tokenizer: PreTrainedTokenizerFast, problems: list[Problem]) -> dict[str, torch.Tensor]:
    """Right-padded teacher-forcing batch: prompt + answer + EOS, labels only on answer + EOS."""
    prompts = tokenizer([p.prompt for p in problems], add_special_tokens=False)["input_ids"]
    answers = tokenizer([p.answer for p in problems], add_special_tokens=False)["input_ids"]
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    seqs = [p + a + [eos] for p, a in zip(prompts, answers)]
    width = max(map(len, seqs))
    input_ids_BT = torch.full((len(seqs), width), pad, dtype=torch.long)
    labels_BT = torch.full((len(seqs), width), -100, dtype=torch.long)
    mask_BT = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (p, s) in enumerate(zip(prompts, seqs)):
        input_ids_BT[i, : len(s)] = torch.tensor(s)
        labels_BT[i, len(p) : len(s)] = torch.tensor(s[len(p) :])
        mask_BT[i, : len(s)] = 1
    return {"input_ids": input_ids_BT, "attention_mask": mask_BT, "labels": labels_BT}


def zero_digit_curriculum(task: Task, seed: int, *, boost: float = 0.5) -> Iterator[Problem]:
    """The task's training stream, with problems where an operand ends in 0 oversampled: each other
    problem is skipped with probability ``boost`` (0: the plain stream).

    The units digit of a sum is (a₁ + b₁) mod 10: knowing one operand alone says nothing about it, so
    a model gets no gradient toward attending to either until it attends to both, and sits on a
    plateau. With ``b₁ = 0`` the units digit is ``a₁``, which rewards each half of the circuit.
    Needs ``meta["a"]`` and ``meta["b"]`` (the arithmetic tasks have them).
    """
    rng = random.Random(f"curriculum/{seed}")
    for p in task.train_problems(seed):
        if p.meta["a"] % 10 == 0 or p.meta["b"] % 10 == 0 or rng.random() >= boost:
            yield p


def corrupt_trace(answer: str, rho: float, key: str) -> str:
    """A worked answer (``add2-trace``'s ``"7+5=12,0+8+1=9>92"``) whose digits before the last ``>`` are each
    replaced, with probability ``rho``, by a uniform random digit; everything else (the symbols, and the
    final number after ``>``) is left as it is, so the reward still reads the right sum. Deterministic: the
    draws are seeded by ``key`` (a problem id, say), so one problem always gets the same corruption.

    >>> corrupt_trace("7+5=12,0+8+1=9>92", 0.0, "add2-trace/07+85")
    '7+5=12,0+8+1=9>92'
    >>> bad = corrupt_trace("7+5=12,0+8+1=9>92", 1.0, "add2-trace/07+85")
    >>> bad.rsplit(">", 1)[1], [c for c in bad if not c.isdigit()] == list("+=,++=>")
    ('92', True)
    >>> bad == corrupt_trace("7+5=12,0+8+1=9>92", 1.0, "add2-trace/07+85")
    True
    """
    if ">" not in answer:
        raise ValueError(f"not a worked answer (no '>'): {answer!r}")
    trace, final = answer.rsplit(">", 1)
    rng = random.Random(f"corrupt/{key}")
    # two draws per character whatever rho is, so the draws of one problem do not depend on rho
    out = [str(d) if c.isdigit() and u < rho else c
           for c, u, d in ((c, rng.random(), rng.randrange(10)) for c in trace)]
    return "".join(out) + ">" + final


def corrupted_trace_stream(task: Task, seed: int, rho: float, *, boost: float = 0.0) -> Iterator[Problem]:
    """``task``'s training stream (``add2-trace``; with ``boost`` > 0, :func:`zero_digit_curriculum`'s) with every
    answer's trace corrupted by :func:`corrupt_trace` at ``rho``, seeded by the problem's id (``rho`` 0: the
    faithful stream)."""
    stream = zero_digit_curriculum(task, seed, boost=boost) if boost > 0 else task.train_problems(seed)
    for p in stream:
        yield Problem(id=p.id, prompt=p.prompt, answer=corrupt_trace(p.answer, rho, p.id), meta=p.meta)


def operator_stream(task: Task, seed: int, op: str, share: float, *, boost: float = 0.0) -> Iterator[Problem]:
    """A training stream of ``task`` (``mixed``) in which each problem has the operator ``op`` with probability
    ``share`` and another operator otherwise (``share`` 1: ``op`` only; 0.5 on ``mixed``: about the plain
    stream's mix), drawn from :func:`zero_digit_curriculum`'s stream at ``boost`` (0: the plain one). Needs
    ``meta["op"]``. Deterministic given ``seed``, ``op``, ``share`` and ``boost``."""
    rng = random.Random(f"operators/{seed}/{op}/{share}")
    stream = zero_digit_curriculum(task, seed, boost=boost) if boost > 0 else task.train_problems(seed)
    while True:
        want_own = rng.random() < share
        p = next(stream)
        while (p.meta["op"] == op) != want_own:
            p = next(stream)
        yield p


def warm_start(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    task: Task,
    steps: int,
    seed: int,
    *,
    batch_size: int = 64,
    lr: float = 3e-3,
    warmup_steps: int = 50,
    final_lr_fraction: float = 0.1,
    weight_decay: float = 0.01,
    callback: Callable[[int, float], bool | None] | None = None,
    problems: Iterator[Problem] | None = None,
) -> list[float]:
    """Supervised warm start: up to ``steps`` AdamW steps on ``task``'s training stream (seeded by
    ``seed``), linear warm-up then cosine decay to ``final_lr_fraction * lr`` (1.0: constant).
    Loss: mean cross-entropy over the answer and EOS tokens.

    ``callback(step, loss)`` runs after every optimizer step (1-based), e.g. to evaluate or save a
    snapshot; if it returns True, training stops there. ``problems`` replaces the task's training
    stream (e.g. :func:`zero_digit_curriculum`). Returns the per-step losses.

    On ``add2`` these models first sit on a plateau (right length and mostly right tens digit,
    units digit near chance, ~5% exact) whose length depends on the seed. In our trials on the
    plain stream with the HF default init it often lasted past 1000–2000 steps; with
    :func:`zero_digit_curriculum` (``boost=0.8``) and the wider init of :data:`TINY_ARCHS`, most
    seeds left it after 200–900 steps (a few later).
    """
    torch.manual_seed(seed)
    stream = task.train_problems(seed) if problems is None else problems
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=weight_decay)

    def lr_at(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        t = (step - warmup_steps) / max(1, steps - warmup_steps)
        return final_lr_fraction + (1 - final_lr_fraction) * 0.5 * (1 + math.cos(math.pi * t))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    model.train()
    losses: list[float] = []
    for step in range(1, steps + 1):
        batch = sft_batch(tokenizer, [next(stream) for _ in range(batch_size)])
        loss = model(**batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if callback is not None and callback(step, losses[-1]):
            break
    model.eval()
    return losses


# ---------------------------------------------------------------- evaluation


@torch.no_grad()
def generate_greedy(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, prompts: list[str], *,
                    max_new_tokens: int, batch_size: int = 256, do_sample: bool = False) -> list[str]:
    """Batched generation with left padding; returns the decoded completions (special tokens dropped)."""
    was_training, side = model.training, tokenizer.padding_side
    model.eval()
    tokenizer.padding_side = "left"
    out: list[str] = []
    try:
        for i in range(0, len(prompts), batch_size):
            enc = tokenizer(prompts[i : i + batch_size], add_special_tokens=False, padding=True,
                            return_tensors="pt")
            gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=do_sample,
                                 top_k=None, top_p=None, temperature=1.0,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            out += tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return out


def greedy_accuracy(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, task: Task,
                    problems: list[Problem] | None = None, *, do_sample: bool = False) -> float:
    """Mean reward of greedy (or, with ``do_sample``, temperature-1) answers on ``problems``
    (default: the task's 1000 test problems). Unscorable answers count as wrong."""
    problems = task.test_problems() if problems is None else problems
    answers = generate_greedy(model, tokenizer, [p.prompt for p in problems],
                              max_new_tokens=task.max_new_tokens, do_sample=do_sample)
    return sum(task.reward(a, p.as_sample()) or 0.0 for a, p in zip(answers, problems)) / len(problems)
