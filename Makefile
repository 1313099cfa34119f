# delayq: `make dev` runs the local stack, `make test` passes the tests. Both set up everything first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
READY  := $(VENV)/.ready
# The SAM CLI builds the bundle in the tests; it pins its own pydantic, so it lives in a venv of its own.
SAM_CLI := aws-sam-cli==1.170.0
SAM     := .venv-sam/bin/sam

.PHONY: dev test faults lint typecheck check bench clean

$(READY): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	touch $@

# make dev HOST=... PORT=...: on the command line only (a shell's own HOST or PORT is not taken)
HOST = 127.0.0.1
PORT = 8000
dev: $(READY)          ## the API on http://$(HOST):$(PORT) with the sweep and consume loops (make dev PORT=8001)
	$(BIN)/python -m delayq.local --host '$(HOST)' --port '$(PORT)'

$(SAM):
	test -x .venv-sam/bin/python || $(PYTHON) -m venv .venv-sam
	.venv-sam/bin/python -m pip install -q '$(SAM_CLI)'

test: $(READY) $(SAM)  ## every test tier but the fault tier (make faults)
	DELAYQ_SAM=$(abspath $(SAM)) SAM_CLI_TELEMETRY=0 $(BIN)/python -m pytest

faults: $(READY)       ## the fault tier: kill -9, Redis restarts and outages, skewed clocks, 20,000 jobs
	$(BIN)/python -m pytest -m fault

lint: $(READY)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(READY)
	$(BIN)/mypy

check: lint typecheck test faults

BENCH_ARGS ?=
bench: $(READY)        ## delayq vs the Redis limit and peer queues on a private redis-server: bench/README.md
	$(BIN)/python bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .venv-sam .pytest_cache .mypy_cache .ruff_cache .bench bench/peers/bullmq_node/node_modules
