# One command to set up and run the demo, one to set up and run the tests.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export OMP_NUM_THREADS ?= 2

.PHONY: setup demo test test-slow bench clean

$(BIN)/hacrl: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, pinned to the CPU wheel, so pyproject's range is already met
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(BIN)/hacrl

setup: $(BIN)/hacrl

demo: setup
	$(BIN)/hacrl train

test: setup
	$(BIN)/python -m pytest -q -m "not slow and not gpu"

test-slow: setup
	$(BIN)/python -m pytest -q -m "slow and not gpu"

bench: setup
	$(BIN)/python bench/step_time.py

clean:
	rm -rf $(VENV) runs build *.egg-info
