// A rate limiter on Redis that calls ratelab's scripts (lua/README.md): the
// same keys, arguments and decisions as the Rust `RedisLimiter`, so Node,
// Rust and Python services share one limit.

import type { Cluster, Redis } from "ioredis";

import {
  DEFAULT_PREFIX,
  OPS,
  PROTOCOL_VERSION,
  algorithm as makeAlgorithm,
  redisKey,
  scriptSha,
  scriptSource,
  type Algorithm,
  type AlgorithmName,
  type Key,
  type Op,
  type Quota,
} from "./protocol.js";

/** Every error of this client. */
export class RatelabError extends Error {
  override name = "RatelabError";
}

/** A cost above the capacity: it could never pass, even on a fresh key. */
export class CostTooHigh extends RatelabError {
  override name = "CostTooHigh";
}

/**
 * Redis answered, and the answer is about the key or the call, not Redis's
 * reachability: corrupt state, a key of another type, invalid arguments,
 * another protocol version, a reply no script could send, out of memory.
 */
export class DataError extends RatelabError {
  override name = "DataError";
}

/** The call reached Redis after its deadline: nothing was charged. */
export class Expired extends RatelabError {
  override name = "Expired";
}

/** One check's answer: the fields of the Rust `Decision`, in µs. */
export interface Decision {
  readonly allowed: boolean;
  readonly limit: number;
  readonly remaining: number;
  readonly retryAfterMicros: number;
  readonly resetAfterMicros: number;
  readonly delayMicros: number;
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
  /** With `clockSkewMs`, the deadline of a call; `null` for none (default 100). */
  timeoutMs?: number | null;
  /** How far this host's clock may be behind Redis's, ms (default 500). */
  clockSkewMs?: number;
  /** This host's wall clock, µs since the Unix epoch (for tests). */
  wallClock?: () => number;
}

/** µs since the Unix epoch, on this host's clock. */
export function wallClockMicros(): number {
  return Math.round((performance.timeOrigin + performance.now()) * 1000);
}

/**
 * One algorithm on one quota, any number of keys, state on Redis (an ioredis
 * `Redis` or `Cluster`).
 */
export class Limiter {
  readonly algorithm: Algorithm;
  readonly source: string;
  readonly sha: string;
  readonly prefix: string;
  readonly ttlSlackMs: number;
  private readonly maxWait: number;

  constructor(
    readonly client: Redis | Cluster,
    name: AlgorithmName,
    readonly quota: Quota,
    private readonly options: LimiterOptions = {},
  ) {
    this.algorithm = makeAlgorithm(name, quota);
    this.source = scriptSource(name);
    this.sha = scriptSha(this.source);
    this.prefix = options.prefix ?? DEFAULT_PREFIX;
    // Redis expires keys on its own clock: a caller's clock may differ.
    this.ttlSlackMs = options.ttlSlackMs ?? (options.clock ? 60_000 : 0);
    // Replies may wait up to 1 s plus the slack longer than from fresh state.
    this.maxWait = this.algorithm.maxWaitMicros + 1_000_000 + this.ttlSlackMs * 1000;
  }

  /** The Redis key holding `key`'s state. */
  redisKey(key: Key): Buffer {
    return redisKey(this.prefix, key, this.algorithm.keySuffix);
  }

  /**
   * `ARGV` of one call: version, now or "", cost, slack, deadline or "", operation (a refund as
   * `refund:<owed>`), parameters.
   */
  arguments(cost: number, now?: number, op: Op = "check", owed = 0): (string | number)[] {
    if (!OPS.includes(op)) throw new RangeError(`op must be one of ${OPS.join(", ")}, not ${String(op)}`);
    if (!Number.isSafeInteger(owed) || owed < 0) {
      throw new RangeError(`owed must be an integer from 0 to 2^53 - 1 µs, not ${owed}`);
    }
    const timeout = this.options.timeoutMs === undefined ? 100 : this.options.timeoutMs;
    const wall = this.options.wallClock ?? wallClockMicros;
    const deadline =
      timeout === null ? "" : wall() + Math.round((timeout + (this.options.clockSkewMs ?? 500)) * 1000);
    return [
      PROTOCOL_VERSION,
      now === undefined ? "" : now,
      cost,
      this.ttlSlackMs,
      deadline,
      op === "refund" ? `refund:${owed}` : op,
      ...this.algorithm.params,
    ];
  }

  /**
   * Decides a request of weight `cost` for `key`: all or nothing; cost 0
   * reports without consuming. One `EVALSHA` (after `NOSCRIPT`, the script
   * is loaded and the call sent again).
   *
   * Rejects with `CostTooHigh`, `DataError`, `Expired`, or ioredis's own
   * errors when Redis is away.
   */
  check(key: Key, cost = 1): Promise<Decision> {
    return this.call(key, cost, "check");
  }

  /**
   * The decision a check of `cost` would get now, writing nothing: a check at
   * the same instant, with nothing consumed in between, decides the same.
   */
  peek(key: Key, cost = 1): Promise<Decision> {
    return this.call(key, cost, "peek");
  }

  /**
   * Gives back up to `cost` units of one admission of `key` that still weighs
   * on it for `owedMicros`: its decision's `resetAfterMicros`, less the time
   * since it was asked (measure from before the call, so that it errs low).
   * Only what the admission still holds comes back: units whose debt was
   * repaid, or counted in a window that has ended, would otherwise let later
   * requests count for less (lua/README.md, "Refunds"). Never above the
   * capacity (a key full again is deleted); answers what a peek of cost 0
   * would after it.
   *
   * On Redis `TIME` the script decides when it runs, as late as the deadline
   * allows: `owedMicros` is first taken down by the timeout and twice the
   * clock skew (with no timeout, nothing is owed).
   */
  refund(key: Key, cost: number, owedMicros: number): Promise<Decision> {
    if (!Number.isSafeInteger(owedMicros) || owedMicros < 0) {
      return Promise.reject(new RangeError(`owedMicros must be a non-negative integer, not ${owedMicros}`));
    }
    let owed = owedMicros;
    if (!this.options.clock) {
      const timeout = this.options.timeoutMs === undefined ? 100 : this.options.timeoutMs;
      owed =
        timeout === null
          ? 0
          : Math.max(0, owed - Math.round((timeout + 2 * (this.options.clockSkewMs ?? 500)) * 1000));
    }
    return this.call(key, cost, "refund", owed);
  }

  /** Puts `key` back to full capacity: `DEL` of its Redis key. */
  async reset(key: Key): Promise<void> {
    await this.client.del(this.redisKey(key));
  }

  private async call(key: Key, cost: number, op: Op, owed = 0): Promise<Decision> {
    if (!Number.isSafeInteger(cost) || cost < 0 || cost > 0xffffffff) {
      throw new RangeError(`cost must be an integer from 0 to 2^32 - 1, not ${cost}`);
    }
    if (cost > this.algorithm.capacity) {
      throw new CostTooHigh(`a cost of ${cost} can never fit: the capacity is ${this.algorithm.capacity}`);
    }
    const now = this.options.clock?.();
    const k = this.redisKey(key);
    const args = this.arguments(cost, now, op, owed);
    let reply: unknown;
    try {
      try {
        reply = await this.client.evalsha(this.sha, 1, k, ...args);
      } catch (e) {
        if (!(e instanceof Error) || !e.message.startsWith("NOSCRIPT")) throw e;
        await this.client.script("LOAD", this.source);
        reply = await this.client.evalsha(this.sha, 1, k, ...args);
      }
    } catch (e) {
      // Error replies are ReplyErrors; anything else is the connection's.
      if (e instanceof Error && e.name === "ReplyError") {
        if (e.message.startsWith("ratelab expired")) throw new Expired(e.message, { cause: e });
        throw new DataError(e.message, { cause: e });
      }
      throw e;
    }
    return this.decision(reply);
  }

  /** A script's reply as a `Decision`, trusting nothing in it. */
  decision(reply: unknown): Decision {
    const invalid = (why: string) =>
      new DataError(`ratelab ${this.algorithm.name}: invalid reply ${JSON.stringify(reply)}: ${why}`);
    if (!Array.isArray(reply) || reply.length !== 6) throw invalid("not six integers");
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
    return {
      allowed: allowed === 1,
      limit,
      remaining,
      retryAfterMicros: retry,
      resetAfterMicros: reset,
      delayMicros: delay,
    };
  }
}
