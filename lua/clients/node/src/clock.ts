// Deadlines on Redis's clock, from a measured offset.
//
// A script refuses to run after `ARGV[5]`, an instant in µs on Redis's
// clock: the instant the caller gives up. This process knows that instant
// on its own monotonic clock; `RedisClock` places it on Redis's.
//
// One sample: read the monotonic clock (`before`), send `TIME`, read it
// again when the reply is in (`after`). Redis read its clock somewhere in
// between, so `redis − local` lies in `[redis − after, redis − before]`. The
// lower bound is kept: a deadline computed from it is never later, on
// Redis's clock, than the caller's own give-up instant. The offset drifts
// (NTP slews Redis's host by up to 500 ppm): for a sample `age` µs old the
// bound is widened by `driftPpm × age`, and a sample older than `maxAgeMicros`
// is measured again (and after a reconnect, which may reach another server).
// On a Redis Cluster each master is sampled and the lowest bound kept.
//
// The deadline sent is `giveUp + offset − drift − rtt / 2`: the script must
// also leave the reply time to fly back before the caller stops listening.

/** How far the two clocks may drift apart, in parts per million. */
export const DEFAULT_DRIFT_PPM = 500;
/** A sample older than this (µs) is measured again before the next call. */
export const DEFAULT_MAX_SAMPLE_AGE_MICROS = 5_000_000;

/** This process's monotonic clock, µs. */
export function monotonicMicros(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

/** Redis `TIME` (`[seconds, microseconds]`) in µs since the epoch; a `RangeError` for anything else. */
export function parseTime(reply: unknown): number {
  if (!Array.isArray(reply) || reply.length !== 2 || !reply.every((x) => typeof x === "string" && /^\d{1,16}$/.test(x))) {
    throw new RangeError(`TIME answered ${JSON.stringify(reply)}, not two integers`);
  }
  const [seconds, micros] = (reply as string[]).map(Number) as [number, number];
  if (micros >= 1_000_000) throw new RangeError(`TIME answered ${JSON.stringify(reply)}`);
  return seconds * 1_000_000 + micros;
}

/** One `TIME` round trip: local µs before sending, Redis's µs, local µs after the reply. */
export interface Sample {
  readonly before: number;
  readonly redis: number;
  readonly after: number;
}

export interface RedisClockOptions {
  driftPpm?: number;
  maxAgeMicros?: number;
  /** The local monotonic clock, µs (for tests). */
  monotonic?: () => number;
}

/**
 * The offset between this process's monotonic clock and Redis's `TIME`,
 * measured. One per limiter by default; limiters on one connection may share
 * one (`redisClock`).
 */
export class RedisClock {
  readonly driftPpm: number;
  readonly maxAgeMicros: number;
  readonly monotonic: () => number;
  private state: { offset: number; rtt: number; taken: number } | null = null;

  constructor(options: RedisClockOptions = {}) {
    this.driftPpm = options.driftPpm ?? DEFAULT_DRIFT_PPM;
    this.maxAgeMicros = options.maxAgeMicros ?? DEFAULT_MAX_SAMPLE_AGE_MICROS;
    this.monotonic = options.monotonic ?? monotonicMicros;
    if (!(this.driftPpm >= 0) || !(this.maxAgeMicros > 0)) {
      throw new RangeError("driftPpm must be >= 0 and maxAgeMicros > 0");
    }
  }

  /** A sample exists and is younger than `maxAgeMicros`. */
  fresh(now = this.monotonic()): boolean {
    if (!this.state) return false;
    const age = now - this.state.taken;
    return age >= 0 && age <= this.maxAgeMicros;
  }

  /** A sample was recorded (and not forgotten since), however old. */
  get sampled(): boolean {
    return this.state !== null;
  }

  /** Forget the sample (a reconnect: maybe another server). */
  invalidate(): void {
    this.state = null;
  }

  /** Samples taken together (one per master of a cluster): the lowest offset and the longest round trip are kept. */
  record(samples: readonly Sample[]): void {
    if (samples.length === 0) throw new RangeError("no TIME sample");
    this.state = {
      offset: Math.min(...samples.map((s) => s.redis - s.after)),
      rtt: Math.max(...samples.map((s) => s.after - s.before)),
      taken: Math.max(...samples.map((s) => s.after)),
    };
  }

  /** The offset kept (Redis − local, its lower bound), if any. */
  get offsetMicros(): number | undefined {
    return this.state?.offset;
  }

  /**
   * `giveUp` (local monotonic µs) on Redis's clock, less the uncertainty the
   * sample's age adds and half its round trip. Call `record` first.
   */
  deadline(giveUp: number, now = this.monotonic()): number {
    if (!this.state) throw new Error("no TIME sample yet");
    const { offset, rtt, taken } = this.state;
    const age = Math.max(0, now - taken);
    const drift = Math.ceil((age * this.driftPpm) / 1_000_000);
    return Math.max(0, giveUp + offset - drift - Math.floor((rtt + 1) / 2));
  }
}
