"""The evaluation before training, computed once for every run that starts from the same place.

Every run of a comparison that shares its agents, task and evaluation settings starts from the same weights
and evaluates the same held-out problems greedily before its first step, whatever its algorithm or seed:
on a 2-core CPU that evaluation of two SmolLM2 agents (300 problems, and again at ``trainer.eval_budget``
tokens) costs as much as a third of a run. ``trainer.start_eval_cache: DIR`` keeps it in
``DIR/<key>.json`` the first time and copies it into the eval.jsonl and eval_problems.jsonl of every later
run with the same key.

The key is a hash of everything that decides those answers: the agents' settings and the content of their
weight files, the task section, the rollout section, the evaluation settings (size, benchmarks, answer
texts, the longer budget) and the versions of hacrl, torch and transformers. Greedy decoding of the same
weights on the same prompts is deterministic on one machine (the run's own tests hold the copied records
equal to computed ones, and the metrics of a run that reused them equal those of one that did not: the
evaluation draws no random numbers). Sampled evaluation (``trainer.eval_k`` > 0) is never cached. A seed
is not part of the key: the start is the same for every seed (LoRA adapters start as the identity).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hacrl.config import Config

logger = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
# agent settings that change training only, never the answers of the untrained model
TRAINING_ONLY = ("lr", "weight_decay", "grad_clip", "kl_coef", "max_answer_tokens", "gradient_checkpointing",
                 "data_parallel", "cpu_offload", "num_cpus", "num_gpus")


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of a run (``Trainer.evaluation``; cached here for step 0): the eval metrics it logs and
    its eval.jsonl / eval_problems.jsonl lines."""

    metrics: dict[str, float]
    totals: list[dict[str, Any]]
    per_problem: list[dict[str, Any]]


def weights_digest(model_dir: Path) -> str:
    """A hash of the content of the weight files in ``model_dir`` (names and bytes, in name order); of the
    path itself when it is not a directory (a model the loader will reject anyway)."""
    h = hashlib.blake2b(digest_size=16)
    if not model_dir.is_dir():
        h.update(str(model_dir).encode())
        return h.hexdigest()
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)):
        h.update(str(path.relative_to(model_dir)).encode())
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()


def start_key(cfg: Config) -> str:
    """The cache key of ``cfg``'s step-0 evaluation (see the module docstring for what goes into it)."""
    import torch
    import transformers

    import hacrl
    from hacrl.backends.resolve import resolve_model_path

    agents = []
    for spec in cfg.agents:
        fields = {k: v for k, v in spec.model_dump(mode="json").items() if k not in TRAINING_ONLY}
        fields["weights"] = weights_digest(resolve_model_path(spec.model, f"agents.{spec.id}.model"))
        agents.append(fields)
    t = cfg.trainer
    material = {
        "agents": agents, "task": cfg.task.model_dump(mode="json"), "rollout": cfg.rollout.model_dump(mode="json"),
        "eval": {"size": t.eval_size, "benchmarks": t.eval_benchmarks, "texts": t.eval_texts, "budget": t.eval_budget},
        "versions": [hacrl.__version__, torch.__version__, transformers.__version__],
    }
    return hashlib.blake2b(json.dumps(material, sort_keys=True).encode(), digest_size=12).hexdigest()


class StartCache:
    """``DIR/<key>.json`` for one config; :meth:`load` is None on a miss, :meth:`store` writes atomically."""

    def __init__(self, directory: Path, cfg: Config) -> None:
        self.path = Path(directory) / f"{start_key(cfg)}.json"

    def load(self) -> Evaluation | None:
        if not self.path.is_file():
            return None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return Evaluation(data["metrics"], data["totals"], data["per_problem"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("%s: unreadable (%s); evaluating again", self.path, exc)
            return None

    def store(self, evaluation: Evaluation, source: Path) -> None:
        """Write the entry whole or not at all: into a temporary file of its own (unique to this writer, so
        runs of ``hacrl compare --jobs`` or of other hosts that miss the same key at once never share one),
        flushed to disk, then renamed over the entry; the last of equal writers wins, a reader sees one whole
        entry or none."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps({"source": str(source), "metrics": evaluation.metrics,
                                    "totals": evaluation.totals, "per_problem": evaluation.per_problem}))
                f.flush()
                os.fsync(f.fileno())
            os.replace(name, self.path)
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise


def start_cache(cfg: Config) -> StartCache | None:
    """The configured cache, or None: no ``trainer.start_eval_cache``, or a sampled evaluation (never cached)."""
    t = cfg.trainer
    if not t.start_eval_cache or t.eval_k:
        return None
    return StartCache(Path(t.start_eval_cache), cfg)


def from_run(run_dir: Path) -> Evaluation | None:
    """The step-0 evaluation a finished or running run already wrote (to fill a cache from runs made before
    it existed); None when the run has no step-0 records."""
    from hacrl.run.sinks import read_jsonl

    totals = [r for r in read_jsonl(run_dir / "eval.jsonl") if r["step"] == 0]
    per_problem = [r for r in read_jsonl(run_dir / "eval_problems.jsonl") if r["step"] == 0]
    metrics = next((m for m in read_jsonl(run_dir / "metrics.jsonl") if m["step"] == 0), None)
    if not totals or not per_problem or metrics is None:
        return None
    return Evaluation({k: v for k, v in metrics.items() if k.startswith("eval/")}, totals, per_problem)
