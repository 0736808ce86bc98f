// A new limiter's first calls, all at once, on a Redis slow to accept
// connections: while ioredis is connecting, a call waits for it (and for the
// first sample of Redis's clock) within `connectTimeoutMs`, and its own
// timeout starts once it is ready, so a healthy but busy Redis decides them,
// instead of every one timing out (or, behind the middleware, passing
// unchecked).
//
// The proxy holds the connection until each call has waited longer than its
// timeout (counted from the moment the proxy accepted it, which no call
// started after): what is asserted is what was decided, never how long it
// took.

import assert from "node:assert/strict";
import { request as httpRequest, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, it } from "node:test";

import express from "express";

import { CircuitOpen, Limiter, Quota, Timeout, type Decision } from "../src/index.js";
import { Policy, rateLimit, type Failure } from "../src/express.js";
import { Breaker } from "../src/resilience.js";
import { Proxy } from "../testing/proxy.js";
import { RedisServer } from "../testing/redis_server.js";

const QUOTA = Quota.perHour(10);
const T0 = 1_700_000_000_000_000;
/** Generous: a loaded machine must still answer in time once connected. */
const TIMEOUT_MS = 2000;
const sleep = (ms: number) => new Promise((ok) => setTimeout(ok, ms));

async function releaseAfterTimeout(proxy: Proxy): Promise<void> {
  await proxy.accepts(1);
  await sleep((proxy.accepted[0] as number) + TIMEOUT_MS + 50 - performance.now());
  proxy.releaseConnections();
}

describe("a cold start on a Redis slow to accept", () => {
  it("decides the first checks", async () => {
    const server = await RedisServer.start();
    const proxy = await Proxy.start(server.port);
    proxy.holdConnections();
    const client = proxy.client();
    try {
      const limiter = new Limiter(client, "gcra", QUOTA, { prefix: "cold", clock: () => T0, timeoutMs: TIMEOUT_MS, connectTimeoutMs: 30_000, logger: null });
      const releasing = releaseAfterTimeout(proxy);
      const results = await Promise.allSettled(Array.from({ length: 20 }, () => limiter.check("k")));
      await releasing;
      const errors = results.flatMap((r) => (r.status === "rejected" ? [String(r.reason)] : []));
      assert.deepEqual(errors, []);
      const decisions = results.map((r) => (r as PromiseFulfilledResult<Decision>).value);
      assert.deepEqual(decisions.map((d) => d.allowed).sort(), [...Array(10).fill(false), ...Array(10).fill(true)]);
      assert.ok(decisions.every((d) => !d.degraded));
      const stats = limiter.stats();
      assert.deepEqual([stats.answered, stats.timeouts, stats.errors], [20, 0, 0]);
    } finally {
      client.disconnect();
      await proxy.close();
      server.stop();
    }
  });

  it("fails at the connect timeout when connecting never ends", async () => {
    const server = await RedisServer.start();
    const proxy = await Proxy.start(server.port);
    proxy.holdConnections();
    const client = proxy.client();
    try {
      const limiter = new Limiter(client, "gcra", QUOTA, { connectTimeoutMs: 200, logger: null });
      await assert.rejects(limiter.check("k"), (e: Error) => e instanceof Timeout && e.message === "could not connect to the rate limiter backend within 200 ms");
      assert.equal(limiter.stats().timeouts, 1);
    } finally {
      client.disconnect();
      await proxy.close();
      server.stop();
    }
  });

  it("decides a burst through the Express middleware, none unchecked", async () => {
    const server = await RedisServer.start();
    const proxy = await Proxy.start(server.port);
    proxy.holdConnections();
    const client = proxy.client();
    const limiter = new Limiter(client, "gcra", QUOTA, { prefix: "cold-express", clock: () => T0, timeoutMs: TIMEOUT_MS, connectTimeoutMs: 30_000, logger: null });
    const failures: Failure[] = [];
    const app = express();
    app.use(rateLimit({ policies: [new Policy("default", limiter, { timeoutMs: TIMEOUT_MS })], onFailure: (f) => failures.push(f), logger: null }));
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
      const releasing = releaseAfterTimeout(proxy);
      const statuses = await Promise.all(Array.from({ length: 20 }, get));
      await releasing;
      assert.deepEqual([statuses.sort(), failures.map((f) => f.error.message)], [[...Array(10).fill(200), ...Array(10).fill(429)], []]);
    } finally {
      await new Promise((ok) => http.close(ok));
      client.disconnect();
      await proxy.close();
      server.stop();
    }
  });

  it("tries nothing while the breaker is open", async () => {
    // The middleware warms its limiters before every request: an open breaker must still answer at once,
    // not wait for ioredis to connect (held here until the test ends).
    const server = await RedisServer.start();
    const proxy = await Proxy.start(server.port);
    proxy.holdConnections();
    const client = proxy.client();
    try {
      const limiter = new Limiter(client, "gcra", QUOTA, { connectTimeoutMs: 3_600_000, logger: null });
      const breaker = new Breaker(1, 3_600_000, 1000);
      breaker.failure(false);
      (limiter as unknown as { breaker: Breaker }).breaker = breaker;
      const hang = new Promise((ok) => setTimeout(() => ok("waited for the connection"), 10_000).unref());
      assert.equal(await Promise.race([limiter.warm(), hang]), false);
      await assert.rejects(Promise.race([limiter.check("k"), hang.then((why) => new Error(String(why)))]), CircuitOpen);
    } finally {
      client.disconnect();
      await proxy.close();
      server.stop();
    }
  });

  it("refuses a bad connect timeout", () => {
    for (const bad of [0, -1, "1", 3_600_001]) {
      assert.throws(() => new Limiter({} as never, "gcra", QUOTA, { connectTimeoutMs: bad as never }), /connectTimeoutMs must be a positive number/);
    }
  });
});
