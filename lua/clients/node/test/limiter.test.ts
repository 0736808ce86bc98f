// The Node client against a real Redis: the reference table on the caller's
// clock, every algorithm's first answers and TTLs, EVALSHA after a script
// flush, every error reply, peeks, receipts (settlements, refunds) and resets.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import type { Redis } from "ioredis";

import {
  ALGORITHMS,
  CostTooHigh,
  DataError,
  Expired,
  ForeignReceipt,
  Limiter as BaseLimiter,
  Quota,
  Receipt,
  ReceiptSpent,
  RedisClock,
  ceilSecs,
  monotonicMicros,
  type AlgorithmName,
  type Decision,
  type LimiterOptions,
} from "../src/index.js";
import { RedisServer } from "../testing/redis_server.js";

const QUOTA = Quota.perSecond(5, 10);
const T0 = 1_700_000_000_000_000; // µs: an arbitrary instant on the caller's clock

let server: RedisServer;
let client: Redis;
let next = 0;
const prefix = () => `nodetest${process.pid}-${next++}`;
/**
 * The limiter, with a timeout a loaded machine cannot miss unless a case sets
 * its own: these cases decide on Redis's answers, not on how fast they come.
 */
class Limiter extends BaseLimiter {
  constructor(client: Redis, name: AlgorithmName, quota: Quota, options: LimiterOptions = {}) {
    super(client, name, quota, { timeoutMs: 5000, connectTimeoutMs: 30_000, ...options });
  }
}
/** A decision without its receipt: what two decisions are compared on. */
const bare = (d: Decision) => ({ ...d, receipt: undefined });

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
      /^ReplyError: ratelab: protocol version 5 expected, got 999$/,
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
      [1, 10, 9, 0, 200_000, 0, 0],
      [1, 11, 9, 0, 0, 0, 0, 0],
      [1, 10, 11, 0, 0, 0, 0, 0],
      [2, 10, 9, 0, 0, 0, 0, 0],
      [1, 10, 9, 5, 0, 0, 0, 0],
      [0, 10, 9, 5, 0, 5, 0, 0],
      // Past the debts' ceiling (a gcra peek may wait up to 2^52 + 2^51 µs).
      [0, 10, 9, 2 ** 52 + 2 ** 51 + 1, 0, 0, 0, 0],
      [1, 10, -1, 0, 0, 0, 0, 0],
      ["1", 10, 9, 0, 0, 0, 0, 0],
      null,
      // Six integers: version 3's reply.
      [1, 10, 9, 0, 200_000, 0],
      // A stamp for no admission (a peek's reply).
      [1, 10, 9, 0, 200_000, 0, T0 + 200_000, 0],
    ];
    for (const reply of bad) {
      assert.throws(() => limiter.decision(reply), (e: Error) => e instanceof DataError && /^ratelab gcra: invalid reply/.test(e.message));
    }
  });

  it("never trusts a stamp", () => {
    const cases: [AlgorithmName, number[]][] = [
      // No stamp for an admission of a positive cost; one for a refusal.
      ["gcra", [1, 10, 9, 0, 200_000, 0, 0, 0]],
      ["gcra", [0, 10, 0, 200_000, 2_000_000, 0, T0 + 2_000_000, 0]],
      // A debt's end not after now, or past the longest wait after it (2 s + 1 s + the slack of 60 s).
      ["gcra", [1, 10, 9, 0, 200_000, 0, T0, 0]],
      ["gcra", [1, 10, 9, 0, 200_000, 0, T0 + 63_000_001, 0]],
      // An admission's waits stay within the quota's, debt or not.
      ["gcra", [1, 10, 0, 0, 63_000_001, 0, T0 + 200_000, 0]],
      // A window's stamp without a mark (version 4's).
      ["fixed-window", [1, 10, 9, 0, 2_000_000, 0, 850_000_000, 0]],
    ];
    for (const [name, reply] of cases) {
      const limiter = new Limiter(client, name, QUOTA, { clock: () => T0 });
      assert.throws(
        () => limiter.decision(reply, "check", 1, T0),
        (e: Error) => e instanceof DataError && e.message.startsWith(`ratelab ${name}: invalid reply`),
        JSON.stringify(reply),
      );
    }
  });

  it("lets a debt's waits run to the protocol's ceiling outside an admission", () => {
    const debt = new Limiter(client, "gcra", QUOTA, { clock: () => T0 });
    const ceiling = 2 ** 52 + 2 ** 51;
    const far = [0, 10, 0, ceiling, ceiling, 0, 0, 0];
    assert.equal(debt.decision(far, "peek", 1, T0).retryAfterMicros, ceiling);
    assert.equal(debt.decision(far, "check", 1, T0).resetAfterMicros, ceiling);
    assert.throws(() => debt.decision([0, 10, 0, ceiling + 1, 0, 0, 0, 0], "peek", 1, T0), /a wait longer/);
    const window = new Limiter(client, "fixed-window", QUOTA, { clock: () => T0 });
    assert.throws(() => window.decision([0, 10, 0, 63_000_001, 0, 0, 0, 0], "peek", 1, T0), /a wait longer/);
    const d = debt.decision([1, 10, 9, 0, 200_000, 0, T0 + 200_000, 7], "check", 1, T0);
    assert.ok(d.allowed && d.receipt === undefined); // a receipt comes only from a call
    assert.ok(window.decision([1, 10, 9, 0, 2_000_000, 0, 0, 1], "check", 1, T0).allowed);
  });

  it("sends the protocol's arguments", () => {
    const fixed = new Limiter(client, "gcra", QUOTA, { clock: () => T0, timeoutMs: null });
    assert.deepEqual(fixed.arguments(1, T0), [5, T0, 1, 60_000, "", "check", 200_000, 2_000_000, 10]);
    assert.equal(fixed.arguments(3, T0, "settle", "", { actual: 1, stampAt: T0 + 600_000, stampMark: 7 })[5], `settle:1:${T0 + 600_000}:7`);
    assert.deepEqual(fixed.arguments(0, T0, "reset").slice(2, 6), [0, 60_000, "", "reset"]);
    assert.throws(() => fixed.arguments(3, T0, "settle", "", { actual: -1, stampAt: T0, stampMark: 0 }), RangeError);
    assert.throws(() => fixed.arguments(3, T0, "settle", "", { actual: 1, stampAt: 2 ** 53, stampMark: 0 }), RangeError);
    assert.throws(() => fixed.arguments(3, T0, "settle"), RangeError);
    assert.throws(() => fixed.arguments(3, T0, "refund" as never), RangeError);
    assert.throws(() => fixed.arguments(1, T0, "take" as never), RangeError);
    const redisTime = new Limiter(client, "gcra", QUOTA);
    assert.deepEqual(redisTime.arguments(2, undefined, "check", 1_234), [5, "", 2, 0, 1_234, "check", 200_000, 2_000_000, 10]);
    // Exactly the algorithm's parameters.
    assert.deepEqual(new Limiter(client, "token-bucket", QUOTA).arguments(1).slice(6), [200_000, 10]);
    assert.deepEqual(new Limiter(client, "sliding-counter", QUOTA).arguments(1).slice(6), [2_000_000, 10, 31, 64517]);
  });

  for (const version of [1, 3, 4, 6]) {
    it(`gets the version error for a version ${version} call`, async () => {
      const limiter = new Limiter(client, "gcra", QUOTA, { prefix: prefix() });
      await client.script("LOAD", limiter.source);
      // Version 1: no operation, the parameters from ARGV[6]; 3: six-integer replies and refund:<owed>.
      const args = version === 1 ? [version, T0, 1, 0, "", 200_000, 2_000_000, 10] : [version, T0, 1, 0, "", "check", 200_000, 2_000_000, 10];
      await assert.rejects(
        client.evalsha(limiter.sha, 1, limiter.redisKey("k"), ...args),
        new RegExp(`^ReplyError: ratelab: protocol version 5 expected, got ${version}$`),
      );
      assert.equal(await client.exists(limiter.redisKey("k")), 0);
    });
  }
});

describe("peek, receipts and reset", () => {
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
        assert.deepEqual(bare(await limiter.check("k", cost)), bare(peeked), `step ${step}`);
      }
    });

    it(`${name}: a refund gives back what was taken, never above the capacity`, async () => {
      const limiter = new Limiter(client, name, QUOTA, { prefix: prefix(), clock: () => T0 });
      const taken = await limiter.check("k", 7);
      assert.equal(taken.remaining, 3);
      const receipt = taken.receipt as Receipt;
      assert.ok(receipt instanceof Receipt);
      assert.deepEqual([receipt.key.toString(), receipt.cost], ["k", 7]);
      // At the instant of the check: settled to 3, the admission gives 4 back.
      const after = await limiter.settle(receipt, 3);
      assert.deepEqual([after.allowed, after.remaining, after.receipt], [true, 7, undefined]);
      assert.deepEqual(await limiter.peek("k", 0), after);
      // Usable once.
      await assert.rejects(limiter.refund(receipt), (e: Error) => e instanceof ReceiptSpent && /settled once/.test(e.message));
      assert.ok(receipt.spent);
      // Never above the capacity. The key full again keeps what the receipt gave back (so that it gives
      // nothing more), with a TTL.
      const more = await limiter.check("j", 4);
      assert.equal((await limiter.refund(more.receipt as Receipt)).remaining, 10);
      assert.ok((await client.pttl(limiter.redisKey("j"))) > 0);
      assert.ok((await limiter.check("j", 10)).allowed);
      // A reset puts a key back to full capacity; on a key that holds nothing it writes nothing.
      await limiter.reset("j");
      assert.equal((await limiter.peek("j", 0)).remaining, 10);
      await limiter.reset("never-seen");
      assert.equal(await client.exists(limiter.redisKey("never-seen")), 0);
    });

    it(`${name}: a settlement above the cost charges the difference`, async () => {
      const limiter = new Limiter(client, name, QUOTA, { prefix: prefix(), clock: () => T0 });
      const d = await limiter.check("k", 2);
      const after = await limiter.settle(d.receipt as Receipt, 9);
      assert.deepEqual([after.allowed, after.remaining], [true, 1]);
      assert.equal((await limiter.peek("k", 2)).allowed, false);
    });

    it(`${name}: no receipt gives anything back after a reset`, async () => {
      const limiter = new Limiter(client, name, QUOTA, { prefix: prefix(), clock: () => T0 });
      const old = (await limiter.check("k", 6)).receipt as Receipt;
      await limiter.reset("k");
      assert.equal((await limiter.peek("k", 0)).remaining, 10);
      assert.equal((await limiter.check("k", 4)).remaining, 6);
      assert.equal((await limiter.refund(old)).remaining, 6);
      assert.ok((await client.pttl(limiter.redisKey("k"))) > 0, "a reset of a key in use leaves a tombstone, with a TTL");
    });
  }

  it("a decision without a receipt has nothing to settle", async () => {
    const limiter = new Limiter(client, "gcra", QUOTA, { prefix: prefix(), clock: () => T0 });
    for (const d of [await limiter.peek("k", 3), await limiter.check("k", 0)]) assert.equal(d.receipt, undefined);
    for (let i = 0; i < 10; i++) await limiter.check("k");
    const refused = await limiter.check("k");
    assert.ok(!refused.allowed && refused.receipt === undefined);
    await assert.rejects(limiter.settle(refused.receipt as never, 0), (e: Error) => e instanceof TypeError && /not undefined: only a check that Redis admitted/.test(e.message));
    await assert.rejects(limiter.refund("k" as never), /take a Receipt, not string/);
  });

  it("a receipt goes back only to its limiter; a copy is no receipt", async () => {
    const p = prefix();
    const ours = new Limiter(client, "gcra", QUOTA, { prefix: p, clock: () => T0 });
    const sameQuota = new Limiter(client, "gcra", QUOTA, { prefix: p, clock: () => T0 });
    const receipt = (await ours.check("k", 4)).receipt as Receipt;
    await assert.rejects(sameQuota.refund(receipt), (e: Error) => e instanceof ForeignReceipt && /another limiter/.test(e.message));
    // A spread or a structured clone keeps the fields, not the receipt.
    await assert.rejects(ours.refund({ ...receipt } as Receipt), /take a Receipt, not a plain object/);
    await assert.rejects(ours.refund(structuredClone(receipt)), /take a Receipt, not a plain object/);
    // Refused, not spent: its own limiter still takes it.
    assert.ok(!receipt.spent);
    assert.equal((await ours.refund(receipt)).remaining, 10);
    // A serialized receipt names its limiter: another prefix or quota refuses it.
    const text = JSON.stringify((await ours.check("k", 4)).receipt);
    for (const other of [
      new Limiter(client, "gcra", QUOTA, { prefix: p + "x" }),
      new Limiter(client, "gcra", Quota.perSecond(5, 11), { prefix: p }),
      new Limiter(client, "token-bucket", QUOTA, { prefix: p }),
    ]) {
      assert.throws(() => other.receiptFromJSON(text), (e: Error) => e instanceof ForeignReceipt && /another limiter/.test(e.message));
    }
    const loaded = sameQuota.receiptFromJSON(text);
    assert.deepEqual([loaded.key.toString(), loaded.cost], ["k", 4]);
    assert.equal((await sameQuota.refund(loaded)).remaining, 10);
    for (const bad of ["{", "[]", '{"ratelab_receipt":1}', text.replace('"cost":4', '"cost":-4'), text.replace('"cost":4', '"cost":11'), text.replace('"key_hex":"6b"', '"key_hex":"zz"')]) {
      assert.throws(() => ours.receiptFromJSON(bad), RangeError, bad);
    }
  });

  it("a settlement above the capacity is an error and spends the receipt", async () => {
    const limiter = new Limiter(client, "gcra", QUOTA, { prefix: prefix(), clock: () => T0 });
    const receipt = (await limiter.check("k", 4)).receipt as Receipt;
    await assert.rejects(limiter.settle(receipt, -1), /actual must be an integer/);
    assert.ok(!receipt.spent);
    await assert.rejects(limiter.settle(receipt, 11), (e: Error) => e instanceof CostTooHigh && /the receipt is spent/.test(e.message));
    assert.ok(receipt.spent);
    assert.equal((await limiter.peek("k", 0)).remaining, 6);
  });

  it("a replayed receipt gives back its own units once", async () => {
    // A receipt serialized for another process (a job queue) can be loaded any number of times: each load
    // is a receipt of its own. The scripts give an admission's units back once, whatever the replays
    // (lua/README.md, "What a replayed or forged stamp can do"); crates/tests/tests/redis/settle_bound.rs
    // checks the same from Rust.
    const second = 1_000_000;
    let now = T0;
    const p = prefix();
    const gcra = new Limiter(client, "gcra", new Quota(1, second, 10), { prefix: p, clock: () => now });
    const texts: string[] = [];
    for (let i = 0; i < 10; i++) texts.push(JSON.stringify((await gcra.check("k")).receipt));
    assert.equal((await gcra.peek("k", 0)).remaining, 0);
    const replay = async (limiter: Limiter, text: string | object, times: number) => {
      const answers: number[] = [];
      for (let i = 0; i < times; i++) answers.push((await limiter.refund(limiter.receiptFromJSON(text as string))).remaining);
      return answers;
    };
    // The third, replayed 50 times: its own unit back, once; the last one's too.
    assert.deepEqual(new Set(await replay(gcra, texts[2] as string, 50)), new Set([1]));
    assert.deepEqual(new Set(await replay(gcra, texts[9] as string, 50)), new Set([2]));
    // Never past full capacity, however many stamps are forged.
    for (let s = 0; s < 20; s++) {
      const forged = { ...JSON.parse(texts[0] as string), cost: 10, stamp_at: T0 + s * second, stamp_mark: s % 3 };
      const [left] = await replay(gcra, forged, 1);
      assert.ok((left as number) <= 10, `forged at ${s} s: ${left}`);
    }
    // A fixed window of 3 per second: likewise, and nothing for a window that has ended.
    const window = new Limiter(client, "fixed-window", Quota.perSecond(3), { prefix: p, clock: () => now });
    now = T0 + 10 * second;
    const text = JSON.stringify((await window.check("w")).receipt);
    await window.check("w");
    await window.check("w");
    assert.deepEqual(new Set(await replay(window, text, 50)), new Set([1]));
    now = T0 + 11 * second;
    for (let i = 0; i < 3; i++) assert.ok((await window.check("w")).allowed);
    assert.deepEqual(await replay(window, text, 1), [0]);
  });

  it("one receipt delivered thirty times lets no more pass", async () => {
    // A job queue delivers one serialized receipt of a refunded job thirty times, while other jobs check
    // the same key (5 an hour): no more than the 5 pass, for every algorithm. Version 4's scripts let each
    // delivery give a unit back.
    for (const name of Object.keys(ALGORITHMS) as AlgorithmName[]) {
      const limiter = new Limiter(client, name, new Quota(5, 3_600_000_000, 5), { prefix: prefix(), clock: () => T0 });
      const text = JSON.stringify((await limiter.check("jobs")).receipt);
      await limiter.refund(limiter.receiptFromJSON(text));
      let passed = 0;
      for (let i = 0; i < 30; i++) {
        if ((await limiter.check("jobs")).allowed) passed++;
        await limiter.refund(limiter.receiptFromJSON(text));
      }
      assert.equal(passed, 5, name);
    }
  });

  it("a settlement past the protocol's ceiling is out of range, and writes nothing", async () => {
    // At the end of the instants (now clamped at 2^52), four receipts of a quota of 4 per 2^50 µs each
    // settled to 4: the second settlement would leave a debt ending past 2^52 + 2^51 µs.
    const limiter = new Limiter(client, "gcra", new Quota(4, 2 ** 50, 4), { prefix: prefix(), clock: () => 2 ** 52 });
    const receipts: Receipt[] = [];
    for (let i = 0; i < 4; i++) receipts.push((await limiter.check("k")).receipt as Receipt);
    assert.equal((await limiter.settle(receipts[0] as Receipt, 4)).remaining, 0);
    const before = await client.getBuffer(limiter.redisKey("k"));
    await assert.rejects(
      limiter.settle(receipts[1] as Receipt, 4),
      (e: Error) => e instanceof DataError && /^ratelab gcra: out of range at .*past 2\^52 \+ 2\^51/.test(e.message),
    );
    assert.deepEqual(await client.getBuffer(limiter.redisKey("k")), before, "an out-of-range settlement wrote");
  });
});
