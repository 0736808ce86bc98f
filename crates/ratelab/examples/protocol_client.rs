//! The Rust side of the cross-language tests of the script protocol
//! (`lua/README.md`): a `RedisLimiter` driven by commands on stdin, one per
//! line, answering one JSON line each, so that a test in another language
//! can interleave Rust checks with its own on the same keys.
//!
//! ```text
//! cargo run -p ratelab --example protocol_client -- redis://127.0.0.1:6379/ [prefix]
//! ```
//!
//! Commands (the key is one word, taken as its UTF-8 bytes):
//!
//! - `quota <limit> <period_us> <burst>`: the quota of the checks that
//!   follow (default 5 per second, burst 10); answers `{"ok":true}`.
//! - `check <algorithm> <key> <cost> <now>`: one check; `now` in µs on the
//!   caller's clock, or `-` for Redis `TIME`. Answers the decision
//!   (`allowed`, `limit`, `remaining`, `retry_after_micros`,
//!   `reset_after_micros`, `delay_micros`, and for an admission of a
//!   positive cost `receipt`, a number naming its receipt, with its stamp
//!   `stamp_at` and `stamp_mark`) or `{"error":..,"kind":..}`.
//! - `peek ...`, the same way (no receipt).
//! - `settle <algorithm> <receipt> <actual> <now>`: the admission of that
//!   receipt (of this process, for this algorithm and quota) finally counts
//!   for `actual` units; `refund <algorithm> <receipt> <now>` settles it to
//!   0. A receipt is used once. Answers the decision after it.
//! - `reset <algorithm> <key> <now>`: the key back to full capacity; answers
//!   `{"ok":true}`.
//! - `mismatches`: how many times this process's limiters found another
//!   quota in a key's quota registry; answers `{"quota_mismatches":n}`.

use std::collections::HashMap;
use std::future::Future;
use std::io::{BufRead, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ratelab::redis::{Connection, DEFAULT_PREFIX, RedisLimiter, RedisStore, TimeSource};
use ratelab::toolkit::RemoteForm;
use ratelab::{
    AlgorithmKind, AlgorithmVisitor, Clock, Decision, Error, KnownAlgorithm, ManualClock, Quota,
    Receipt,
};

type Answer<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + 'a>>;

/// A Redis limiter of any algorithm, one operation at a time.
trait Driven {
    fn check<'a>(&'a self, key: &'a [u8], cost: u32) -> Answer<'a, (Decision, Option<Receipt>)>;
    fn peek<'a>(&'a self, key: &'a [u8], cost: u32) -> Answer<'a, Decision>;
    fn settle(&self, receipt: Receipt, actual: u32) -> Answer<'_, Decision>;
    fn reset<'a>(&'a self, key: &'a [u8]) -> Answer<'a, ()>;
    fn quota_mismatches(&self) -> u64;
}

impl<A: RemoteForm> Driven for RedisLimiter<A> {
    fn check<'a>(&'a self, key: &'a [u8], cost: u32) -> Answer<'a, (Decision, Option<Receipt>)> {
        Box::pin(self.check_with_receipt(key, cost))
    }
    fn peek<'a>(&'a self, key: &'a [u8], cost: u32) -> Answer<'a, Decision> {
        Box::pin(RedisLimiter::peek(self, key, cost))
    }
    fn settle(&self, receipt: Receipt, actual: u32) -> Answer<'_, Decision> {
        Box::pin(RedisLimiter::settle(self, receipt, actual))
    }
    fn reset<'a>(&'a self, key: &'a [u8]) -> Answer<'a, ()> {
        Box::pin(RedisLimiter::reset(self, key))
    }
    fn quota_mismatches(&self) -> u64 {
        self.store().stats().quota_mismatches
    }
}

/// Builds a Redis limiter of any algorithm, as a trait object.
struct Build<'a> {
    connection: &'a Connection,
    prefix: &'a str,
    time: TimeSource,
}

impl AlgorithmVisitor for Build<'_> {
    type Output = Box<dyn Driven>;

    fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
        Box::new(
            RedisStore::builder(self.connection.clone(), algorithm)
                .prefix(self.prefix)
                .time_source(self.time)
                // A loaded test machine: a slow answer is not what is tested.
                .timeout(Duration::from_secs(5))
                .build(),
        )
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .ok_or("usage: protocol_client <redis-url> [prefix]")?;
    let prefix = args.next().unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let connection = runtime.block_on(Connection::single(&url))?;
    let clock = ManualClock::new();
    let mut quota = Quota::per_second(5)?.with_burst(10)?;
    // One limiter per algorithm, quota and time source, built on first use.
    let mut limiters: HashMap<(AlgorithmKind, Quota, bool), Box<dyn Driven>> = HashMap::new();
    // Receipts not yet settled, by number, with the limiter that issued them.
    let mut receipts: HashMap<u64, ((AlgorithmKind, Quota, bool), Receipt)> = HashMap::new();
    let mut next_receipt = 1u64;

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        // The command, its algorithm, what it names (a key or a receipt),
        // its number (a cost or an actual) and its instant.
        let (op, algorithm, name, number, now) = match words[..] {
            [] => continue,
            ["quota", limit, period, burst] => {
                let answer = match parse_quota(limit, period, burst) {
                    Ok(q) => {
                        quota = q;
                        r#"{"ok":true}"#.to_owned()
                    }
                    Err(e) => error_json(&e, "Usage"),
                };
                writeln!(out, "{answer}")?;
                out.flush()?;
                continue;
            }
            ["mismatches"] => {
                let n: u64 = limiters.values().map(|l| l.quota_mismatches()).sum();
                writeln!(out, r#"{{"quota_mismatches":{n}}}"#)?;
                out.flush()?;
                continue;
            }
            [
                op @ ("check" | "peek" | "settle"),
                algorithm,
                name,
                number,
                now,
            ] => (op, algorithm, name, number, now),
            [op @ "refund", algorithm, name, now] => (op, algorithm, name, "0", now),
            [op @ "reset", algorithm, name, now] => (op, algorithm, name, "0", now),
            _ => {
                writeln!(
                    out,
                    "{}",
                    error_json(&format!("unknown command: {line}"), "Usage")
                )?;
                out.flush()?;
                continue;
            }
        };
        let (kind, number, now) = match parse_call(algorithm, number, now) {
            Ok(parsed) => parsed,
            Err(e) => {
                writeln!(out, "{}", error_json(&e, "Usage"))?;
                out.flush()?;
                continue;
            }
        };
        let which = (kind, quota, now.is_some());
        let limiter = limiters.entry(which).or_insert_with(|| {
            let time = match now {
                Some(_) => TimeSource::Client(Arc::new(clock.clone()) as Arc<dyn Clock>),
                None => TimeSource::Redis,
            };
            kind.visit(
                quota,
                Build {
                    connection: &connection,
                    prefix: &prefix,
                    time,
                },
            )
        });
        if let Some(now) = now {
            clock.set(now);
        }
        let key = name.as_bytes();
        let answer = match op {
            "check" => match runtime.block_on(limiter.check(key, number)) {
                Ok((decision, receipt)) => {
                    let mut json = decision_json(&decision);
                    if let Some(receipt) = receipt {
                        let stamp = receipt.stamp();
                        json.pop();
                        json.push_str(&format!(
                            r#","receipt":{next_receipt},"stamp_at":{},"stamp_mark":{}}}"#,
                            stamp.at, stamp.mark
                        ));
                        receipts.insert(next_receipt, (which, receipt));
                        next_receipt += 1;
                    }
                    json
                }
                Err(e) => error_json(&e.to_string(), &format!("{:?}", e.kind())),
            },
            "peek" => answer_json(runtime.block_on(limiter.peek(key, number))),
            "settle" | "refund" => {
                let receipt = name
                    .parse::<u64>()
                    .ok()
                    .and_then(|id| receipts.remove(&id))
                    .filter(|(issuer, _)| *issuer == which);
                match receipt {
                    Some((_, receipt)) => {
                        answer_json(runtime.block_on(limiter.settle(receipt, number)))
                    }
                    None => error_json(&format!("no receipt {name} of this limiter"), "Usage"),
                }
            }
            _ => match runtime.block_on(limiter.reset(key)) {
                Ok(()) => r#"{"ok":true}"#.to_owned(),
                Err(e) => error_json(&e.to_string(), &format!("{:?}", e.kind())),
            },
        };
        writeln!(out, "{answer}")?;
        out.flush()?;
    }
    Ok(())
}

fn parse_quota(limit: &str, period: &str, burst: &str) -> Result<Quota, String> {
    let number = |s: &str| s.parse::<u64>().map_err(|e| format!("{s}: {e}"));
    let limit = u32::try_from(number(limit)?).map_err(|e| e.to_string())?;
    let burst = u32::try_from(number(burst)?).map_err(|e| e.to_string())?;
    let period = Duration::from_micros(number(period)?);
    Quota::new(limit, period)
        .and_then(|q| q.with_burst(burst))
        .map_err(|e| e.to_string())
}

fn parse_call(
    algorithm: &str,
    number: &str,
    now: &str,
) -> Result<(AlgorithmKind, u32, Option<u64>), String> {
    let kind = algorithm.parse().map_err(|e| format!("{e}"))?;
    let number = number.parse().map_err(|e| format!("{number}: {e}"))?;
    let now = match now {
        "-" => None,
        now => Some(now.parse().map_err(|e| format!("now {now}: {e}"))?),
    };
    Ok((kind, number, now))
}

/// A decision's JSON, or the error's.
fn answer_json(answer: Result<Decision, Error>) -> String {
    match answer {
        Ok(decision) => decision_json(&decision),
        Err(e) => error_json(&e.to_string(), &format!("{:?}", e.kind())),
    }
}

fn decision_json(d: &Decision) -> String {
    format!(
        r#"{{"allowed":{},"limit":{},"remaining":{},"retry_after_micros":{},"reset_after_micros":{},"delay_micros":{}}}"#,
        d.allowed,
        d.limit,
        d.remaining,
        d.retry_after().as_micros(),
        d.reset_after().as_micros(),
        d.delay().as_micros()
    )
}

fn error_json(message: &str, kind: &str) -> String {
    format!(
        r#"{{"error":{},"kind":{}}}"#,
        json_string(message),
        json_string(kind)
    )
}

/// A JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
