//! Each algorithm's Redis side: its script (`lua/`), the parameters the
//! script takes, the short code that ends its keys, and the native module's
//! command that runs it. The decision logic
//! itself lives in the algorithm crates; the scripts mirror it exactly.

use ratelab_core::Algorithm;
use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_leaky_bucket::{LeakyMeter, LeakyQueue};
use ratelab_sliding_window::{SlidingCounter, SlidingLog};
use ratelab_token_bucket::TokenBucket;

use crate::limiter::RedisLimiter;
use crate::script::{RedisAlgorithm, Script};

/// Implements [`RedisAlgorithm`] for `$algorithm` with the script
/// `lua/$file` (behind the shared prologue), and names the Redis limiter
/// `$alias`, with a runnable example.
macro_rules! on_redis {
    ($krate:literal, $algorithm:ident, $alias:ident, $file:literal, $code:literal,
     $module:literal, $doc:literal, |$this:ident| $params:expr, max_wait: $max_wait:expr,
     debt: $debt:literal $(, unsupported: $unsupported:expr)?) => {
        #[doc = $doc]
        ///
        /// ```
        /// use ratelab_core::Quota;
        #[doc = concat!("use ratelab_redis::{Connection, RedisLimiter, ", stringify!($alias), "};")]
        #[doc = concat!("use ", $krate, "::", stringify!($algorithm), ";")]
        /// # let server = ratelab_testkit::redis::RedisServer::start();
        /// # let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        /// # runtime.block_on(async {
        ///
        /// // Every instance that connects to this Redis shares the limit.
        /// let connection = Connection::single(&server.url()).await?;
        /// let quota = Quota::per_second(5)?.with_burst(10)?;
        #[doc = concat!("let limiter: ", stringify!($alias), " = RedisLimiter::new(connection, ", stringify!($algorithm), "::new(quota));")]
        /// let admitted = limiter.check(b"client-42", 1).await?;
        /// assert!(admitted.allowed);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// # })?;
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub type $alias = RedisLimiter<$algorithm>;

        impl RedisAlgorithm for $algorithm {
            fn code(&self) -> &'static str {
                $code
            }

            fn max_wait_micros(&self) -> u64 {
                let $this = self;
                $max_wait
            }

            fn module_command(&self) -> Option<&'static str> {
                Some($module)
            }

            fn is_debt(&self) -> bool {
                $debt
            }

            fn script(&self) -> &'static Script {
                static SCRIPT: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
                    Script::new(concat!(
                        include_str!("../lua/prologue.lua"),
                        include_str!(concat!("../lua/", $file))
                    ))
                });
                &SCRIPT
            }

            fn script_params(&self) -> Vec<u64> {
                let $this = self;
                $params
            }

            $(
            fn unsupported(&self) -> Option<&'static str> {
                let $this = self;
                $unsupported
            }
            )?
        }
    };
}

on_redis!(
    "ratelab_fixed_window",
    FixedWindow,
    RedisFixedWindow,
    "fixed_window.lua",
    "fw",
    "RATELAB.FIXED-WINDOW",
    "A fixed window with its state on Redis, windows aligned on the Unix epoch.",
    |a| vec![a.window_micros(), a.capacity()],
    max_wait: a.window_micros(),
    debt: false
);
on_redis!(
    "ratelab_sliding_window",
    SlidingLog,
    RedisSlidingLog,
    "sliding_log.lua",
    "sl",
    "RATELAB.SLIDING-LOG",
    "A sliding log with its state on Redis (a sorted set of admissions, one member per unit: a limit of at most `MAX_STORED_LOG_LIMIT`).",
    |a| vec![a.window_micros(), a.capacity()],
    max_wait: a.window_micros(),
    debt: false,
    unsupported: (a.capacity() > u64::from(ratelab_sliding_window::MAX_STORED_LOG_LIMIT)).then_some(
        "a sliding log above 10,000 units on Redis (one sorted-set member per unit); use the sliding counter"
    )
);
on_redis!(
    "ratelab_sliding_window",
    SlidingCounter,
    RedisSlidingCounter,
    "sliding_counter.lua",
    "sc",
    "RATELAB.SLIDING-COUNTER",
    "A sliding window counter with its state on Redis.",
    |a| vec![a.window_micros(), a.capacity(), a.step_micros(), a.steps()],
    max_wait: 2 * a.window_micros(),
    debt: false
);
on_redis!(
    "ratelab_leaky_bucket",
    LeakyMeter,
    RedisLeakyMeter,
    "leaky_meter.lua",
    "lm",
    "RATELAB.LEAKY-METER",
    "A leaky bucket meter with its state on Redis.",
    |a| vec![
        a.quota().emission_interval_micros(),
        a.quota().burst_tolerance_micros(),
        a.capacity(),
    ],
    max_wait: a.quota().burst_tolerance_micros(),
    debt: true
);
on_redis!(
    "ratelab_leaky_bucket",
    LeakyQueue,
    RedisLeakyQueue,
    "leaky_queue.lua",
    "lq",
    "RATELAB.LEAKY-QUEUE",
    "A leaky bucket queue with its state on Redis: every instance hands out slots from the same queue.",
    |a| vec![
        a.quota().emission_interval_micros(),
        a.quota().burst_tolerance_micros(),
        a.capacity(),
    ],
    max_wait: a.quota().burst_tolerance_micros(),
    debt: true
);
on_redis!(
    "ratelab_token_bucket",
    TokenBucket,
    RedisTokenBucket,
    "token_bucket.lua",
    "tb",
    "RATELAB.TOKEN-BUCKET",
    "A token bucket with its state on Redis.",
    |a| vec![a.interval_micros(), a.capacity()],
    max_wait: a.capacity() * a.interval_micros(),
    debt: true
);
on_redis!(
    "ratelab_gcra",
    Gcra,
    RedisGcra,
    "gcra.lua",
    "gcra",
    "RATELAB.GCRA",
    "GCRA with its state on Redis: one timestamp per key.",
    |a| vec![a.interval_micros(), a.tolerance_micros(), a.capacity()],
    max_wait: a.tolerance_micros(),
    debt: true
);
