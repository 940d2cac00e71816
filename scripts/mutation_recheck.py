"""Re-run mutants against chosen test files and record the ones a test kills (docs/mutation.md).

mutmut re-runs a survivor with every test that covers its function (for the loss internals and the update,
~110 s of tests on 2 cores); after writing a test for it, the test file that holds the new test is enough to
show the mutant killed. For each mutant whose name matches a pattern and whose result is "survived" (or any
result, with --all: also the ones mutmut has not reached), this runs ``pytest -x`` on the given test files
with the mutant switched on (``MUTANT_UNDER_TEST``, the mutated copy in mutants/src first on the path), as
mutmut does: the library and the test files are imported once, and each mutant's run is a fork of that
process. A mutant a test fails on is written as "killed" into mutmut's results straight away; the others keep
their result (a mutant that passes here may still be killed by a test outside the files given). Run ``bash
scripts/mutation.sh`` (or ``mutmut run``) first, and not at the same time as it (both write the results).

    python scripts/mutation_recheck.py 'hacrl.core.losses.x_hacpo_loss*' -- tests/core/test_loss_edges.py
    python scripts/mutation_recheck.py --all 'hacrl.core.logprobs.*' -- tests/core/test_logprobs.py
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import time
from pathlib import Path

KILLED, SURVIVED = 1, 0  # mutmut's exit codes for these results
PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]


def _run_forked(name: str, tests: list[str]) -> int:
    """pytest's exit code for ``tests`` with mutant ``name`` switched on, in a fork of this process."""
    import pytest

    pid = os.fork()
    if pid == 0:  # the child: quiet, the mutant on (mutmut's trampolines read the variable at each call)
        os.environ["MUTANT_UNDER_TEST"] = name
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        try:
            code = int(pytest.main([*PYTEST_ARGS, *tests]))
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("patterns", nargs="+", help="mutant name globs, then -- and the test files")
    p.add_argument("--all", action="store_true", help="every matching mutant, not only survivors")
    argv = sys.argv[1:]
    if "--" not in argv:
        p.error("give the test files after --")
    cut = argv.index("--")
    args, tests = p.parse_args(argv[:cut]), argv[cut + 1:]
    metas = sorted(Path("mutants/src").rglob("*.py.meta"))
    if not metas or not tests:
        p.error("no mutants/ here (run scripts/mutation.sh first) or no test files given")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, str(Path("mutants/src").resolve()))  # the mutated copy, with its trampolines
    os.environ["PYTHONPATH"] = os.pathsep.join([sys.path[0], os.environ.get("PYTHONPATH", "")])
    os.environ["MUTANT_UNDER_TEST"] = ""  # the original code while warming up
    import pytest

    if int(pytest.main([*PYTEST_ARGS, "--collect-only", "-qq", *tests])) != 0:  # imports torch, hacrl, the tests
        p.error(f"the test files do not collect: {' '.join(tests)}")
    counts = {"killed": 0, "survived": 0}
    for meta in metas:
        data = json.loads(meta.read_text())
        codes = data["exit_code_by_key"]
        names = [n for n in codes if any(fnmatch.fnmatch(n, pat) for pat in args.patterns)
                 and (args.all or codes[n] == SURVIVED)]
        for name in names:
            start = time.monotonic()
            code = _run_forked(name, tests)
            if code not in (0, 1):  # 0: every test passed; 1: one failed; other codes: the run itself failed
                print(f"{name}: pytest exited {code}; result left as it was", file=sys.stderr, flush=True)
                continue
            killed = code == 1
            counts["killed" if killed else "survived"] += 1
            print(f"{'killed  ' if killed else 'passed  '} {name} ({time.monotonic() - start:.1f} s)", flush=True)
            if killed:
                codes[name] = KILLED
                meta.write_text(json.dumps(data))  # each kill kept at once: a stopped re-check loses nothing
    print(f"{counts['killed']} killed, {counts['survived']} not killed by these files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
