#!/usr/bin/env bash
# Mutation testing of the learning signal (issue #28.4; docs/mutation.md): mutmut mutates hacrl.core and
# hacrl.learner ([tool.mutmut] in pyproject.toml) and runs, for each mutant, the tests of tests/core,
# tests/learner and tests/pool that cover the mutated function; a mutant that no test kills "survived".
# Usage: bash scripts/mutation.sh [MUTANT-PATTERN ...]   e.g. 'hacrl.core.advantages*' (default: all)
# Results stay in mutants/ (git-ignored) and continue where a stopped run left off; `mutmut results` lists the
# survivors, `mutmut show NAME` one diff. Not part of `make test`: the whole set (~2,600 mutants) takes hours on
# 2 cores (the loss helpers and update_learner are reached by ~110 s of tests each); one module, minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
"$VENV/bin/python" -m pip install -q "mutmut==3.8.1"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
"$VENV/bin/mutmut" run --max-children "${MUTMUT_CHILDREN:-2}" "$@"
# per module: killed, survived, no tests, not checked, and the score killed / (killed + survived + timeout)
"$VENV/bin/mutmut" results --all true | "$VENV/bin/python" scripts/mutation_summary.py
