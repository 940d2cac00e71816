#!/usr/bin/env bash
# Create $VENV (.venv; if missing or older than pyproject.toml) with the CPU build of torch 2.13 first, then
# hacrl with $EXTRAS (default dev: the test, lint and docs toolchain; empty: hacrl alone, what the demo needs).
# Used by `make setup|test` and scripts/test.sh (.venv, dev) and by `make demo` / scripts/demo.sh (.venv-demo,
# no extras: about 1 GB instead of 2.3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-python3}"
VENV="${VENV:-.venv}"
EXTRAS="${EXTRAS-dev}"
if [ ! -x "$VENV/bin/hacrl" ] || [ pyproject.toml -nt "$VENV/bin/hacrl" ]; then
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # torch first, pinned to the CPU wheel, so pyproject's range is already met
    "$VENV/bin/python" -m pip install -q torch==2.13.0
    "$VENV/bin/python" -m pip install -q -e ".${EXTRAS:+[$EXTRAS]}"
    touch "$VENV/bin/hacrl"
fi
