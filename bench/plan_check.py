"""Hold `hacrl plan`'s training-peak estimate against the measured peak of one optimizer step on CPU.

    python bench/plan_check.py --model builtin:qwen2-char --prompt 48 --answer 80 --rows 16
    python bench/plan_check.py --model builtin:smollm2-135m-instruct --prompt 64 --answer 64 --rows 4 --kl 0.001

The measurement is the peak of live CPU tensor bytes (torch profiler's allocation record) during one
optimizer step after a first one (AdamW's moments present), plus the weights, reference and optimizer
state held before it: the quantity the estimate models (not RSS, which adds the allocator's and
Python's own memory). Needs only the model's config.json for the estimate; loads the model to measure.
"""

from __future__ import annotations

import argparse
import time

import torch

from hacrl.agents.agent import load_agent
from hacrl.backends import plan
from hacrl.backends.resolve import resolve_model_path
from hacrl.config import load_config
from hacrl.learner.view import ViewRow


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin:qwen2-char")
    ap.add_argument("--prompt", type=int, default=48)
    ap.add_argument("--answer", type=int, default=80)
    ap.add_argument("--rows", type=int, default=16, help="rows of the micro-batch (= the minibatch)")
    ap.add_argument("--kl", type=float, default=0.001)
    ap.add_argument("--checkpointing", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    agent = load_agent("a", 0, resolve_model_path(args.model))
    if args.checkpointing:
        agent.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if args.kl > 0:
        agent.enable_reference()
    agent.configure_optimizer(lr=1e-6)
    vocab = agent.model.config.vocab_size
    rows = [ViewRow(i, 0, True, [(11 + 7 * i + j) % (vocab - 10) + 5 for j in range(args.prompt)],
                    [(3 + j) % (vocab - 10) + 5 for j in range(args.answer)], -2.0, None, 1.0,
                    advantage=1.0 if i % 2 else -1.0) for i in range(args.rows)]
    start = time.perf_counter()
    measured = plan.measure_update_peak(agent, rows, micro_batch_size=args.rows, kl_coef=args.kl)
    seconds = time.perf_counter() - start
    overrides = [f"agents.qwen-char.model={args.model}", f"agents.qwen-char.max_prompt_tokens={args.prompt}",
                 f"agents.qwen-char.max_answer_tokens={args.answer}", f"trainer.micro_batch_size={args.rows}",
                 f"agents.qwen-char.kl_coef={args.kl}", f"agents.qwen-char.gradient_checkpointing={args.checkpointing}"]
    cfg = load_config("tiny-test", overrides=overrides)
    spec = cfg.agents[0]
    est = plan.estimate(plan.model_shape(spec), plan.setting_of(spec, cfg), prompt=args.prompt, answer=args.answer,
                        rollout_rows=args.rows, device_bytes=2**40)
    mib = 2**20
    print(f"{args.model}: {agent.num_parameters / 1e6:.1f}M params, {args.rows} rows x ({args.prompt}+{args.answer}) "
          f"tokens, KL {args.kl}, checkpointing {args.checkpointing}")
    print(f"  estimated training peak {est['train_peak'] / mib:.1f} MiB (weights {est['weights'] / mib:.1f}, "
          f"optimizer {est['optimizer'] / mib:.1f}, reference {est['reference'] / mib:.1f}, activations "
          f"{est['activations'] / mib:.1f}, logits {est['logits'] / mib:.1f}, gradients {est['gradients'] / mib:.1f})")
    print(f"  measured peak           {measured['peak'] / mib:.1f} MiB (resident before the step "
          f"{measured['resident'] / mib:.1f}); estimate / measured = {est['train_peak'] / measured['peak']:.3f}; "
          f"{seconds:.0f} s for two steps")


if __name__ == "__main__":
    main()
