// What a limiter does when Redis fails or is slow, as the Rust
// `ratelab-redis` crate does it: the failure policy, the circuit breaker,
// the alerts, the stats, and the local cache of refusals. No I/O here.

import type { RatelabError } from "./errors.js";

/** The default per-call timeout, ms (Rust: `DEFAULT_TIMEOUT`). */
export const DEFAULT_TIMEOUT_MS = 100;
/**
 * The default bound on waiting for ioredis to connect (and for the first
 * clock sample of a connection), ms: apart from the call's own timeout, so
 * that connecting to a healthy but busy Redis is not an outage.
 */
export const DEFAULT_CONNECT_TIMEOUT_MS = 1000;
/**
 * How long, after its caller gave up, `settled()` waits for a check's late
 * reply and its refund, ms (the Rust client's `LATE_REPLY_WAIT`). A reply
 * that comes later is still given back when it comes; one on a connection
 * that is lost stays charged.
 */
export const LATE_REPLY_WAIT_MS = 30_000;
/** Consecutive outage failures that open the circuit breaker. */
export const DEFAULT_BREAKER_THRESHOLD = 5;
/** How long an open breaker keeps Redis uncalled before one probe, ms. */
export const DEFAULT_BREAKER_COOL_DOWN_MS = 500;

/**
 * What a check answers when Redis is unavailable (an outage). Data errors
 * are not outages: they are thrown whatever the policy.
 *
 * - `"error"` (the default): reject with the `Unavailable` error.
 * - `"allow"`: fail open: admit as a fresh key would, `degraded`, with an alert.
 * - `"deny"`: fail closed: refuse, `retryAfterMicros` the breaker's remaining
 *   cool-down when it is open, else the timeout; `degraded`, with an alert.
 */
export type FailurePolicy = "error" | "allow" | "deny";

/** Every failure policy. */
export const FAILURE_POLICIES: readonly FailurePolicy[] = ["error", "allow", "deny"];

/** What a limiter did, counted (Rust: `ratelab_redis::Stats`). */
export interface Stats {
  /** Calls answered by Redis. */
  readonly answered: number;
  /** Calls that failed because Redis did not answer within the timeout. */
  readonly timeouts: number;
  /** Calls that failed on another outage (a connection refused or lost, an expired call). */
  readonly errors: number;
  /** Calls that failed on a data error. */
  readonly dataErrors: number;
  /** Calls sent as a script (`EVALSHA`), answered or not. */
  readonly scriptCalls: number;
  /** Scripts loaded again after `NOSCRIPT`. */
  readonly reloads: number;
  /** Refusals answered from the local cache. */
  readonly cachedRefusals: number;
  /** Calls answered without calling Redis, the breaker being open. */
  readonly shortCircuited: number;
  /** Times the breaker opened. */
  readonly breakerOpened: number;
  /** The breaker is open now. */
  readonly breakerOpen: boolean;
  /** Ms before an open breaker lets a probe through (0 when closed). */
  readonly coolDownLeftMs: number;
  /** Redis `TIME` samples taken to place deadlines on Redis's clock. */
  readonly clockSamples: number;
  /** Times another quota was found on a key this limiter uses. */
  readonly quotaMismatches: number;
  /** Admissions whose reply came after their caller gave up, given back at once by their stamp. */
  readonly lateRefunds: number;
  /** Such admissions whose refund failed: they stay charged (a warning is logged). */
  readonly lateRefundsFailed: number;
}

/** One failure (or a quota mismatch), as the alert hook sees it. */
export interface Alert {
  /** The algorithm of the limiter. */
  readonly algorithm: string;
  /** What went wrong: an `Unavailable`, a `DataError` or a `QuotaMismatch`. */
  readonly error: RatelabError;
  /** What the limiter did about it (`null` for a quota mismatch, which changes no decision). */
  readonly policy: FailurePolicy | null;
  /** The user key of the call. */
  readonly key: Buffer;
}

/** Where warnings go: `console` by default, anything with `warn`, or `null` for nowhere. */
export interface Logger {
  warn(message: string): void;
}

/** A milliseconds clock, monotonic. */
export type MillisClock = () => number;

/**
 * After `threshold` consecutive outage failures, Redis is not called for
 * `coolDownMs`; then one call at a time probes it (a probe that takes longer
 * than `probeTimeoutMs` lets another through), and the first answer closes
 * it. A threshold of 0 never opens.
 */
export class Breaker {
  private consecutive = 0;
  private openUntil: number | null = null;
  private probingUntil: number | null = null;
  opened = 0;
  shortCircuited = 0;

  constructor(
    readonly threshold: number,
    readonly coolDownMs: number,
    readonly probeTimeoutMs: number,
    private readonly clock: MillisClock = () => performance.now(),
  ) {
    if (!Number.isSafeInteger(threshold) || threshold < 0) {
      throw new RangeError(`the breaker threshold must be a non-negative integer, not ${threshold}`);
    }
    if (!(coolDownMs >= 0)) throw new RangeError(`the breaker cool-down must not be negative, not ${coolDownMs}`);
  }

  /** `"call"`, `"probe"` (this call is the one probe), or the ms to wait (open: do not call). */
  permit(): "call" | "probe" | number {
    if (this.openUntil === null) return "call";
    const now = this.clock();
    if (now < this.openUntil) {
      this.shortCircuited++;
      return this.openUntil - now;
    }
    if (this.probingUntil !== null && now < this.probingUntil) {
      this.shortCircuited++;
      return this.probingUntil - now;
    }
    this.probingUntil = now + this.probeTimeoutMs;
    return "probe";
  }

  /** Redis answered (a decision or a data error: it is up either way). */
  success(): void {
    this.consecutive = 0;
    this.openUntil = null;
    this.probingUntil = null;
  }

  /** An outage failure. */
  failure(probe: boolean): void {
    if (this.threshold === 0) return;
    this.consecutive++;
    if (probe || (this.openUntil === null && this.consecutive >= this.threshold)) {
      this.openUntil = this.clock() + this.coolDownMs;
      this.probingUntil = null;
      this.opened++;
    }
  }

  /** [open, ms of cool-down left]. */
  state(): [boolean, number] {
    if (this.openUntil === null) return [false, 0];
    return [true, Math.max(0, this.openUntil - this.clock())];
  }
}

/** The mutable counts behind `Stats`. */
export class Counters {
  answered = 0;
  timeouts = 0;
  errors = 0;
  dataErrors = 0;
  scriptCalls = 0;
  reloads = 0;
  cachedRefusals = 0;
  clockSamples = 0;
  quotaMismatches = 0;
  lateRefunds = 0;
  lateRefundsFailed = 0;

  snapshot(breaker: Breaker): Stats {
    const [breakerOpen, coolDownLeftMs] = breaker.state();
    return {
      answered: this.answered,
      timeouts: this.timeouts,
      errors: this.errors,
      dataErrors: this.dataErrors,
      scriptCalls: this.scriptCalls,
      reloads: this.reloads,
      cachedRefusals: this.cachedRefusals,
      shortCircuited: breaker.shortCircuited,
      breakerOpened: breaker.opened,
      breakerOpen,
      coolDownLeftMs,
      clockSamples: this.clockSamples,
      quotaMismatches: this.quotaMismatches,
      lateRefunds: this.lateRefunds,
      lateRefundsFailed: this.lateRefundsFailed,
    };
  }
}

/**
 * Every alert reaches the hook; a warning goes to the logger at most once a
 * second, with the count of those suppressed since, so that an outage does
 * not flood the logs.
 */
export class Alerts {
  private last: number | null = null;
  private suppressed = 0;

  constructor(
    private readonly hook: ((alert: Alert) => void) | undefined,
    private readonly logger: Logger | null,
    private readonly clock: MillisClock = () => performance.now(),
  ) {}

  /** A warning outside the alerts (the logger's, as it comes). */
  warn(message: string): void {
    this.logger?.warn(message);
  }

  raise(alert: Alert, stats: Stats): void {
    if (this.hook) {
      try {
        this.hook(alert);
      } catch (e) {
        // A broken hook must not break the check.
        this.logger?.warn(`ratelab-client: the alert hook threw: ${String(e)}`);
      }
    }
    const now = this.clock();
    if (this.last !== null && now - this.last < 1000) {
      this.suppressed++;
      return;
    }
    const suppressed = this.suppressed;
    this.last = now;
    this.suppressed = 0;
    this.logger?.warn(
      `ratelab ${alert.algorithm}: ${alert.error.message} (policy ${alert.policy ?? "none"}; ` +
        `timeouts ${stats.timeouts}, errors ${stats.errors}, ${suppressed} alerts suppressed)`,
    );
  }
}

interface Refusal {
  cost: number;
  until: number;
  fullAt: number;
  limit: number;
  remaining: number;
}

/**
 * Refusals remembered locally: a key refused with `retry_after = d` is
 * refused again without a round trip until `d` has passed, for a request of
 * the same cost; at most `maxKeys` keys. It only ever refuses what Redis
 * would refuse.
 */
export class RefusalCache {
  private readonly entries = new Map<string, Refusal>();

  constructor(readonly maxKeys: number) {
    if (!Number.isSafeInteger(maxKeys) || maxKeys < 1) {
      throw new RangeError(`cacheRefusals must be a positive number of keys, not ${maxKeys}`);
    }
  }

  /** [limit, remaining, retryAfterMicros, resetAfterMicros] of a cached refusal, if any. */
  refusal(key: Buffer, cost: number, now: number): [number, number, number, number] | undefined {
    if (cost === 0) return undefined;
    const id = key.toString("latin1");
    const entry = this.entries.get(id);
    if (!entry) return undefined;
    if (now >= entry.until) {
      this.entries.delete(id);
      return undefined;
    }
    if (entry.cost !== cost) return undefined;
    return [entry.limit, entry.remaining, entry.until - now, Math.max(0, entry.fullAt - now)];
  }

  forget(key: Buffer): void {
    this.entries.delete(key.toString("latin1"));
  }

  /** `now` was read before the request was sent: `now + retryAfter` is never later than Redis said. */
  remember(key: Buffer, cost: number, now: number, limit: number, remaining: number, retry: number, reset: number): void {
    if (this.entries.size >= this.maxKeys) {
      for (const [id, r] of this.entries) if (r.until <= now) this.entries.delete(id);
      if (this.entries.size >= this.maxKeys) return;
    }
    this.entries.set(key.toString("latin1"), { cost, until: now + retry, fullAt: now + reset, limit, remaining });
  }
}
