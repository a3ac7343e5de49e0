# The README's two commands: `make demo` (the incident replay on the embedded default, needs only
# cargo) and `make test` (installs what the tests need, then runs every check and test).
CARGO ?= cargo

.PHONY: demo test fmt-check clippy cargo-test

demo:
	$(CARGO) run --release -q -p sim -- compare monday-2025-06-09

test: fmt-check clippy cargo-test

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --all-targets -- -D warnings

cargo-test:
	$(CARGO) test --all-targets
