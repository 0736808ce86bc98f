//! proptest strategies: quotas, and arrival sequences that hit the edges
//! (bursts, exact refill instants, window boundaries, costs too high).

use std::time::Duration;

use proptest::prelude::*;
use ratelab_core::Quota;
use ratelab_core::toolkit::{MAX_INSTANT_MICROS, clamp_instant};

/// One request: when, for which key, for how much.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// The clock reading, µs.
    pub at: u64,
    /// One of a few keys, so that keys are shown not to share state.
    pub key: u8,
    /// The request's weight.
    pub cost: u32,
}

/// Small quotas whose edges a short sequence reaches: limits 1 to 12,
/// periods from 1 µs per unit to a few seconds, bursts 1 to 16.
pub fn quotas() -> impl Strategy<Value = Quota> {
    (
        1u32..=12,
        prop_oneof![1u64..=4, 5u64..=1_000, Just(100_000u64), 1u64..=400_000],
        prop_oneof![Just(None), (1u32..=16).prop_map(Some)],
    )
        .prop_filter_map(
            "quota outside the valid range",
            |(limit, per_unit, burst)| {
                let period = Duration::from_micros(u64::from(limit) * per_unit);
                let quota = Quota::new(limit, period).ok()?;
                match burst {
                    Some(burst) => quota.with_burst(burst).ok(),
                    None => Some(quota),
                }
            },
        )
}

/// A gap before the next request, in terms of the quota: none (a burst), a
/// refill interval exactly or a microsecond either side, anything up to two
/// windows, or a jump to the next window boundary (± 1 µs).
fn gap(quota: Quota) -> impl Strategy<Value = Gap> {
    let t = quota.emission_interval_micros();
    let w = quota.window_micros();
    prop_oneof![
        3 => Just(Gap::By(0)),
        2 => prop_oneof![Just(t), Just(t - 1), Just(t + 1)].prop_map(Gap::By),
        3 => (0..=2 * w).prop_map(Gap::By),
        1 => (-1i64..=1).prop_map(Gap::ToBoundary),
    ]
}

#[derive(Debug, Clone, Copy)]
enum Gap {
    By(u64),
    /// To the next multiple of the window, plus this many µs.
    ToBoundary(i64),
}

/// A cost: mostly 1, sometimes 0 (a peek), anything up to the burst, or just
/// above it (never fits).
fn cost(quota: Quota) -> impl Strategy<Value = u32> {
    let burst = quota.burst();
    prop_oneof![
        6 => Just(1u32),
        1 => Just(0u32),
        2 => 0..=burst,
        1 => burst..=burst.saturating_add(2),
    ]
}

/// A quota and up to `max_len` arrivals on non-decreasing times, over three
/// keys, starting anywhere up to 2^50 µs.
pub fn quota_and_arrivals(max_len: usize) -> impl Strategy<Value = (Quota, Vec<Arrival>)> {
    quotas().prop_flat_map(move |quota| {
        let start = prop_oneof![
            3 => 0..=10 * quota.window_micros(),
            1 => 0..=(1u64 << 50),
        ];
        let steps = proptest::collection::vec((gap(quota), 0u8..3, cost(quota)), 1..=max_len);
        (Just(quota), start, steps).prop_map(move |(quota, start, steps)| {
            let w = quota.window_micros();
            let mut at = start;
            let arrivals = steps
                .into_iter()
                .map(|(gap, key, cost)| {
                    at = match gap {
                        Gap::By(d) => at + d,
                        Gap::ToBoundary(delta) => {
                            ((at / w + 1) * w).saturating_add_signed(delta).max(at)
                        }
                    };
                    Arrival { at, key, cost }
                })
                .collect();
            (quota, arrivals)
        })
    })
}

/// Like [`quota_and_arrivals`], but the clock also jumps backwards (up to
/// twice the window, or to 0) and far forwards (up to and past
/// [`MAX_INSTANT_MICROS`]).
pub fn quota_and_wild_arrivals(max_len: usize) -> impl Strategy<Value = (Quota, Vec<Arrival>)> {
    (
        quota_and_arrivals(max_len),
        proptest::collection::vec(
            prop_oneof![
                6 => Just(Jump::None),
                2 => any::<u64>().prop_map(Jump::Back),
                1 => Just(Jump::ToZero),
                1 => any::<u64>().prop_map(Jump::Forward),
                1 => Just(Jump::ToMax),
            ],
            max_len,
        ),
    )
        .prop_map(|((quota, arrivals), jumps)| {
            let w = quota.window_micros();
            let mut offset: i128 = 0;
            let arrivals = arrivals
                .into_iter()
                .zip(jumps)
                .map(|(arrival, jump)| {
                    let base = i128::from(arrival.at) + offset;
                    let at = match jump {
                        Jump::None => base,
                        Jump::Back(by) => base - i128::from(by % (2 * w + 1)),
                        Jump::ToZero => 0,
                        Jump::Forward(by) => base + i128::from(by % (1 << 51)),
                        Jump::ToMax => i128::from(MAX_INSTANT_MICROS) + 5,
                    }
                    .clamp(0, i128::from(u64::MAX));
                    offset = at - i128::from(arrival.at);
                    Arrival {
                        at: u64::try_from(at).expect("clamped to the u64 range"),
                        ..arrival
                    }
                })
                .collect();
            (quota, arrivals)
        })
}

#[derive(Debug, Clone, Copy)]
enum Jump {
    None,
    Back(u64),
    ToZero,
    Forward(u64),
    ToMax,
}

/// The timeline on which a clock that goes back is taken to stand still:
/// each reading's time is the sum of the forward steps before it. The
/// readings are clamped to [`MAX_INSTANT_MICROS`] first, as limiters do.
pub fn unwrapped(readings: impl IntoIterator<Item = u64>) -> Vec<u64> {
    let mut previous: Option<u64> = None;
    let mut elapsed = 0u64;
    readings
        .into_iter()
        .map(|reading| {
            let reading = clamp_instant(reading);
            if let Some(previous) = previous {
                elapsed += reading.saturating_sub(previous);
            } else {
                elapsed = reading;
            }
            previous = Some(reading);
            elapsed
        })
        .collect()
}
