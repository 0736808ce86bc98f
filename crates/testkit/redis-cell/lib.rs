//! Empty: this package exists to pin and build `redis-cell` (see Cargo.toml).
