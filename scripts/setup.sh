#!/usr/bin/env bash
# Create .venv (if missing or older than pyproject.toml) with the CPU build of torch 2.13 first, then hacrl
# and its test extras. Used by `make setup|demo|test` and by scripts/test.sh and scripts/demo.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-python3}"
VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/hacrl" ] || [ pyproject.toml -nt "$VENV/bin/hacrl" ]; then
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # torch first, pinned to the CPU wheel, so pyproject's range is already met
    "$VENV/bin/python" -m pip install -q torch==2.13.0
    "$VENV/bin/python" -m pip install -q -e ".[dev]"
    touch "$VENV/bin/hacrl"
fi
