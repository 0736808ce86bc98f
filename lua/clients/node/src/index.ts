// ratelab's Redis script protocol from Node: the same scripts, keys and
// decisions as the Rust `ratelab-redis` crate and the Python client, so a
// polyglot fleet shares one rate limit; and the same timeout, failure
// policies, circuit breaker, alerts and stats, so that it fails alike. The
// protocol: lua/README.md.
//
//   import { Redis } from "ioredis";
//   import { Limiter, Quota } from "ratelab-client";
//
//   const limiter = new Limiter(new Redis(), "token-bucket", Quota.perSecond(5, 10));
//   const decision = await limiter.check("client-42", 3);
//   if (decision.receipt) await limiter.settle(decision.receipt, 1); // it used 1 of the 3
//
// `ratelab-client/express` is a rate limiting middleware for Express.

export {
  ALGORITHMS,
  DEFAULT_PREFIX,
  MAX_END,
  MAX_KEY_LEN,
  MAX_STORED_LOG_LIMIT,
  MAX_TTL_SLACK_MS,
  OPS,
  PROTOCOL_VERSION,
  REPLY_LEN,
  Quota,
  algorithm,
  encodeOp,
  keyBytes,
  luaDir,
  redisKey,
  scriptSource,
  scriptSha,
  specPath,
  type Algorithm,
  type AlgorithmName,
  type Key,
  type Op,
  type Settlement,
} from "./protocol.js";
export { RECEIPT_FORMAT, Receipt, type ReceiptJSON } from "./receipt.js";
export {
  BackendError,
  CircuitOpen,
  CostTooHigh,
  DataError,
  Expired,
  ForeignReceipt,
  QuotaMismatch,
  RatelabError,
  ReceiptError,
  ReceiptSpent,
  Timeout,
  Unavailable,
} from "./errors.js";
export {
  DEFAULT_BREAKER_COOL_DOWN_MS,
  DEFAULT_BREAKER_THRESHOLD,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_TIMEOUT_MS,
  FAILURE_POLICIES,
  LATE_REPLY_WAIT_MS,
  type Alert,
  type FailurePolicy,
  type Logger,
  type Stats,
} from "./resilience.js";
export { RedisClock, monotonicMicros, type RedisClockOptions, type Sample } from "./clock.js";
export { DEFAULT_QUOTA_CHECK_EVERY, Limiter, ceilSecs, type Decision, type LimiterOptions } from "./limiter.js";
