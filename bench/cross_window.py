"""Can collaboration act on a pair? Before training: each agent's sampled accuracy, and where the other
agents' answers land against HACPO's cross clip window.

A learner l trains on a cross answer y of agent k through the sequence ratio
s = exp(mean log π_l(y) − mean log π_k(y)) (each mean over its own tokenization of y), clipped to the
window [1 − δ, 1]: outside it the answer gives no gradient whatever its reward. For answers k sampled,
mean log π_k − mean log π_l estimates the per-token KL(π_k ‖ π_l), so s ≈ exp(−KL): the window only
admits partners within about −log(1 − δ) nats per token (0.22 at δ = 0.2, 0.92 at δ = 0.6).

This samples the preset's first ``--steps`` batches (the run's own prompts, G answers each, the
preset's sampling), scores them, and for every (learner, source) pair prints the share of the source's
answers with s in the window for several δ (and the share of its *correct* answers in it, the ones the
learner most needs), the median s, and each agent's sampled accuracy. No weights change.

    python bench/cross_window.py --preset smollm2-state --steps 4
    python bench/cross_window.py --preset smollm2-state --set agents.smollm2-sft.model=builtin:smollm2-135m-instruct-sft-light
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

DELTAS = (0.2, 0.4, 0.6, 0.8)


def measure(preset: str, overrides: list[str], steps: int, threads: int) -> dict:
    import torch
    from transformers.utils import logging as hf_logging

    from hacrl.agents.agent import token_logprobs
    from hacrl.config import load_config
    from hacrl.trainer.trainer import Trainer

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    torch.set_num_threads(threads)
    cfg = load_config(preset, overrides=[*overrides, "backend.name=local", "rollout.old_logprobs=recompute"])
    ratios: dict[tuple[str, str], list[tuple[float, bool]]] = {}
    correct: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, Path(tmp), sinks=False)
        try:
            agents = trainer.agents
            for _ in range(steps):
                problems = trainer.data.take(cfg.trainer.batch_size)
                pool, _ = trainer.phases.score(problems, trainer._rollout(problems)[0], step=trainer.step_idx + 1)
                for t in pool.trajectories:
                    if t.reward is not None:
                        correct.setdefault(agents[t.source].id, []).append(float(t.reward))
                for learner in agents:
                    cross = [t for t in pool.trajectories if t.source != learner.index and t.reward is not None]
                    for start in range(0, len(cross), 16):
                        chunk = cross[start : start + 16]
                        prompts = [learner.render_prompt(problems[t.prompt_index].prompt) for t in chunk]
                        answers = [learner.encode_answer(t.text, t.finished)[0] for t in chunk]
                        batch = learner.batch(prompts, answers)
                        with torch.no_grad(), learner.autocast():
                            logp_BT = token_logprobs(learner.model, batch)
                        n_B = batch.answer_mask_BT.sum(-1).clamp_min(1)
                        mean_B = (logp_BT.sum(-1) / n_B).tolist()
                        for t, mean in zip(chunk, mean_B, strict=True):
                            author = t.logp_sum / max(t.num_tokens, 1)
                            key = (learner.id, agents[t.source].id)
                            ratios.setdefault(key, []).append((float(torch.tensor(mean - author).exp()), t.reward > 0))
        finally:
            trainer.close()
    return {"accuracy": {a: sum(v) / len(v) for a, v in correct.items()},
            "answers": {a: len(v) for a, v in correct.items()},
            "pairs": {f"{dst} <- {src}": summarize(v) for (dst, src), v in ratios.items()}}


def summarize(values: list[tuple[float, bool]]) -> dict:
    s = [v for v, _ in values]
    good = [v for v, ok in values if ok]
    out = {"n": len(s), "median_ratio": statistics.median(s), "above_1": sum(v > 1 for v in s) / len(s),
           "correct": len(good)}
    for d in DELTAS:
        out[f"in_window@{d}"] = sum(1 - d <= v <= 1 for v in s) / len(s)
        out[f"correct_in_window@{d}"] = sum(1 - d <= v <= 1 for v in good) / len(good) if good else float("nan")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="smollm2-state")
    p.add_argument("--steps", type=int, default=4, help="batches of the preset's prompts to sample")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--json", action="store_true", help="print the record as JSON")
    args = p.parse_args()
    r = measure(args.preset, args.overrides, args.steps, args.threads)
    if args.json:
        print(json.dumps(r))
        return
    print(f"preset {args.preset} {' '.join(args.overrides)}: {args.steps} batches")
    for a, acc in r["accuracy"].items():
        print(f"  {a:<28} sampled accuracy {acc:.3f} ({r['answers'][a]} answers)")
    head = " ".join(f"{'δ=' + str(d):>7}" for d in DELTAS)
    print(f"  {'learner <- source':<44} {'median s':>8} {'s>1':>5} | in window {head} | correct in window {head}")
    for name, v in r["pairs"].items():
        print(f"  {name:<44} {v['median_ratio']:>8.3f} {v['above_1']:>5.2f} | {'':>9} "
              + " ".join(f"{v[f'in_window@{d}']:>7.2f}" for d in DELTAS) + f" | {'':>17} "
              + " ".join(f"{v[f'correct_in_window@{d}']:>7.2f}" for d in DELTAS) + f"  (n {v['n']}, {v['correct']} correct)")


if __name__ == "__main__":
    main()
