"""Per-module counts of a mutmut run (docs/mutation.md): reads ``mutmut results --all true`` on stdin, prints a
Markdown table, one row per module, with the mutants' states and the score killed / (mutants that had tests).

Usage: .venv/bin/mutmut results --all true | python scripts/mutation_summary.py
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict

STATES = ("killed", "survived", "timeout", "no tests", "not checked")


def main() -> None:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for line in sys.stdin:
        name, _, state = line.strip().rpartition(": ")
        match = re.match(r"(hacrl(?:\.\w+)*?)\.x", name)
        if match:
            counts[match.group(1)][state] += 1
    print("| module | mutants | " + " | ".join(STATES) + " | score |")
    print("|---|---:|" + "---:|" * len(STATES) + "---:|")
    total: Counter[str] = Counter()
    for module in sorted(counts):
        total.update(counts[module])
        print(_row(module, counts[module]))
    print(_row("**all**", total))


def _row(module: str, c: Counter[str]) -> str:
    tested = c["killed"] + c["survived"] + c["timeout"]
    score = f"{c['killed']}/{tested} ({100 * c['killed'] / tested:.0f}%)" if tested else "–"
    return f"| {module} | {sum(c.values())} | " + " | ".join(str(c[s]) for s in STATES) + f" | {score} |"


if __name__ == "__main__":
    main()
