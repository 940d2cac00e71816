"""Run mutants against chosen test files and record what they show in mutmut's results (docs/mutation.md).

mutmut runs a mutant with every test that covers its function (for the loss internals and the update, ~110 s
of tests on 2 cores) and only with the tests of its selection. This runs each mutant whose name matches a
pattern and that is not yet killed (every matching one with --all) against the test files given, as mutmut
does: the mutated copy in mutants/src first on the path, the mutant switched on by ``MUTANT_UNDER_TEST``, the
tests run once without a mutant first (they must pass; this warms the process up), and each mutant's run a
fork of that process under a CPU-time and memory bound. A mutant a test fails on is written as "killed", one
that runs past the bounds (a loop that never ends) as "timeout"; one that passes keeps its result (a test
outside the files given may still kill it), or, with --record-survivors, is written as "survived": for code
whose tests lie outside mutmut's selection (the trainer's phases), the files given are its test suite. Each
result is written at once, under a lock; do not run this while ``mutmut run`` runs (both write the results).

    python scripts/mutation_recheck.py 'hacrl.core.losses.x_hacpo_loss*' -- tests/core/test_loss_edges.py
    python scripts/mutation_recheck.py --record-survivors 'hacrl.trainer.phases.x_rescue_share*' -- tests/trainer
"""

from __future__ import annotations

import argparse
import fcntl
import fnmatch
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

KILLED, SURVIVED, TIMEOUT = 1, 0, 36  # mutmut's exit codes for these results
MEMORY_BYTES = 6 * 2**30  # a mutant's address space: a runaway loop stops here, not at the machine's OOM killer
PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]


def _run_forked(name: str, tests: list[str], cpu_s: int) -> int:
    """pytest's exit code for ``tests`` with mutant ``name`` switched on, in a fork of this process; TIMEOUT
    for a mutant that runs past ``cpu_s`` CPU seconds or past MEMORY_BYTES (a loop that never ends)."""
    import pytest

    scratch = tempfile.mkdtemp(prefix="mutant-")
    pid = os.fork()
    if pid == 0:  # the child: quiet, bounded, the mutant on (mutmut's trampolines read the variable at each call)
        # in a directory of its own: what a mutant writes to a relative path (a checkpoint at "None/") is not
        # left for the next mutant to read
        os.chdir(scratch)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
        os.environ["MUTANT_UNDER_TEST"] = name
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        try:
            code = int(pytest.main([*PYTEST_ARGS, *tests]))
        except MemoryError:
            code = TIMEOUT
        except BaseException:  # noqa: BLE001 - a forked child never returns into the parent's code
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    shutil.rmtree(scratch, ignore_errors=True)
    code = os.waitstatus_to_exitcode(status)
    return TIMEOUT if code in (-signal.SIGXCPU, -signal.SIGKILL) else code


def _record(meta: Path, name: str, code: int) -> None:
    """Write one mutant's result into its meta file, read afresh under a lock (another re-check may be writing
    the same file's other mutants)."""
    with open(meta.parent / ".recheck.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(meta.read_text())
        data["exit_code_by_key"][name] = code
        tmp = meta.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(meta)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("patterns", nargs="+", help="mutant name globs, then -- and the test files")
    p.add_argument("--all", action="store_true", help="every matching mutant, the killed ones too")
    p.add_argument("--record-survivors", action="store_true",
                   help="also record a mutant these files do not kill as survived (when they hold every test "
                        "that reaches its code, e.g. code outside mutmut's test selection)")
    argv = sys.argv[1:]
    if "--" not in argv:
        p.error("give the test files after --")
    cut = argv.index("--")
    args, tests = p.parse_args(argv[:cut]), [str(Path(t).resolve()) for t in argv[cut + 1:]]
    metas = sorted(Path("mutants/src").rglob("*.py.meta"))
    if not metas or not tests:
        p.error("no mutants/ here (run scripts/mutation.sh first) or no test files given")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, str(Path("mutants/src").resolve()))  # the mutated copy, with its trampolines
    os.environ["PYTHONPATH"] = os.pathsep.join([sys.path[0], os.environ.get("PYTHONPATH", "")])
    os.environ["MUTANT_UNDER_TEST"] = ""  # the original code while warming up
    import pytest

    # one clean run first, as mutmut's: the tests must pass without a mutant, and everything they import (torch,
    # transformers' model classes, hacrl, the test files) is imported once here, not in every fork
    start = time.process_time()
    if int(pytest.main([*PYTEST_ARGS, "-qq", *tests])) != 0:
        p.error(f"the tests fail without a mutant: {' '.join(tests)}")
    cpu_s = int(10 * (time.process_time() - start)) + 60  # mutmut's rule of thumb: well past a clean run
    # and once more in a fork under the bounds, no mutant on: a test that cannot run under them (a process it
    # starts needing more address space, say) would otherwise count every mutant as killed
    if _run_forked("", tests, cpu_s) != 0:
        p.error(f"the tests fail in a fork under the bounds ({cpu_s} CPU s, {MEMORY_BYTES >> 30} GiB of address "
                f"space) without a mutant: {' '.join(tests)}")
    counts = {"killed": 0, "survived": 0, "timeout": 0}
    for meta in metas:
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        names = [n for n in codes if any(fnmatch.fnmatch(n, pat) for pat in args.patterns)
                 and (args.all or codes[n] != KILLED)]
        for name in names:
            start = time.monotonic()
            code = _run_forked(name, tests, cpu_s)
            if code not in (0, 1, 3, TIMEOUT):  # 0: every test passed; 1: one failed; 3: pytest's internal error
                print(f"{name}: pytest exited {code}; result left as it was", file=sys.stderr, flush=True)
                continue
            code = KILLED if code == 3 else code  # as mutmut counts it (a mutant that breaks pytest itself)
            kind = {KILLED: "killed", SURVIVED: "survived", TIMEOUT: "timeout"}[code]
            counts[kind] += 1
            print(f"{'passed' if code == SURVIVED else kind:8} {name} ({time.monotonic() - start:.1f} s)", flush=True)
            if code != SURVIVED or args.record_survivors:
                _record(meta, name, code)  # each result kept at once: a stopped re-check loses nothing
    print(f"{counts['killed']} killed, {counts['timeout']} timed out, {counts['survived']} not killed by these files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
