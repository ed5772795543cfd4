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

# A rehearsal on a fleet of `booking serve --stack redis` OS processes on a private redis-server, killed mid-rush if asked, e.g. `just rehearse-fleet --instances 3 --kill 0@rush=0.4,down_ms=1000`.
rehearse-fleet *ARGS:
    cargo build --release -p booking-server --bin booking
    cargo run --release -p scenarios -- rehearse --fleet processes {{ARGS}}

# The AWS stack rehearsed on this machine: aws-local (DynamoDB and its stream on dynoxide, SQS on fauxqs, S3 on moto, every call counted) and `booking serve --stack aws` processes, the `ci` profile by default; prints CPU seconds per process and AWS calls per booking. Flags after the recipe, e.g. `just rehearse-aws-local --profile ci --set load.rate=300`.
rehearse-aws-local *ARGS:
    cargo build --release -p booking-server --bin booking -p booking-aws-local --bin aws-local -p scenarios --bin scenarios
    scripts/rehearse-aws-local {{ARGS}}

# One sale in virtual time under a fault schedule (built-in name or TOML file), e.g. `just chaos --schedule gateway-trouble --seed 7`.
chaos *ARGS:
    cargo run --release -p chaos -- run {{ARGS}}

# Every built-in fault schedule across seeds (the bounded CI profile); one line per run, the seed that reproduces a failure.
chaos-matrix *ARGS:
    cargo run --release -p chaos -- matrix --profile ci {{ARGS}}

# The bug zoo: every bug the article's team found, switched back on, must be caught (with each rehearsal row's control).
zoo *ARGS:
    cargo run --release -p chaos -- zoo --controls {{ARGS}}

# Every built-in rehearsal fault schedule (processes killed at each point of the request path, paused, restarted; redis-server paused and restarted; link toxics; gateway rules) on a process fleet of three instances, the bounded CI profile.
chaos-rehearsal *ARGS:
    cargo build -p booking-server --bin booking
    cargo run -p chaos -- matrix --rehearsal --profile ci {{ARGS}}

# The headline chaos rehearsal, three seeds: 3 process instances on Redis at 2,000 bookings/s, one killed at 10 s and back at 15 s, redis-server paused 2 s at 20 s, +200 ms on the gateway link for 5 s.
soak-rehearsal:
    cargo build --release -p booking-server --bin booking
    cargo run --release -p chaos -- matrix --rehearsal --profile soak

# The long soak: every schedule × 10 seeds of the article's full 40,000-candidate sale, then 100 more seeds of the calm sale.
soak:
    cargo run --release -p chaos -- matrix --profile soak
    cargo run --release -p chaos -- matrix --seeds 100 --candidates 4000

# How many simulated sales a minute this machine runs (the article's full sale, 10 seeds, both cores).
sim-rate:
    cargo run --release -p chaos --example sim_rate -- 10 40000 2

# Install what the tests need beyond Rust (Python venv with third-party bKash clients, redis-server); idempotent.
setup:
    scripts/setup

# Start the mock bKash gateway on 127.0.0.1:9090 (pass more flags after `--`).
gateway *ARGS:
    cargo run --release -p mock-gateway -- {{ARGS}}

# Run every test (the README's test command; what .ci/run calls).
test *ARGS:
    scripts/test {{ARGS}}

# Mutation testing of the core crates (cargo-mutants, in a copy with --copy): a score table per file, exit 1 when a package catches under 90 % of its viable mutants; `just mutants money` for the money path only, `just mutants lua` for the ledger's Lua scripts, `just mutants ci` for the step scripts/test runs. Results in target/mutants/<scope>/.
mutants WHAT="core" *ARGS:
    scripts/mutants {{WHAT}} {{ARGS}}

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

# Benchmarks, one table from one run (release, about 5 minutes, every process it starts stopped): raw EVALSHA of the admission script by redis-benchmark (and pipelined), the script through the ledger, POST /bookings closed loop and paced on embedded and Redis, the load generator's CPU against the system's and wrk's, the capacity found. Flags: --skip-capacity, --capacity-minutes N (per stack, default 5).
bench *ARGS:
    cargo build --release -p booking-server --bin booking -p scenarios --bin scenarios --example bench_table -p booking-redis --example admission_rate -p booking-api --example bookings_rate
    target/release/examples/bench_table {{ARGS}}

# How cost grows on Redis, two tables from one run (release, about 4 minutes, every process it starts stopped): 40K → 400K → 4M candidates (load time, Redis memory, instance RSS, bookings/s closed loop) and 2 → 4 → 8 instances on one Redis. Flags: --candidates 40000,400000,4000000 --instances 2,4,8 --instances-candidates N --secs N.
scale *ARGS:
    cargo build --release -p booking-server --bin booking -p scenarios --example scale_table
    target/release/examples/scale_table {{ARGS}}

# The arrival rate stepped up with short rehearsals until a verdict breaks, on embedded and Redis: the highest rate held, its p99, what broke above it, CPU per component; e.g. `just capacity --rates 1000,2000,3000,4000 --stack redis --fleet processes`.
capacity *ARGS:
    cargo build --release -p booking-server --bin booking
    cargo run --release -p scenarios -- capacity {{ARGS}}

# The gateway's create+execute round trips per second on one core.
bench-gateway:
    cargo bench -p mock-gateway --bench round_trip

# The Redis admission script's rate through the ledger.
bench-admission:
    cargo run --release -p booking-redis --example admission_rate

# POST /bookings closed loop and paced on one stack, e.g. `just bench-bookings redis`.
bench-bookings STACK="embedded":
    BENCH_STACK={{STACK}} cargo run --release -p booking-api --example bookings_rate

# API docs for every crate.
doc:
    cargo doc --workspace --no-deps
