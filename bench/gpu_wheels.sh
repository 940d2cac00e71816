#!/usr/bin/env bash
# Fill bench/wheels/ (gitignored) with the pure-Python dependencies that an offline GPU machine may lack,
# for bench/gpu_check.sh to install from without a package registry. Run here, on a machine with PyPI:
#   bash bench/gpu_wheels.sh                 # CPython 3.10-3.13, x86_64 and aarch64 manylinux wheels
#   PYTHONS="3.11" ARCHS="x86_64" bash bench/gpu_wheels.sh   # just what the GPU machine runs (smaller)
# What: pydantic (+ pydantic-core, the one compiled wheel), rich, pyyaml, pytest and pytest-timeout with
# their dependencies. Not torch, transformers, tokenizers, safetensors, numpy, peft or accelerate: the GPU
# machine brings those (its own CUDA builds). Measured: about 17 MB for 4 Pythons x 1 arch.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST="${DEST:-bench/wheels}"
PY="${PY:-python3}"
PYTHONS="${PYTHONS:-3.10 3.11 3.12 3.13}"
ARCHS="${ARCHS:-x86_64}"
PKGS=("pydantic>=2.6" "rich>=13" "pyyaml>=6" "pytest>=8" "pytest-timeout>=2.3")
mkdir -p "$DEST"
for arch in $ARCHS; do
    for v in $PYTHONS; do
        # pip evaluates environment markers against the Python running it, not --python-version:
        # pytest's backports for 3.10 are named here
        extra=()
        [ "$v" = 3.10 ] && extra=("exceptiongroup>=1.0.0" "tomli>=1")
        "$PY" -m pip download -q --disable-pip-version-check --only-binary=:all: --implementation cp \
            --python-version "$v" --platform "manylinux2014_$arch" --platform "manylinux_2_17_$arch" \
            --platform "manylinux_2_28_$arch" -d "$DEST" "${PKGS[@]}" "${extra[@]}"
    done
done
du -sh "$DEST"
ls "$DEST" | wc -l
