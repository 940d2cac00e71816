"""The README's figure and results table, both from a committed comparison's summary.json.

The figure (docs/img/tiny-model-curves.png) is each agent's held-out accuracy against the training step for
hacpo, gspo, gspo2x and imitation, drawn by the report's own :func:`hacrl.report.plots.draw_curves`. The
table gives each algorithm's final accuracy and hacpo's paired difference to it (the report's bootstrap
interval), for the weaker agent first. Both say on which CPU the comparison ran: summary.json does not record
it, so ``MEASURED_ON`` holds it per comparison (from docs/results/tiny-pairs.md §9) and ``--cpu`` overrides it.

Run (a few seconds; matplotlib from the ``report`` extra, only for the figure):

    python scripts/readme_figure.py                  # write the PNG and the table into README.md
    python scripts/readme_figure.py --check          # exit 1 if README.md's table is not this script's output

tests/meta/test_readme.py runs the ``--check`` comparison, so a table edited by hand fails the tests.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "results/tiny-model-evidence"
FIGURE = "docs/img/tiny-model-curves.png"
ALGOS = ("hacpo", "gspo", "gspo2x", "imitation")
WHAT = {"hacpo": "HACPO, shared pool (δ 0.6)", "gspo": "GSPO, each alone",
        "gspo2x": "GSPO×2, alone with 2× rollouts", "imitation": "imitate the partner's verified answers"}
# the CPU each committed comparison ran on (summary.json has no field for it)
MEASURED_ON = {"results/tiny-model-evidence": "a 2-core AMD EPYC with AVX2 (torch CPU capability AVX2)"}
BEGIN, END = "<!-- readme-table: begin (scripts/readme_figure.py) -->", "<!-- readme-table: end -->"


def _signed(x: float) -> str:
    return f"{x:+.3f}".replace("-", "−")


def table_lines(summary: dict[str, Any], source: str, cpu: str) -> list[str]:
    """The README's results table (Markdown lines, caption included) for ``ALGOS`` of ``summary``."""
    results = summary["results"]
    agents = sorted(summary["agents"], key=lambda a: results[a]["hacpo"]["start"])  # weaker agent first
    n_seeds, n_problems = len(summary["seeds"]), summary["eval_size"]
    head = ["algorithm"]
    for rank, agent in zip(("weaker", "stronger"), agents):
        head += [f"{rank} agent {agent}: accuracy (start {results[agent]['hacpo']['start']:.3f})",
                 "HACPO minus this [95% interval]"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for algo in ALGOS:
        cells = [f"`{algo}`: {WHAT[algo]}"]
        for agent in agents:
            final = results[agent][algo]["final"]
            cells.append(f"{final['mean']:.3f} ± {final['sd']:.3f}")
            if algo == "hacpo":
                cells.append("—")
            else:
                d = results[agent]["hacpo"]["vs"][algo]["interval"]
                cells.append(f"{_signed(d['mean'])} [{_signed(d['lo'])}, {_signed(d['hi'])}]")
        lines.append("| " + " | ".join(cells) + " |")
    caption = (f"Held-out greedy accuracy after {summary['steps']} steps of `{summary['preset']}`, mean ± sd "
               f"over {n_seeds} seeds; the interval is the paired bootstrap over seeds and {n_problems:,} "
               f"problems of [{source}]({source}/report.md). Measured on {cpu}; another CPU may round "
               f"differently. Made by `python scripts/readme_figure.py`.")
    return [*lines, "", *textwrap.wrap(caption, width=110, break_on_hyphens=False)]


def draw_figure(summary: dict[str, Any], path: Path) -> Path:
    """Both agents' learning curves for ``ALGOS``, side by side, colours as in the comparison's report."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hacrl.report.plots import draw_curves, save_figure

    results = summary["results"]
    agents = sorted(summary["agents"], key=lambda a: results[a]["hacpo"]["start"])
    colors = {a: f"C{i}" for i, a in enumerate(summary["algorithms"])}
    fig, axes = plt.subplots(1, len(agents), figsize=(9, 3.4), sharey=True)
    for ax, agent, rank in zip(axes, agents, ("weaker", "stronger")):
        draw_curves(ax, results[agent], list(ALGOS), colors)
        ax.set_title(f"{agent} ({rank} agent)", fontsize=10)
    axes[0].set_ylabel("held-out greedy accuracy")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{summary['preset']}: mean over {len(summary['seeds'])} seeds (band ± sd)", fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, path)


def replace_block(text: str, lines: list[str]) -> str:
    """``text`` with the lines between the BEGIN and END markers replaced by ``lines``."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + "\n".join(lines) + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=SOURCE, help="the comparison directory (holds summary.json)")
    parser.add_argument("--cpu", default=None, help="the CPU it ran on (default: MEASURED_ON[source])")
    parser.add_argument("--readme", default="README.md")
    parser.add_argument("--check", action="store_true", help="only compare README's table; write nothing")
    args = parser.parse_args(argv)
    summary = json.loads((ROOT / args.source / "summary.json").read_text(encoding="utf-8"))
    cpu = args.cpu or MEASURED_ON.get(args.source)
    if cpu is None:
        parser.error(f"say on which CPU {args.source} ran: --cpu '...'")
    readme = ROOT / args.readme
    text = readme.read_text(encoding="utf-8")
    new = replace_block(text, table_lines(summary, args.source, cpu))
    if args.check:
        if new != text:
            print(f"{args.readme}: the results table differs from `python scripts/readme_figure.py`'s", file=sys.stderr)
            return 1
        return 0
    readme.write_text(new, encoding="utf-8")
    print(draw_figure(summary, ROOT / FIGURE).relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
