"""Peak memory of a training forward + backward's answer log-probs on a large-vocabulary model: the
textbook way (every position's float32 logits, ``log_softmax``, gather) against hacrl's lean way
(``token_logprobs``: logits from the first answer position on, chosen tokens read in chunks by
``hacrl.core.selected_logprobs``), side by side in one invocation.

The model is a random-init Llama with Qwen3's vocabulary (151,936) and a few small layers, so the
vocabulary dominates as it does for long answers of real models; nothing is downloaded. Each method runs
in its own subprocess; the number is that process's peak RSS above its RSS after the model is built
and one warm-up pass has run (so the allocator's steady state is not counted as the method's).

    python bench/logprob_memory.py [--rows 4] [--prompt 256] [--answer 768] [--autocast]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

VOCAB = 151_936


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def worker(method: str, rows: int, prompt: int, answer: int, autocast: bool) -> None:
    import contextlib

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from hacrl.agents.agent import TokenBatch, token_logprobs

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    model = LlamaForCausalLM(config).train()
    length = prompt + answer
    ids = torch.randint(0, VOCAB, (rows, length))
    batch = TokenBatch(ids, torch.ones_like(ids), torch.zeros(rows, length - 1, dtype=torch.bool))
    batch.answer_mask_BT[:, prompt - 1 :] = True
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if autocast else contextlib.nullcontext

    def textbook() -> torch.Tensor:
        out = model(input_ids=batch.input_ids_BL, attention_mask=batch.attention_mask_BL, use_cache=False)
        logits = out.logits[:, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1) * batch.answer_mask_BT

    def lean() -> torch.Tensor:
        return token_logprobs(model, batch)

    fn = textbook if method == "textbook" else lean

    def step() -> float:
        with ctx():
            logp = fn()
        loss = -(logp.sum() / batch.answer_mask_BT.sum())
        loss.backward()
        model.zero_grad(set_to_none=True)
        return float(loss)

    # warm-up on a short batch, so allocator and thread pools exist before the baseline
    full = batch
    batch = TokenBatch(ids[:1, :64], torch.ones_like(ids[:1, :64]), full.answer_mask_BT[:1, :63])
    saved_ids, ids = ids, ids[:1, :64]
    step()
    batch, ids = full, saved_ids
    base = rss_mb()
    loss = step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"method": method, "peak_above_base_mb": peak - base, "loss": loss}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--prompt", type=int, default=256)
    p.add_argument("--answer", type=int, default=768)
    p.add_argument("--autocast", action="store_true", help="bfloat16 autocast over the float32 model")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.rows, args.prompt, args.answer, args.autocast)
        return
    out = {}
    for method in ("textbook", "lean"):
        cmd = [sys.executable, __file__, "--worker", method, "--rows", str(args.rows), "--prompt", str(args.prompt),
               "--answer", str(args.answer)] + (["--autocast"] if args.autocast else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ})
        if proc.returncode != 0:
            sys.exit(f"{method} failed:\n{proc.stderr[-2000:]}")
        out[method] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"vocabulary {VOCAB}, {args.rows} rows x ({args.prompt} prompt + {args.answer} answer) tokens, "
          f"{'bf16 autocast' if args.autocast else 'float32'}; peak RSS above the warmed-up baseline:")
    for m, r in out.items():
        print(f"  {m:<9} {r['peak_above_base_mb']:>8.0f} MB   (loss {r['loss']:.6f})")
    t, le = out["textbook"], out["lean"]
    print(f"lean / textbook: {le['peak_above_base_mb'] / t['peak_above_base_mb']:.2f}x; "
          f"same loss: {abs(le['loss'] - t['loss']) < 1e-4 * max(1.0, abs(t['loss']))}")


if __name__ == "__main__":
    main()
