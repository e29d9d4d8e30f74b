# Two entry points (see README): `make synth` and `make test`. Both set everything up first.
SHELL := /bin/bash
ENV ?= dev
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export CDK_DISABLE_VERSION_CHECK := 1
export CDK_DISABLE_CLI_TELEMETRY := true
export NPM_CONFIG_LOGLEVEL := error
# One worker per core of the 2-core machines CI runs on; each loadgroup is built once.
PYTEST := python -m pytest -n 2 --dist loadgroup

.PHONY: setup setup-synth synth synth-all synth-pipeline deploy-pipeline check format test test-fast snapshots bench gpu-suite mutation mutation-report docs

setup:
	@scripts/bootstrap.sh test

setup-synth:
	@scripts/bootstrap.sh synth

synth: setup-synth
	@npx cdk synth -c env=$(ENV) --quiet --output cdk.out/$(ENV)
	@python scripts/synth_summary.py cdk.out/$(ENV)

synth-all: setup-synth
	@for e in dev staging prod; do $(MAKE) --no-print-directory synth ENV=$$e || exit 1; done

# The delivery pipeline (config/delivery/pipeline.yaml) with every environment as a Stage;
# the pipeline's own synth step runs this after `make test`.
synth-pipeline: setup-synth
	@npx cdk synth -c pipeline=true --quiet --output cdk.out/pipeline

# Once, from the tooling account; afterwards the pipeline updates itself from git.
deploy-pipeline: setup-synth
	@npx cdk deploy -c pipeline=true --output cdk.out/pipeline hyperpod-pipeline

# The gate on the Python itself: lint (with import order), format and types.
check: setup
	@ruff check --quiet .
	@ruff format --check --quiet .
	@mypy

# Apply the linter's safe fixes and the formatter.
format: setup
	@ruff check --quiet --fix .
	@ruff format --quiet .

test: setup check
	@$(PYTEST) $(PYTEST_ARGS)

# The inner loop: everything but the multi-process training runs.
test-fast: setup
	@$(PYTEST) -m "not slow" $(PYTEST_ARGS)

# Rewrite the committed snapshots from a fresh synth, then show what changed.
snapshots: setup
	@UPDATE_SNAPSHOTS=1 $(PYTEST) tests/stability/test_snapshots.py -q
	@git --no-pager diff --stat -- tests/stability/snapshots
	@git --no-pager diff -- tests/stability/snapshots

# Rewrite the lists in docs/ that the code owns (tools/docs_lists.py); tests fail when one is stale.
docs: setup
	@python -m tools.docs_lists

bench: setup
	@python benchmarks/synth_time.py

# Every GPU check and benchmark, one JSON line per figure, within 8 minutes (benchmarks/README.md).
gpu-suite: setup
	@python -m benchmarks.gpu_suite

# Mutation testing (not part of `make test`): mutmut over the modules the platform's promises
# rest on, each with its own tests (tests/mutation/modules.toml), then a score per module; fails
# on any survivor tests/mutation/equivalent.toml does not explain. One module:
# `make mutation MODULES=config/capacity.py`.
mutation: setup
	@python tools/mutation.py run $(MODULES)

# The scores of the last `make mutation` again, without running it.
mutation-report:
	@python tools/mutation.py report $(MODULES)
