"""A few HACPO steps of two realistically shaped, randomly initialised LLMs, on what an offline GPU machine
has (PyTorch, Transformers; no package registry, no model hub).

The agents are built on the spot: a Qwen3-0.6B-shaped model (28 layers, hidden 1024, GQA 16/8, vocabulary
151,936) and a Llama-3.2-1B-shaped one (16 layers, hidden 2048, GQA 32/8, vocabulary 128,256), each with a
byte-level BPE tokenizer of its own size built from synthetic merges (different merges, so the agents
tokenize each other's answers differently, as the real pair does). Both train with float32 weights and
AdamW, bfloat16 autocast and gradient checkpointing (the paper presets' recipe), through hacrl's own
``Trainer`` and ``hf`` rollout engine, on ``add2`` prompts with a parity reward (a random model has no
accuracy to reward; this gives every group mixed rewards, so every update has a gradient).

It prints per step and averaged over steps 2..N (step 1 warms up kernels and the allocator):
rollout tokens/s (answer tokens all agents generated / rollout time), each learner's training tokens/s
(answer tokens in the pool it trains on / its update time), the log-prob gap between rollout and training
(under autocast π_old is recomputed by the training pass, and the engine's log-probs are compared with it:
mean and max |Δ| per token), and peak memory (torch's CUDA allocator; on CPU the process's peak RSS).

Run:
    python bench/gpu_check.py                   # CUDA, realistic shapes: a few minutes on one H100/H200
    python bench/gpu_check.py --tiny            # the same code path on CPU with tiny shapes (~30 s)
    python bench/gpu_check.py --json out.json   # also write the numbers
``bash bench/gpu_check.sh`` wraps it with the dependency check and the GPU tests.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

# (architecture, config keyword arguments); the tokenizer has exactly vocab_size tokens
QWEN3_0_6B = dict(vocab_size=151_936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, rope_theta=1_000_000.0,
                  rms_norm_eps=1e-6)
LLAMA_3_2_1B = dict(vocab_size=128_256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=64, rope_theta=500_000.0,
                    rms_norm_eps=1e-5)
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
SHAPES: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {
    "real": {"qwen3-0.6b-shape": ("qwen3", QWEN3_0_6B), "llama3.2-1b-shape": ("llama", LLAMA_3_2_1B)},
    "tiny": {"qwen3-tiny": ("qwen3", dict(TINY, vocab_size=1024, intermediate_size=128)),
             "llama-tiny": ("llama", dict(TINY, vocab_size=768, intermediate_size=160))},
}
SPECIALS = {"qwen3": {"eos": "<|endoftext|>"},
            "llama": {"bos": "<|begin_of_text|>", "eos": "<|end_of_text|>"}}


def parity_reward(completion: str, sample: dict[str, Any]) -> float:
    """1 for an answer of odd length, else 0: mixed rewards in every group of a random model.

    >>> parity_reward("abc", {}), parity_reward("ab", {})
    (1.0, 0.0)
    """
    return float(len(completion) % 2)


# ---- tokenizers and models --------------------------------------------------------------------------
def synthetic_merges(vocab_size: int, specials: int,
                     seed: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A byte-level BPE vocabulary of ``vocab_size - specials`` tokens: the 256 byte symbols, then merges
    of two bytes and of a merged pair with a byte, in a seeded order (each merge makes a new string)."""
    from tokenizers.pre_tokenizers import ByteLevel

    rng = random.Random(seed)
    common = [c for c in ByteLevel.alphabet() if c.isascii()]  # printable ASCII (and Ġ, Ċ: space, newline)
    common += ["Ġ", "Ċ"]
    rest = sorted(set(ByteLevel.alphabet()) - set(common))
    rng.shuffle(common)
    rng.shuffle(rest)
    order = common + rest  # seeded: each tokenizer numbers the bytes differently
    vocab = {s: i for i, s in enumerate(order)}
    merges: list[tuple[str, str]] = []
    want = vocab_size - specials - len(order)
    pairs = [(a, b) for a in order for b in order]
    for a, b in pairs[:want]:
        merges.append((a, b))
        vocab[a + b] = len(vocab)
    for c in order:  # (two bytes, a byte): 256^3 more if need be; each string is new
        for a, b in pairs[: max(0, want - len(merges))]:
            merges.append((a + b, c))
            vocab[a + b + c] = len(vocab)
    return vocab, merges


def build_tokenizer(arch: str, vocab_size: int, seed: int) -> Any:
    """A Qwen2Tokenizer (what transformers rebuilds for a Qwen checkpoint) or a byte-level BPE
    PreTrainedTokenizerFast (Llama 3's kind) with exactly ``vocab_size`` tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Tokenizer

    special = SPECIALS[arch]
    vocab, merges = synthetic_merges(vocab_size, len(special), seed)
    for token in special.values():
        vocab[token] = len(vocab)
    if arch == "qwen3":
        return Qwen2Tokenizer(vocab=vocab, merges=merges, eos_token=special["eos"], pad_token=special["eos"],
                              unk_token=None, bos_token=None, padding_side="left")
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=special["bos"], eos_token=special["eos"],
                                   pad_token=special["eos"], padding_side="left")


def build_agent_dir(name: str, arch: str, kwargs: dict[str, Any], root: Path, seed: int) -> tuple[Path, int]:
    """A random-init model of the given shape and its tokenizer, saved (bf16 safetensors) under ``root``."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    tok = build_tokenizer(arch, kwargs["vocab_size"], seed)
    assert len(tok) == kwargs["vocab_size"], (len(tok), kwargs["vocab_size"])
    config_cls = Qwen3Config if arch == "qwen3" else LlamaConfig
    config = config_cls(**kwargs, tie_word_embeddings=True, max_position_embeddings=4096,
                        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                        bos_token_id=tok.bos_token_id)
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):  # initialise on the GPU: seconds instead of a minute of CPU init
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    path = root / name
    model.save_pretrained(path)
    tok.save_pretrained(path)
    params = sum(p.numel() for p in model.parameters())
    del model
    return path, params


# ---- the run ----------------------------------------------------------------------------------------
@dataclass
class StepNumbers:
    step: int
    seconds: float
    rollout_s: float
    rollout_tok_s: float
    train_tok_s: dict[str, float]
    gap_mean: dict[str, float]
    gap_max: dict[str, float]


def step_numbers(step: int, seconds: float, m: dict[str, float], ids: list[str], answers: int) -> StepNumbers:
    """Throughput and gaps of one step's metrics; ``answers``: answers per agent per step."""
    tokens = sum(m[f"agent/{a}/answer_tokens"] * answers for a in ids)
    return StepNumbers(
        step, seconds, m["timing/rollout"], tokens / m["timing/rollout"],
        {a: tokens / m[f"timing/update/{a}"] for a in ids},
        {a: m.get(f"agent/{a}/rollout/logp_gap_mean", float("nan")) for a in ids},
        {a: m.get(f"agent/{a}/rollout/logp_gap_max", float("nan")) for a in ids})


def make_config(dirs: dict[str, Path], args: argparse.Namespace, device: str) -> Any:
    from hacrl.config import build_config

    agents = [{"id": name, "model": str(path), "lr": 1e-6, "dtype": "float32", "device": device,
               "autocast": "bfloat16", "gradient_checkpointing": True, "template": "plain"}
              for name, path in dirs.items()]
    return build_config({
        "run": {"seed": 0, "loggers": ["jsonl"]},
        "task": {"kind": "builtin", "name": "add2", "reward": "gpu_check:parity_reward",
                 "reward_timeout_s": None},
        "agents": agents,
        "rollout": {"rollouts_per_prompt": args.group, "max_new_tokens": args.max_new_tokens,
                    "old_logprobs": "recompute"},
        "algorithm": {"name": "hacpo", "delta": 0.6},
        "trainer": {"steps": args.steps, "batch_size": args.batch, "micro_batch_size": args.micro_batch,
                    "eval_size": 1, "log_samples": 0, "threads": args.threads},
    })


def train_steps(cfg: Any, run_dir: Path, args: argparse.Namespace,
                device: str) -> tuple[list[StepNumbers], float]:
    """``args.steps`` HACPO steps through hacrl's Trainer; (per-step numbers, trainer start-up seconds)."""
    from hacrl.trainer.trainer import Trainer

    t0 = time.perf_counter()
    trainer = Trainer(cfg, run_dir, sinks=False)
    load_s = time.perf_counter() - t0
    ids = [a.id for a in cfg.agents]
    print("gpu_check: " + ", ".join(f"{a.id}: vocab {len(a.tokenizer)}" for a in trainer.agents)
          + f"; loaded in {load_s:.1f} s; device {device}, float32 weights, bf16 autocast, gradient "
          f"checkpointing; {args.batch} prompts x G {args.group} x {args.max_new_tokens} new tokens",
          flush=True)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    rows = []
    try:
        for _ in range(args.steps):
            start = time.perf_counter()
            metrics = trainer.step()
            rows.append(step_numbers(trainer.step_idx, time.perf_counter() - start, metrics, ids,
                                     args.batch * args.group))
            print_row(rows[-1], ids)
    finally:
        trainer.close()
    return rows, load_s


def summarize(rows: list[StepNumbers], ids: list[str], device: str) -> dict[str, Any]:
    """Means over steps 2..N (step 1 warms up), the largest gap, and the peak memory."""
    later = rows[1:] or rows

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    cuda = device == "cuda"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    peak = torch.cuda.max_memory_allocated() if cuda else rss
    return {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu", "steps": len(rows),
        "mean_over_steps": [later[0].step, later[-1].step],
        "rollout_tok_s": mean([r.rollout_tok_s for r in later]),
        "train_tok_s": {a: mean([r.train_tok_s[a] for r in later]) for a in ids},
        "logp_gap_mean": {a: mean([r.gap_mean[a] for r in rows]) for a in ids},
        "logp_gap_max": {a: max(r.gap_max[a] for r in rows) for a in ids},
        "peak_memory_gib": peak / 2**30, "peak_memory_kind": "cuda allocated" if cuda else "max RSS",
        "step_s": [r.seconds for r in rows],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = "cpu" if args.tiny else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device; run with --tiny for the CPU check")
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # the parity reward: gpu_check:parity_reward
    with tempfile.TemporaryDirectory(prefix="hacrl-gpu-check-", dir=args.tmp) as tmp:
        t0 = time.perf_counter()
        dirs, params = {}, {}
        for i, (name, (arch, kwargs)) in enumerate(SHAPES["tiny" if args.tiny else "real"].items()):
            dirs[name], params[name] = build_agent_dir(name, arch, kwargs, Path(tmp), seed=i)
        build_s = time.perf_counter() - t0
        print("gpu_check: built " + ", ".join(f"{n} ({p / 1e6:.2f}M params)" for n, p in params.items())
              + f" in {build_s:.1f} s", flush=True)
        rows, load_s = train_steps(make_config(dirs, args, device), Path(tmp) / "run", args, device)
    ids = list(dirs)
    summary = {"shapes": "tiny" if args.tiny else "real", "params": params, "build_s": build_s,
               "load_s": load_s, **summarize(rows, ids, device)}
    first, last = summary["mean_over_steps"]
    print(f"gpu_check: mean of steps {first}..{last}: rollout {summary['rollout_tok_s']:.0f} tok/s; training "
          + ", ".join(f"{a} {v:.0f} tok/s" for a, v in summary["train_tok_s"].items())
          + "; log-prob gap rollout vs training (mean / max |Δ| per token) "
          + ", ".join(f"{a} {summary['logp_gap_mean'][a]:.2e} / {summary['logp_gap_max'][a]:.2e}"
                      for a in ids)
          + f"; peak memory {summary['peak_memory_gib']:.2f} GiB ({summary['peak_memory_kind']})", flush=True)
    return summary


def print_row(r: StepNumbers, ids: list[str]) -> None:
    print(f"  step {r.step}: {r.seconds:.1f} s, rollout {r.rollout_s:.1f} s = {r.rollout_tok_s:.0f} tok/s; "
          "training " + ", ".join(f"{a} {r.train_tok_s[a]:.0f} tok/s" for a in ids)
          + "; gap mean/max " + ", ".join(f"{r.gap_mean[a]:.2e}/{r.gap_max[a]:.2e}" for a in ids), flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", "--dry-run", action="store_true", help="CPU, tiny shapes: the same code path")
    p.add_argument("--steps", type=int, default=None, help="HACPO steps (default 4; --tiny 2)")
    p.add_argument("--batch", type=int, default=None, help="prompts per step (default 8; --tiny 2)")
    p.add_argument("--group", type=int, default=4, help="answers per prompt per agent (G)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default 256; --tiny 8")
    p.add_argument("--micro-batch", type=int, default=8, help="sequences per forward/backward pass")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--tmp", default=None, help="where the models are written (about 4 GB; default $TMPDIR)")
    p.add_argument("--json", default=None, help="also write the summary here")
    args = p.parse_args(argv)
    tiny = args.tiny
    args.steps = args.steps or (2 if tiny else 4)
    args.batch = args.batch or (2 if tiny else 8)
    args.max_new_tokens = args.max_new_tokens or (8 if tiny else 256)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing from a hub
    summary = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
