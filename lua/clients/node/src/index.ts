// ratelab's Redis script protocol from Node: the same scripts, keys and
// decisions as the Rust `ratelab-redis` crate and the Python client, so a
// polyglot fleet shares one rate limit. The protocol: lua/README.md.
//
//   import { Redis } from "ioredis";
//   import { Limiter, Quota } from "ratelab-client";
//
//   const limiter = new Limiter(new Redis(), "token-bucket", Quota.perSecond(5, 10));
//   const decision = await limiter.check("client-42");

export {
  ALGORITHMS,
  DEFAULT_PREFIX,
  MAX_KEY_LEN,
  MAX_STORED_LOG_LIMIT,
  OPS,
  PROTOCOL_VERSION,
  Quota,
  algorithm,
  keyBytes,
  luaDir,
  redisKey,
  scriptSource,
  scriptSha,
  type Algorithm,
  type AlgorithmName,
  type Key,
  type Op,
} from "./protocol.js";
export {
  CostTooHigh,
  DataError,
  Expired,
  Limiter,
  RatelabError,
  ceilSecs,
  wallClockMicros,
  type Decision,
  type LimiterOptions,
} from "./limiter.js";
