"""E4's partner pre-flight (issue #45, docs/results/mechanism.md §12.8): fine-tuned SmolLM2 copies made by variants of the
SFT recipe (``hacrl.agents.gguf``), each measured alone on the 300 held-out problems of
``examples/mechanism/e4-unfaithful.yaml``: greedy accuracy, and the equation shares of ``bench/mechanism.py``
(``consistent``: the first equation ``a ± b = v`` right; ``right_inconsistent``: scored right with a wrong
equation). One JSON line per variant: the recipe, the fine-tuning loss (first and last step), the measures, the
seconds the fine-tuning and the evaluation took, and the first four answers.

A variant is made into the model cache under the name ``smollm2-135m-instruct-sft-pf-<variant>`` and the
recipe's hash (:func:`hacrl.agents.gguf.sft_cache_name`), so a variant whose recipe equals a shipped copy's has
that copy's hash too (``unf-x256e4`` is ``builtin:smollm2-135m-instruct-sft-unfaithful``).

    python bench/e4_partner.py unf-8 unf-x256 unf-e4 faithful-x256 unf-x256e4 > partner_recipes.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from hacrl.agents import gguf

ROOT = Path(__file__).resolve().parents[1]
_UNFAITHFUL = {**gguf.SFT_RECIPE, "equation": "unfaithful"}  # the faithful recipe's pass on unfaithful answers
VARIANTS = {
    "unf-8": _UNFAITHFUL,                                      # 64 examples, 1 epoch: 8 steps
    "unf-e4": {**_UNFAITHFUL, "epochs": 4},                    # 32 steps over the same 64
    "unf-x256": {**_UNFAITHFUL, "examples": 256},              # 32 steps over 256
    "unf-x256e4": {**_UNFAITHFUL, "examples": 256, "epochs": 4},  # 128 steps over 256
    "faithful-x256": {**gguf.SFT_RECIPE, "examples": 256},     # the faithful answers, 32 steps over 256
}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("variants", nargs="*", help=f"of {', '.join(VARIANTS)} (default: every one)")
    a = p.parse_args(argv)
    unknown = [v for v in a.variants if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variant {unknown[0]!r}; known: {', '.join(VARIANTS)}")

    from mechanism import equation_measures  # bench/mechanism.py: bench/ is sys.path[0] when this file runs

    from hacrl.backends.loading import load_answering_agent
    from hacrl.config import load_config
    from hacrl.data.factory import build_task, task_scorer
    from hacrl.rollout import get_engine
    from hacrl.trainer.evaluation import evaluate_agent_problems

    cfg = load_config(path=ROOT / "examples" / "mechanism" / "e4-unfaithful.yaml")
    task = build_task(cfg.task, seed=0, max_new_tokens=cfg.rollout.max_new_tokens)
    problems = task.test_problems(cfg.trainer.eval_size)
    scorer = task_scorer(task, cfg.task)
    engine = get_engine("hf")
    spec = cfg.agents[1]  # the partner's settings (chat template, dtype)
    for variant in a.variants or list(VARIANTS):
        name = f"{gguf.SMOLLM2_SFT}-pf-{variant}"
        gguf.SFT_RECIPES[name] = VARIANTS[variant]
        gguf.PRETRAINED[name] = lambda n=name: gguf._sft_copy(n)
        t0 = time.perf_counter()
        path = gguf.pretrained_path(name)
        t1 = time.perf_counter()
        marker = json.loads((path / "hacrl-converted.json").read_text())
        agent = load_answering_agent(spec, 1, path, max_new_tokens=cfg.rollout.max_new_tokens)
        res, rec = evaluate_agent_problems(agent, problems, scorer.score_problems, engine,
                                           max_new_tokens=cfg.rollout.max_new_tokens, texts=len(problems))
        record = rec.as_dict()
        print(json.dumps({
            "variant": variant, "recipe": VARIANTS[variant], "loss_first": marker["losses"][0],
            "loss_last": marker["losses"][-1], "acc": res.greedy_acc, **equation_measures(record),
            "finished": sum(record["finished"]) / len(record["finished"]), "sft_s": round(t1 - t0),
            "eval_s": round(time.perf_counter() - t1), "texts": record["texts"][:4]}), flush=True)
        del agent


if __name__ == "__main__":
    main()
