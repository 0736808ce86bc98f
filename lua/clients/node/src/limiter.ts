// A rate limiter on Redis that calls ratelab's scripts (lua/README.md): the
// same keys, arguments and decisions as the Rust `RedisLimiter`, and the
// same timeout, failure policies, circuit breaker, alerts, stats and refusal
// cache, so Node, Rust and Python services share one limit and fail alike.

import type { Cluster, Redis } from "ioredis";

import { RedisClock, monotonicMicros, parseTime, type Sample } from "./clock.js";
import {
  CircuitOpen,
  CostTooHigh,
  DataError,
  ForeignReceipt,
  QuotaMismatch,
  RatelabError,
  ReceiptSpent,
  Timeout,
  Unavailable,
  classify,
} from "./errors.js";
import {
  DEFAULT_PREFIX,
  MAX_END,
  MAX_TTL_SLACK_MS,
  PROTOCOL_VERSION,
  REPLY_LEN,
  algorithm as makeAlgorithm,
  encodeOp,
  keyBytes,
  redisKey,
  scriptSha,
  scriptSource,
  type Algorithm,
  type AlgorithmName,
  type Key,
  type Op,
  type Quota,
  type Settlement,
} from "./protocol.js";
import { Receipt, parseReceipt, type ReceiptJSON } from "./receipt.js";
import {
  Alerts,
  Breaker,
  Counters,
  DEFAULT_BREAKER_COOL_DOWN_MS,
  DEFAULT_BREAKER_THRESHOLD,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_TIMEOUT_MS,
  FAILURE_POLICIES,
  LATE_REPLY_WAIT_MS,
  RefusalCache,
  type Alert,
  type FailurePolicy,
  type Logger,
  type Stats,
} from "./resilience.js";

export { CostTooHigh, DataError, RatelabError } from "./errors.js";

/** By default every 100th check (and the first) also records its quota for its key. */
export const DEFAULT_QUOTA_CHECK_EVERY = 100;

/** One call's answer: the fields of the Rust `Decision`, in µs. */
export interface Decision {
  readonly allowed: boolean;
  readonly limit: number;
  readonly remaining: number;
  readonly retryAfterMicros: number;
  readonly resetAfterMicros: number;
  readonly delayMicros: number;
  /** No script decided it: the failure policy answered for an unavailable Redis. */
  readonly degraded: boolean;
  /**
   * For a check that Redis admitted with a cost above 0, the receipt of the
   * admission, to settle or refund once (`limiter.settle(decision.receipt,
   * actual)`); `undefined` for everything else: a refusal, a peek, a
   * settlement's or reset's answer, a cost of 0, and a decision the failure
   * policy made (nothing was charged on Redis: there is nothing to settle).
   */
  readonly receipt: Receipt | undefined;
}

/** `micros` in whole seconds, rounded up (`Retry-After`). */
export function ceilSecs(micros: number): number {
  return Math.ceil(micros / 1_000_000);
}

export interface LimiterOptions {
  /** The key prefix (default `ratelab`). */
  prefix?: string;
  /** The caller's clock, µs: passed to the script as `now`. Default: Redis `TIME`. */
  clock?: () => number;
  /** Keys live this much longer than their state needs, ms (default 0, or 60 000 with a clock). */
  ttlSlackMs?: number;
  /**
   * The most a call waits for Redis, ms (default 100; `null` for none),
   * ioredis's offline queue and reconnections included, once ioredis is
   * connected (see `connectTimeoutMs`). The call's deadline on Redis's clock
   * is the instant the caller gives up, from a measured offset: a call that
   * times out is never charged (a check whose script ran before the deadline
   * and whose reply came after it is given back at once when the reply
   * comes, within `LATE_REPLY_WAIT_MS`).
   */
  timeoutMs?: number | null;
  /**
   * While ioredis is connecting (its first connection, or a reconnection
   * under way, not its wait between attempts), the most a call waits for it,
   * and for the first sample of Redis's clock on the new connection, before
   * its own timeout starts, ms (default 1000; `null` for no bound).
   */
  connectTimeoutMs?: number | null;
  /** What a check answers on an outage (default `"error"`). */
  onFailure?: FailurePolicy;
  /** Apply the failure policy to data errors too (default false). */
  policyOnDataErrors?: boolean;
  /** The circuit breaker: consecutive outages that open it (default 5; 0 never opens) and its cool-down, ms (default 500). */
  breaker?: { threshold?: number; coolDownMs?: number };
  /** Called with every failure and quota mismatch. */
  onAlert?: (alert: Alert) => void;
  /** Where a warning goes, at most once a second (default `console`; `null`: nowhere). */
  logger?: Logger | null;
  /** Remember refusals locally for at most this many keys (off by default). */
  cacheRefusals?: number;
  /** Every N-th check (and the first) records this quota for its key and alerts on another (default 100; `null`: never). */
  quotaCheckEvery?: number | null;
  /** The offset to Redis's clock, to share between limiters on one connection. */
  redisClock?: RedisClock;
}

interface Call {
  op: Op;
  key: Buffer;
  redisKey: Buffer;
  /** The request's cost; a settlement's: the cost the admission was charged; a reset's: 0. */
  cost: number;
  /** A settlement's: what the admission finally counts for, and its stamp. */
  settlement: Settlement | undefined;
  now: number | undefined;
  /** Local monotonic µs at which the caller gives up (null: never). */
  giveUp: number | null;
  localNow: number;
  probe: boolean;
  registry: boolean;
}

type Client = Redis | Cluster;

/** ioredis's states in which a connection is being made (not waiting to retry, not closed). */
const CONNECTING = new Set(["wait", "connecting", "connect"]);

function isCluster(client: Client): client is Cluster {
  return typeof (client as Cluster).nodes === "function" && (client as { isCluster?: boolean }).isCluster === true;
}

/**
 * One algorithm on one quota, any number of keys, state on Redis (an ioredis
 * `Redis` or `Cluster`). See `LimiterOptions` for the timeout, the failure
 * policy, the breaker, alerts, the refusal cache and the quota registry.
 */
export class Limiter {
  readonly algorithm: Algorithm;
  readonly source: string;
  readonly sha: string;
  readonly prefix: string;
  readonly ttlSlackMs: number;
  readonly timeoutMs: number | null;
  readonly connectTimeoutMs: number | null;
  readonly onFailure: FailurePolicy;
  readonly redisClock: RedisClock;
  private readonly maxWait: number;
  private readonly breaker: Breaker;
  private readonly alerts: Alerts;
  private readonly counters = new Counters();
  private readonly refusals: RefusalCache | undefined;
  private readonly quotaCheckEvery: number | null;
  private checks = 0;
  private lastStream: unknown = undefined;
  /** Replies owed to callers who gave up: Redis is stalled while there are some. */
  private owed = 0;
  /** Late admissions being given back. */
  private readonly late = new Set<Promise<void>>();
  /** The first clock sample of a connection, shared by the calls that wait for it. */
  private sampling: Promise<void> | null = null;
  /** ioredis connecting, awaited by the calls that wait for it. */
  private connecting: Promise<void> | null = null;

  constructor(
    readonly client: Client,
    name: AlgorithmName,
    readonly quota: Quota,
    private readonly options: LimiterOptions = {},
  ) {
    this.algorithm = makeAlgorithm(name, quota);
    this.source = scriptSource(name);
    this.sha = scriptSha(this.source);
    this.prefix = options.prefix ?? DEFAULT_PREFIX;
    if (typeof this.prefix !== "string") throw new TypeError("prefix must be a string");
    // Redis expires keys on its own clock: a caller's clock may differ.
    this.ttlSlackMs = options.ttlSlackMs ?? (options.clock ? 60_000 : 0);
    if (!Number.isSafeInteger(this.ttlSlackMs) || this.ttlSlackMs < 0) {
      throw new RangeError(`ttlSlackMs must be a non-negative integer, not ${this.ttlSlackMs}`);
    }
    if (this.ttlSlackMs > MAX_TTL_SLACK_MS) {
      // The scripts answer "invalid arguments" to it: refused here, before any call.
      throw new RangeError(
        `ttlSlackMs must be at most ${MAX_TTL_SLACK_MS} (2^52 µs, the whole range of instants), which the scripts refuse past, not ${this.ttlSlackMs}`,
      );
    }
    const timeout = options.timeoutMs === undefined ? DEFAULT_TIMEOUT_MS : options.timeoutMs;
    if (timeout !== null && !(typeof timeout === "number" && timeout > 0 && timeout <= 3_600_000)) {
      throw new RangeError(`timeoutMs must be a positive number of ms up to an hour, or null, not ${String(timeout)}`);
    }
    this.timeoutMs = timeout;
    const connectTimeout = options.connectTimeoutMs === undefined ? DEFAULT_CONNECT_TIMEOUT_MS : options.connectTimeoutMs;
    if (connectTimeout !== null && !(typeof connectTimeout === "number" && connectTimeout > 0 && connectTimeout <= 3_600_000)) {
      throw new RangeError(`connectTimeoutMs must be a positive number of ms up to an hour, or null, not ${String(connectTimeout)}`);
    }
    this.connectTimeoutMs = connectTimeout;
    this.onFailure = options.onFailure ?? "error";
    if (!FAILURE_POLICIES.includes(this.onFailure)) {
      throw new RangeError(`onFailure must be one of ${FAILURE_POLICIES.join(", ")}, not ${String(this.onFailure)}`);
    }
    // A probe may take as long as a call on a new connection: then another caller may probe.
    this.breaker = new Breaker(
      options.breaker?.threshold ?? DEFAULT_BREAKER_THRESHOLD,
      options.breaker?.coolDownMs ?? DEFAULT_BREAKER_COOL_DOWN_MS,
      (this.timeoutMs ?? 1000) + (this.connectTimeoutMs ?? 1000),
    );
    this.alerts = new Alerts(options.onAlert, options.logger === undefined ? console : options.logger);
    this.refusals = options.cacheRefusals === undefined ? undefined : new RefusalCache(options.cacheRefusals);
    const every = options.quotaCheckEvery === undefined ? 100 : options.quotaCheckEvery;
    if (every !== null && (!Number.isSafeInteger(every) || every < 1)) {
      throw new RangeError(`quotaCheckEvery must be a positive integer or null, not ${String(every)}`);
    }
    this.quotaCheckEvery = every;
    this.redisClock = options.redisClock ?? new RedisClock();
    // Replies may wait up to 1 s plus the slack longer than from fresh state.
    this.maxWait = this.algorithm.maxWaitMicros + 1_000_000 + this.ttlSlackMs * 1000;
  }

  /** The Redis key holding `key`'s state. */
  redisKey(key: Key): Buffer {
    return redisKey(this.prefix, key, this.algorithm.keySuffix);
  }

  /** The quota registry's key for `key` and this algorithm: the state key's hash tag, then `<code>:quota`. */
  registryKey(key: Key): Buffer {
    const state = this.redisKey(key);
    return Buffer.concat([state.subarray(0, state.length - this.algorithm.keySuffix.length), Buffer.from(`${this.algorithm.code}:quota`)]);
  }

  /** `ARGV` of one call: version, now or "", cost, slack, deadline or "", the operation (a settlement's with its fields), the parameters. */
  arguments(cost: number, now?: number, op: Op = "check", deadline: number | "" = "", settlement?: Settlement): (string | number)[] {
    return [PROTOCOL_VERSION, now === undefined ? "" : now, cost, this.ttlSlackMs, deadline, encodeOp(op, settlement), ...this.algorithm.params];
  }

  /**
   * A receipt serialized by `Receipt.toJSON` (here or in another process: a
   * job queue's worker), as a receipt of this limiter, usable once. It must
   * name this limiter's prefix, algorithm and quota, else `ForeignReceipt`; a
   * malformed one is a `RangeError`. Loading the same JSON again gives
   * another receipt: the scripts bound what replays give back.
   */
  receiptFromJSON(data: string | ReceiptJSON): Receipt {
    const fields = parseReceipt(data);
    if (fields.prefix !== this.prefix || fields.fingerprint !== this.algorithm.fingerprintInput) {
      throw new ForeignReceipt(
        `a receipt of another limiter (prefix ${JSON.stringify(fields.prefix)}, ${fields.fingerprint}); this one is ` +
          `prefix ${JSON.stringify(this.prefix)}, ${this.algorithm.fingerprintInput}`,
      );
    }
    if (fields.cost > this.algorithm.capacity) {
      throw new RangeError(`not a receipt of this limiter: a cost of ${fields.cost} is above its capacity`);
    }
    return new Receipt(this, fields.key, fields.cost, fields.stamp_at, fields.stamp_mark);
  }

  /** What this limiter has done so far. */
  stats(): Stats {
    return this.counters.snapshot(this.breaker);
  }

  /**
   * Decides a request of weight `cost` for `key`: all or nothing; cost 0
   * reports without consuming. One `EVALSHA` (none for a cached refusal or
   * an open breaker), plus a `TIME` when the clock sample is stale.
   *
   * An admission of a cost above 0 carries its receipt (`decision.receipt`):
   * give it to `settle` or `refund` when what the request really counts for
   * is known, or drop it to keep the charge. A decision the failure policy
   * made (`degraded`) has none: nothing was charged on Redis.
   *
   * Rejects with `CostTooHigh`, `DataError`, and under `onFailure: "error"`
   * with `Unavailable` (`Timeout`, `BackendError`, `Expired`, `CircuitOpen`).
   */
  async check(key: Key, cost = 1): Promise<Decision> {
    return this.decide(this.start("check", key, cost));
  }

  /** The decision a check of `cost` would get now, writing nothing. Rejects as `check`. */
  async peek(key: Key, cost = 1): Promise<Decision> {
    return this.decide(this.start("peek", key, cost));
  }

  /**
   * Settles the admission `receipt` stands for: it finally counts for
   * `actual` units instead of the cost it was charged. Less gives the
   * difference back, only what the key provably still holds of it (units
   * whose debt was repaid, or counted in a window that has ended, belong to
   * other requests by then; a reset since gives nothing back); more charges
   * the difference as debt that later requests wait out, whatever the room.
   * Never takes the key above its capacity. Answers what a peek of cost 0
   * would after it. One round trip.
   *
   * The receipt is spent when the call starts, whatever happens to it: a
   * second use rejects with `ReceiptSpent`. Rejects with `ForeignReceipt` for
   * another limiter's receipt (it stays unspent), `TypeError` for
   * `undefined` (a decision without a receipt: there is nothing to settle),
   * `CostTooHigh` for an `actual` above the capacity (spent: the admission
   * counts as charged), `DataError`, and `Unavailable` on an outage: no
   * failure policy applies, and the admission counts as charged.
   */
  async settle(receipt: Receipt, actual: number): Promise<Decision> {
    return this.decide(this.startSettle(receipt, actual));
  }

  /** Gives back what the admission `receipt` stands for still holds (a request that should not count): `settle` to 0. */
  async refund(receipt: Receipt): Promise<Decision> {
    return this.settle(receipt, 0);
  }

  /**
   * Puts `key` back to full capacity, as if never seen; no receipt issued for
   * it before gives anything back afterwards. A key that holds something a
   * receipt could still claim keeps a tombstone until none could
   * (lua/README.md, "Operations"). One round trip; an outage rejects (no
   * failure policy).
   */
  async reset(key: Key): Promise<void> {
    await this.decide(this.start("reset", key, 0));
  }

  /**
   * Waits (at most `connectTimeoutMs`) for what the next call would wait for
   * before its own timeout starts: ioredis connecting, and the first sample
   * of Redis's clock on the connection. Resolves true when ready, false
   * otherwise; never rejects. The Express middleware calls it before its
   * policies' deadlines start; an application may at its start. Tries
   * nothing while the breaker is open.
   */
  async warm(): Promise<boolean> {
    if (this.breaker.state()[0]) return false;
    // A stall: a call would not wait for connecting either.
    if (this.owed > 0) return this.client.status === "ready";
    try {
      await this.setUp(this.timeoutMs !== null);
      return this.client.status === "ready";
    } catch {
      return false;
    }
  }

  /**
   * Resolves once every admission whose reply came after its caller gave up
   * has been given back (or could not be: at most `LATE_REPLY_WAIT_MS` after
   * it was given up). Closing the client is still the caller's business.
   */
  async settled(): Promise<void> {
    while (this.late.size) await Promise.all([...this.late]);
  }

  private async decide(call: Call): Promise<Decision> {
    const { op, cost } = call;
    if (op === "check" && this.refusals) {
      const hit = this.refusals.refusal(call.key, cost, call.localNow);
      if (hit) {
        this.counters.cachedRefusals++;
        const [limit, remaining, retry, reset] = hit;
        return { allowed: false, limit, remaining, retryAfterMicros: retry, resetAfterMicros: reset, delayMicros: 0, degraded: false, receipt: undefined };
      }
    }
    if (op === "settle" || op === "reset") this.refusals?.forget(call.key);
    let error = this.permit(call);
    if (!error) {
      try {
        // While Redis owes a reply to a caller who gave up (a stall), a new
        // connection would wait as long: connecting counts against the call's timeout then.
        if (this.owed === 0) {
          await this.setUp(call.giveUp !== null);
          this.arm(call);
        }
        const reply = await this.bounded(call, () => this.script(call), (late) => this.giveBackLate(call, late));
        const [decision, stampAt, stampMark] = this.validate(reply, op, cost, call.now);
        this.breaker.success();
        this.counters.answered++;
        if (op === "check" && this.refusals && !decision.allowed) {
          this.refusals.remember(call.key, cost, call.localNow, decision.limit, decision.remaining, decision.retryAfterMicros, decision.resetAfterMicros);
        }
        if (call.registry) {
          // A warning system: it never fails nor delays past the timeout a decision.
          await this.bounded(call, () => this.recordQuota(call)).catch(() => undefined);
        }
        if (op === "check" && cost > 0 && decision.allowed) {
          return { ...decision, receipt: new Receipt(this, call.key, cost, stampAt, stampMark) };
        }
        return decision;
      } catch (e) {
        error = this.failed(call, e);
      }
    }
    return this.answerFailure(call, error);
  }

  /**
   * Takes `receipt` back (refusing one of another limiter, or one spent
   * already), validates `actual`, and reads the clocks. The receipt is spent
   * from here on, whatever the call does, as in Rust.
   */
  private startSettle(receipt: Receipt, actual: number): Call {
    if (!(receipt instanceof Receipt)) {
      if (receipt === undefined || receipt === null) {
        throw new TypeError(
          "settle and refund take the Receipt of an admission (decision.receipt), not " +
            `${String(receipt)}: only a check that Redis admitted with a cost above 0 has one; a refusal, a peek, ` +
            "a cost of 0 and a decision the failure policy made (degraded: nothing was charged on Redis) have none, " +
            "and there is nothing to settle",
        );
      }
      throw new TypeError(`settle and refund take a Receipt, not ${typeof receipt === "object" ? "a plain object" : typeof receipt}`);
    }
    if (!receipt.issuedBy(this)) {
      throw new ForeignReceipt(
        `a receipt of another limiter (${receipt.issuerName()}): only the limiter whose check issued it settles it ` +
          "(another process: send JSON.stringify(receipt) and load it there with receiptFromJSON)",
      );
    }
    if (!Number.isSafeInteger(actual) || actual < 0 || actual > 0xffffffff) {
      throw new RangeError(`actual must be an integer from 0 to 2^32 - 1, not ${String(actual)}`);
    }
    if (!receipt.spend()) {
      throw new ReceiptSpent(
        `this receipt (key ${JSON.stringify(receipt.key.subarray(0, 64).toString("latin1"))}, cost ${receipt.cost}) ` +
          "was settled or refunded already: an admission is settled once",
      );
    }
    if (actual > this.algorithm.capacity) {
      throw new CostTooHigh(
        `a settlement to ${actual} units can never fit: the capacity is ${this.algorithm.capacity} ` +
          "(the receipt is spent; the admission counts as charged)",
      );
    }
    return this.call("settle", receipt.key, receipt.cost, { actual, stampAt: receipt.stampAt, stampMark: receipt.stampMark });
  }

  private start(op: Op, key: Key, cost: number): Call {
    if (!Number.isSafeInteger(cost) || cost < 0 || cost > 0xffffffff) {
      throw new RangeError(`cost must be an integer from 0 to 2^32 - 1, not ${cost}`);
    }
    if (cost > this.algorithm.capacity) {
      throw new CostTooHigh(`a cost of ${cost} can never fit: the capacity is ${this.algorithm.capacity}`);
    }
    if (typeof key !== "string" && !(key instanceof Uint8Array)) {
      throw new TypeError(`a key is a string or bytes, not ${typeof key}`);
    }
    return this.call(op, keyBytes(key), cost, undefined);
  }

  private call(op: Op, key: Buffer, cost: number, settlement: Settlement | undefined): Call {
    let now: number | undefined;
    if (this.options.clock) {
      now = this.options.clock();
      if (!Number.isSafeInteger(now) || now < 0) throw new RangeError(`the clock must answer a non-negative integer of µs, not ${now}`);
      now = Math.min(now, 2 ** 52);
    }
    const started = monotonicMicros();
    let registry = false;
    if (op === "check" && this.quotaCheckEvery !== null) {
      registry = this.checks % this.quotaCheckEvery === 0;
      this.checks++;
    }
    return {
      op,
      key,
      redisKey: this.redisKey(key),
      cost,
      settlement,
      now,
      giveUp: this.timeoutMs === null ? null : started + Math.round(this.timeoutMs * 1000),
      localNow: now ?? started,
      probe: false,
      registry,
    };
  }

  /** Starts the call's timeout now: what it waited for before (connecting) is not counted. */
  private arm(call: Call): void {
    if (this.timeoutMs !== null) call.giveUp = monotonicMicros() + Math.round(this.timeoutMs * 1000);
  }

  /**
   * Waits, within `connectTimeoutMs`, for ioredis while it is connecting, then
   * (with deadlines to place) for the first sample of Redis's clock on a new
   * connection. ioredis waiting to retry, or closed, is an outage: the call's
   * own timeout bounds it.
   */
  private async setUp(withClock: boolean): Promise<void> {
    const started = performance.now();
    const left = () => (this.connectTimeoutMs === null ? null : this.connectTimeoutMs - (performance.now() - started));
    if (CONNECTING.has(this.client.status)) await this.connected(left());
    if (!withClock || this.client.status !== "ready") return;
    this.noteStream();
    if (this.redisClock.sampled) return;
    this.sampling ??= this.sampleTime()
      .then((samples) => {
        this.counters.clockSamples++;
        this.redisClock.record(samples);
      })
      .finally(() => (this.sampling = null));
    await this.within(this.sampling, left());
  }

  /**
   * Until ioredis is ready, or no longer connecting (it failed: the call
   * fails on its own); one wait shared by every call.
   */
  private connected(ms: number | null): Promise<void> {
    const client = this.client;
    if (client.status === "wait") client.connect().catch(() => undefined);
    this.connecting ??= new Promise<void>((resolve) => {
      const finish = () => {
        client.off("ready", finish);
        client.off("close", finish);
        client.off("end", finish);
        this.connecting = null;
        resolve();
      };
      client.once("ready", finish);
      client.once("close", finish);
      client.once("end", finish);
    });
    return this.within(this.connecting, ms);
  }

  private within<T>(promise: Promise<T>, ms: number | null): Promise<T> {
    if (ms === null) return promise;
    const timedOut = () =>
      new Timeout(`could not connect to the rate limiter backend within ${this.connectTimeoutMs} ms`);
    if (ms <= 0) {
      promise.catch(() => undefined);
      return Promise.reject(timedOut());
    }
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        promise.catch(() => undefined);
        reject(timedOut());
      }, Math.ceil(ms));
      promise.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (error: unknown) => {
          clearTimeout(timer);
          reject(error);
        },
      );
    });
  }

  /** A new stream is a reconnect, maybe to another server (a failover): its clock is measured again. */
  private noteStream(): void {
    if (isCluster(this.client)) return;
    const stream = (this.client as { stream?: unknown }).stream;
    if (stream !== this.lastStream) {
      this.lastStream = stream;
      this.redisClock.invalidate();
    }
  }

  /**
   * For a check whose caller gave up before its reply came: an admission is
   * given back at once, by its stamp (a settlement to 0, with no deadline).
   */
  private giveBackLate(call: Call, reply: unknown): void {
    if (call.op !== "check" || call.cost === 0) return;
    let refund: Call;
    try {
      const [decision, stampAt, stampMark] = this.validate(reply, call.op, call.cost, call.now);
      if (!decision.allowed) return;
      refund = this.call("settle", call.key, call.cost, { actual: 0, stampAt, stampMark });
      refund.giveUp = null;
    } catch {
      return;
    }
    const work = this.script(refund).then(
      () => {
        this.counters.lateRefunds++;
      },
      (e: unknown) => {
        this.counters.lateRefundsFailed++;
        this.alerts.warn(
          `ratelab ${this.algorithm.name}: a check that timed out was admitted after all, and could not be given back ` +
            `(${String(e)}): it stays charged`,
        );
      },
    );
    this.track(work);
  }

  /** Late work, followed for at most `LATE_REPLY_WAIT_MS` (`settled`). */
  private track(work: Promise<unknown>): void {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const bound = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, LATE_REPLY_WAIT_MS);
      timer.unref();
    });
    const tracked: Promise<void> = Promise.race([work.then(() => undefined, () => undefined), bound]).finally(() => {
      clearTimeout(timer);
      this.late.delete(tracked);
    });
    this.late.add(tracked);
  }

  private permit(call: Call): RatelabError | undefined {
    const permit = this.breaker.permit();
    if (permit === "call") return undefined;
    if (permit === "probe") {
      call.probe = true;
      return undefined;
    }
    return new CircuitOpen(permit);
  }

  /**
   * `work` bounded by the caller's give-up instant. ioredis may hold a command
   * in its offline queue for as long as it reconnects: past the timeout the
   * caller is answered, and the command, if it is ever sent, finds its
   * deadline passed. A reply that comes after the caller gave up goes to
   * `onLate` (and, until it comes, Redis is taken to be stalled).
   */
  private bounded<T>(call: Call, work: () => Promise<T>, onLate?: (value: T) => void): Promise<T> {
    if (call.giveUp === null) return work();
    const left = (call.giveUp - monotonicMicros()) / 1000;
    const timedOut = () => new Timeout(`the rate limiter backend did not answer within ${this.timeoutMs} ms`);
    if (left <= 0) return Promise.reject(timedOut());
    const promise = work();
    const gaveUp = () => {
      this.owed++;
      const came = promise.then(
        (value) => onLate?.(value),
        () => undefined,
      );
      this.track(came.finally(() => this.owed--));
    };
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        gaveUp();
        reject(timedOut());
      }, Math.ceil(left));
      promise.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (error: unknown) => {
          clearTimeout(timer);
          reject(error);
        },
      );
    });
  }

  /** The script call: a `TIME` sample first when stale, then `EVALSHA` (after `NOSCRIPT`, `SCRIPT LOAD` and again). */
  private async script(call: Call): Promise<unknown> {
    let deadline: number | "" = "";
    if (call.giveUp !== null) {
      this.noteStream();
      if (!this.redisClock.fresh()) {
        const samples = await this.sampleTime();
        this.counters.clockSamples++;
        this.redisClock.record(samples);
      }
      // The caller gave up meanwhile (a late TIME): nothing more to send.
      if (monotonicMicros() >= call.giveUp) throw new Timeout(`the rate limiter backend did not answer within ${this.timeoutMs} ms`);
      deadline = this.redisClock.deadline(call.giveUp);
    }
    const args = this.arguments(call.cost, call.now, call.op, deadline, call.settlement);
    this.counters.scriptCalls++;
    try {
      return await this.client.evalsha(this.sha, 1, call.redisKey, ...args);
    } catch (e) {
      if (!(e instanceof Error) || !e.message.startsWith("NOSCRIPT")) throw e;
      this.counters.reloads++;
      if (isCluster(this.client)) {
        await Promise.all(this.client.nodes("master").map((node) => node.script("LOAD", this.source)));
      } else {
        await this.client.script("LOAD", this.source);
      }
      return await this.client.evalsha(this.sha, 1, call.redisKey, ...args);
    }
  }

  private async sampleTime(): Promise<Sample[]> {
    const nodes = isCluster(this.client) ? this.client.nodes("master") : [this.client];
    const samples: Sample[] = [];
    for (const node of nodes) {
      const before = monotonicMicros();
      const reply = await node.time();
      const after = monotonicMicros();
      try {
        samples.push({ before, redis: parseTime(reply), after });
      } catch (e) {
        throw new DataError(`invalid reply to TIME: ${(e as Error).message}`);
      }
    }
    return samples;
  }

  private async recordQuota(call: Call): Promise<void> {
    const ours = this.algorithm.fingerprintInput;
    const ttl = Math.max(60_000, Math.ceil(this.algorithm.maxWaitMicros / 1000));
    const theirs = (await this.client.call("SET", this.registryKey(call.key), ours, "PX", ttl, "GET")) as string | null;
    if (theirs !== null && theirs !== undefined && String(theirs) !== ours) {
      this.counters.quotaMismatches++;
      const error = new QuotaMismatch(call.key, ours, String(theirs));
      this.alerts.raise({ algorithm: this.algorithm.name, error, policy: null, key: call.key }, this.stats());
    }
  }

  private failed(call: Call, e: unknown): RatelabError {
    const error = classify(e);
    if (error instanceof Timeout) this.counters.timeouts++;
    else if (error instanceof DataError) this.counters.dataErrors++;
    else this.counters.errors++;
    if (error instanceof Unavailable) this.breaker.failure(call.probe);
    // Redis answered: it is up, whatever it said.
    else this.breaker.success();
    return error;
  }

  /**
   * The failure policy's answer for a check or a peek (after an alert), or
   * `error` thrown. Settlements and resets have no policy: there is nothing
   * to give back on a store that is not there.
   */
  private answerFailure(call: Call, error: RatelabError): Decision {
    if (call.op === "settle" || call.op === "reset") throw error;
    const policy: FailurePolicy =
      error instanceof Unavailable || this.options.policyOnDataErrors ? this.onFailure : "error";
    this.alerts.raise({ algorithm: this.algorithm.name, error, policy, key: call.key }, this.stats());
    const capacity = this.algorithm.capacity;
    if (policy === "error") throw error;
    if (policy === "allow") {
      // As a fresh key would answer: full iff nothing is missing.
      const reset = call.cost ? Math.max(1, this.algorithm.maxWaitMicros) : 0;
      return { allowed: true, limit: capacity, remaining: capacity - call.cost, retryAfterMicros: 0, resetAfterMicros: reset, delayMicros: 0, degraded: true, receipt: undefined };
    }
    // Deny: an open breaker says when Redis is tried again; else the next
    // check may find it back after a timeout at most.
    const waitMs = error instanceof CircuitOpen && error.retryAfterMs !== undefined ? error.retryAfterMs : (this.timeoutMs ?? 1000);
    const retry = Math.max(1, Math.round(waitMs * 1000));
    return { allowed: false, limit: capacity, remaining: 0, retryAfterMicros: retry, resetAfterMicros: retry, delayMicros: 0, degraded: true, receipt: undefined };
  }

  /** A script's reply to `op` of `cost` (at `now`, when the caller's clock was sent) as a `Decision`, trusting nothing in it. */
  decision(reply: unknown, op: Op = "peek", cost = 0, now?: number): Decision {
    return this.validate(reply, op, cost, now)[0];
  }

  /**
   * The decision and the stamp of a script's reply to `op` of `cost`: eight
   * integers, `allowed` 0 or 1, `limit` the capacity, `remaining` at most the
   * limit, no wait to retry an admitted request and no delay for a refused
   * one; waits within the longest this quota produces (plus 1 s and the
   * slack), but for a debt's refusals, peeks, settlements and resets (up to
   * `MAX_END`); a stamp exactly for a check admitted with a cost above 0 (a
   * debt's after `now` and within the longest wait of it, when `now` was
   * sent; a window's with a mark from 1), `0, 0` otherwise.
   */
  private validate(reply: unknown, op: Op, cost: number, now: number | undefined): [Decision, number, number] {
    const invalid = (why: string) =>
      new DataError(`ratelab ${this.algorithm.name}: invalid reply ${JSON.stringify(reply)}: ${why}`);
    if (!Array.isArray(reply) || reply.length !== REPLY_LEN) throw invalid("not eight integers");
    if (!reply.every((n) => typeof n === "number" && Number.isSafeInteger(n))) {
      throw invalid("not eight integers");
    }
    const n = reply as number[];
    if (n.some((x) => x < 0)) throw invalid("a negative integer");
    const [allowed, limit, remaining, retry, reset, delay, at, mark] = n as [number, number, number, number, number, number, number, number];
    if (limit !== this.algorithm.capacity) throw invalid("limit is not this limiter's capacity");
    if (remaining > limit) throw invalid("remaining above the limit");
    const admission = op === "check" && cost > 0 && allowed === 1;
    // A settlement's debt lengthens a debt's waits, never an admission's: it needed the room.
    const maxWait = this.algorithm.debt && !admission ? Math.max(this.maxWait, MAX_END) : this.maxWait;
    if (Math.max(retry, reset, delay) > maxWait) throw invalid("a wait longer than this quota can produce");
    if (allowed !== 0 && allowed !== 1) throw invalid("allowed is neither 0 nor 1");
    if ((allowed === 1 && retry !== 0) || (allowed === 0 && delay !== 0)) {
      throw invalid("a retry wait when admitted, or a delay when refused");
    }
    if (admission) {
      let ok: boolean;
      if (this.algorithm.debt) {
        // The key is full again after the admission, at most the longest wait after the instant sent.
        ok = now !== undefined ? at > now && at - now <= this.maxWait : at >= 1 && at <= MAX_END;
      } else {
        // A window's mark counts at least the admission's own units.
        ok = mark >= 1 && at <= MAX_END;
      }
      if (!ok) throw invalid("a stamp out of bounds");
    } else if (at !== 0 || mark !== 0) {
      throw invalid("a stamp for no admission");
    }
    const decision: Decision = {
      allowed: allowed === 1,
      limit,
      remaining,
      retryAfterMicros: retry,
      resetAfterMicros: reset,
      delayMicros: delay,
      degraded: false,
      receipt: undefined,
    };
    return [decision, at, mark];
  }
}
