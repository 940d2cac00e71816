#!/usr/bin/env bash
# The GPU check for an offline machine with PyTorch (CUDA), Transformers and nothing else to reach:
# no package registry, no model hub, no install of hacrl. At most ~8 minutes on one H100/H200.
#   1. dependencies: torch, transformers, tokenizers, safetensors, numpy must be there; pydantic, pyyaml,
#      rich, pytest(-timeout) are installed from bench/wheels/ (fill it here with `bash bench/gpu_wheels.sh`,
#      ~15 MB, gitignored, carried along) into $DEPS with pip --target, nothing else is touched;
#      hacrl itself runs from PYTHONPATH=src,
#   2. versions and nvidia-smi,
#   3. the GPU tests that need no vLLM or Ray: pytest -m gpu tests/gpu (the vLLM ones skip themselves;
#      among them FSDP2 bf16 mixed precision on NCCL, tests/gpu/test_cuda_mixed_precision.py),
#   4. bench/gpu_check.py: HACPO steps of a Qwen3-0.6B-shaped and a Llama-3.2-1B-shaped random-init
#      model on CUDA (bf16 autocast, gradient checkpointing): tokens/s, peak memory, log-prob gap.
# Run from anywhere:  bash bench/gpu_check.sh      (TINY=1: the CPU dry run, tiny shapes)
# Knobs: PY (python3), DEPS (.gpu-deps), SKIP_TESTS=1, STEPS, OUT (where gpu_check.json goes: .).
# bench/gpu_smoke.sh is the check for a GPU machine WITH a package registry (it installs vLLM).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-python3}"
DEPS="${DEPS:-.gpu-deps}"
OUT="${OUT:-.}"
export PYTHONPATH="$PWD/src:$PWD/$DEPS${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
phase() { echo; echo "== $1 (t=${SECONDS}s)"; }

# ---- 1. dependencies ------------------------------------------------------------------------------
phase "dependencies"
missing() {  # the pip names of the modules in "$@" (module=pip-name) that do not import
    "$PY" - "$@" <<'PYEOF'
import importlib.util, sys
print(" ".join(a.split("=")[1] for a in sys.argv[1:] if importlib.util.find_spec(a.split("=")[0]) is None))
PYEOF
}
CORE=$(missing torch=torch transformers=transformers tokenizers=tokenizers safetensors=safetensors numpy=numpy)
if [ -n "$CORE" ]; then
    echo "gpu_check: missing $CORE: this machine must bring PyTorch and Transformers (their CUDA builds)"; exit 2
fi
WANT=$(missing pydantic=pydantic yaml=pyyaml rich=rich pytest=pytest pytest_timeout=pytest-timeout)
if [ -n "$WANT" ]; then
    if [ -d bench/wheels ] && "$PY" -m pip install -q --disable-pip-version-check --no-index \
            --find-links bench/wheels --target "$DEPS" $WANT; then
        echo "installed $WANT from bench/wheels into $DEPS"
    else
        echo "could not install $WANT (no bench/wheels, or none for this Python); fill it on a machine with PyPI:" \
             "bash bench/gpu_wheels.sh (PYTHONS=\"$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')\")"
    fi
fi
HARD=$(missing pydantic=pydantic yaml=pyyaml)
[ -z "$HARD" ] || { echo "gpu_check: hacrl needs $HARD; see above"; exit 2; }

# ---- 2. versions ----------------------------------------------------------------------------------
phase "versions"
"$PY" - <<'PYEOF'
import importlib.metadata as md, platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "cuda", torch.version.cuda,
      "| available", torch.cuda.is_available(), "|", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
for name in ("transformers", "tokenizers", "peft", "accelerate", "pydantic", "vllm"):
    try:
        print(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name} (not installed)")
PYEOF
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

# ---- 3. GPU tests ---------------------------------------------------------------------------------
TEST_RC=0
if [ "${SKIP_TESTS:-0}" != 1 ] && [ "${TINY:-0}" != 1 ]; then
    phase "pytest -m gpu tests/gpu"
    if [ -z "$(missing pytest=pytest)" ]; then
        timeout 240 "$PY" -m pytest -m gpu tests/gpu -q -p no:cacheprovider -rs || TEST_RC=$?
    else
        echo "pytest is not available: GPU tests skipped"
    fi
fi

# ---- 4. HACPO steps on realistic shapes -------------------------------------------------------------
CHECK_RC=0
ARGS=(--json "$OUT/gpu_check.json")
[ "${TINY:-0}" = 1 ] && ARGS+=(--tiny)
[ -n "${STEPS:-}" ] && ARGS+=(--steps "$STEPS")
phase "bench/gpu_check.py ${ARGS[*]}"
timeout 300 "$PY" bench/gpu_check.py "${ARGS[@]}" || CHECK_RC=$?

phase "done"
echo "gpu tests: rc=$TEST_RC, gpu_check: rc=$CHECK_RC, numbers in $OUT/gpu_check.json"
[ "$TEST_RC" = 0 ] && [ "$CHECK_RC" = 0 ]
