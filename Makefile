# The README's two commands: `make demo` (the incident replay on the embedded default, needs only
# cargo) and `make test` (installs what the tests need, then runs every check and test).
CARGO ?= cargo
VENV := $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)

.PHONY: demo test tools build fmt-check clippy house lint-template cargo-test test-sam-local bench bench-stores gatectl

# The build shows its progress on stderr first (the first one compiles the workspace and the AWS
# SDK crates: 10-15 minutes on 2 cores; afterwards seconds), then the replay prints only its table.
demo:
	@echo "demo: building the simulator (release). The first build compiles the workspace and the" >&2
	@echo "demo: AWS SDK crates: 10-15 minutes on 2 cores; later runs take seconds." >&2
	@start=$$(date +%s); $(CARGO) build --release -p sim --bin sim && \
		echo "demo: built in $$(( $$(date +%s) - start )) s; replaying monday-2025-06-09" >&2
	@$(CARGO) run --release -q -p sim -- compare monday-2025-06-09

test: tools fmt-check clippy house lint-template cargo-test test-sam-local

# moto[server], cargo-lambda, aws-sam-cli, cfn-lint at pinned versions into ./.venv, and checkov
# into ./.venv/checkov (its own venv: it pins an older boto3), if missing (scripts/tools.sh).
tools:
	scripts/tools.sh

# `sam build` for the deploy (docs/DEPLOYING.md, "Build and deploy"): the three functions built with
# `cargo lambda build --release --arm64`. The arm64 Rust target is installed first, once: `sam
# build` runs the three builds in parallel (samconfig.toml) and each would try to install the
# missing target at the same time ("Failed to install target component", then "can't find crate
# for `std`").
build: tools
	rustup target add aarch64-unknown-linux-gnu
	sam build

# The operators' command line (docs/OPERATING.md, "gatectl"): a release binary for the
# operator's machine, target/release/gatectl.
gatectl:
	$(CARGO) build --release -p gatectl

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --all-features -- -D warnings

# `gatectl check-template` (thresholds, policy rules, lint) on both templates, each with the gate
# application it instantiates (sam/gate/template.yaml).
# The house rules: no Rust file over 600 lines, no module preamble over 20 lines, no issue number
# in code (scripts/house.py lists each breach).
house:
	python3 scripts/house.py

lint-template:
	scripts/lint-template.sh template.yaml examples/payments/template.yaml

# moto and a throwaway PostgreSQL (scripts/with-postgres.sh: the distribution's PostgreSQL 15,
# installed with apt-get if missing) run on free loopback ports for the duration of the tests and
# are stopped afterwards, also when a test fails.
cargo-test:
	scripts/with-postgres.sh scripts/with-moto.sh $(CARGO) test --workspace --all-targets --all-features

# `sam local invoke` of the functions `sam build` makes (x86_64), in SAM's emulator, against moto
# and the terminal simulator on a docker network of its own (scripts/sam-local.sh; as root: it
# installs docker.io and debootstrap with apt if missing and starts its own dockerd, stopped at the
# end). Each answer and the store after it are checked, on the root template and payments', then
# a consumer broken on purpose must fail the checks. The last step of `make test`: the first run
# builds the base image and the release binaries (docs/LOCAL_RUNS.md, "sam local invoke").
test-sam-local: tools
	scripts/sam-local.sh

# Benchmarks (issue 8; not part of `make test`, never timed assertions): the criterion benches of
# the gate's CPU work per event, the release consumer for x86_64 and arm64 (cargo lambda, zig from
# .venv), then the harness: one moto server, the terminal simulator, the naive handler, the gate
# and Powertools (bench/requirements.txt into .venv) side by side, batch behaviour, cold start and
# footprint (and the webhook ingress's, issue 16); issue 18's parts: cold start of the gate and of
# Powertools (awslambdaric) under one fake Runtime API, dollars per million events (each function
# in a cgroup with the CPU share of its memory size: run as root), the capacity model against
# `sim sustained`, and the floor handler. Figures and how to read them: docs/BENCHMARKS.md.
# BENCH_ARGS=--events 5000 for the issue's full size (about 3 minutes per run on moto).
BENCH_ARGS ?= --runs 5
bench: tools
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r bench/requirements.txt
	$(CARGO) bench -p truck-slot --bench slot_cpu
	rustup target add aarch64-unknown-linux-gnu
	$(CARGO) lambda build --release --arm64 -p consumer --lambda-dir target/lambda-arm64
	$(CARGO) lambda build --release -p consumer --lambda-dir target/lambda-x86_64
	$(CARGO) lambda build --release -p ingress --lambda-dir target/lambda-x86_64
	$(CARGO) build --release -p gate-bench -p sim --bin gate-bench --bin terminal-sim
	target/release/gate-bench $(BENCH_ARGS) \
		--consumer-bin target/lambda-x86_64/consumer/bootstrap \
		--ingress-bin target/lambda-x86_64/ingress/bootstrap \
		--binary x86_64=target/lambda-x86_64/consumer/bootstrap \
		--binary arm64=target/lambda-arm64/consumer/bootstrap

# The store on PostgreSQL (a throwaway loopback server, scripts/with-postgres.sh) and on DynamoDB
# (moto) side by side: round trips and latency per new event and per duplicate (issue 26, item 6;
# docs/BENCHMARKS.md, section 9). Not part of `make bench` (it needs PostgreSQL). The server runs
# with fsync off; `PG_FSYNC=on make bench-stores` measures a durable one (scripts/with-postgres.sh).
STORES_ARGS ?= --runs 5
bench-stores: tools
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r bench/requirements.txt
	$(CARGO) build --release -p gate-bench --bin gate-bench
	scripts/with-postgres.sh target/release/gate-bench --parts stores $(STORES_ARGS)
