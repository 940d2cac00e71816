#!/usr/bin/env bash
# Set up (scripts/setup.sh), lint and type-check (scripts/lint.sh: ruff, mypy), build the docs with warnings as
# errors (scripts/docs.sh), then run the test suite (tests/ and the doctests in src/hacrl): what `make test`
# does, for machines without make. It runs the model-marked tests too (those that train or load a model, or start
# processes); `make test-fast` is the inner loop without them (docs/usage.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/lint.sh
bash scripts/docs.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
exec "${VENV:-.venv}/bin/python" -m pytest -q -m "not slow and not gpu" "$@"
