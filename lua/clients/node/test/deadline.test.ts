// A check that timed out is never charged, however Redis stalls:
//
// - Before its script runs (SIGSTOP, or a `DEBUG SLEEP` from another
//   connection, for 150, 300 and 450 ms, with checks starting every 10 ms
//   all through it): the script finds its deadline passed and writes nothing.
// - After its script ran, before its reply comes (a proxy holds Redis's
//   replies back): the limiter takes the reply when it comes, after its
//   caller gave up, and gives the admission back at once by its stamp.
//
// Each case counts, with peeks on the caller's clock (frozen: nothing comes
// back with time), what stays charged once the limiter has settled its late
// replies: every check that timed out left its key full, every check that
// was answered took its unit.
//
// Before the deadline was placed on a measured clock, the scripts ran until
// `now + timeout + 500 ms`; before late replies were taken, a check whose
// reply was late stayed charged.

import assert from "node:assert/strict";
import { request as httpRequest, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, it } from "node:test";

import express from "express";
import type { Redis } from "ioredis";

import { Expired, Limiter, Quota, Timeout } from "../src/index.js";
import { Policy, rateLimit } from "../src/express.js";
import { Proxy } from "../testing/proxy.js";
import { RedisServer } from "../testing/redis_server.js";

const QUOTA = Quota.perMinute(10);
const T0 = 1_700_000_000_000_000;
const frozen = () => T0;
const sleep = (ms: number) => new Promise((ok) => setTimeout(ok, ms));

/** Polls `condition` until it holds; fails after `ms` (a bound on a hang, never on speed). */
async function waitUntil(condition: () => Promise<boolean>, what: string, ms = 30_000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!(await condition())) {
    assert.ok(performance.now() < deadline, `not within ${ms} ms: ${what}`);
    await sleep(5);
  }
}

/**
 * Redis stalled for at least `pause` ms, and until a check has timed out (so
 * that the case always holds one, however late a loaded machine starts the
 * checks): SIGSTOP then SIGCONT, or `DEBUG SLEEP` from another connection.
 */
async function stall(server: RedisServer, how: string, pause: number, timedOut: Promise<void>): Promise<void> {
  if (how === "sigstop") {
    server.pause();
    await sleep(pause);
    await timedOut;
    server.resume();
    return;
  }
  const admin = server.client();
  try {
    let done = false;
    void timedOut.then(() => (done = true));
    await admin.call("DEBUG", "SLEEP", String(pause / 1000));
    while (!done) await admin.call("DEBUG", "SLEEP", "0.2");
  } finally {
    admin.disconnect();
  }
}

describe("checks through a stalled Redis", () => {
  for (const how of ["sigstop", "debug-sleep"]) {
    for (const pause of [150, 300, 450]) {
      it(`${how} ${pause} ms: no check that timed out is charged`, async () => {
        const server = await RedisServer.start(["--enable-debug-command", "local"]);
        const client = server.client();
        try {
          const limiter = new Limiter(client, "gcra", QUOTA, { clock: frozen, breaker: { threshold: 0 }, quotaCheckEvery: null, logger: null });
          await limiter.check("warm", 0); // connected, script loaded, clock sampled
          // 5 ms off the 10 ms grid.
          const starts: number[] = [];
          for (let at = 5; at < pause; at += 10) starts.push(at);
          const outcomes = new Map<string, string>();
          let sawTimeout = () => {};
          const timedOut = new Promise<void>((ok) => (sawTimeout = ok));
          const stalling = stall(server, how, pause, timedOut);
          // DEBUG SLEEP is on its way: checks sent after it wait behind it.
          await sleep(how === "sigstop" ? 0 : 10);
          const began = performance.now();
          const runs = starts.map(async (at, i) => {
            await sleep(began + at - performance.now());
            const key = `k${i}`;
            try {
              await limiter.check(key);
              outcomes.set(key, "answered");
            } catch (e) {
              outcomes.set(key, e instanceof Timeout ? "timeout" : e instanceof Expired ? "expired" : String(e));
              if (e instanceof Timeout) sawTimeout();
            }
          });
          await Promise.all(runs);
          sawTimeout();
          await stalling;
          await limiter.settled();
          const peek = new Limiter(client, "gcra", QUOTA, { clock: frozen, timeoutMs: null });
          const charged = [];
          for (const [key, outcome] of outcomes) {
            assert.ok(["answered", "timeout", "expired"].includes(outcome), `${key}: ${outcome}`);
            const left = (await peek.peek(key, 0)).remaining;
            if (outcome === "answered") assert.equal(left, 9, key);
            else if (left !== 10) charged.push(key);
          }
          assert.deepEqual(charged, [], `checks charged after their caller gave up`);
          const timeouts = [...outcomes.values()].filter((o) => o === "timeout").length;
          assert.ok(timeouts >= 1, `none timed out`);
          const answered = [...outcomes.values()].filter((o) => o === "answered").length;
          console.log(`# ${how} ${pause} ms: ${timeouts} timed out, ${answered} answered, ${limiter.stats().lateRefunds} late admissions given back`);
        } finally {
          client.disconnect();
          server.stop();
        }
      });
    }
  }
});

describe("a reply held after the script ran", () => {
  async function through(run: (limiter: Limiter, direct: Limiter, proxy: Proxy, client: Redis) => Promise<void>, timeoutMs = 1000) {
    const server = await RedisServer.start();
    const proxy = await Proxy.start(server.port);
    const client = proxy.client();
    const admin = server.client();
    try {
      const limiter = new Limiter(client, "gcra", QUOTA, { prefix: "late", clock: frozen, breaker: { threshold: 0 }, quotaCheckEvery: null, logger: null, timeoutMs });
      const direct = new Limiter(admin, "gcra", QUOTA, { prefix: "late", clock: frozen, timeoutMs: null });
      assert.ok((await limiter.check("warm", 0)).allowed); // connected, script loaded
      await run(limiter, direct, proxy, client);
    } finally {
      client.disconnect();
      admin.disconnect();
      await proxy.close();
      server.stop();
    }
  }

  it("gives a late admission back at once", async () => {
    await through(async (limiter, direct, proxy) => {
      proxy.holdReplies();
      const checking = limiter.check("k").then(
        (d) => d,
        (e: unknown) => e,
      );
      // The script ran (Redis charged the check), and its caller gives up.
      await waitUntil(async () => (await direct.peek("k", 0)).remaining === 9, "the script never ran through the proxy");
      assert.ok((await checking) instanceof Timeout);
      assert.equal((await direct.peek("k", 0)).remaining, 9);
      proxy.releaseReplies();
      await limiter.settled();
      assert.equal((await direct.peek("k", 0)).remaining, 10);
      // The connection is as good as before: the next check is answered.
      assert.equal((await limiter.check("k")).remaining, 9);
      const stats = limiter.stats();
      assert.deepEqual([stats.timeouts, stats.lateRefunds, stats.errors], [1, 1, 0]);
    });
  });

  it("gives nothing back for a late refusal", async () => {
    await through(async (limiter, direct, proxy) => {
      for (let i = 0; i < 10; i++) await limiter.check("k");
      proxy.holdReplies();
      await assert.rejects(limiter.check("k"), Timeout); // refused by the script; the reply held
      proxy.releaseReplies();
      await limiter.settled();
      assert.equal(limiter.stats().lateRefunds, 0);
      assert.equal((await direct.peek("k", 0)).remaining, 0);
    });
  });

  it("behind Express: an admission after the policy's timeout is given back", async () => {
    // The policy gives up (500 ms) before the limiter does (5 s): the request is answered 503 (failing
    // closed) while Redis's reply is held; the admission that reply brings is refunded when it comes.
    await through(async (limiter, direct, proxy) => {
      const app = express();
      app.use(rateLimit({ policies: [new Policy("default", limiter, { failure: "closed", timeoutMs: 500 })], logger: null }));
      app.use((_req, res) => {
        res.send("ok");
      });
      const http: Server = await new Promise((ok) => {
        const s = app.listen(0, "127.0.0.1", () => ok(s));
      });
      const get = () =>
        new Promise<number>((ok, fail) => {
          const req = httpRequest({ host: "127.0.0.1", port: (http.address() as AddressInfo).port, path: "/" }, (res) => {
            res.resume();
            res.on("end", () => ok(res.statusCode ?? 0));
          });
          req.on("error", fail);
          req.end();
        });
      try {
        const key = "default:ip:127.0.0.1";
        assert.equal(await get(), 200);
        assert.equal((await direct.peek(key, 0)).remaining, 9);
        proxy.holdReplies();
        assert.equal(await get(), 503);
        assert.equal((await direct.peek(key, 0)).remaining, 8); // the script ran: charged
        proxy.releaseReplies();
        await waitUntil(async () => (await direct.peek(key, 0)).remaining === 9, "the late admission was not given back");
      } finally {
        await new Promise((ok) => http.close(ok));
      }
    }, 5000);
  });
});
