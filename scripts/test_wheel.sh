#!/usr/bin/env bash
# The install a user does, checked: build hacrl's wheel, install it with the documented extras into a fresh
# venv (torch's CPU wheel first, as scripts/setup.sh does), then run `hacrl --version` and a two-step demo from
# that install, outside the checkout (so nothing is imported from src/). CI runs it after the test suite.
#   bash scripts/test_wheel.sh            # EXTRAS (default "math,report") picks the extras installed
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-python3}"
EXTRAS="${EXTRAS:-math,report}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
# build from the tracked files alone (a copy: no build/ or egg-info of the checkout's editable install leaks in)
mkdir "$work/tree"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$work/tree"
"$PY" -m pip wheel -q --no-deps -w "$work/dist" "$work/tree"
wheel="$(ls "$work"/dist/hacrl-*.whl)"
"$PY" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --upgrade pip
"$work/venv/bin/python" -m pip install -q torch==2.13.0
"$work/venv/bin/python" -m pip install -q "hacrl[$EXTRAS] @ file://$wheel"
cd "$work"
"$work/venv/bin/hacrl" --version
OMP_NUM_THREADS=2 "$work/venv/bin/hacrl" train --preset tiny-test --set trainer.eval_size=50 --output "$work/demo" --quiet
test -f "$work/demo/metrics.jsonl"
echo "test_wheel: $(basename "$wheel") with [$EXTRAS] installed and trained in a fresh venv in $((SECONDS - start)) s"
