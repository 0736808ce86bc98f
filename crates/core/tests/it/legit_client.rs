//! A light, legitimate client during a flood of distinct keys at ten times
//! the table's size: how much of its traffic still passes. Printed with
//! `cargo test -p ratelab-core --test it legit_client -- --nocapture`.

// Small test figures (random draws below a few thousand, key counts).
#![allow(clippy::cast_possible_truncation)]

use crate::common;

use std::time::Duration;

use common::Toy;
use ratelab_core::{FloodPolicy, Keyed, ManualClock, Quota};

const MAX_KEYS: usize = 100;
/// One unit per second, bursts of 10 (GCRA's arithmetic).
fn quota() -> Quota {
    Quota::per_minute(60).unwrap().with_burst(10).unwrap()
}

/// Light, legitimate clients: each sends one request every 5 s (a fifth of
/// its quota), at staggered instants.
const CLIENTS: u64 = 20;

/// The share of the light clients' requests admitted over two minutes while
/// `factor × MAX_KEYS` distinct new keys arrive every second, each owing for
/// one second after its request: `factor` tables' worth of keys owe at any
/// time.
fn legit_share(factor: u64, policy: Option<FloodPolicy>) -> f64 {
    let clock = ManualClock::starting_at(1 << 40);
    let builder = Keyed::builder(Toy::new(quota()))
        .clock(clock.clone())
        .max_keys(MAX_KEYS);
    let limiter = match policy {
        Some(policy) => builder.flood_policy(policy).build(),
        None => builder.build(),
    };
    // Ticks of 100 µs; a flood key every so many ticks.
    let (tick, per_second) = (100, 10_000);
    let flood_every = (factor * MAX_KEYS as u64).max(1);
    let flood_every = per_second / flood_every;
    let (mut asked, mut admitted, mut flood_key) = (0u32, 0u32, 0u64);
    for t in 0..120 * per_second {
        if factor > 0 && t % flood_every == 0 {
            flood_key += 1;
            // Admitted, refused or out of room: the flood gets what it gets.
            let _ = limiter.check(&flood_key.to_be_bytes(), 1);
        }
        // Client c asks at c × 250 ms + every 5 s.
        let at = t * tick;
        if at % 250_000 < tick && (at / 250_000) % 20 < CLIENTS {
            let client = (at / 250_000) % 20;
            asked += 1;
            let key = format!("legit-client-{client}");
            if limiter.check(key.as_bytes(), 1).is_ok_and(|d| d.allowed) {
                admitted += 1;
            }
        }
        clock.advance(Duration::from_micros(tick));
    }
    assert!(asked >= 400, "{asked} requests");
    f64::from(admitted) / f64::from(asked)
}

#[test]
fn light_clients_keep_being_served_through_a_flood() {
    let alone = legit_share(0, None);
    assert_eq!(alone, 1.0, "a fifth of the quota always passes");

    let ten_default = legit_share(10, None);
    let three_default = legit_share(3, None);
    // Fewer cells than the default: about one and a half are needed per key
    // owing beyond the table.
    let ten_small = legit_share(10, Some(FloodPolicy::sketch(4 * MAX_KEYS, 1)));
    let ten_deep = legit_share(10, Some(FloodPolicy::sketch(16 * MAX_KEYS, 2)));
    let ten_refuse = legit_share(10, Some(FloodPolicy::Refuse));
    println!("light clients' share admitted, {MAX_KEYS}-key table (alone: {alone:.3}):");
    println!("  flood of 3x the table, default sketch (2,048 cells): {three_default:.3}");
    println!("  flood of 10x the table, default sketch (2,048 cells): {ten_default:.3}");
    println!("  flood of 10x the table, 4 cells per key slot, depth 1: {ten_small:.3}");
    println!("  flood of 10x the table, 16 cells per key slot, depth 2: {ten_deep:.3}");
    println!("  flood of 10x the table, refuse new keys: {ten_refuse:.3}");
    assert!(three_default >= 0.9 * alone, "{three_default}");
    assert!(ten_default >= 0.9 * alone, "{ten_default}");
}
