"""docs/results-tallies.md, generated: the tallies and readings the README quotes that no comparison's own table holds.

docs/results-summary.md (``scripts/results_summary.py``) has one table per committed comparison; the README also
quotes what two analysis scripts compute *across* comparisons. This page is their output, made by the same
functions, so that every number the README quotes is on a generated page (``tests/meta/test_readme_numbers.py``):

- ``bench/mechanism.py --tally`` (HACPO against naive and against imitation, per agent and cell) and ``--rules``
  (every contrast the mechanism study's decision rules read, each arm against GSPO×2 included), over the study's
  finished cells;
- ``bench/trust_study.py`` (``trust`` against the best fixed way of sharing, and each arm's shortfall to it) and
  its ``--method ... --vs trust`` reading of stage 3's variant and stage 9's cut, over the trust study's finished
  cells.

The cells are listed here (``MECHANISM_CELLS``, ``TRUST_CELLS``), not globbed: a cell whose runs are still coming
in (a directory without summary.json, or with one its last invocation wrote over part of the runs) would change
the page under the tests. A cell enters once it is finished, by adding it to its list and running this script.
Everything is read from summary.json and, for trust's decisions, the runs' metrics (compacted or not); no
training. A few seconds.

    python scripts/results_tallies.py            # write docs/results-tallies.md
    python scripts/results_tallies.py --check    # exit 1 if the page is not this script's output

tests/meta/test_results_tallies.py runs ``--check``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
PAGE = "docs/results-tallies.md"

# The mechanism study's finished cells (each with every run in and its summary.json), in the study's order.
MECHANISM_CELLS = ["e1-tiny-model", "e1-tiny-state", "sym-0.5", "sym-1.0", "asym", "high", "eq-model", "low",
                   "p1-rho0", "p1-rho1", "p2-rho0", "p2-rho1", "p1-avx2-rho1", "high-avx2", "p1-avx2-rho0",
                   "p1-avx2-rho0.5", "p2-rho0.5", "asym-avx2", "e4-unfaithful", "e4-faithful"]
# The trust study's tiny cells: stage 1's five, stage 2b's three and stage 5's six (docs/results-trust.md).
TINY_CELLS = ["tiny-model", "p1-rho1", "sym-1.0", "p1-rho0", "high", "tiny-state", "sym-0.5", "asym", "p2-rho1",
              "p1-rho0.5", "p2-rho0.5", "low", "eq-model", "p2-rho0"]
# Its finished cells: the tiny ones, then stage 4's SmolLM2 cells, each once its runs are all in (rule E1).
TRUST_CELLS = [*TINY_CELLS, "e4-unfaithful"]
# The cells where stage 3's variant ran: stages 1 and 2b's eight, then (stage 5b) stage 5's six: all fourteen.
VARIANT_CELLS = TINY_CELLS
# Stage 3's variant, read against trust as the README quotes it.
TRUST_VARIANT = "trust@trust_budget=true@trust_mean=trained"
# trust's settings read in trust's place, each over the cells it ran in: (title, method, cells).
TRUST_SETTINGS = [("Stage 3's variant", TRUST_VARIANT, VARIANT_CELLS),
                  ("Stage 9's cut", "trust@trust_cut=0.5", TINY_CELLS)]
TALLIES = [("hacpo", "naive"), ("hacpo", "imitation")]


def _load(path: str, name: str) -> ModuleType:
    """A bench script by its path (bench/ is not a package), registered in sys.modules first."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _signed(x: float) -> str:
    return f"{x:+.3f}".replace("-", "−")


def _dirs(study: str, cells: list[str]) -> list[Path]:
    return [ROOT / "results" / study / c for c in cells]


def _brace(study: str, cells: list[str]) -> str:
    """The cells as one shell argument: ``results/trust/{a,b}``."""
    return f"results/{study}/{{{','.join(cells)}}}"


def tally_section(mech: ModuleType) -> list[str]:
    out = ["## HACPO against naive and against imitation, per agent and cell", "",
           ("`ahead`: both intervals of HACPO − it (the paired bootstrap and the seed-level one) above 0; `behind`: "
            "both below 0; an agent-cell without both intervals (one seed) is not counted."), ""]
    for algo, base in TALLIES:
        counts = mech.tally(_dirs("mechanism", MECHANISM_CELLS), algo, base)
        n = sum(map(len, counts.values()))
        out += [f"### HACPO against {base}", "",
                f"`python bench/mechanism.py --tally {algo} {base} {_brace('mechanism', MECHANISM_CELLS)}`", "",
                (f"{algo} − {base} over {n} agent-cells: ahead for {len(counts['ahead'])} of {n}, behind for "
                 f"{len(counts['behind'])} of {n}, neither for {len(counts['neither'])} of {n}."), "",
                "| reading | cell | agent | Δ |", "|---|---|---|---|"]
        out += [f"| {key} | {cell} | {agent} | {_signed(delta)} |"
                for key in ("ahead", "behind") for cell, agent, delta in counts[key]]
        out.append("")
    return out


def rules_section(mech: ModuleType) -> list[str]:
    return ["## The mechanism study's decision rules", "",
            ("Every contrast the rules of [the mechanism study](results/mechanism.md) read: each arm against GSPO×2, "
             "HACPO against its ablations, rule 1 (with the sister cell's sign where the cells hold one) and E2's "
             "difference-in-differences; Δ and both intervals from each cell's summary.json."), "",
            f"`python bench/mechanism.py --rules {_brace('mechanism', MECHANISM_CELLS)}`", "",
            mech.rules_table(mech.rule_rows(_dirs("mechanism", MECHANISM_CELLS))), ""]


def _regrets(trust: ModuleType, rows: list[dict]) -> list[str]:
    out = ["| arm | worst shortfall | mean shortfall | above 0.01 in | within 0.01 in |", "|---|---|---|---|---|"]
    n = len(rows)
    for arm, r in trust.arm_regrets(rows).items():
        above = int(r["above_margin"])
        out.append(f"| `{arm}` | {r['worst']:.3f} | {r['mean']:.3f} | {above} of {n} | {n - above} of {n} |")
    return out


def trust_section(trust: ModuleType) -> list[str]:
    rows = [row for c in _dirs("trust", TRUST_CELLS) for row in trust.cell_rows(c)]
    command = f"python bench/trust_study.py {_brace('trust', TRUST_CELLS)}"
    lines = ["## The trust study", "",
             ("Per cell and agent, trust's final accuracy against the best fixed arm (hacpo, naive, imitation, "
              "gspo2x) and against GSPO×2, read by the rules of [its study](results-trust.md); then every arm's "
              "shortfall to the best fixed arm of each cell and agent (point estimates of the final means). Then "
              "each of trust's settings the study measured, the same way in trust's place and against trust: "
              + ", ".join(f"{title} (`{method}`)" for title, method, _ in TRUST_SETTINGS) + "."), "",
             "### Trust against the best fixed arm", "", f"`{command}`", "", trust.table(rows), "",
             trust.overall(rows), "",
             "### Each arm's shortfall to the best fixed arm", "", f"`{command}`", "", *_regrets(trust, rows), ""]
    for title, method, cells in TRUST_SETTINGS:
        setting = [row for c in _dirs("trust", cells) for row in trust.cell_rows(c, method, "trust")]
        setting_command = f"python bench/trust_study.py {_brace('trust', cells)} --method '{method}' --vs trust"
        lines += [f"### {title} against trust", "", f"`{setting_command}`", "", trust.table(setting), "",
                  trust.overall(setting), "",
                  f"### Each arm's shortfall, {title[0].lower() + title[1:]} in trust's place", "",
                  f"`{setting_command}`", "", *_regrets(trust, setting), ""]
    return lines


def page() -> str:
    mech = _load("bench/mechanism.py", "bench_mechanism")
    trust = _load("bench/trust_study.py", "bench_trust_study")
    lines = ["# Tallies across comparisons", "",
             ("Generated by `python scripts/results_tallies.py`: do not edit by hand "
              "(`tests/meta/test_results_tallies.py` fails if this page and results/ disagree). What the analysis "
              "scripts compute across the committed comparisons, each section under the command that prints it: "
              "the tallies and readings the [README](../README.md) quotes beside the per-comparison tables of "
              "[the results in brief](results-summary.md). Every number the README quotes is on one of the two "
              "pages (`tests/meta/test_readme_numbers.py`)."), "",
             ("The cells read are listed in the script, finished ones only: the mechanism study's "
              + ", ".join(f"`{c}`" for c in MECHANISM_CELLS) + "; the trust study's "
              + ", ".join(f"`{c}`" for c in TRUST_CELLS) + ". A cell still running (a trust cell of stage 4) is "
              "left out until its runs are all in."), ""]
    lines += [*tally_section(mech), *rules_section(mech), *trust_section(trust)]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    generated = _load("scripts/results_summary.py", "results_summary")  # the same command line for both pages
    return generated.write_or_check(argv, __doc__.splitlines()[0], page, PAGE, "scripts/results_tallies.py")


if __name__ == "__main__":
    sys.exit(main())
