//! [redis-cell](https://github.com/brandur/redis-cell), the outside anchor
//! for ratelab on Redis: a Rust Redis module whose `CL.THROTTLE` runs GCRA
//! in one native command. The benches and the compare report load it beside
//! ratelab's own module to measure both on one server.
//!
//! redis-cell 0.2.2 declares `crate-type = ["dylib"]`, which Redis cannot
//! load; it builds unchanged as a `cdylib`. [`library`] builds it that way,
//! once, from `crates/testkit/redis-cell/` (a standalone package, not a
//! workspace member, whose committed `Cargo.lock` pins every dependency),
//! into its own target directory, and returns the shared library's path.
//!
//! ```no_run
//! use ratelab_testkit::redis::RedisServer;
//!
//! let cell = ratelab_testkit::redis_cell::library().expect("redis-cell builds");
//! let server = RedisServer::start_with(&["--loadmodule", cell.to_str().unwrap()]);
//! let reply = server.command(&["CL.THROTTLE", "user", "15", "30", "60", "1"]);
//! assert_eq!(reply.unwrap().lines().next(), Some("0")); // allowed
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The redis-cell version the package pins.
pub const VERSION: &str = "0.2.2";

/// Overrides the build: the path of a redis-cell shared library to use as is.
pub const PATH_ENV: &str = "RATELAB_REDIS_CELL_PATH";

/// The standalone package that pins redis-cell (`Cargo.toml`, `Cargo.lock`).
pub fn manifest_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("redis-cell")
}

/// Where redis-cell is built: `redis-cell/` under `$CARGO_TARGET_DIR` when
/// set, else under the workspace's `target/`, so that it never shares a
/// target directory (or a lock file) with the workspace itself.
pub fn target_dir() -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    base.join("redis-cell")
}

/// redis-cell's shared library: `$RATELAB_REDIS_CELL_PATH` if set, else
/// built (once per process; cargo makes a fresh build a no-op) with
/// `cargo rustc --release --lib --crate-type cdylib --locked` from the pinned
/// package. The first build fetches its crates from crates.io.
///
/// An `Err` says exactly why there is no library (cargo missing, crates.io
/// unreachable, a failed build with cargo's output, a missing file), so that
/// a caller can fail loudly or report redis-cell as missing with the reason.
pub fn library() -> Result<PathBuf, String> {
    static LIBRARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    LIBRARY.get_or_init(find_or_build).clone()
}

fn find_or_build() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(PATH_ENV) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "${PATH_ENV} is {}, but no such file exists",
                path.display()
            ))
        };
    }
    let manifest = manifest_dir().join("Cargo.toml");
    let target = target_dir();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .args(["rustc", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .args(["-p", "redis-cell", "--release", "--lib", "--locked"])
        .args(["--crate-type", "cdylib"])
        .env("CARGO_TARGET_DIR", &target)
        // A test's `cargo` environment must not leak into this build.
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            format!(
                "cannot run {} to build redis-cell {VERSION}: {e}",
                Path::new(&cargo).display()
            )
        })?;
    if !output.status.success() {
        return Err(format!(
            "building redis-cell {VERSION} failed (cargo rustc --manifest-path {} \
             -p redis-cell --release --lib --locked --crate-type cdylib, \
             target dir {}; it needs crates.io the first time): {}",
            manifest.display(),
            target.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let library = target.join("release").join(format!(
        "{}redis_cell{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ));
    if library.is_file() {
        Ok(library)
    } else {
        Err(format!(
            "redis-cell {VERSION} was built but {} is missing",
            library.display()
        ))
    }
}
