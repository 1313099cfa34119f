# delayq: `make dev` runs the local stack, `make test` passes the tests. Both set up everything first:
# the venvs, and for the tests what tests/setup.sh installs or starts (Debian packages, a Redis on 6379).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
READY  := $(VENV)/.ready
# The SAM CLI builds the bundle in the tests; it pins its own pydantic, so it lives in a venv of its own.
SAM_CLI := aws-sam-cli==1.170.0
SAM     := .venv-sam/bin/sam

# The tiers that talk to a server, run a second time on Valkey by `make test` (docs: tests.md).
VALKEY_TIERS := tests/redis tests/loops tests/api tests/compat tests/security tests/aws/test_aws_secrets.py

.PHONY: dev test-deps test test-valkey faults lint typecheck check bench bench-scale clean

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

test-deps:             ## python3-venv, redis-server, nutcracker, faketime, valkey-server, chromium; a Redis on 6379
	@bash tests/setup.sh

test: test-deps $(READY) $(SAM)  ## every tier but the fault tier on Redis, then the server's tiers on Valkey
	DELAYQ_SAM=$(abspath $(SAM)) SAM_CLI_TELEMETRY=0 $(BIN)/python -m pytest
	@$(MAKE) --no-print-directory test-valkey

test-valkey: test-deps $(READY)  ## the tiers that talk to a server, on a private valkey-server
	DELAYQ_TEST_SERVER=valkey $(BIN)/python -m pytest $(VALKEY_TIERS)

faults: test-deps $(READY)  ## the fault tier: kill -9, Redis restarts and outages, skewed clocks, 20,000 jobs
	$(BIN)/python -m pytest -m fault

lint: $(READY)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(READY)
	$(BIN)/mypy

check: lint typecheck test faults

BENCH_ARGS ?=
bench: $(READY)        ## delayq vs the Redis limit and peer queues on a private redis-server: bench/README.md
	$(BIN)/python bench/compare/run.py $(BENCH_ARGS)

SCALE_ARGS ?=
bench-scale: $(READY)  ## delayq's cost against topics, backlog and load (SCALE_ARGS="--compare ../other"): bench/README.md
	$(BIN)/python bench/scale/run.py $(SCALE_ARGS)

clean:
	rm -rf $(VENV) .venv-sam .pytest_cache .mypy_cache .ruff_cache .bench bench/compare/peers/bullmq_node/node_modules
