//! One HTTP stack over loopback sockets, nothing else: for a profiler
//! (`perf record -e cpu-clock`, then `perf report --comm http-server`) or a
//! quick timing without the bench's rounds. The apps, the server and the load
//! generator are the `http` bench's socket groups'.
//!
//! ```text
//! cargo build --release -p ratelab-benches --example http_socket_path
//! http_socket_path <admitted|refused> <stack> [seconds]
//!   stack:   axum | ratelab-http | tower-governor | ratelab-http-lean
//!            | tower-governor-headers (see the bench's docs)
//!   seconds: default 5
//! ```
//!
//! Prints the requests per second admitted and refused, and the server
//! thread's CPU time per request (Linux).

use std::time::Duration;

// Shared with the bench, which uses more of them.
#[allow(dead_code)]
#[path = "../src/http_apps.rs"]
mod http_apps;
#[allow(dead_code)]
#[path = "../src/http_socket.rs"]
mod http_socket;

use http_apps::{Path, STACKS, app};
use http_socket::with_sockets;

fn usage() -> ! {
    eprintln!(
        "usage: http_socket_path <admitted|refused> <stack> [seconds]\n  stack: {}",
        STACKS.join(" | ")
    );
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(path), Some(stack)) = (args.first(), args.get(1)) else {
        usage()
    };
    let path = match path.as_str() {
        "admitted" => Path::Admitted,
        "refused" => Path::Refused,
        _ => usage(),
    };
    let seconds: f64 = args
        .get(2)
        .map_or(Ok(5.0), |s| s.parse())
        .unwrap_or_else(|_| usage());
    let Some(app) = app(path, stack) else { usage() };
    let round = with_sockets(vec![app], 16, move |client| {
        client.round(0, Duration::from_secs_f64(seconds))
    });
    println!(
        "{stack}, {}: {:.0} admitted/s, {:.0} refused/s, server {} ns of CPU per request, on a CPU {} % of the time (the load generator {} %)",
        path.socket_group(),
        round.admitted_per_sec(),
        round.refused_per_sec(),
        round
            .server_ns_per_request()
            .map_or("?".to_owned(), |ns| format!("{ns:.0}")),
        round
            .server_busy()
            .map_or("?".to_owned(), |b| format!("{:.0}", b * 100.0)),
        round
            .client_busy()
            .map_or("?".to_owned(), |b| format!("{:.0}", b * 100.0)),
    );
}
