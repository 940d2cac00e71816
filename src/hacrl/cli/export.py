"""``hacrl export RUN``: each agent of a run's checkpoint as a plain Hugging Face model folder, ready to ship.

    hacrl export RUN [--step N] [--output DIR] [--agent ID ...]

Each agent goes to ``DIR/<agent id>/`` (default ``DIR``: ``RUN/export/step-<N>``) holding only what
``from_pretrained`` and the Hub's uploader read: ``config.json``, ``generation_config.json``, the safetensors
weights, the tokenizer files, any custom code files, and a ``README.md`` model card naming the run, its
algorithm, the agent's partners and its held-out accuracy at that step (from the run's eval.jsonl). The files a
checkpoint keeps only to resume (``optimizer.pt``, the random streams, the KL reference, FSDP shards, the
asynchronous mode's pending answers) are left behind. A LoRA agent is exported as its merged model: the
adapter merged into the base weights with peft's ``merge_and_unload`` when the checkpoint was written (its
``merged/`` folder); the adapter alone stays in the checkpoint.

Files are copied, not re-saved: the exported weights are the checkpoint's, byte for byte. Each agent's folder is
written under a temporary name and renamed into place when complete; an existing folder is never overwritten.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from hacrl.errors import InputError

__all__ = ["add_export_parser", "cmd_export", "export_run", "model_card"]

# what a Hugging Face model folder holds (save_pretrained of a causal LM and its tokenizer); nothing else is copied
HF_FILES = ("config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json", "tokenizer*",
            "special_tokens_map.json", "added_tokens.json", "vocab.*", "merges.txt", "chat_template.*",
            "*.tiktoken", "spiece.model", "sentencepiece*.model", "*.py")


def add_export_parser(sub: Any) -> None:
    e = sub.add_parser("export", help="write each agent of a run as a plain Hugging Face model folder (no "
                                      "optimizer or RNG state), with a model card")
    e.add_argument("run", metavar="RUN", help="a run directory (hacrl train --output)")
    e.add_argument("--step", type=int, default=None, help="the checkpoint of this step (default: the latest intact)")
    e.add_argument("--output", metavar="DIR", default=None,
                   help="write each agent to DIR/<agent id> (default: RUN/export/step-<N>)")
    e.add_argument("--agent", action="append", default=[], metavar="ID", help="only this agent (repeatable)")


def cmd_export(args: argparse.Namespace) -> int:
    paths = export_run(Path(args.run), step=args.step, output=Path(args.output) if args.output else None,
                       agents=args.agent or None)
    for path in paths:
        print(path)
    return 0


def export_run(run: Path, *, step: int | None = None, output: Path | None = None,
               agents: list[str] | None = None) -> list[Path]:
    """Export the agents of ``run``'s checkpoint at ``step`` (default: the latest intact one) into
    ``output/<agent id>`` (default ``output``: ``run/export/step-<N>``); the folders written, in agent order."""
    from hacrl.run.checkpoint import read_manifest

    cfg = _run_config(run)
    ckpt = _checkpoint(run, step)
    at = int(read_manifest(ckpt).get("step", 0))
    ids = [a["id"] for a in cfg["agents"]]
    for name in agents or []:
        if name not in ids:
            raise InputError(f"--agent {name}: {run} has no such agent; its agents: {', '.join(ids)}")
    root = output if output is not None else run / "export" / ckpt.name
    chosen = [a for a in ids if not agents or a in agents]
    taken = [str(root / a) for a in chosen if (root / a).exists()]
    if taken:  # before anything is written: never half an export
        raise InputError(f"export: {', '.join(taken)} exists; delete it or give another --output")
    evals = _held_out(run, at)
    written = []
    for agent_id in chosen:
        card = model_card(cfg, agent_id, run=run, step=at, evals=evals)
        written.append(_export_agent(ckpt / "agents" / agent_id, root / agent_id, card))
        print(f"export: {agent_id} (step {at} of {cfg['trainer']['steps']}) -> {written[-1]}", file=sys.stderr)
    return written


# ---- which checkpoint, which files ------------------------------------------------------------------------------
def _run_config(run: Path) -> dict[str, Any]:
    from hacrl.config import ConfigError, load_config

    if not run.is_dir():
        raise InputError(f"export: {run}: no such directory; give a run directory (hacrl train --output)")
    if not (run / "config.yaml").is_file():
        raise InputError(f"export: {run} has no config.yaml; give a run directory (hacrl train --output)")
    try:
        return load_config(path=run / "config.yaml").model_dump(mode="json")
    except ConfigError as exc:
        raise InputError(f"export: {run}/config.yaml is not a usable run config ({exc})") from None


def _checkpoint(run: Path, step: int | None) -> Path:
    """The checkpoint to export: ``step``'s, or the newest intact one; one line naming what there is otherwise."""
    from hacrl.run.checkpoint import (
        complete_checkpoints,
        passed_over,
        unusable_why,
        usable_checkpoint,
        verify_checkpoint,
    )

    root = run / "checkpoints"
    if step is None:
        found, damaged = usable_checkpoint(root)
        if found is None:
            raise InputError(f"export: {run}: {unusable_why(damaged, 'no checkpoint')} under {root}; export a run "
                             "that saved one")
        for line in passed_over(damaged, found, "exporting"):
            print(line, file=sys.stderr)
        return found
    chosen = [p for p in complete_checkpoints(root) if int(p.name.split("-")[1]) == step]
    if not chosen:
        have = ", ".join(str(int(p.name.split("-")[1])) for p in complete_checkpoints(root)) or "none"
        raise InputError(f"--step {step}: {run} has no checkpoint of step {step}; its checkpoints' steps: {have}")
    problem = verify_checkpoint(chosen[0])
    if problem is not None:
        raise InputError(f"--step {step}: checkpoint {chosen[0]} is damaged ({problem}); export another step")
    return chosen[0]


def model_files(agent_dir: Path) -> tuple[Path, list[Path]]:
    """The folder holding an agent's Hugging Face model inside its checkpoint directory (a LoRA agent's
    ``merged/``) and the files of it to export (``HF_FILES``)."""
    from hacrl.agents.lora import is_adapter_dir, merged_dir

    source = merged_dir(agent_dir, "export") if is_adapter_dir(agent_dir) else agent_dir
    if not (source / "config.json").is_file():
        raise InputError(f"export: {source} holds no model (config.json missing); the checkpoint is incomplete")
    files = sorted(p for p in source.iterdir() if p.is_file() and any(fnmatch.fnmatch(p.name, g) for g in HF_FILES))
    if not any(p.suffix == ".safetensors" for p in files):
        raise InputError(f"export: {source} has no safetensors weights; re-save the model with save_pretrained")
    return source, files


def _export_agent(agent_dir: Path, dest: Path, card: str) -> Path:
    """Copy the agent's model files and write its model card into ``dest`` (all or nothing)."""
    from hacrl.run.files import guard

    _, files = model_files(agent_dir)
    if dest.exists():
        raise InputError(f"export: {dest} exists; delete it or give another --output")
    tmp = dest.parent / f".tmp-{dest.name}-{os.getpid()}"
    try:
        with guard(tmp):
            tmp.mkdir(parents=True)
            for path in files:
                shutil.copyfile(path, tmp / path.name)
            if not (tmp / "generation_config.json").is_file():
                _write_generation_config(tmp)
            (tmp / "README.md").write_text(card, encoding="utf-8")
            os.rename(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _write_generation_config(folder: Path) -> None:
    """A model saved without one (not a generating model class): the defaults its config implies."""
    from transformers import AutoConfig, GenerationConfig

    GenerationConfig.from_model_config(AutoConfig.from_pretrained(folder)).save_pretrained(folder)


# ---- the model card -------------------------------------------------------------------------------------------
def _held_out(run: Path, step: int) -> dict[str, dict[str, Any]]:
    """agent → its eval.jsonl record at step 0 (``"start"``) and at ``step`` (``"end"``) on the task's held-out
    split (greedy answers at the training answer budget)."""
    from hacrl.run.sinks import is_task_record, read_jsonl

    out: dict[str, dict[str, Any]] = {}
    for rec in read_jsonl(run / "eval.jsonl"):
        if "agent" in rec and is_task_record(rec) and rec.get("greedy_acc") is not None:
            if rec["step"] in (0, step):
                out.setdefault(rec["agent"], {})["end" if rec["step"] == step else "start"] = rec
    return out


def _hub_id(model: str) -> str | None:
    """``org/name`` of a Hub model spec (``org/name[@revision]``); None for a path or a builtin model.

    >>> _hub_id("Qwen/Qwen3-0.6B@main"), _hub_id("builtin:llama-bpe"), _hub_id("/data/models/m")
    ('Qwen/Qwen3-0.6B', None, None)
    """
    name = model.split("@", 1)[0]
    parts = name.split("/")
    if model.startswith(("builtin:", "/", ".", "~")) or len(parts) != 2 or not all(parts) or Path(name).exists():
        return None
    return name


def model_card(cfg: dict[str, Any], agent_id: str, *, run: Path, step: int,
               evals: dict[str, dict[str, Any]]) -> str:
    """The README.md of an exported agent: Hub metadata, then the run, algorithm, partners and accuracy."""
    import hacrl

    agents = {a["id"]: a for a in cfg["agents"]}
    me, algorithm, task = agents[agent_id], cfg["algorithm"]["name"], cfg["task"]
    partners = [f"`{a}` ({spec['model']})" for a, spec in agents.items() if a != agent_id]
    base = _hub_id(me["model"])
    meta = ["---", "library_name: transformers", "pipeline_tag: text-generation",
            f"tags: [hacrl, reinforcement-learning, {algorithm}]", *([f"base_model: {base}"] if base else []), "---"]
    reward = task.get("reward") or "the task's verifier"
    lines = [
        f"# {agent_id}", "",
        (f"`{me['model']}` trained with reinforcement learning from verifiable rewards by "
         f"[hacrl](https://arxiv.org/abs/2603.02604) {hacrl.__version__}, algorithm **{algorithm}**, "
         f"step {step} of {cfg['trainer']['steps']}, in run `{run.resolve().name}`."), "",
        f"- Partner(s): {', '.join(partners) if partners else 'none (trained alone)'}",
        f"- Task: {task['name']}; reward: {json.dumps(reward) if isinstance(reward, list) else reward}",
        f"- Held-out accuracy: {_accuracy_line(evals.get(agent_id, {}), step)}",
    ]
    if me.get("lora"):
        lines.append("- LoRA: the adapter merged into the base weights (peft `merge_and_unload`); the adapter "
                     "alone stays in the run's checkpoint")
    lines += ["", "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
              f'model = AutoModelForCausalLM.from_pretrained("path/to/{agent_id}")',
              f'tokenizer = AutoTokenizer.from_pretrained("path/to/{agent_id}")', "```", "",
              "Weights, config, tokenizer and generation config only: no optimizer or random state."]
    return "\n".join(meta + [""] + lines) + "\n"


def _accuracy_line(recs: dict[str, Any], step: int) -> str:
    """``0.700 at step 2 (greedy, 50 held-out problems), 0.600 at step 0``, or why there is none."""
    end, start = recs.get("end"), recs.get("start")
    if end is None:
        return f"not evaluated at step {step} (no eval.jsonl record of that step)"
    text = (f"{end['greedy_acc']:.3f} at step {step} (mean reward of one greedy answer on {end.get('n', '?')} "
            f"held-out problems)")
    return text + (f", {start['greedy_acc']:.3f} at step 0" if start is not None and step != 0 else "")
