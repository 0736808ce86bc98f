//! Light traffic, on simulated time: the realistic-traffic simulation on a
//! population that mostly stays well under its limit, as on a typical API,
//! with a few clients at the limit. The limit-hugging population of
//! [`super::traffic`] is one end, this is the other: together they show how
//! far the sliding counter strays from the exact sliding log, set beside
//! Cloudflare's published figure for its own traffic (0.003 % of requests
//! wrongly allowed or rate limited: "How we built rate limiting capable of
//! scaling to millions of domains", Cloudflare blog, 2017).

pub mod report;

use serde::Serialize;

use super::traffic::{self, Population, Traffic};
use crate::Context;

/// Cloudflare's figure: % of requests wrongly allowed or rate limited by its
/// sliding-window counter, on its own traffic.
pub const CLOUDFLARE_WRONG_PCT: f64 = 0.003;

/// The scenario's results: the traffic simulation on a light population.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LightTraffic {
    /// The simulation, every algorithm and governor.
    pub traffic: Traffic,
}

/// The light population: most clients far below the quota of 10 per second
/// (on for 5 s now and then at 0.5 to 6 per second), a few near it.
pub fn population(quick: bool) -> Population {
    let full = Population {
        light: 1_000,
        heavy: 3,
        seconds: 300,
        mean_off_secs: 30.0,
        mean_on_secs: 5.0,
        light_rate: (0.5, 6.0),
        heavy_rate: 12.0,
    };
    if quick {
        Population {
            light: 100,
            heavy: 1,
            seconds: 30,
            ..full
        }
    } else {
        full
    }
}

/// Runs the scenario.
pub fn run(ctx: &Context<'_>) -> LightTraffic {
    let population = population(ctx.config.quick);
    // Another seed than the realistic traffic's: other arrivals.
    let traffic = traffic::simulate(
        &population,
        ctx.config.seed.wrapping_add(1),
        || ctx.tick(),
        |n| ctx.bar.set_length(n),
    );
    LightTraffic { traffic }
}
