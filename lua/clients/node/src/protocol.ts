// The pure half of ratelab's script protocol (lua/README.md): quotas, each
// algorithm's parameters, the key scheme, and the scripts themselves. No I/O
// besides reading the script files.

import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

// Everything that changes with the protocol's version is in this block: the
// version sent, the operations and how they are written into `ARGV[6]`, the
// length of a reply, and the bounds a reply and the slack are held to.

/** The protocol version this client speaks: the first argument of every call. */
export const PROTOCOL_VERSION = 4;

/**
 * What a call does with the key (`ARGV[6]`): decide and consume, decide
 * without writing, settle one admission by its stamp, or put the key back to
 * full capacity.
 */
export type Op = "check" | "peek" | "settle" | "reset";

/** Every operation. */
export const OPS: readonly Op[] = ["check", "peek", "settle", "reset"];

/** The integers of a script's reply: allowed, limit, remaining, retry_after_us, reset_after_us, delay_us, stamp_at, stamp_mark. */
export const REPLY_LEN = 8;

/** The most TTL slack the scripts take, ms (`ARGV[4]`): 2^52 µs rounded up. A limiter refuses a larger one before any call. */
export const MAX_TTL_SLACK_MS = Math.ceil(2 ** 52 / 1000);

/** The latest instant a debt may end at (lua/README.md, "State"): 2^52 + 2^51 µs. */
export const MAX_END = 2 ** 52 + 2 ** 51;

/** A settlement's fields: what the admission finally counts for, and the stamp its check answered. */
export interface Settlement {
  readonly actual: number;
  readonly stampAt: number;
  readonly stampMark: number;
}

function field(name: string, value: number, max: number): number {
  if (!Number.isSafeInteger(value) || value < 0 || value > max) {
    throw new RangeError(`${name} must be an integer from 0 to ${max}, not ${String(value)}`);
  }
  return value;
}

/** `ARGV[6]` for `op`: `check`, `peek`, `reset`, or `settle:<actual>:<stamp_at>:<stamp_mark>`. */
export function encodeOp(op: Op, settlement?: Settlement): string {
  if (!OPS.includes(op)) throw new RangeError(`op must be one of ${OPS.join(", ")}, not ${String(op)}`);
  if (op === "settle") {
    if (!settlement) throw new RangeError("a settlement needs the units it finally counts for and the admission's stamp");
    const max = Number.MAX_SAFE_INTEGER;
    return `settle:${field("actual", settlement.actual, 0xffffffff)}:${field("stampAt", settlement.stampAt, max)}:${field("stampMark", settlement.stampMark, max)}`;
  }
  if (settlement) throw new RangeError(`only a settlement takes an actual and a stamp, not ${op}`);
  return op;
}

/** The default key prefix. */
export const DEFAULT_PREFIX = "ratelab";

/** The longest user key, in bytes, used as is; longer keys are hashed. */
export const MAX_KEY_LEN = 128;

/** The longest span the arithmetic carries exactly, in µs (2^50). */
export const MAX_SPAN_MICROS = 2 ** 50;

/** The sliding counter weighs the previous window in at most this many steps. */
const MAX_STEPS = 2 ** 16;
/** The largest sliding log on Redis: one sorted-set member per unit (the script answers "invalid arguments" above it). */
export const MAX_STORED_LOG_LIMIT = 10_000;

/** Every algorithm's name. */
export type AlgorithmName =
  | "fixed-window"
  | "sliding-log"
  | "sliding-counter"
  | "leaky-meter"
  | "leaky-queue"
  | "token-bucket"
  | "gcra";

/** Each algorithm: its key code and script file. */
export const ALGORITHMS: Readonly<Record<AlgorithmName, { code: string; script: string }>> = {
  "fixed-window": { code: "fw", script: "fixed_window.lua" },
  "sliding-log": { code: "sl", script: "sliding_log.lua" },
  "sliding-counter": { code: "sc", script: "sliding_counter.lua" },
  "leaky-meter": { code: "lm", script: "leaky_meter.lua" },
  "leaky-queue": { code: "lq", script: "leaky_queue.lua" },
  "token-bucket": { code: "tb", script: "token_bucket.lua" },
  gcra: { code: "gcra", script: "gcra.lua" },
};

/** A user key: a string (its UTF-8 bytes) or bytes. */
export type Key = string | Uint8Array;

// Every result here stays below 2^53, exact in a double; divisions and the
// products that could pass 2^53 (period × burst) are done on BigInt.
function ceilDiv(a: number, b: number): number {
  return Number((BigInt(a) + BigInt(b) - 1n) / BigInt(b));
}

function isCount(n: unknown, max: number): n is number {
  return typeof n === "number" && Number.isSafeInteger(n) && n >= 0 && n <= max;
}

/**
 * `limit` units per `periodMicros`, up to `burst` at once (default: the
 * limit). Validated as the Rust `Quota` is: a `RangeError` says what is wrong.
 */
export class Quota {
  readonly limit: number;
  readonly periodMicros: number;
  readonly burst: number;

  constructor(limit: number, periodMicros: number, burst: number = limit) {
    for (const [name, value] of [
      ["limit", limit],
      ["periodMicros", periodMicros],
      ["burst", burst],
    ] as const) {
      if (!isCount(value, Number.MAX_SAFE_INTEGER)) {
        throw new RangeError(`${name} must be a non-negative integer, not ${String(value)}`);
      }
    }
    if (limit === 0) throw new RangeError("the limit must be at least 1 per period, not 0");
    if (limit > 0xffffffff || burst > 0xffffffff) {
      throw new RangeError("the limit and the burst must fit in 32 bits");
    }
    if (periodMicros === 0) throw new RangeError("the period must be longer than zero");
    if (burst === 0) throw new RangeError("the burst must be at least 1, not 0");
    if (periodMicros > MAX_SPAN_MICROS) {
      throw new RangeError(`the period is longer than the longest supported, ${MAX_SPAN_MICROS} µs`);
    }
    if (limit > periodMicros) {
      throw new RangeError("more than one per microsecond, finer than the time resolution");
    }
    this.limit = limit;
    this.periodMicros = periodMicros;
    this.burst = burst;
    const t = BigInt(this.emissionIntervalMicros);
    const tolerance = BigInt(burst) * t;
    const ofLimit = BigInt(limit) * t;
    const max = BigInt(MAX_SPAN_MICROS) > ofLimit ? BigInt(MAX_SPAN_MICROS) : ofLimit;
    if (tolerance > max) {
      throw new RangeError("the burst takes longer to refill than the longest supported span");
    }
  }

  static perSecond(limit: number, burst?: number): Quota {
    return new Quota(limit, 1_000_000, burst ?? limit);
  }

  static perMinute(limit: number, burst?: number): Quota {
    return new Quota(limit, 60_000_000, burst ?? limit);
  }

  static perHour(limit: number, burst?: number): Quota {
    return new Quota(limit, 3_600_000_000, burst ?? limit);
  }

  /** `T = ceil(period / limit)`: rounds up, never faster than asked. */
  get emissionIntervalMicros(): number {
    return ceilDiv(this.periodMicros, this.limit);
  }

  /** `burst × T`: the time an empty bucket takes to refill. */
  get burstToleranceMicros(): number {
    return this.burst * this.emissionIntervalMicros;
  }

  /** The window algorithms' window: `ceil(period × burst / limit)`. */
  get windowMicros(): number {
    const product = BigInt(this.periodMicros) * BigInt(this.burst);
    const limit = BigInt(this.limit);
    return Number((product + limit - 1n) / limit);
  }
}

/** One algorithm on one quota, as the scripts see it. */
export interface Algorithm {
  readonly name: AlgorithmName;
  readonly code: string;
  readonly scriptFile: string;
  /** The script parameters, `ARGV[7...]`. */
  readonly params: readonly number[];
  /** The `limit` of every decision: the burst. */
  readonly capacity: number;
  /** The longest wait the script answers from state it wrote itself, µs. */
  readonly maxWaitMicros: number;
  /**
   * The state is a debt (GCRA, token bucket, leaky meter and queue): a
   * settlement above the cost charges it whatever the room, so its waits
   * outside an admission may run up to `MAX_END`.
   */
  readonly debt: boolean;
  /** `v2:<code>:<params joined by commas>` (`v2`: the version of the stored state's format). */
  readonly fingerprintInput: string;
  /** `<code>:<first 8 hex digits of the SHA-1 of the fingerprint input>`. */
  readonly keySuffix: string;
}

/** The algorithm `name` on `quota`: its parameters, capacity and key suffix. */
export function algorithm(name: AlgorithmName, quota: Quota): Algorithm {
  const entry = ALGORITHMS[name];
  if (!entry) {
    throw new RangeError(`unknown algorithm ${String(name)}: one of ${Object.keys(ALGORITHMS).join(", ")}`);
  }
  const t = quota.emissionIntervalMicros;
  const tau = quota.burstToleranceMicros;
  const window = quota.windowMicros;
  const burst = quota.burst;
  if (name === "sliding-log" && burst > MAX_STORED_LOG_LIMIT) {
    throw new RangeError(
      `a sliding log of ${burst} units cannot run on Redis: it keeps one sorted-set member per unit, ` +
        `at most ${MAX_STORED_LOG_LIMIT}; use the sliding counter`,
    );
  }
  let params: number[];
  let maxWait: number;
  switch (name) {
    case "fixed-window":
    case "sliding-log":
      params = [window, burst];
      maxWait = window;
      break;
    case "sliding-counter": {
      const step = ceilDiv(window, MAX_STEPS);
      params = [window, burst, step, ceilDiv(window, step)];
      maxWait = 2 * window;
      break;
    }
    case "leaky-meter":
    case "leaky-queue":
    case "gcra":
      params = [t, tau, burst];
      maxWait = tau;
      break;
    case "token-bucket":
      params = [t, burst];
      maxWait = burst * t;
      break;
  }
  const fingerprintInput = `v2:${entry.code}:${params.join(",")}`;
  const digest = createHash("sha1").update(fingerprintInput).digest("hex");
  return {
    name,
    code: entry.code,
    scriptFile: entry.script,
    params,
    capacity: burst,
    maxWaitMicros: maxWait,
    debt: ["leaky-meter", "leaky-queue", "token-bucket", "gcra"].includes(name),
    fingerprintInput,
    keySuffix: `${entry.code}:${digest.slice(0, 8)}`,
  };
}

/** A user key as bytes: a string as UTF-8, bytes as they are. */
export function keyBytes(key: Key): Buffer {
  return typeof key === "string" ? Buffer.from(key, "utf8") : Buffer.from(key);
}

function escapeInto(out: number[], bytes: Uint8Array): void {
  for (const b of bytes) {
    if (b === 0x25) out.push(0x25, 0x32, 0x35); // % -> %25
    else if (b === 0x7b) out.push(0x25, 0x37, 0x42); // { -> %7B
    else if (b === 0x7d) out.push(0x25, 0x37, 0x44); // } -> %7D
    else out.push(b);
  }
}

/** `<prefix escaped>:{<key escaped, or %, or %H + SHA-1 hex>}:<suffix>`. */
export function redisKey(prefix: string, key: Key, suffix: string): Buffer {
  const data = keyBytes(key);
  const out: number[] = [];
  escapeInto(out, Buffer.from(prefix, "utf8"));
  out.push(0x3a, 0x7b); // ":{"
  if (data.length === 0) {
    out.push(0x25);
  } else if (data.length > MAX_KEY_LEN) {
    out.push(...Buffer.from("%H" + createHash("sha1").update(data).digest("hex"), "latin1"));
  } else {
    escapeInto(out, data);
  }
  out.push(0x7d, 0x3a); // "}:"
  out.push(...Buffer.from(suffix, "utf8"));
  return Buffer.from(out);
}

/**
 * Where the scripts are read from: `RATELAB_LUA_DIR` if set, else the copy a
 * packed package ships in `lua/` (`npm pack` copies it), else the
 * repository's `lua/` this package sits in (`lua/clients/node`).
 */
export function luaDir(): string {
  const env = process.env.RATELAB_LUA_DIR;
  if (env) return env;
  // dist/src/protocol.js -> the package's root.
  const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
  const shipped = join(root, "lua");
  if (existsSync(join(shipped, "prologue.lua"))) return shipped;
  return resolve(root, "..", "..");
}

const sources = new Map<AlgorithmName, string>();

/** The script of `name`: the prologue followed by its file, read once. */
export function scriptSource(name: AlgorithmName): string {
  let source = sources.get(name);
  if (source === undefined) {
    const dir = luaDir();
    source = ["prologue.lua", ALGORITHMS[name].script]
      .map((file) => {
        const path = join(dir, file);
        try {
          return readFileSync(path, "utf8");
        } catch (e) {
          throw new Error(`ratelab script ${path} not found (${String(e)}): set RATELAB_LUA_DIR to ratelab's lua/ folder`);
        }
      })
      .join("");
    sources.set(name, source);
  }
  return source;
}

/** The SHA-1 `EVALSHA` names a script by. */
export function scriptSha(source: string): string {
  return createHash("sha1").update(source, "utf8").digest("hex");
}
