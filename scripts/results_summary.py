"""docs/results-summary.md, generated from the committed comparisons' summary.json files.

Every number on that page comes from a ``results/<dir>/summary.json`` that ``hacrl compare`` wrote (each
comparison's command is in it and on the page); the words around the tables say what each comparison asks and
where its full reading is, never a number. docs/results.md holds the full tables, the readings and the caveats.

Per comparison and agent: the agent's starting accuracy and its partner's, then per algorithm the final
held-out greedy accuracy (mean ± sd over seeds), in how many seeds it ended below the partner's start, and
HACPO's paired difference to it with the report's intervals (the two-level bootstrap over seeds × problems;
the seed-level interval over per-seed differences where summary.json has one).

Run (a second, no extras):

    python scripts/results_summary.py            # write docs/results-summary.md
    python scripts/results_summary.py --check    # exit 1 if the page is not this script's output

tests/meta/test_results_summary.py runs ``--check``, so a number edited by hand or a comparison regenerated
without the page fails the tests.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = "docs/results-summary.md"

# (directory, title, what it asks, where it is read in full): the order of the page. Words only: every number
# on the page is read from the directory's summary.json.
COMPARISONS: list[tuple[str, str, str, str]] = [
    ("results/tiny-model-evidence", ("Tiny models (`tiny-model`): two embedded models of different architecture "
     "and tokenizer on 2-digit addition"),
     ("Does HACPO beat training alone, at the same and at twice the rollouts, and does it beat imitating the "
     "partner's verified answers or pooling them with no correction?"),
     "results.md §9"),
    ("results/smollm2-clean", ("A real pretrained pair (`smollm2-state`): SmolLM2-135M-Instruct as shipped and "
     "its copy fine-tuned on the answer format"),
     ("Does the shipped model learn from a partner that knows the answer format, and is it HACPO's corrections "
     "or the partner's answers that carry the gain? The partner is a demonstrator: the numbers speak for this "
     "pair and task only."),
     "results.md §5"),
    ("results/smollm2-gemma", ("A pair of different architectures and tokenizers (`smollm2-gemma`): SmolLM2-135M "
     "and Gemma 3 270M, both warm-started on the answer format"),
     "Does the weaker model gain across two tokenizers, and does the stronger one gain anything?",
     "results.md §10"),
]
NOT_HERE = ("Sections 1–4 and 6–8 of results.md (the paper's δ against a wider window on the three tiny pairs, "
            "cost, the adaptive window, the stronger agent, three agents) cite run directories that are not in "
            "the repository: their numbers cannot be recomputed from it and are not repeated here. "
            "results/smollm2-state (the first SmolLM2 comparison, superseded by smollm2-clean: its held-out set "
            "leaked) and results/async-pace are read in results.md §5 and §11. results/sharing-methods-tiny (ten ways "
            "of sharing on tiny-model) and results/mechanism (the mechanism study's cells, read by "
            "bench/mechanism.py against the study's decision rules) are read in results.md §13 and §12.")


def _signed(x: float) -> str:
    return f"{x:+.3f}".replace("-", "−")


def _seed_interval(vs: dict[str, Any]) -> str:
    """The seed-level interval of a paired difference where summary.json has one, else its t-test p."""
    seed = vs.get("seed_interval")
    if isinstance(seed, dict) and seed.get("lo") is not None:
        return f"[{_signed(seed['lo'])}, {_signed(seed['hi'])}]"
    return f"p {vs['p']:.2g}" if vs.get("p") is not None else "—"


def _below(final: dict[str, Any], partner_start: float | None) -> str:
    if partner_start is None:
        return "—"
    seeds = final.get("by_seed", {})
    return f"{sum(v < partner_start for v in seeds.values())} of {len(seeds)}"


def agent_table(summary: dict[str, Any], agent: str) -> list[str]:
    """One agent's Markdown table: every algorithm's final accuracy and HACPO's paired difference to it."""
    results = summary["results"]
    others = [a for a in summary["agents"] if a != agent]
    partner_start = results[others[0]]["hacpo"]["start"] if len(others) == 1 else None
    has_seed = any("seed_interval" in v for r in results[agent].values() for v in (r.get("vs") or {}).values())
    head = ["algorithm", "final (mean ± sd)", "seeds below the partner's start",
            "hacpo − it: bootstrap [95%]", "seed-level [95%]" if has_seed else "seed-level t-test"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    n_all = len(summary["seeds"])
    for algo in summary["algorithms"]:
        r = results[agent][algo]
        final = r["final"]
        k = len(final.get("by_seed", {}))
        seeds = f" ({k} of {n_all} seeds)" if k and k < n_all else ""
        cells = [f"`{algo}`", f"{final['mean']:.3f} ± {final['sd']:.3f}{seeds}", _below(final, partner_start)]
        vs = (results[agent].get("hacpo", {}).get("vs") or {}).get(algo)
        if algo == "hacpo":
            cells += ["—", "—"]
        elif vs is None:
            cells += ["not paired", "—"]
        else:
            d = vs["interval"]
            cells += [f"{_signed(d['mean'])} [{_signed(d['lo'])}, {_signed(d['hi'])}]", _seed_interval(vs)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def section(source: str, title: str, question: str, where: str) -> list[str]:
    summary = json.loads((ROOT / source / "summary.json").read_text(encoding="utf-8"))
    results = summary["results"]
    starts = ", ".join(f"{a} {results[a]['hacpo']['start']:.3f}" for a in summary["agents"])
    out = [f"## {title}", "", question, "",
           f"`{summary['command']}`", "",
           (f"{len(summary['seeds'])} seeds × {summary['eval_size']:,} held-out problems, {summary['steps']} steps; "
           f"greedy accuracy at the start: {starts}. Full reading: [{where}](results.md); the report: "
           f"[{source}/report.md](../{source}/report.md)."), ""]
    for agent in sorted(summary["agents"], key=lambda a: results[a]["hacpo"]["start"]):
        out += [f"**{agent}** (start {results[agent]['hacpo']['start']:.3f})", "", *agent_table(summary, agent), ""]
    return out


def page() -> str:
    lines = ["# The results in brief", "",
             ("Generated by `python scripts/results_summary.py` from the committed comparisons' summary.json: "
             "do not edit by hand (`tests/meta/test_results_summary.py` fails if this page and results/ "
             "disagree). What each comparison shows, in words and with its caveats: [results.md](results.md). "
             "Final accuracy is held-out greedy accuracy at the last step; \"hacpo − it\" is HACPO's paired "
             "difference to that algorithm over the same seeds and problems (positive: HACPO ahead); the "
             "bootstrap interval resamples seeds and problems, the seed-level one only seeds "
             "([compare.md](compare.md))."), ""]
    for source, title, question, where in COMPARISONS:
        lines += section(source, title, question, where)
    lines += ["## Not summarised here", "", NOT_HERE, ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare the page; write nothing")
    args = parser.parse_args(argv)
    new, path = page(), ROOT / PAGE
    if args.check:
        if path.read_text(encoding="utf-8") != new:
            print(f"{PAGE} differs from `python scripts/results_summary.py`'s output: run it", file=sys.stderr)
            return 1
        return 0
    path.write_text(new, encoding="utf-8")
    print(PAGE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
