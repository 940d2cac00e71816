#!/usr/bin/env bash
# Build the documentation into build/docs/ (git-ignored) with Sphinx: the Markdown pages of docs/ through
# myst-parser, the API reference (docs/api.md) from the docstrings with autodoc and napoleon. Every warning is an
# error (-W; --keep-going lists them all first), so a broken link, a docstring docutils cannot parse or a page
# missing from docs/index.md fails it. scripts/test.sh runs this after the lint, hence CI; `make docs` alone.
# Needs the `docs` extra (part of `dev`, installed by scripts/setup.sh). About 10 s, most of it importing torch.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
OUT="${DOCS_OUT:-build/docs}"
# -E: read every page again, so an incremental build does not hide the warnings of unchanged pages
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$VENV/bin/python" -m sphinx -W --keep-going -E -q -b html \
    -d "$OUT/.doctrees" docs "$OUT"
echo "docs: built $OUT/index.html"
