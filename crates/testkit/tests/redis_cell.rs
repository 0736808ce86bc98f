//! redis-cell builds from its pinned package, loads into a test server, and
//! answers `CL.THROTTLE`.

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
