# ratelab tasks. `just --list` shows them with these comments.

set shell := ["bash", "-euo", "pipefail", "-c"]

# Show the recipes.
default:
    @just --list

# Everything CI checks: formatting, clippy on all targets, every test and doctest.
test: lint test-only

# Every test and doctest of the workspace (needs redis-server on PATH).
test-only:
    cargo test --workspace --locked

# Every algorithm through the same scenarios; writes reports/README.md, charts and data (starts a throwaway redis-server if one is on PATH, or uses REDIS_URL).
compare *ARGS:
    cargo run --release --locked -p ratelab-compare -- {{ARGS}}

# Formatting and clippy with warnings as errors, on every target.
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets --locked -- -D warnings

# Format the code in place.
fmt:
    cargo fmt --all
