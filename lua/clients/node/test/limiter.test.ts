// The Node client against a real Redis: the reference table on the caller's
// clock, every algorithm's first answers and TTLs, EVALSHA after a script
// flush, and every error reply.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import type { Redis } from "ioredis";

import {
  ALGORITHMS,
  CostTooHigh,
  DataError,
  Expired,
  Limiter,
  Quota,
  RedisClock,
  ceilSecs,
  monotonicMicros,
  type AlgorithmName,
} from "../src/index.js";
import { RedisServer } from "../testing/redis_server.js";

const QUOTA = Quota.perSecond(5, 10);
const T0 = 1_700_000_000_000_000; // µs: an arbitrary instant on the caller's clock

let server: RedisServer;
let client: Redis;
let next = 0;
const prefix = () => `nodetest${process.pid}-${next++}`;

before(async () => {
  server = await RedisServer.start();
  client = server.client();
});

after(() => {
  client.disconnect();
  server.stop();
});

describe("the reference table (capacity 10, 5 per second)", () => {
  for (const name of ["token-bucket", "gcra", "leaky-meter", "leaky-queue"] as const) {
    it(`${name}: 20 at once admit 10; 1 s later 10 admit 5; refusals say 1 s`, async () => {
      let now = T0;
      const limiter = new Limiter(client, name, QUOTA, { prefix: prefix(), clock: () => now });
      const first = [];
      for (let i = 0; i < 20; i++) first.push(await limiter.check("client"));
      now += 1_000_000;
      const second = [];
      for (let i = 0; i < 10; i++) second.push(await limiter.check("client"));
      assert.equal(first.filter((d) => d.allowed).length, 10);
      assert.equal(second.filter((d) => d.allowed).length, 5);
      const waits = new Set([...first, ...second].filter((d) => !d.allowed).map((d) => ceilSecs(d.retryAfterMicros)));
      assert.deepEqual(waits, new Set([1]));
    });
  }
});

describe("every algorithm on the Redis clock", () => {
  for (const name of Object.keys(ALGORITHMS) as AlgorithmName[]) {
    it(`${name}: a peek writes nothing; a check writes a key that expires when full again`, async () => {
      const limiter = new Limiter(client, name, QUOTA, { prefix: prefix() });
      const peek = await limiter.check("fresh", 0);
      assert.ok(peek.allowed);
      assert.equal(peek.remaining, 10);
      assert.equal(await client.exists(limiter.redisKey("fresh")), 0);
      const d = await limiter.check("fresh", 3);
      assert.deepEqual([d.allowed, d.limit, d.remaining, d.retryAfterMicros], [true, 10, 7, 0]);
      assert.ok(d.resetAfterMicros > 0 && d.resetAfterMicros <= limiter.algorithm.maxWaitMicros);
      const ttl = await client.pttl(limiter.redisKey("fresh"));
      assert.ok(ttl > 0 && ttl <= Math.ceil(d.resetAfterMicros / 1000), `ttl ${ttl}`);
    });
  }
});

describe("the client", () => {
  it("keeps keys a slack longer on the caller's clock", async () => {
    const limiter = new Limiter(client, "gcra", QUOTA, { prefix: prefix(), clock: () => T0 });
    assert.equal((await limiter.check("k")).resetAfterMicros, 200_000);
    const ttl = await client.pttl(limiter.redisKey("k"));
    assert.ok(ttl > 60_000 && ttl <= 60_200, `ttl ${ttl}`);
  });

  it("loads a flushed script again", async () => {
    const limiter = new Limiter(client, "token-bucket", QUOTA, { prefix: prefix(), clock: () => T0 });
    assert.equal((await limiter.check("k")).remaining, 9);
    await client.script("FLUSH");
    assert.deepEqual(await client.script("EXISTS", limiter.sha), [0]);
    assert.equal((await limiter.check("k")).remaining, 8);
    assert.deepEqual(await client.script("EXISTS", limiter.sha), [1]);
  });

  it("refuses a cost over the capacity as an error, not a refusal", async () => {
    const limiter = new Limiter(client, "gcra", QUOTA, { prefix: prefix() });
    await assert.rejects(limiter.check("k", 11), CostTooHigh);
    assert.ok((await limiter.check("k", 10)).allowed);
  });

  it("reports corrupt state and wrong types as data errors", async () => {
    const limiter = new Limiter(client, "gcra", QUOTA, { prefix: prefix(), clock: () => T0 });
    await client.set(limiter.redisKey("text"), "not a timestamp");
    await assert.rejects(limiter.check("text"), (e: Error) => {
      assert.ok(e instanceof DataError);
      assert.match(e.message, /^ratelab gcra: corrupt state at .*not a timestamp/);
      return true;
    });
    await client.lpush(limiter.redisKey("list"), "x");
    await assert.rejects(limiter.check("list"), (e: Error) => e instanceof DataError && /a list, not a string/.test(e.message));
  });

  it("gets a clear error from a script of another protocol version", async () => {
    const limiter = new Limiter(client, "token-bucket", QUOTA, { prefix: prefix(), clock: () => T0 });
    await client.script("LOAD", limiter.source);
    const args = limiter.arguments(1, T0);
    await assert.rejects(
      client.evalsha(limiter.sha, 1, limiter.redisKey("k"), 999, ...args.slice(1)),
      /^ReplyError: ratelab: protocol version .*\b1\b.* expected, got 999$/,
    );
    // A caller of the layout before the version (now first) is refused too.
    await assert.rejects(
      client.evalsha(limiter.sha, 1, limiter.redisKey("k"), ...args.slice(1)),
      /^ReplyError: ratelab: protocol version .* expected, got 1700000000000000$/,
    );
    assert.equal(await client.exists(limiter.redisKey("k")), 0);
  });

  it("charges nothing for a call past its deadline", async () => {
    // A clock sample that puts Redis's clock an hour behind: the deadline
    // sent is an hour early, and the script starts after it.
    const skewed = new RedisClock({ maxAgeMicros: 3_600_000_000 });
    const late = new Limiter(client, "token-bucket", QUOTA, { prefix: prefix(), redisClock: skewed, logger: null });
    await late.check("warm", 0); // samples the clock
    const m = monotonicMicros();
    skewed.record([{ before: m, redis: m + (skewed.offsetMicros ?? 0) - 3_600_000_000, after: m }]);
    await assert.rejects(late.check("k", 5), (e: Error) => e instanceof Expired && /nothing was charged/.test(e.message));
    assert.equal(await client.exists(late.redisKey("k")), 0);
    skewed.invalidate();
    assert.equal((await late.check("k", 5)).remaining, 5);
  });

  it("never trusts a reply", () => {
    const limiter = new Limiter(client, "gcra", QUOTA);
    const bad: unknown[] = [
      [1, 10, 9, 0, 200_000],
      [1, 11, 9, 0, 0, 0],
      [1, 10, 11, 0, 0, 0],
      [2, 10, 9, 0, 0, 0],
      [1, 10, 9, 5, 0, 0],
      [0, 10, 9, 5, 0, 5],
      [0, 10, 9, 1e12, 0, 0],
      [1, 10, -1, 0, 0, 0],
      ["1", 10, 9, 0, 0, 0],
      null,
    ];
    for (const reply of bad) {
      assert.throws(() => limiter.decision(reply), (e: Error) => e instanceof DataError && /^ratelab gcra: invalid reply/.test(e.message));
    }
  });

  it("sends the protocol's arguments", () => {
    const fixed = new Limiter(client, "gcra", QUOTA, { clock: () => T0, timeoutMs: null });
    assert.deepEqual(fixed.arguments(1, T0), [3, T0, 1, 60_000, "", "check", 200_000, 2_000_000, 10]);
    assert.equal(fixed.arguments(3, T0, "refund", 1_500)[5], "refund:1500");
    assert.throws(() => fixed.arguments(3, T0, "refund", -1), RangeError);
    assert.throws(() => fixed.arguments(1, T0, "take" as never), RangeError);
    const redisTime = new Limiter(client, "gcra", QUOTA);
    assert.deepEqual(redisTime.arguments(2, undefined, "check", 0, 1_234), [3, "", 2, 0, 1_234, "check", 200_000, 2_000_000, 10]);
  });

  it("still gets version 1 calls answered, as checks", async () => {
    const limiter = new Limiter(client, "gcra", QUOTA, { prefix: prefix() });
    await client.script("LOAD", limiter.source);
    // Version 1: no operation, the parameters from ARGV[6].
    const reply = await client.evalsha(limiter.sha, 1, limiter.redisKey("k"), 1, T0, 1, 0, "", 200_000, 2_000_000, 10);
    assert.deepEqual(reply, [1, 10, 9, 0, 200_000, 0]);
  });
});

describe("peek, refund and reset", () => {
  for (const name of Object.keys(ALGORITHMS) as AlgorithmName[]) {
    it(`${name}: a peek decides as a check and writes nothing`, async () => {
      let now = T0;
      const limiter = new Limiter(client, name, QUOTA, { prefix: prefix(), clock: () => now });
      const costs = [4, 3, 2, 3, 1, 5, 2];
      for (const [step, cost] of costs.entries()) {
        now = T0 + step * 150_000;
        const before = await client.dumpBuffer(limiter.redisKey("k"));
        const peeked = await limiter.peek("k", cost);
        assert.deepEqual(await client.dumpBuffer(limiter.redisKey("k")), before, "a peek wrote");
        assert.deepEqual(await limiter.check("k", cost), peeked, `step ${step}`);
      }
    });

    it(`${name}: a refund gives back what was taken, never above the capacity`, async () => {
      const limiter = new Limiter(client, name, QUOTA, { prefix: prefix(), clock: () => T0 });
      const taken = await limiter.check("k", 7);
      assert.equal(taken.remaining, 3);
      // At the instant of the check: the admission weighs its whole reset.
      const after = await limiter.refund("k", 4, taken.resetAfterMicros);
      assert.deepEqual([after.allowed, after.remaining], [true, 7]);
      assert.deepEqual(await limiter.peek("k", 0), after);
      assert.equal((await limiter.refund("k", 10, taken.resetAfterMicros)).remaining, 10);
      assert.equal(await client.exists(limiter.redisKey("k")), 0);
      assert.ok((await limiter.check("k", 10)).allowed);
      await limiter.reset("k");
      assert.equal(await client.exists(limiter.redisKey("k")), 0);
    });
  }
});
