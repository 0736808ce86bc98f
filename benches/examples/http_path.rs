//! One HTTP stack in a loop, nothing else: for a profiler (`valgrind
//! --tool=callgrind`) or a quick timing without criterion. The apps and the
//! exchange are the `http` bench's.
//!
//! ```text
//! cargo build --release -p ratelab-benches --example http_path
//! http_path <admitted|refused> <stack> [requests]
//!   stack:    axum | ratelab-http | tower-governor | ratelab-http-lean
//!             | tower-governor-headers (see the bench's docs)
//!   requests: default 200,000; 0 runs the setup alone (to subtract it)
//! ```
//!
//! Prints the time per request. Under callgrind, run it twice (N requests
//! and 0) and divide the difference of the instruction counts by N.

use std::hint::black_box;
use std::time::Instant;

#[path = "../src/http_apps.rs"]
mod http_apps;

use http_apps::{Path, STACKS, app, exchange};

fn usage() -> ! {
    eprintln!(
        "usage: http_path <admitted|refused> <stack> [requests]\n  stack: {}",
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
    let requests: u64 = args
        .get(2)
        .map_or(Ok(200_000), |s| s.parse())
        .unwrap_or_else(|_| usage());
    let Some(mut app) = app(path, stack) else {
        usage()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        if path == Path::Refused && stack != "axum" {
            // The one request the refused path's quota holds.
            exchange(&mut app).await;
        }
        let started = Instant::now();
        for _ in 0..requests {
            black_box(exchange(&mut app).await);
        }
        let took = started.elapsed();
        if requests > 0 {
            #[allow(clippy::cast_precision_loss)]
            let ns = took.as_secs_f64() * 1e9 / requests as f64;
            println!(
                "{stack}, {}: {ns:.1} ns per request over {requests} requests",
                path.group()
            );
        }
    });
}
