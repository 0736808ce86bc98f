package dev.ratelab.client;

import java.time.Duration;

/**
 * What a limiter did, counted (the Rust {@code ratelab_redis::Stats}, and
 * the Python and Node clients' {@code stats()}).
 *
 * @param answered calls answered by Redis
 * @param timeouts calls that failed because Redis did not answer before their deadline
 * @param errors calls that failed on another outage (a connection refused or lost, an expired call)
 * @param dataErrors calls that failed on a data error
 * @param scriptCalls calls sent as a script ({@code EVALSHA}), answered or not
 * @param moduleCalls calls sent to the native module's command
 * @param reloads scripts loaded again after {@code NOSCRIPT}
 * @param cachedRefusals refusals answered from the local cache
 * @param shortCircuited calls answered without calling Redis, the breaker being open
 * @param breakerOpened times the breaker opened
 * @param breakerOpen the breaker is open now
 * @param coolDownLeft before an open breaker lets a probe through (zero when closed)
 * @param clockSamples Redis {@code TIME} samples taken to place deadlines on Redis's clock
 * @param quotaMismatches times another quota was found on a key this limiter uses
 * @param lateRefunds admissions whose reply came after their caller gave up, given back by their stamp
 */
public record Stats(long answered, long timeouts, long errors, long dataErrors, long scriptCalls, long moduleCalls,
                    long reloads, long cachedRefusals, long shortCircuited, long breakerOpened, boolean breakerOpen,
                    Duration coolDownLeft, long clockSamples, long quotaMismatches, long lateRefunds) {}
