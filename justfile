# ratelab tasks. `just --list` shows them with these comments.

set shell := ["bash", "-euo", "pipefail", "-c"]

# Show the recipes.
default:
    @just --list

# Everything CI checks: formatting, clippy on all targets, the docs, every test and doctest, packaging.
test: lint test-only package

# Every crate packages and builds from its packaged files alone, as from a registry (the Lua scripts included); the unpublished binaries' crates are left out: nothing depends on them.
package:
    #!/usr/bin/env bash
    set -euo pipefail
    # cargo verifies each crate against the others as registry crates, which it unpacks under CARGO_HOME and builds only once per version: start from nothing, or an earlier run's sources and builds would be verified instead.
    rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/ratelab-* target/package-check
    cargo package --workspace --locked --allow-dirty --target-dir target/package-check --exclude ratelab-compare --exclude ratelab-benches --exclude ratelab-server
    rm -rf target/package-check

# Every test and doctest of the workspace, every benchmark once in test mode, and the Python and Node clients' tests (needs redis-server, redis-cli and redis-benchmark on PATH).
test-only: test-clients
    cargo test --workspace --locked
    cargo test -p ratelab-benches --benches --locked

# The Python and Node clients of the script protocol (lua/clients), each against a redis-server it starts; the cross-language test also builds the Rust example and the Node client (needs `npm ci` in lua/clients/node and `pip install -e 'lua/clients/python[test]'`, as .ci/run does).
test-clients:
    cd lua/clients/node && npm test
    python3 -m pytest lua/clients/python
    python3 -m pytest crates/server/tests/python

# Every algorithm through the same scenarios; writes reports/README.md, charts and data (starts a throwaway redis-server if one is on PATH, or uses REDIS_URL).
compare *ARGS:
    cargo run --release --locked -p ratelab-compare -- {{ARGS}}

# Benchmarks: every algorithm in memory against governor, and on Redis against redis-benchmark (starts its own Redis); writes reports/bench/ and prints the tables. Arguments go to criterion (a filter, --measurement-time 10).
bench *ARGS:
    cargo bench -p ratelab-benches --locked -- {{ARGS}}
    cargo run --release -p ratelab-benches --locked --bin bench-summary

# The same benchmarks, shorter and noisier (a few minutes).
bench-quick *ARGS:
    RATELAB_BENCH_QUICK=1 just bench {{ARGS}}

# Formatting, clippy on every target and the docs (broken links included), warnings as errors.
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets --locked -- -D warnings
    RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

# After a deliberate protocol change or a new algorithm: rewrites what the other languages read from the Rust implementation (lua/clients/vectors.json and algorithms.json), lua/README.md's reference table, and lua/'s links to the algorithms' scripts.
regenerate:
    RATELAB_BLESS=1 cargo test --locked -p ratelab --test protocol_vectors

# Format the code in place.
fmt:
    cargo fmt --all
