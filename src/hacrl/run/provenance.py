"""Where a run's numbers came from: the code, the libraries and the machine, one JSON line per invocation.

:func:`record_provenance` appends to ``<run>/provenance.jsonl`` at every invocation of a run (the first and
every resume; ``Trainer.__init__`` calls it), so a run resumed under other code says so. :func:`collect` is
the record itself (``hacrl eval`` puts it in its ``--json-out``), :func:`read_provenance` reads the file back
(``[]`` for a run from before it, or without it). Nothing here raises on a missing tool: no git, or a hacrl
that is not a git checkout, is recorded as ``"unknown"``, an absent library as ``null``.

A record::

    {"time": "2026-12-04T17:20:00Z", "resumed": false, "from_step": 0,
     "hacrl": {"version": "0.1.0", "commit": "2eb995e…" | "unknown", "dirty": false | null},
     "python": "3.11.9", "libraries": {"torch": "2.13.0", "transformers": "5.24.0", "vllm": null, ...},
     "device": {"kind": "cpu", "cpu_capability": "AVX512", "cpu_model": "Intel(R) Xeon(R) ...", "gpu": null},
     "torch_threads": 1}

``dirty`` counts changes to tracked files only (run outputs and caches in the checkout are untracked and
would mark every run).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hacrl.run.files import append_lines

logger = logging.getLogger(__name__)

PROVENANCE_FILE = "provenance.jsonl"
UNKNOWN = "unknown"
# distribution names (as pip knows them), in the order the report lists them
LIBRARIES = ("torch", "transformers", "peft", "vllm", "ray", "accelerate", "datasets", "math-verify", "numpy",
             "pydantic")


def library_versions() -> dict[str, str | None]:
    """Each of :data:`LIBRARIES`' installed version, None when it is not installed (none is imported)."""
    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def hacrl_version() -> str:
    """The running hacrl's ``__version__`` (read from the loaded package: this layer imports none above it)."""
    version = getattr(sys.modules.get("hacrl"), "__version__", None)
    if version:
        return str(version)
    try:
        return importlib.metadata.version("hacrl")
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state(package_dir: Path | None = None) -> dict[str, Any]:
    """``{"commit", "dirty"}`` of the git checkout hacrl runs from (``src/hacrl`` inside the work tree);
    ``{"commit": "unknown", "dirty": None}`` without git, or when hacrl is installed rather than checked out
    (a repository that merely encloses site-packages is not hacrl's)."""
    package_dir = Path(package_dir or Path(__file__).resolve().parents[1]).resolve()  # src/hacrl
    unknown = {"commit": UNKNOWN, "dirty": None}
    top = _git(["rev-parse", "--show-toplevel"], package_dir)
    if not top or (Path(top).resolve() / "src" / "hacrl") != package_dir:
        return unknown
    commit = _git(["rev-parse", "HEAD"], package_dir)
    status = _git(["status", "--porcelain", "--untracked-files=no"], package_dir)
    if not commit:
        return unknown
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def device_info() -> dict[str, Any]:
    """The machine: torch's CPU capability (the kernels it picks) and the CPU model; the GPU names when CUDA
    is available."""
    out: dict[str, Any] = {"kind": "cpu", "cpu_capability": None, "cpu_model": _cpu_model(), "gpu": None}
    try:
        import torch

        out["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        if torch.cuda.is_available():
            out["kind"] = "cuda"
            out["gpu"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except (RuntimeError, AssertionError, OSError) as exc:  # a broken driver must not stop a run
        logger.debug("provenance: no device details (%s)", exc)
    return out


def _threads() -> int:
    import torch

    return int(torch.get_num_threads())


def collect(*, resumed: bool = False, from_step: int = 0) -> dict[str, Any]:
    """This process's provenance record (see the module docstring)."""
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "resumed": bool(resumed), "from_step": int(from_step),
        "hacrl": {"version": hacrl_version(), **git_state()},
        "python": platform.python_version(),
        "libraries": library_versions(),
        "device": device_info(),
        "torch_threads": _threads(),
    }


def record_provenance(run_dir: Path, *, from_step: int = 0) -> dict[str, Any]:
    """Append this invocation's record to ``run_dir/provenance.jsonl`` (one whole line or none) and return it;
    ``from_step`` > 0 is a resume."""
    rec = collect(resumed=from_step > 0, from_step=from_step)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    append_lines(run_dir / PROVENANCE_FILE, [rec])
    return rec


def read_provenance(run_dir: Path) -> list[dict[str, Any]]:
    """The run's records, oldest first; ``[]`` without the file. A line cut short by a kill is skipped."""
    from hacrl.run.records import run_text  # the file, or its copy in a compacted comparison's records

    try:
        text = run_text(Path(run_dir) / PROVENANCE_FILE) or ""
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out
