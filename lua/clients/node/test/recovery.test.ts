// After Redis restarts (killed, then started again, empty, on the same
// port), the limiter decides with Redis at its next call, whatever it served
// before: ioredis's one connection is closed by the kernel, and ioredis makes
// a new one; the breaker's cool-down runs on a clock the test advances. The
// Express middleware failing closed answers again at its first request.

import assert from "node:assert/strict";
import { request as httpRequest, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, it } from "node:test";

import express from "express";
import type { Redis } from "ioredis";

import { CircuitOpen, Limiter, Quota, Unavailable } from "../src/index.js";
import { Policy, rateLimit } from "../src/express.js";
import { Breaker } from "../src/resilience.js";
import { RedisServer } from "../testing/redis_server.js";

const QUOTA = Quota.perHour(100);
const T0 = 1_700_000_000_000_000;

/** A breaker whose clock the test moves: cool-downs end when it says. */
function manualBreaker(limiter: Limiter, threshold: number, coolDownMs: number): { now: number } {
  const clock = { now: 1000 };
  (limiter as unknown as { breaker: Breaker }).breaker = new Breaker(threshold, coolDownMs, 1100, () => clock.now);
  return clock;
}

/** ioredis's next `ready`: it connected again. */
const ready = (client: Redis) => new Promise((ok) => client.once("ready", ok));

async function serveTwenty(limiter: Limiter): Promise<void> {
  const decisions = await Promise.all(Array.from({ length: 20 }, (_, i) => limiter.check(`busy${i}`)));
  assert.ok(decisions.every((d) => d.allowed));
}

describe("after Redis restarts", () => {
  it("the first check decides with the new server", async () => {
    const server = await RedisServer.start();
    const client = server.client();
    client.on("error", () => {});
    try {
      // A timeout ioredis's reconnection fits in (it retries within a few hundred ms).
      const limiter = new Limiter(client, "gcra", QUOTA, { prefix: "restart", clock: () => T0, logger: null, timeoutMs: 5000 });
      await serveTwenty(limiter);
      server.kill();
      await server.restart();
      for (const left of [99, 98, 97]) {
        const d = await limiter.check("after");
        assert.deepEqual([d.allowed, d.remaining, d.degraded], [true, left, false]);
      }
      const stats = limiter.stats();
      assert.deepEqual([stats.answered, stats.errors, stats.timeouts], [23, 0, 0]);
    } finally {
      client.disconnect();
      server.stop();
    }
  });

  it("the probe after an outage decides with the new server", async () => {
    const server = await RedisServer.start();
    // Without the offline queue, calls fail at once while ioredis is disconnected: the outage is over in
    // five calls, and the timeout can be one a loaded machine cannot miss.
    const client = server.client({ enableOfflineQueue: false });
    client.on("error", () => {});
    try {
      const limiter = new Limiter(client, "gcra", QUOTA, { prefix: "probe", clock: () => T0, logger: null, timeoutMs: 5000 });
      const clock = manualBreaker(limiter, 5, 500);
      await serveTwenty(limiter);
      server.kill();
      for (let i = 0; i < 5; i++) await assert.rejects(limiter.check("down"), Unavailable);
      await assert.rejects(limiter.check("down"), CircuitOpen);
      const back = ready(client);
      await server.restart();
      await back;
      clock.now += 500;
      const d = await limiter.check("after");
      assert.deepEqual([d.allowed, d.remaining, d.degraded], [true, 99, false]);
      assert.equal(limiter.stats().breakerOpen, false);
    } finally {
      client.disconnect();
      server.stop();
    }
  });

  it("the Express middleware failing closed decides its first request", async () => {
    const server = await RedisServer.start();
    const client = server.client();
    client.on("error", () => {});
    const limiter = new Limiter(client, "gcra", QUOTA, { prefix: "express-restart", clock: () => T0, logger: null, timeoutMs: 5000 });
    const app = express();
    app.use(rateLimit({ policies: [new Policy("default", limiter, { failure: "closed", timeoutMs: 5000 })], logger: null }));
    app.use((_req, res) => {
      res.send("ok");
    });
    const http: Server = await new Promise((ok) => {
      const s = app.listen(0, "127.0.0.1", () => ok(s));
    });
    const get = () =>
      new Promise<{ status: number; ratelimit: string }>((ok, fail) => {
        const req = httpRequest({ host: "127.0.0.1", port: (http.address() as AddressInfo).port, path: "/" }, (res) => {
          res.resume();
          res.on("end", () => ok({ status: res.statusCode ?? 0, ratelimit: String(res.headers["ratelimit"]) }));
        });
        req.on("error", fail);
        req.end();
      });
    try {
      const first = await Promise.all(Array.from({ length: 20 }, get));
      assert.deepEqual(first.map((r) => r.status), Array(20).fill(200));
      server.kill();
      await server.restart();
      for (const left of [99, 98, 97]) {
        const r = await get();
        assert.equal(r.status, 200);
        assert.ok(r.ratelimit.includes(`"default";r=${left};`), r.ratelimit);
      }
    } finally {
      await new Promise((ok) => http.close(ok));
      client.disconnect();
      server.stop();
    }
  });
});
