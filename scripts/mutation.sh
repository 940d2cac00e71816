#!/usr/bin/env bash
# Mutation testing of the learning signal (issue #28.4; docs/mutation.md): mutmut mutates hacrl.core,
# hacrl.learner and the trainer ([tool.mutmut] in pyproject.toml) and runs, for each mutant, the tests of tests/core,
# tests/learner and tests/pool that cover the mutated function; a mutant that no test kills "survived". The
# trainer's phase functions then run against tests/trainer, the sharding code against its forked-rank tests
# (below).
# Usage: bash scripts/mutation.sh [MUTANT-PATTERN ...]   e.g. 'hacrl.core.advantages*' (default: all)
# Results stay in mutants/ (git-ignored) and continue where a stopped run left off; `mutmut results` lists the
# survivors, `mutmut show NAME` one diff. Not part of `make test`: the whole set (~4,100 mutants) takes hours on
# 2 cores (the loss helpers and update_learner are reached by ~110 s of tests each); one module, minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
"$VENV/bin/python" -m pip install -q "mutmut==3.8.1"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# hacrl.trainer.trainer and .phases are mutated (mutmut writes their mutants) but run below, not by mutmut's selection
if [ "$#" -eq 0 ]; then set -- 'hacrl.core.*' 'hacrl.learner.*'; RUN_PHASES=1; else RUN_PHASES=0; fi
"$VENV/bin/mutmut" run --max-children "${MUTMUT_CHILDREN:-2}" "$@"
# the trainer's phase code: its tests (tests/trainer) lie outside mutmut's selection, so its mutants run against
# them here, forked from one warm process as mutmut runs its own (scripts/mutation_recheck.py)
if [ "$RUN_PHASES" -eq 1 ]; then
  LOOP=(step train _train_lockstep _write_samples _rollout checkpoint_state)
  PHASES=(score update_request update_metrics build)
  PATTERNS=()
  for f in rescue_share sub_phase_timings pool_metrics rollout_metrics; do
    PATTERNS+=("hacrl.trainer.phases.x_${f}__*")
  done
  for f in "${LOOP[@]}"; do PATTERNS+=("hacrl.trainer.trainer.xǁTrainerǁ${f}__*"); done
  for f in "${PHASES[@]}"; do PATTERNS+=("hacrl.trainer.phases.xǁPhasesǁ${f}__*"); done
  PATTERNS+=('hacrl.trainer.phases.xǁDataStreamǁ*')
  "$VENV/bin/python" scripts/mutation_recheck.py --record-survivors "${PATTERNS[@]}" -- tests/trainer
  # the sharding code runs in forked gloo ranks, which mutmut's trace of the test process does not see: its
  # mutants run against tests/learner/test_sharding.py whole (every rank inherits the mutant)
  "$VENV/bin/python" scripts/mutation_recheck.py --record-survivors 'hacrl.learner.sharding.*' \
    -- tests/learner/test_sharding.py
fi
# per module: killed, survived, no tests, not checked, and the score killed / (killed + survived + timeout)
"$VENV/bin/mutmut" results --all true | "$VENV/bin/python" scripts/mutation_summary.py
