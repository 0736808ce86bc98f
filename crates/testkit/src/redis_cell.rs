//! [redis-cell](https://github.com/brandur/redis-cell), the outside anchor
//! for ratelab on Redis: a Rust Redis module whose `CL.THROTTLE` runs GCRA
//! in one native command. The benches and the compare report load it beside
//! ratelab's own module to measure both on one server.
//!
//! Which redis-cell: [`PEER_VERSION`] (0.5.0, which replicates
//! `CL.THROTTLE` to replicas) from its upstream tree at
//! `../shared/peers/redis-cell-0.5.0` beside the workspace when that folder
//! is there (or at `$RATELAB_REDIS_CELL_SRC`), else [`CRATES_IO_VERSION`]
//! (0.2.2, the newest crates.io serves) through `crates/testkit/redis-cell/`
//! (a standalone package, not a workspace member, whose committed
//! `Cargo.lock` pins every dependency). [`version`] says which one
//! [`library`] builds, so that every report can print it beside its rows.
//!
//! Both declare `crate-type = ["dylib"]`, which Redis cannot load; they
//! build unchanged as a `cdylib`. [`library`] builds the chosen one that
//! way, once, into a target directory of its own, and returns the shared
//! library's path.
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

/// The redis-cell version `crates/testkit/redis-cell/` pins from crates.io.
pub const CRATES_IO_VERSION: &str = "0.2.2";

/// The redis-cell version of the upstream tree kept beside the workspace.
pub const PEER_VERSION: &str = "0.5.0";

/// Overrides the build: the path of a redis-cell shared library to use as is.
pub const PATH_ENV: &str = "RATELAB_REDIS_CELL_PATH";

/// Overrides where the redis-cell 0.5.0 source tree is looked for.
pub const SOURCE_ENV: &str = "RATELAB_REDIS_CELL_SRC";

/// Where redis-cell comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A library given in `$RATELAB_REDIS_CELL_PATH`, version unknown.
    Given(PathBuf),
    /// The upstream 0.5.0 tree at this path.
    Peer(PathBuf),
    /// 0.2.2 from crates.io, through the pinned package.
    CratesIo,
}

/// Where [`library`] takes redis-cell from: `$RATELAB_REDIS_CELL_PATH`, else
/// the 0.5.0 tree (`$RATELAB_REDIS_CELL_SRC`, else
/// `../shared/peers/redis-cell-0.5.0` beside the workspace or, from a git
/// worktree, beside the main checkout) when it has a `Cargo.toml`, else
/// crates.io.
pub fn source() -> Source {
    if let Some(path) = std::env::var_os(PATH_ENV) {
        return Source::Given(PathBuf::from(path));
    }
    let peer = match std::env::var_os(SOURCE_ENV) {
        Some(path) => PathBuf::from(path),
        None => beside_checkouts()
            .into_iter()
            .map(|checkout| checkout.join(PEER_TREE))
            .find(|tree| tree.join("Cargo.toml").is_file())
            .unwrap_or_else(|| PathBuf::from(PEER_TREE)),
    };
    if peer.join("Cargo.toml").is_file() {
        Source::Peer(peer)
    } else {
        Source::CratesIo
    }
}

/// The 0.5.0 tree, relative to a checkout of the workspace.
const PEER_TREE: &str = "../shared/peers/redis-cell-0.5.0";

/// The checkouts the peer tree is looked for beside: this workspace, and,
/// when it is a git worktree, the main checkout (the parent of git's common
/// directory), since a worktree may live anywhere.
fn beside_checkouts() -> Vec<PathBuf> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut out = vec![workspace.clone()];
    let common = Command::new("git")
        .arg("-C")
        .arg(&workspace)
        .args(["rev-parse", "--path-format=absolute", "--git-common-dir"])
        .stderr(Stdio::null())
        .output();
    if let Ok(output) = common
        && output.status.success()
        && let Some(main) = Path::new(String::from_utf8_lossy(&output.stdout).trim()).parent()
    {
        out.push(main.to_owned());
    }
    out
}

/// The redis-cell [`library`] builds, for a report's rows: `redis-cell
/// 0.5.0 (upstream tree at ...)`, `redis-cell 0.2.2 (crates.io; ...)` or
/// the library given.
pub fn version() -> String {
    match source() {
        Source::Given(path) => format!(
            "redis-cell of version unknown (${PATH_ENV}={})",
            path.display()
        ),
        // Where the tree was found is named relative to a checkout, never
        // as a path of this machine.
        Source::Peer(_) => match std::env::var_os(SOURCE_ENV) {
            Some(_) => format!("redis-cell {PEER_VERSION} (upstream tree at ${SOURCE_ENV})"),
            None => format!("redis-cell {PEER_VERSION} (upstream tree at {PEER_TREE})"),
        },
        Source::CratesIo => format!(
            "redis-cell {CRATES_IO_VERSION} (crates.io; {PEER_VERSION} is not published there and {PEER_TREE} is absent beside this checkout and the main one: set ${SOURCE_ENV} to measure {PEER_VERSION})"
        ),
    }
}

/// The standalone package that pins redis-cell (`Cargo.toml`, `Cargo.lock`).
pub fn manifest_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("redis-cell")
}

/// Where redis-cell is built: `redis-cell/` (crates.io) or
/// `redis-cell-0.5.0/` (the upstream tree) under `$CARGO_TARGET_DIR` when
/// set, else under the workspace's `target/`, so that it never shares a
/// target directory (or a lock file) with the workspace itself, nor writes
/// into the upstream tree.
pub fn target_dir() -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    match source() {
        Source::Peer(_) => base.join(format!("redis-cell-{PEER_VERSION}")),
        Source::Given(_) | Source::CratesIo => base.join("redis-cell"),
    }
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
    let (manifest, version) = match source() {
        Source::Given(path) => {
            return if path.is_file() {
                Ok(path)
            } else {
                Err(format!(
                    "${PATH_ENV} is {}, but no such file exists",
                    path.display()
                ))
            };
        }
        Source::Peer(tree) => (tree.join("Cargo.toml"), PEER_VERSION),
        Source::CratesIo => (manifest_dir().join("Cargo.toml"), CRATES_IO_VERSION),
    };
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
                "cannot run {} to build redis-cell {version}: {e}",
                Path::new(&cargo).display()
            )
        })?;
    if !output.status.success() {
        return Err(format!(
            "building redis-cell {version} failed (cargo rustc --manifest-path {} \
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
            "redis-cell {version} was built but {} is missing",
            library.display()
        ))
    }
}
