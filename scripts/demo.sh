#!/usr/bin/env bash
# Set up hacrl alone, with none of the test toolchain (scripts/setup.sh with VENV=.venv-demo EXTRAS=), then run
# the embedded default: what `make demo` does, for machines without make.
set -euo pipefail
cd "$(dirname "$0")/.."
export VENV="${DEMO_VENV:-.venv-demo}" EXTRAS=""
bash scripts/setup.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
exec "$VENV/bin/hacrl" train "$@"
