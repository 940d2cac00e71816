#!/usr/bin/env bash
# Lint and type check: ruff (the rules chosen in pyproject's [tool.ruff.lint]) over all the Python here, then
# mypy over the modules in pyproject's [tool.mypy] files (core, pool, config, learner, trainer, backends). Any
# finding exits non-zero. scripts/test.sh runs this before the tests, so CI fails on findings; `make lint` runs it
# alone.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
status=0  # run both, so one run shows every finding
"$VENV/bin/ruff" check src tests bench examples scripts || status=1
"$VENV/bin/mypy" || status=1
exit "$status"
