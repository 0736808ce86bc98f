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
  QuotaMismatch,
  RatelabError,
  Timeout,
  Unavailable,
  classify,
} from "./errors.js";
import {
  DEFAULT_PREFIX,
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
} from "./protocol.js";
import {
  Alerts,
  Breaker,
  Counters,
  DEFAULT_BREAKER_COOL_DOWN_MS,
  DEFAULT_BREAKER_THRESHOLD,
  DEFAULT_TIMEOUT_MS,
  FAILURE_POLICIES,
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
   * ioredis's offline queue and reconnections included. The call's deadline on
   * Redis's clock is the instant the caller gives up, from a measured offset:
   * a call that times out is never charged.
   */
  timeoutMs?: number | null;
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
  cost: number;
  owed: number;
  now: number | undefined;
  /** Local monotonic µs at which the caller gives up (null: never). */
  giveUp: number | null;
  localNow: number;
  probe: boolean;
  registry: boolean;
}

type Client = Redis | Cluster;

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
    const timeout = options.timeoutMs === undefined ? DEFAULT_TIMEOUT_MS : options.timeoutMs;
    if (timeout !== null && !(typeof timeout === "number" && timeout > 0 && timeout <= 3_600_000)) {
      throw new RangeError(`timeoutMs must be a positive number of ms up to an hour, or null, not ${String(timeout)}`);
    }
    this.timeoutMs = timeout;
    this.onFailure = options.onFailure ?? "error";
    if (!FAILURE_POLICIES.includes(this.onFailure)) {
      throw new RangeError(`onFailure must be one of ${FAILURE_POLICIES.join(", ")}, not ${String(this.onFailure)}`);
    }
    // A probe may take as long as a call: then another caller may probe.
    this.breaker = new Breaker(
      options.breaker?.threshold ?? DEFAULT_BREAKER_THRESHOLD,
      options.breaker?.coolDownMs ?? DEFAULT_BREAKER_COOL_DOWN_MS,
      this.timeoutMs ?? 1000,
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

  /** `ARGV` of one call: version, now or "", cost, slack, deadline or "", the operation, the parameters. */
  arguments(cost: number, now?: number, op: Op = "check", owed = 0, deadline: number | "" = ""): (string | number)[] {
    return [PROTOCOL_VERSION, now === undefined ? "" : now, cost, this.ttlSlackMs, deadline, encodeOp(op, owed), ...this.algorithm.params];
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
   * Rejects with `CostTooHigh`, `DataError`, and under `onFailure: "error"`
   * with `Unavailable` (`Timeout`, `BackendError`, `Expired`, `CircuitOpen`).
   */
  check(key: Key, cost = 1): Promise<Decision> {
    return this.decide("check", key, cost);
  }

  /** The decision a check of `cost` would get now, writing nothing. Rejects as `check`. */
  peek(key: Key, cost = 1): Promise<Decision> {
    return this.decide("peek", key, cost);
  }

  /**
   * Gives back up to `cost` units of one admission of `key` that still weighs
   * on it for `owedMicros`: its decision's `resetAfterMicros`, less the time
   * since it was asked (measured from before the call). Only what the
   * admission still holds comes back; never above the capacity; answers what
   * a peek of cost 0 would after it. On Redis `TIME`, `owedMicros` is first
   * taken down by the timeout (the script may run that late); with no timeout,
   * nothing is owed. No failure policy applies: an outage rejects.
   */
  refund(key: Key, cost: number, owedMicros: number): Promise<Decision> {
    return this.decide("refund", key, cost, owedMicros);
  }

  /** Puts `key` back to full capacity: `DEL` of its Redis key. An outage rejects. */
  async reset(key: Key): Promise<void> {
    const call = this.start("refund", key, 0, 0);
    this.refusals?.forget(call.key);
    const error = this.permit(call);
    if (error) throw error;
    try {
      await this.bounded(call, () => this.client.del(call.redisKey));
    } catch (e) {
      throw this.failed(call, e);
    }
    this.breaker.success();
    this.counters.answered++;
  }

  private async decide(op: Op, key: Key, cost: number, owed = 0): Promise<Decision> {
    const call = this.start(op, key, cost, owed);
    if (op === "check" && this.refusals) {
      const hit = this.refusals.refusal(call.key, cost, call.localNow);
      if (hit) {
        this.counters.cachedRefusals++;
        const [limit, remaining, retry, reset] = hit;
        return { allowed: false, limit, remaining, retryAfterMicros: retry, resetAfterMicros: reset, delayMicros: 0, degraded: false };
      }
    }
    if (op === "refund") this.refusals?.forget(call.key);
    let error = this.permit(call);
    if (!error) {
      try {
        const reply = await this.bounded(call, () => this.script(call));
        const decision = this.decision(reply);
        this.breaker.success();
        this.counters.answered++;
        if (op === "check" && this.refusals && !decision.allowed) {
          this.refusals.remember(call.key, cost, call.localNow, decision.limit, decision.remaining, decision.retryAfterMicros, decision.resetAfterMicros);
        }
        if (call.registry) {
          // A warning system: it never fails nor delays past the timeout a decision.
          await this.bounded(call, () => this.recordQuota(call)).catch(() => undefined);
        }
        return decision;
      } catch (e) {
        error = this.failed(call, e);
      }
    }
    return this.answerFailure(call, error);
  }

  private start(op: Op, key: Key, cost: number, owed: number): Call {
    if (!Number.isSafeInteger(cost) || cost < 0 || cost > 0xffffffff) {
      throw new RangeError(`cost must be an integer from 0 to 2^32 - 1, not ${cost}`);
    }
    if (cost > this.algorithm.capacity) {
      throw new CostTooHigh(`a cost of ${cost} can never fit: the capacity is ${this.algorithm.capacity}`);
    }
    if (typeof key !== "string" && !(key instanceof Uint8Array)) {
      throw new TypeError(`a key is a string or bytes, not ${typeof key}`);
    }
    if (op === "refund") {
      if (!Number.isSafeInteger(owed) || owed < 0) {
        throw new RangeError(`owedMicros must be a non-negative integer, not ${owed}`);
      }
      if (!this.options.clock) {
        // On Redis TIME the refund is decided when the script runs, which may
        // be as late as the caller's give-up instant.
        owed = this.timeoutMs === null ? 0 : Math.max(0, owed - Math.round(this.timeoutMs * 1000));
      }
    }
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
    const k = keyBytes(key);
    return {
      op,
      key: k,
      redisKey: this.redisKey(k),
      cost,
      owed,
      now,
      giveUp: this.timeoutMs === null ? null : started + Math.round(this.timeoutMs * 1000),
      localNow: now ?? started,
      probe: false,
      registry,
    };
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
   * deadline passed.
   */
  private bounded<T>(call: Call, work: () => Promise<T>): Promise<T> {
    if (call.giveUp === null) return work();
    const left = (call.giveUp - monotonicMicros()) / 1000;
    const promise = work();
    if (left <= 0) {
      promise.catch(() => undefined);
      return Promise.reject(new Timeout(`the rate limiter backend did not answer within ${this.timeoutMs} ms`));
    }
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        promise.catch(() => undefined);
        reject(new Timeout(`the rate limiter backend did not answer within ${this.timeoutMs} ms`));
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
      if (!isCluster(this.client)) {
        // A new stream is a reconnect, maybe to another server (a failover).
        const stream = (this.client as { stream?: unknown }).stream;
        if (stream !== this.lastStream) {
          this.lastStream = stream;
          this.redisClock.invalidate();
        }
      }
      if (!this.redisClock.fresh()) {
        const samples = await this.sampleTime();
        this.counters.clockSamples++;
        this.redisClock.record(samples);
      }
      deadline = this.redisClock.deadline(call.giveUp);
    }
    const args = this.arguments(call.cost, call.now, call.op, call.owed, deadline);
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

  /** The failure policy's answer (after an alert), or `error` thrown. Refunds have no policy. */
  private answerFailure(call: Call, error: RatelabError): Decision {
    if (call.op === "refund") throw error;
    const policy: FailurePolicy =
      error instanceof Unavailable || this.options.policyOnDataErrors ? this.onFailure : "error";
    this.alerts.raise({ algorithm: this.algorithm.name, error, policy, key: call.key }, this.stats());
    const capacity = this.algorithm.capacity;
    if (policy === "error") throw error;
    if (policy === "allow") {
      // As a fresh key would answer: full iff nothing is missing.
      const reset = call.cost ? Math.max(1, this.algorithm.maxWaitMicros) : 0;
      return { allowed: true, limit: capacity, remaining: capacity - call.cost, retryAfterMicros: 0, resetAfterMicros: reset, delayMicros: 0, degraded: true };
    }
    // Deny: an open breaker says when Redis is tried again; else the next
    // check may find it back after a timeout at most.
    const waitMs = error instanceof CircuitOpen && error.retryAfterMs !== undefined ? error.retryAfterMs : (this.timeoutMs ?? 1000);
    const retry = Math.max(1, Math.round(waitMs * 1000));
    return { allowed: false, limit: capacity, remaining: 0, retryAfterMicros: retry, resetAfterMicros: retry, delayMicros: 0, degraded: true };
  }

  /** A script's reply as a `Decision`, trusting nothing in it. */
  decision(reply: unknown): Decision {
    const invalid = (why: string) =>
      new DataError(`ratelab ${this.algorithm.name}: invalid reply ${JSON.stringify(reply)}: ${why}`);
    if (!Array.isArray(reply) || reply.length !== REPLY_LEN) throw invalid("not six integers");
    if (!reply.every((n) => typeof n === "number" && Number.isSafeInteger(n))) {
      throw invalid("not six integers");
    }
    const n = reply as number[];
    if (n.some((x) => x < 0)) throw invalid("a negative integer");
    const [allowed, limit, remaining, retry, reset, delay] = n as [number, number, number, number, number, number];
    if (limit !== this.algorithm.capacity) throw invalid("limit is not this limiter's capacity");
    if (remaining > limit) throw invalid("remaining above the limit");
    if (Math.max(retry, reset, delay) > this.maxWait) throw invalid("a wait longer than this quota can produce");
    if (allowed !== 0 && allowed !== 1) throw invalid("allowed is neither 0 nor 1");
    if ((allowed === 1 && retry !== 0) || (allowed === 0 && delay !== 0)) {
      throw invalid("a retry wait when admitted, or a delay when refused");
    }
    return { allowed: allowed === 1, limit, remaining, retryAfterMicros: retry, resetAfterMicros: reset, delayMicros: delay, degraded: false };
  }
}
