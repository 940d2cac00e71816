"""The ``hacrl`` command: wiring only.

    hacrl train [--preset NAME] [--config FILE] [--set key=value ...] [--output RUN] [--resume [CKPT | RUN]]
                [--overwrite]
    hacrl eval  (--run DIR | --model DIR ...) [--task NAME] [--reward SPEC ...] [--benchmark NAME=PATH ...] [--n 500]
                [--k 0] [--json-out PATH]
    hacrl export RUN [--step N] [--output DIR] [--agent ID ...]
    hacrl presets [--show NAME] [--fields]

Bad input (config, paths, damaged model or checkpoint files, devices) exits with code 2 and at most three
lines naming the file or field and the fix, as does a run that diverges (a non-finite loss, gradient, weight
or logit: the agent, step and phase); an agent whose worker dies (Ray) exits with code 3, naming the agent
and the checkpoint to resume from. A full disk exits with code 2 and one line naming the path, the space it
needed and the command that continues the run (``hacrl.run.files``: nothing is left half-written).
``--overwrite`` deletes only a run directory (``trainer.rundir``), and a run directory has one writer at a
time (a file lock).
"""

from __future__ import annotations

import argparse
import errno
import logging
import re
import sys
from pathlib import Path

import hacrl
from hacrl.cli.compare import add_compare_parser, cmd_compare
from hacrl.cli.eval import add_eval_parser, cmd_eval
from hacrl.cli.export import add_export_parser, cmd_export
from hacrl.cli.plan import add_plan_parser, cmd_plan
from hacrl.cli.train import _resolve_resume, add_train_parser, cmd_train  # noqa: F401 (_resolve_resume: tests)
from hacrl.config import preset_names, preset_text
from hacrl.errors import DiskFull, InputError
from hacrl.run.files import as_disk_full

_PATH_ERRNOS = {errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.EROFS}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hacrl", description="Heterogeneous Agent Collaborative RL (HACPO).")
    p.add_argument("--version", action="version", version=f"hacrl {hacrl.__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    add_train_parser(sub)
    add_eval_parser(sub)
    add_export_parser(sub)
    add_compare_parser(sub)
    add_plan_parser(sub)

    pr = sub.add_parser("presets", help="list the named presets")
    pr.add_argument("--show", metavar="NAME", help="print a preset's YAML")
    pr.add_argument("--fields", action="store_true", help="list every config field with its help text")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command in ("train", "eval"):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    try:
        if args.command == "compare":
            return cmd_compare(args)
        if args.command == "plan":
            return cmd_plan(args)
        if args.command == "train":
            return cmd_train(args)
        if args.command == "eval":
            return cmd_eval(args)
        if args.command == "export":
            return cmd_export(args)
        return cmd_presets(args)
    except (InputError, DiskFull) as exc:
        print(f"hacrl: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        full = as_disk_full(exc, Path.cwd())  # a write not made through hacrl.run.files names its file
        if full is not None:
            print(f"hacrl: error: {full}", file=sys.stderr)
            return 2
        if exc.errno in _PATH_ERRNOS and exc.filename:  # a path the user gave that cannot be written or read
            print(f"hacrl: error: {exc.filename}: {exc.strerror}; check the path and its permissions", file=sys.stderr)
            return 2
        raise
    except KeyboardInterrupt as exc:
        print(f"hacrl: interrupted{f': {exc}' if str(exc) else ''}", file=sys.stderr)
        return 130


# ---- presets --------------------------------------------------------------------------------------

def preset_summary(text: str) -> str:
    r"""A preset's first sentence, from the comment lines that open its YAML (it may run over several lines).

    >>> preset_summary("# Model heterogeneity on SmolLM2-135M (Llama, 49k vocabulary) and\n# Gemma 3. More.\nrun: {}")
    'Model heterogeneity on SmolLM2-135M (Llama, 49k vocabulary) and Gemma 3.'
    """
    lines = []
    for line in text.splitlines():
        if not line.startswith("#") or not line.strip("# "):
            break
        lines.append(line.lstrip("# ").strip())
    joined = " ".join(lines)
    end = re.search(r"[.!?](?=\s|$)", joined)
    return joined[: end.end()] if end else joined


def cmd_presets(args: argparse.Namespace) -> int:
    if args.show:
        print(preset_text(args.show), end="")
        return 0
    if args.fields:
        from hacrl.config import Config, config_fields

        for section, field in config_fields(Config).items():
            sub = getattr(field.annotation, "model_fields", None)
            if sub is None and section == "agents":
                from hacrl.config import AgentSpec

                sub, section = AgentSpec.model_fields, "agents.<id>"
            for name, f in (sub or {}).items():
                default = "" if f.is_required() else f" = {f.get_default(call_default_factory=True)!r}"
                extra = {("task", "name"): f"; builtin: {_names('task')}",
                         ("algorithm", "name"): f"; all: {_names('algorithm')}"}.get((section, name), "")
                print(f"{section}.{name}{default}  {f.description or ''}{extra}".rstrip())
        return 0
    import yaml

    names = preset_names()
    width = max(map(len, names)) + 2
    for name in names:
        tree = yaml.safe_load(preset_text(name))
        agents = ", ".join(a["id"] for a in tree.get("agents", []))
        print(f"{name:<{width}}{preset_summary(preset_text(name))}  [agents: {agents}]")
    print(f"\nbuiltin tasks (task.name): {_names('task')}\nalgorithms (algorithm.name): {_names('algorithm')}\n"
          f"every config key with its help: hacrl presets --fields")
    return 0


def _names(kind: str) -> str:
    """The registered builtin task or algorithm names, for listings."""
    from hacrl.data.tasks import TASKS
    from hacrl.learner.algorithms import ALGORITHMS

    return ", ".join((TASKS if kind == "task" else ALGORITHMS).listing())

