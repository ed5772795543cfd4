# sellout — every recipe a user or CI needs. `just` lists them.

# List the recipes.
default:
    @just --list

# The main job: rehearse a whole flash sale on this machine (mock gateway + 2 booking instances, embedded stack), audit it, write reports/runs/<run>/. Flags after the recipe, e.g. `just rehearse --stack redis --set load.rate=1000`.
rehearse *ARGS:
    cargo run --release -p scenarios -- rehearse {{ARGS}}

# The short rehearsal profile CI runs (also inside the tests).
rehearse-ci *ARGS:
    cargo run --release -p scenarios -- rehearse --profile ci {{ARGS}}

# Install what the tests need beyond Rust (Python venv with third-party bKash clients, redis-server); idempotent.
setup:
    scripts/setup

# Start the mock bKash gateway on 127.0.0.1:9090 (pass more flags after `--`).
gateway *ARGS:
    cargo run --release -p mock-gateway -- {{ARGS}}

# Run every test (the README's test command; what .ci/run calls).
test *ARGS:
    scripts/test {{ARGS}}

# Run a booking instance (API + background loops) against a gateway; `just booking --help` for flags.
booking *ARGS:
    cargo run --release -p booking-server -- {{ARGS}}

# Format the code.
fmt:
    cargo fmt --all

# Lint with warnings denied.
lint:
    cargo clippy --workspace --all-targets --locked -- -D warnings

# What CI gates on: format check, clippy with warnings denied, the tests.
ci:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets --locked -- -D warnings
    scripts/test

# Benchmarks: gateway create+execute round trips per second on one core; the Redis admission script's rate.
bench:
    cargo bench -p mock-gateway --bench round_trip
    cargo run --release -p booking-redis --example admission_rate
    cargo run --release -p booking-api --example bookings_rate

# API docs for every crate.
doc:
    cargo doc --workspace --no-deps
