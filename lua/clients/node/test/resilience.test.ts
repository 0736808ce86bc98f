// When Redis fails or is slow, the Node limiter does what the Rust client
// does: a timeout that bounds ioredis's queue and reconnections, failure
// policies on outages only, the circuit breaker, alerts, stats, the refusal
// cache; and a quota mismatch on a shared key is loud. On real
// redis-servers, paused with SIGSTOP or killed.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import type { Redis } from "ioredis";

import {
  BackendError,
  CircuitOpen,
  DataError,
  Expired,
  Limiter,
  MAX_TTL_SLACK_MS,
  Quota,
  QuotaMismatch,
  ReceiptSpent,
  RedisClock,
  Timeout,
  Unavailable,
  monotonicMicros,
  type Alert,
  type Decision,
  type Receipt,
} from "../src/index.js";
import { Breaker } from "../src/resilience.js";
import { RedisServer } from "../testing/redis_server.js";

const QUOTA = Quota.perSecond(5, 10);
const T0 = 1_700_000_000_000_000;
/** The timeout of the cases that decide on Redis's answers, not on how fast a loaded machine gets them. */
const PATIENT_MS = 5000;

let server: RedisServer;
let client: Redis;
let next = 0;
const prefix = () => `noderes${process.pid}-${next++}`;

before(async () => {
  server = await RedisServer.start();
  client = server.client();
});

after(() => {
  client.disconnect();
  server.stop();
});

describe("an unavailable Redis", () => {
  it("paused: a check times out at the timeout and is not charged", async () => {
    const own = await RedisServer.start();
    const c = own.client();
    try {
      // The breaker would open after five outages: these five must all wait.
      // Ten an hour: nothing comes back while the test runs.
      const limiter = new Limiter(c, "gcra", Quota.perHour(10), { logger: null, breaker: { threshold: 10 } });
      // Connected, the script loaded and the clock sampled (tried again on a loaded machine); the charge
      // before the pause is a patient limiter's.
      for (let i = 0; i < 20; i++) {
        const warmed = await limiter.peek("k", 0).then(
          () => true,
          () => false,
        );
        if (warmed) break;
      }
      const patient = new Limiter(c, "gcra", Quota.perHour(10), { logger: null, timeoutMs: PATIENT_MS, connectTimeoutMs: 30_000 });
      assert.equal((await patient.check("k")).remaining, 9);
      const before = limiter.stats();
      // Each call is answered while the server is still paused (it is resumed
      // afterwards): the limiter's timeout ended it, never before the timeout.
      own.pause();
      const took: number[] = [];
      for (let i = 0; i < 5; i++) {
        const started = performance.now();
        await assert.rejects(limiter.check("k"), (e: Error) => e instanceof Timeout && /within 100 ms/.test(e.message));
        took.push(performance.now() - started);
      }
      own.resume();
      console.log(`# paused calls answered after, ms: ${took.map((t) => t.toFixed(2)).join(" ")}`);
      assert.ok(Math.min(...took) >= 100 - 5, String(took));
      const stats = limiter.stats();
      assert.deepEqual([stats.answered - before.answered, stats.timeouts - before.timeouts, stats.errors], [0, 5, 0]);
      assert.equal((await patient.peek("k", 0)).remaining, 9);
    } finally {
      c.disconnect();
      own.stop();
    }
  });

  it("down: a check fails within the timeout, not after ioredis's retries", async () => {
    const own = await RedisServer.start();
    const c = own.client();
    c.on("error", () => {}); // ioredis reports each reconnection that fails
    const seen: Alert[] = [];
    try {
      const limiter = new Limiter(c, "gcra", QUOTA, { logger: null, onAlert: (a) => seen.push(a) });
      // The clock sampled (tried again on a loaded machine); the charge before the outage is a patient
      // limiter's.
      for (let i = 0; i < 20; i++) {
        const warmed = await limiter.peek("warm", 0).then(
          () => true,
          () => false,
        );
        if (warmed) break;
      }
      seen.length = 0;
      const patient = new Limiter(c, "gcra", QUOTA, { logger: null, timeoutMs: PATIENT_MS, connectTimeoutMs: 30_000 });
      assert.ok((await patient.check("k")).allowed);
      own.stop();
      // ioredis would hold the commands while it reconnects (73.5 s with its defaults): the limiter's
      // timeout answers instead.
      for (let i = 0; i < 3; i++) {
        await assert.rejects(limiter.check("k"), (e: Error) => e instanceof Timeout && /within 100 ms/.test(e.message));
      }
      const allow = new Limiter(c, "gcra", QUOTA, { logger: null, onFailure: "allow", onAlert: (a) => seen.push(a) });
      const d = await allow.check("k", 3);
      assert.deepEqual([d.allowed, d.limit, d.remaining, d.retryAfterMicros, d.degraded], [true, 10, 7, 0, true]);
      assert.equal(d.resetAfterMicros, allow.algorithm.maxWaitMicros);
      assert.equal((await allow.peek("k", 0)).resetAfterMicros, 0);
      assert.equal((await allow.peek("k", 4)).remaining, 6);
      const deny = new Limiter(c, "gcra", QUOTA, { logger: null, onFailure: "deny", onAlert: (a) => seen.push(a) });
      const refused = await deny.check("k");
      assert.deepEqual(
        [refused.allowed, refused.remaining, refused.retryAfterMicros, refused.resetAfterMicros, refused.degraded],
        [false, 0, 100_000, 100_000, true],
      );
      assert.deepEqual(
        seen.map((a) => a.policy),
        ["error", "error", "error", "allow", "allow", "allow", "deny"],
      );
      assert.ok(seen.every((a) => a.error instanceof Unavailable && a.key.toString() === "k"));
      // A decision the failure policy made has no receipt: nothing was charged on Redis, so there is
      // nothing to settle. Resets have no policy.
      assert.equal(d.receipt, undefined);
      await assert.rejects(allow.refund(d.receipt as never), (e: Error) => e instanceof TypeError && /the failure policy made/.test(e.message));
      await assert.rejects(allow.reset("k"), Unavailable);
    } finally {
      c.disconnect();
    }
  });

  it("a settlement during an outage rejects, and the admission stays charged", async () => {
    const own = await RedisServer.start();
    const c = own.client();
    try {
      // A timeout a loaded machine cannot miss before the pause; the refund during it times out.
      const limiter = new Limiter(c, "gcra", QUOTA, { logger: null, onFailure: "allow", breaker: { threshold: 0 }, clock: () => T0, timeoutMs: 500, connectTimeoutMs: 30_000 });
      const receipt = (await limiter.check("k", 4)).receipt;
      assert.ok(receipt);
      own.pause();
      // Settlements have no failure policy: the error, whatever onFailure says.
      await assert.rejects(limiter.refund(receipt), Timeout);
      own.resume();
      assert.ok(receipt.spent);
      await assert.rejects(limiter.refund(receipt), ReceiptSpent);
      // The timed-out refund was never run (its deadline passed): still charged.
      assert.equal((await limiter.peek("k", 0)).remaining, 6);
    } finally {
      own.resume();
      c.disconnect();
      own.stop();
    }
  });

  it("the breaker opens after five outages, then one probe closes it", async () => {
    // Redis is killed (every call an outage) and started again; the breaker's cool-down ends when the test
    // moves its clock.
    const own = await RedisServer.start();
    // Without the offline queue, calls fail at once while ioredis is disconnected, and the timeout can be
    // one a loaded machine cannot miss.
    const c = own.client({ enableOfflineQueue: false });
    c.on("error", () => {});
    const seen: Alert[] = [];
    try {
      const limiter = new Limiter(c, "token-bucket", QUOTA, { logger: null, onFailure: "deny", onAlert: (a) => seen.push(a), timeoutMs: PATIENT_MS, connectTimeoutMs: 30_000 });
      const clock = { now: 1000 };
      (limiter as unknown as { breaker: Breaker }).breaker = new Breaker(5, 300, 1100, () => clock.now);
      assert.ok((await limiter.check("k")).allowed);
      own.kill();
      for (let i = 0; i < 5; i++) assert.ok((await limiter.check("k")).degraded);
      let stats = limiter.stats();
      assert.deepEqual([stats.timeouts + stats.errors, stats.breakerOpen, stats.breakerOpened], [5, true, 1]);
      // Open: answered without Redis, retry when the probe may go.
      let d = await limiter.check("k");
      for (let i = 0; i < 200; i++) d = await limiter.check("k");
      assert.ok(d.degraded && !d.allowed && d.retryAfterMicros === 300_000);
      assert.ok(seen.at(-1)?.error instanceof CircuitOpen);
      assert.equal(limiter.stats().shortCircuited, 201);
      const back = new Promise((ok) => c.once("ready", ok));
      await own.restart();
      await back;
      clock.now += 299;
      assert.ok((await limiter.check("k")).degraded);
      clock.now += 1;
      const probe = await limiter.check("k");
      assert.ok(!probe.degraded && probe.allowed);
      stats = limiter.stats();
      assert.deepEqual([stats.breakerOpen, stats.coolDownLeftMs, stats.answered], [false, 0, 2]);
    } finally {
      c.disconnect();
      own.stop();
    }
  });

  it("a failed probe opens it again; a lost probe lets another go", () => {
    let now = 0;
    const breaker = new Breaker(3, 500, 100, () => now);
    for (let i = 0; i < 3; i++) {
      assert.equal(breaker.permit(), "call");
      breaker.failure(false);
    }
    assert.equal(breaker.permit(), 500);
    now = 600;
    assert.equal(breaker.permit(), "probe");
    assert.equal(breaker.permit(), 100);
    breaker.failure(true);
    assert.deepEqual(breaker.state(), [true, 500]);
    now = 1200;
    assert.equal(breaker.permit(), "probe");
    now = 1350;
    assert.equal(breaker.permit(), "probe");
    breaker.success();
    assert.equal(breaker.permit(), "call");
    assert.equal(breaker.opened, 2);
    const never = new Breaker(0, 1000, 1000);
    for (let i = 0; i < 10; i++) never.failure(false);
    assert.equal(never.permit(), "call");
  });
});

describe("data errors", () => {
  it("are thrown whatever the policy, and keep the breaker closed", async () => {
    const seen: Alert[] = [];
    const limiter = new Limiter(client, "gcra", QUOTA, {
      prefix: prefix(),
      logger: null,
      onFailure: "allow",
      breaker: { threshold: 1, coolDownMs: 10_000 },
      onAlert: (a) => seen.push(a),
      timeoutMs: PATIENT_MS,
    });
    await client.lpush(limiter.redisKey("list"), "x");
    for (let i = 0; i < 3; i++) await assert.rejects(limiter.check("list"), DataError);
    const stats = limiter.stats();
    assert.deepEqual([stats.dataErrors, stats.breakerOpen, stats.errors], [3, false, 0]);
    assert.deepEqual(seen.map((a) => a.policy), ["error", "error", "error"]);
    assert.ok((await limiter.check("fine")).allowed);
    const lenient = new Limiter(client, "gcra", QUOTA, { prefix: limiter.prefix, logger: null, onFailure: "allow", policyOnDataErrors: true, timeoutMs: PATIENT_MS });
    assert.ok((await lenient.check("list")).degraded);
  });

  it("an expired call is an outage", async () => {
    const skewed = new RedisClock({ maxAgeMicros: 3_600_000_000 });
    // The deadline is an hour early; the timeout (a minute) leaves a loaded machine all it needs for the rest.
    const limiter = new Limiter(client, "gcra", QUOTA, { prefix: prefix(), logger: null, redisClock: skewed, onFailure: "allow", timeoutMs: 60_000 });
    await limiter.check("warm", 0);
    const m = monotonicMicros();
    skewed.record([{ before: m, redis: m + (skewed.offsetMicros ?? 0) - 3_600_000_000, after: m }]);
    const d = await limiter.check("k");
    assert.ok(d.degraded && d.allowed);
    assert.equal(limiter.stats().errors, 1);
    assert.ok(new Expired("x") instanceof Unavailable);
  });
});

describe("stats, the refusal cache and the quota registry", () => {
  it("count calls, reloads and clock samples", async () => {
    const limiter = new Limiter(client, "token-bucket", QUOTA, { prefix: prefix(), timeoutMs: PATIENT_MS });
    await client.script("FLUSH");
    for (let i = 0; i < 3; i++) await limiter.check("k");
    await client.script("FLUSH");
    await limiter.peek("k");
    const stats = limiter.stats();
    assert.deepEqual([stats.answered, stats.scriptCalls, stats.reloads, stats.clockSamples], [4, 4, 2, 1]);
    assert.deepEqual([stats.timeouts, stats.errors, stats.dataErrors], [0, 0, 0]);
  });

  it("refusals are cached until their retry-after", async () => {
    let now = T0;
    const limiter = new Limiter(client, "gcra", QUOTA, { prefix: prefix(), clock: () => now, cacheRefusals: 100, timeoutMs: PATIENT_MS });
    let last: Decision | undefined;
    for (let i = 0; i < 10; i++) {
      last = await limiter.check("k");
      assert.ok(last.allowed);
    }
    const refused = await limiter.check("k");
    assert.deepEqual([refused.allowed, refused.retryAfterMicros], [false, 200_000]);
    now += 50_000;
    const cached = await limiter.check("k");
    assert.deepEqual([cached.allowed, cached.retryAfterMicros, cached.remaining], [false, 150_000, 0]);
    assert.deepEqual([limiter.stats().cachedRefusals, limiter.stats().scriptCalls], [1, 11]);
    assert.ok(!(await limiter.check("k", 2)).allowed);
    assert.equal((await limiter.refund(last?.receipt as Receipt)).remaining, 1);
    assert.ok((await limiter.check("k")).allowed);
    now += 150_000;
    assert.ok((await limiter.check("k")).allowed);
  });

  it("a quota mismatch on a shared key is loud", async () => {
    const p = prefix();
    const seen: Alert[] = [];
    const options = { prefix: p, quotaCheckEvery: 1, logger: null, onAlert: (a: Alert) => seen.push(a), timeoutMs: PATIENT_MS };
    const ours = new Limiter(client, "gcra", QUOTA, options);
    const same = new Limiter(client, "gcra", QUOTA, options);
    const other = new Limiter(client, "gcra", Quota.perSecond(50), options);
    await ours.check("alice");
    await same.check("alice");
    assert.equal(seen.length, 0);
    await other.check("alice");
    assert.equal(seen.length, 1);
    const alert = seen[0] as Alert;
    assert.ok(alert.error instanceof QuotaMismatch);
    assert.equal(alert.policy, null);
    assert.deepEqual([alert.error.ours, alert.error.theirs], ["v3:gcra:20000,1000000,50", "v3:gcra:200000,2000000,10"]);
    assert.match(alert.error.message, /different Redis keys/);
    await ours.check("alice");
    assert.equal(seen.length, 2);
    assert.deepEqual([ours.stats().quotaMismatches, other.stats().quotaMismatches], [1, 1]);
    assert.equal(ours.registryKey("alice").toString(), `${p}:{alice}:gcra:quota`);
    const ttl = await client.pttl(ours.registryKey("alice"));
    assert.ok(ttl > 0 && ttl <= 60_000);
  });

  it("the quota is recorded on a sample of checks, never on peeks", async () => {
    const limiter = new Limiter(client, "gcra", QUOTA, { prefix: prefix(), quotaCheckEvery: 3, timeoutMs: PATIENT_MS });
    const recorded = [];
    for (let i = 0; i < 7; i++) {
      await client.del(limiter.registryKey("k"));
      await limiter.check("k");
      recorded.push(await client.exists(limiter.registryKey("k")));
    }
    assert.deepEqual(recorded, [1, 0, 0, 1, 0, 0, 1]);
    await limiter.peek("z");
    assert.equal(await client.exists(limiter.registryKey("z")), 0);
    const never = new Limiter(client, "gcra", QUOTA, { prefix: prefix(), quotaCheckEvery: null, timeoutMs: PATIENT_MS });
    await never.check("k");
    assert.equal(await client.exists(never.registryKey("k")), 0);
  });
});

describe("bad input", () => {
  it("is a clear error", async () => {
    const cases: [object, RegExp][] = [
      [{ timeoutMs: 0 }, /timeoutMs must be a positive number/],
      [{ timeoutMs: -1 }, /timeoutMs must be a positive number/],
      [{ timeoutMs: "1" }, /timeoutMs must be a positive number/],
      [{ onFailure: "maybe" }, /onFailure must be one of error, allow, deny/],
      [{ breaker: { threshold: -1 } }, /breaker threshold/],
      [{ cacheRefusals: 0 }, /cacheRefusals/],
      [{ quotaCheckEvery: 0 }, /quotaCheckEvery/],
      [{ ttlSlackMs: -5 }, /ttlSlackMs/],
      // Past 2^52 µs the scripts answer "invalid arguments": refused here.
      [{ ttlSlackMs: MAX_TTL_SLACK_MS + 1 }, /ttlSlackMs must be at most 4503599627371 \(2\^52/],
    ];
    for (const [options, message] of cases) {
      assert.throws(() => new Limiter(client, "gcra", QUOTA, options), message, JSON.stringify(options));
    }
    const limiter = new Limiter(client, "gcra", QUOTA);
    await assert.rejects(limiter.check(42 as never), /a key is a string or bytes/);
    await assert.rejects(limiter.check("k", -1), /cost must be an integer/);
    await assert.rejects(limiter.check("k", 1.5), /cost must be an integer/);
    const receipt = (await new Limiter(client, "gcra", QUOTA, { prefix: prefix(), timeoutMs: PATIENT_MS }).check("k")).receipt as Receipt;
    const own = new Limiter(client, "gcra", QUOTA, { prefix: prefix(), timeoutMs: PATIENT_MS });
    const mine = (await own.check("k")).receipt as Receipt;
    await assert.rejects(own.settle(mine, -3), /actual must be an integer/);
    await assert.rejects(own.settle(mine, "1" as never), /actual must be an integer/);
    await assert.rejects(own.settle(receipt, 0), /another limiter/);
    assert.throws(() => new Limiter(client, "leaky" as never, QUOTA), /unknown algorithm/);
  });
});
