//! redis-cell builds (the upstream 0.5.0 tree beside the workspace, else
//! 0.2.2 from its pinned package), loads into a test server, answers
//! `CL.THROTTLE`, and is the version it is said to be.

use std::time::{Duration, Instant};

use ratelab_testkit::redis::RedisServer;
use ratelab_testkit::redis_cell;

#[test]
fn redis_cell_loads_and_throttles() {
    let library = redis_cell::library().unwrap_or_else(|why| panic!("no redis-cell: {why}"));
    let server = RedisServer::start_with(&["--loadmodule", library.to_str().unwrap()]);
    // Burst 15 (so 16 in a row), 30 per 60 s, cost 1.
    let throttle = ["CL.THROTTLE", "user", "15", "30", "60", "1"];
    let first = server.command(&throttle).unwrap();
    let fields: Vec<&str> = first.lines().collect();
    // allowed, limit, remaining, retry after (-1: allowed), reset after.
    assert_eq!(fields, ["0", "16", "15", "-1", "2"], "{first}");
    for _ in 0..15 {
        server.command(&throttle).unwrap();
    }
    let refused = server.command(&throttle).unwrap();
    assert_eq!(refused.lines().next(), Some("1"), "{refused}");
    // The second call of a process reuses the first build.
    assert_eq!(redis_cell::library(), Ok(library));
}

/// The redis-cell built is the one `version()` names: 0.5.0 replicates
/// `CL.THROTTLE` to a replica, 0.2.2 does not (MODULE LIST says `ver 1` for
/// both, so replication is what tells them apart).
#[test]
fn the_version_named_is_the_one_built() {
    let library = redis_cell::library().unwrap_or_else(|why| panic!("no redis-cell: {why}"));
    let library = library.to_str().unwrap();
    let primary = RedisServer::start_with(&["--loadmodule", library]);
    let port = primary.port().to_string();
    let replica =
        RedisServer::start_with(&["--loadmodule", library, "--replicaof", "127.0.0.1", &port]);
    let synced = || {
        replica
            .command(&["INFO", "replication"])
            .is_ok_and(|info| info.contains("master_link_status:up"))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !synced() {
        assert!(Instant::now() < deadline, "the replica never synced");
        std::thread::sleep(Duration::from_millis(50));
    }
    primary
        .command(&["CL.THROTTLE", "replicated", "15", "30", "60", "1"])
        .unwrap();
    // A plain write after it: once the replica has it, it has everything
    // the primary sent before.
    primary.command(&["SET", "marker", "1"]).unwrap();
    while replica.command(&["EXISTS", "marker"]).unwrap() != "1" {
        assert!(
            Instant::now() < deadline,
            "the replica never got the marker"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let replicated = replica.command(&["EXISTS", "replicated"]).unwrap() == "1";
    let version = redis_cell::version();
    match redis_cell::source() {
        redis_cell::Source::Peer(_) => {
            assert!(version.starts_with("redis-cell 0.5.0"), "{version}");
            assert!(replicated, "0.5.0 replicates CL.THROTTLE");
        }
        redis_cell::Source::CratesIo => {
            assert!(version.starts_with("redis-cell 0.2.2"), "{version}");
            assert!(!replicated, "0.2.2 does not replicate CL.THROTTLE");
        }
        redis_cell::Source::Given(_) => assert!(version.contains("unknown"), "{version}"),
    }
}
