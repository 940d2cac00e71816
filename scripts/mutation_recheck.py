"""Re-run surviving mutants against chosen test files and record the ones a test now kills (docs/mutation.md).

mutmut re-runs a survivor with every test that covers its function (for the loss internals and the update,
~110 s of tests on 2 cores); after writing a test for it, the test file that holds the new test is enough to
show the mutant killed. For each mutant whose name matches a pattern and whose result is "survived" (or any
result, with --all), this runs ``pytest -x`` on the given test files with the mutant switched on
(``MUTANT_UNDER_TEST``, the mutated copy in mutants/src first on the path), as mutmut does, and writes
"killed" into mutmut's results for each one a test fails on; the others keep their result. Run ``bash
scripts/mutation.sh`` (or ``mutmut run``) first, and not at the same time as it (both write the results).

    python scripts/mutation_recheck.py 'hacrl.core.losses.x_hacpo_loss*' -- tests/core/test_loss_edges.py
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
from pathlib import Path

KILLED, SURVIVED = 1, 0  # mutmut's exit codes for these results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("patterns", nargs="+", help="mutant name globs, then -- and the test files")
    p.add_argument("--all", action="store_true", help="re-run every matching mutant, not only survivors")
    argv = sys.argv[1:]
    if "--" not in argv:
        p.error("give the test files after --")
    cut = argv.index("--")
    args, tests = p.parse_args(argv[:cut]), argv[cut + 1:]
    metas = sorted(Path("mutants/src").rglob("*.py.meta"))
    if not metas or not tests:
        p.error("no mutants/ here (run scripts/mutation.sh first) or no test files given")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(["mutants/src", os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    counts = {"killed": 0, "survived": 0}
    for meta in metas:
        data = json.loads(meta.read_text())
        codes = data["exit_code_by_key"]
        names = [n for n in codes if any(fnmatch.fnmatch(n, pat) for pat in args.patterns)
                 and (args.all or codes[n] == SURVIVED)]
        for name in names:
            run = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                                 env={**env, "MUTANT_UNDER_TEST": name}, capture_output=True)
            killed = run.returncode == 1  # a test failed; 0 all passed; other codes: the run itself failed
            if run.returncode not in (0, 1):
                print(f"{name}: pytest exited {run.returncode}; result left as it was", file=sys.stderr)
                continue
            counts["killed" if killed else "survived"] += 1
            print(f"{'killed  ' if killed else 'survived'} {name}")
            if killed:
                codes[name] = KILLED
        if names:
            meta.write_text(json.dumps(data))
    print(f"{counts['killed']} killed, {counts['survived']} still survive")
    return 0


if __name__ == "__main__":
    sys.exit(main())
