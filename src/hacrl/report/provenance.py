"""The provenance of a comparison's runs (see :mod:`hacrl.run.provenance`): which code, libraries and
devices made them, whether they all came from the same code, and report.md's "Provenance" section.

:func:`provenance_summary` reads every run's ``provenance.jsonl`` (a run from before it has none and is
listed as such); runs *differ* when their hacrl commits, or their torch or transformers versions, are not all
the same (a run resumed under other code differs from itself), and a run from a checkout with uncommitted
changes to tracked files is *dirty*. :func:`provenance_warning` is the line the report opens with then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hacrl.report.runs import RunOutcome
from hacrl.run.provenance import LIBRARIES, read_provenance

COMPARED = ("torch", "transformers")  # libraries whose versions must agree for the runs to count as one code


def _device(rec: dict[str, Any]) -> str:
    d = rec.get("device") or {}
    if d.get("gpu"):
        gpus = d["gpu"] if isinstance(d["gpu"], list) else [d["gpu"]]
        return "cuda: " + ", ".join(dict.fromkeys(map(str, gpus)))
    parts = [p for p in (d.get("cpu_capability"), d.get("cpu_model")) if p]
    return "cpu: " + ", ".join(parts) if parts else "unknown"


def _values(recs: list[dict[str, Any]], get: Any) -> list[Any]:
    return list(dict.fromkeys(get(r) for r in recs))


def provenance_summary(outcomes: Sequence[RunOutcome]) -> dict[str, Any]:
    """``{"runs": [per run: commits, dirty, versions, python, devices, torch_threads, invocations],
    "unrecorded": [run names], "differ": [{"what", "values": {value: [run names]}}], "dirty": [run names]}``."""
    runs, unrecorded = [], []
    for o in outcomes:
        name = f"{o.algo} seed {o.seed}"
        recs = read_provenance(o.run_dir)
        if not recs:
            unrecorded.append(name)
            continue
        dirty = [(r.get("hacrl") or {}).get("dirty") for r in recs]
        runs.append({
            "run": name, "algorithm": o.algo, "seed": o.seed, "invocations": len(recs),
            "resumed": sum(bool(r.get("resumed")) for r in recs),
            "version": _values(recs, lambda r: (r.get("hacrl") or {}).get("version")),
            "commits": _values(recs, lambda r: (r.get("hacrl") or {}).get("commit", "unknown")),
            "dirty": True if any(dirty) else None if all(v is None for v in dirty) else False,
            "libraries": {lib: _values(recs, lambda r, lib=lib: (r.get("libraries") or {}).get(lib))
                          for lib in LIBRARIES},
            "python": _values(recs, lambda r: r.get("python")),
            "devices": _values(recs, _device),
            "torch_threads": _values(recs, lambda r: r.get("torch_threads")),
        })
    differ = []
    for what, get in (("hacrl commit", lambda r: r["commits"]),
                      *((lib, lambda r, lib=lib: r["libraries"][lib]) for lib in COMPARED)):
        values: dict[str, list[str]] = {}
        for r in runs:
            for v in get(r):
                values.setdefault(str(v), []).append(r["run"])
        if len(values) > 1:
            differ.append({"what": what, "values": values})
    return {"runs": runs, "unrecorded": unrecorded, "differ": differ,
            "dirty": [r["run"] for r in runs if r["dirty"]]}


def _short(commit: str) -> str:
    return commit[:10] if commit != "unknown" else commit


def provenance_warning(p: dict[str, Any] | None) -> list[str]:
    """The report's opening mark when the runs came from different code (or a dirty checkout), runs named."""
    if not p or not (p.get("differ") or p.get("dirty")):
        return []
    parts = []
    for d in p.get("differ", []):
        shown = {(_short(v) if d["what"] == "hacrl commit" else v): runs for v, runs in d["values"].items()}
        parts.append(f"{d['what']} " + "; ".join(f"{v} ({', '.join(runs)})" for v, runs in shown.items()))
    if p.get("dirty"):
        parts.append(f"uncommitted changes to tracked files (dirty checkout): {', '.join(p['dirty'])}")
    if not p.get("differ"):  # one commit, but not exactly its code
        return [(f"> **These runs came from a checkout with uncommitted changes**, so their code is not exactly "
                 f"their commit: {', '.join(p['dirty'])}. See Provenance below."), ""]
    return [f"> **These runs did not all come from the same code**: {'. '.join(parts)}. See Provenance below.", ""]


def render_provenance(p: dict[str, Any] | None) -> list[str]:
    """report.md's short "Provenance" section: one row per distinct (commit, dirty, libraries, device), with
    the runs that share it; the runs without a record named."""
    lines = ["## Provenance", ""]
    if not p or not p.get("runs"):
        return [*lines, ("No provenance recorded: these runs predate `provenance.jsonl` (hacrl records the "
                         "commit, library versions and device of every invocation since), so the code they ran "
                         "is unknown."), ""]
    groups: dict[tuple, list[str]] = {}
    for r in p["runs"]:
        libs = ", ".join(f"{lib} {'/'.join(str(v) for v in vs)}" for lib, vs in r["libraries"].items()
                         if vs != [None])
        key = ("/".join(map(_short, r["commits"])), {True: "yes", False: "no", None: "unknown"}[r["dirty"]],
               libs, "/".join(map(str, r["python"])), "; ".join(r["devices"]),
               "/".join(map(str, r["torch_threads"])))
        groups.setdefault(key, []).append(r["run"])
    lines += ["| runs | hacrl commit | dirty | libraries | python | device | torch threads |",
              "|---|---|---|---|---|---|---|"]
    for (commit, dirty, libs, py, dev, threads), runs in groups.items():
        who = f"all {len(runs)} runs" if len(groups) == 1 and not p.get("unrecorded") else ", ".join(runs)
        lines.append(f"| {who} | `{commit}` | {dirty} | {libs} | {py} | {dev} | {threads} |")
    lines.append("")
    if p.get("unrecorded"):
        lines += [f"No provenance recorded: {', '.join(p['unrecorded'])}.", ""]
    return [*lines, "From each run's `provenance.jsonl` (one line per invocation); summary.json `provenance`.", ""]
