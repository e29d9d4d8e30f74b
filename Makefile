# Two entry points (see README): `make synth` and `make test`. Both set everything up first.
SHELL := /bin/bash
ENV ?= dev
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export CDK_DISABLE_VERSION_CHECK := 1
export CDK_DISABLE_CLI_TELEMETRY := true
export NPM_CONFIG_LOGLEVEL := error

.PHONY: setup setup-synth synth synth-all test bench

setup:
	@scripts/bootstrap.sh test

setup-synth:
	@scripts/bootstrap.sh synth

synth: setup-synth
	@npx cdk synth -c env=$(ENV) --quiet --output cdk.out/$(ENV)
	@python scripts/synth_summary.py cdk.out/$(ENV)

synth-all: setup-synth
	@for e in dev staging prod; do $(MAKE) --no-print-directory synth ENV=$$e || exit 1; done

test: setup
	@python -m pytest -n 2 --dist loadgroup $(PYTEST_ARGS)

bench: setup
	@python benchmarks/synth_time.py
