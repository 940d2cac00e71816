"""TRL-style hacrl: reward functions written as for TRL's GRPOTrainer, a data set of rows, two tiny models.

    python examples/trl_style.py            # about half a minute on one CPU core
    python examples/trl_style.py --steps 1 --output /tmp/trl-style

The same parts as a TRL script (docs/python-api.md has the mapping): ``reward_funcs`` with TRL's batched
contract (every data set column comes as a keyword list), ``reward_weights``, a ``train_dataset`` of
``{"prompt", "solution", ...}`` rows (a list of dicts, or a ``datasets.Dataset``). What differs: several models
train together (``models``), and the run is a hacrl run directory (``hacrl eval --run`` reads it again).
"""

import argparse
import re

from hacrl.api import HACRLTrainer


def accuracy_reward(completions, solution, **kwargs):
    """1 when the answer's first number is the solution (TRL's docs write rewards this way)."""
    numbers = [re.match(r"\s*(-?\d+)", c) for c in completions]
    return [1.0 if m and m.group(1) == s else 0.0 for m, s in zip(numbers, solution)]


def format_reward(completions, difficulty, **kwargs):
    """A small bonus for an answer that is only digits; the extra column `difficulty` reaches the reward."""
    return [0.2 if c.strip().isdigit() else 0.0 if d == "easy" else -0.2 for c, d in zip(completions, difficulty)]


def make_rows(n: int) -> list[dict]:
    rows = []
    for i in range(n):
        a, b = (i * 37) % 100, (i * 59 + 11) % 100
        rows.append({"prompt": f"{a:02d}+{b:02d}=", "solution": str(a + b),
                     "difficulty": "hard" if (a % 10) + (b % 10) >= 10 else "easy"})
    return rows


if __name__ == "__main__":  # the guard keeps the reward workers from running this script
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--output", default="runs/trl-style")
    args = parser.parse_args()
    rows = make_rows(400)
    trainer = HACRLTrainer(
        models=["builtin:qwen2-char", "builtin:llama-bpe"],  # the tiny-model preset's two agents, their settings
        reward_funcs=[accuracy_reward, format_reward],
        reward_weights=[1.0, 0.5],
        train_dataset=rows[40:],
        eval_dataset=rows[:40],
        preset="tiny-model",
        overrides={"trainer.steps": args.steps, "trainer.eval_size": 40, "trainer.batch_size": 8,
                   "rollout.rollouts_per_prompt": 4, "rollout.max_new_tokens": 4},
        output_dir=args.output,
        overwrite=True,
    )
    result = trainer.train()
    for agent, (before, after) in result.accuracy.items():
        print(f"{agent}: held-out accuracy {before:.3f} -> {after:.3f}")
    print(f"run directory: {result.run_dir}")
