# The README's two commands: `make demo` (the incident replay on the embedded default, needs only
# cargo) and `make test` (installs what the tests need, then runs every check and test).
CARGO ?= cargo
VENV := $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)

.PHONY: demo test tools fmt-check clippy lint-template cargo-test

demo:
	$(CARGO) run --release -q -p sim -- compare monday-2025-06-09

test: tools fmt-check clippy lint-template cargo-test

# moto[server], cargo-lambda, aws-sam-cli, cfn-lint at pinned versions into ./.venv, if missing.
tools:
	scripts/tools.sh

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --all-features -- -D warnings

lint-template:
	scripts/lint-template.sh

# moto runs on a free loopback port for the duration of the tests and is stopped afterwards,
# also when a test fails.
cargo-test:
	scripts/with-moto.sh $(CARGO) test --workspace --all-targets --all-features
