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
TORCH=2.13.0
if [ ! -x "$VENV/bin/hacrl" ] || [ pyproject.toml -nt "$VENV/bin/hacrl" ]; then
    # one line before the quiet installs (a minute or more on a fresh machine)
    echo "setup: $([ -d "$VENV" ] && echo updating || echo creating) $VENV with torch $TORCH (CPU) and" \
         "hacrl${EXTRAS:+[$EXTRAS]} (pip, quiet; a few minutes the first time)"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # torch first, pinned to the CPU wheel, so pyproject's range is already met
    "$VENV/bin/python" -m pip install -q "torch==$TORCH"
    "$VENV/bin/python" -m pip install -q -e ".${EXTRAS:+[$EXTRAS]}"
    touch "$VENV/bin/hacrl"
fi
