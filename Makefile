# One command to set up and run the demo, one to set up and run the tests (scripts/*.sh do the same without make).
VENV ?= .venv
export VENV
export OMP_NUM_THREADS ?= 2

.PHONY: setup demo lint docs test test-fast test-slow mutation bench clean

setup:
	bash scripts/setup.sh

demo:
	bash scripts/demo.sh

lint: setup
	bash scripts/lint.sh

docs: setup
	bash scripts/docs.sh

test:
	bash scripts/test.sh

# the inner loop: no lint or docs, and none of the tests that train or load a model or start processes (marked
# `model`; `make test` runs them); see docs/usage.md
test-fast: setup
	$(VENV)/bin/python -m pytest -q -m "not slow and not gpu and not model"

test-slow: setup
	$(VENV)/bin/python -m pytest -q -m "slow and not gpu"

mutation: setup
	bash scripts/mutation.sh

bench: setup
	$(VENV)/bin/python bench/step_time.py

clean:
	rm -rf $(VENV) .venv-demo runs build mutants *.egg-info
