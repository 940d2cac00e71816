"""A GRPO script as TRL's documentation writes one, trained by hacrl: a ``datasets.Dataset``, two reward functions
with TRL's signature (``completions, **kwargs``; a dataset column arrives in ``kwargs``), ``reward_weights``, a
config in GRPOConfig's names (a cosine learning-rate schedule with warm-up, epochs, G, the batch), ``train()``,
then the trained models written out for ``from_pretrained``.

    python examples/trl_docs_script.py                       # 1 epoch over 160 problems: 40 steps, a few minutes
    python examples/trl_docs_script.py --num_train_epochs 0.1 --output_dir /tmp/trl-docs   # 4 steps

What differs from the TRL script it was adapted from: the models. Two tiny builtin models (``builtin:qwen2-char``,
``builtin:llama-bpe``) stand in for the Hub's ``Qwen/Qwen2-0.5B-Instruct`` and train together (``models=[...]``);
``from hacrl import HACRLTrainer`` stands in for ``from trl import GRPOTrainer``, the config is GRPOConfig's
keywords as a dict (``args=``), so TRL need not be installed, and ``overwrite=True`` lets the script run again
into the same folder, as TRL's does. docs/python-api.md maps each name to hacrl's key.
"""

import argparse

from datasets import Dataset

from hacrl import HACRLTrainer


def reward_len(completions, **kwargs):
    """TRL's example length reward: answers of 3 characters (a sum of two 2-digit numbers) score best."""
    return [-abs(3 - len(completion.strip())) for completion in completions]


def reward_digits(completions, **kwargs):
    """The share of the sum's digits the answer has in place; the dataset's ``ground_truth`` column comes in
    ``kwargs``, a list with one entry per completion."""
    return [sum(a == b for a, b in zip(completion.strip(), truth)) / len(truth)
            for completion, truth in zip(completions, kwargs["ground_truth"])]


def make_dataset(n: int, offset: int = 0) -> Dataset:
    """``n`` additions of two 2-digit numbers, none twice (the ``offset``-th on: splits do not overlap)."""
    pairs = [divmod(i * 7919 % 10000, 100) for i in range(offset, offset + n)]
    return Dataset.from_dict({"prompt": [f"{a:02d}+{b:02d}=" for a, b in pairs],
                              "ground_truth": [str(a + b) for a, b in pairs]})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="runs/trl-docs")
    parser.add_argument("--num_train_epochs", type=float, default=1.0)
    parser.add_argument("--train_size", type=int, default=160)
    cli = parser.parse_args(argv)

    train_dataset = make_dataset(cli.train_size, offset=40)
    eval_dataset = make_dataset(40)

    training_args = dict(  # with TRL: GRPOConfig(...)
        output_dir=cli.output_dir,
        learning_rate=3e-4,
        lr_scheduler_type="cosine",
        warmup_ratio=0.1,
        num_train_epochs=cli.num_train_epochs,
        num_generations=4,
        per_device_train_batch_size=16,  # completions: 4 prompts of 4 answers each
        max_completion_length=4,
        reward_weights=[0.1, 1.0],
        logging_steps=1,
        report_to="none",
        seed=0,
    )
    trainer = HACRLTrainer(
        models=["builtin:qwen2-char", "builtin:llama-bpe"],  # with TRL: model="Qwen/Qwen2-0.5B-Instruct"
        reward_funcs=[reward_len, reward_digits],
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        overwrite=True,
    )
    result = trainer.train()
    for agent, (before, after) in result.accuracy.items():
        print(f"{agent}: held-out reward {before:.3f} -> {after:.3f}")
    for folder in trainer.export():  # with TRL: trainer.save_model()
        print(f"exported: {folder}")


if __name__ == "__main__":  # the guard keeps the reward workers from running this script
    main()
