// The Express middleware through a real HTTP server: Express on a
// dual-stack socket, requests from node:http bound to the peer address each
// case names (127.0.0.x, ::1). The cases are lua/clients/http/cases.json,
// which the ASGI middleware's tests and ratelab-http's
// (crates/http/tests/it/shared_cases.rs) run too.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { request as httpRequest, type IncomingHttpHeaders, type Server } from "node:http";
import { createServer as netServer, type AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import express from "express";
import { Redis } from "ioredis";

import { Limiter, Quota, type AlgorithmName } from "../src/index.js";
import { Identify, Policy, TrustedProxies, header, rateLimit, type RateLimitInfo } from "../src/express.js";
import { LUA, RedisServer } from "../testing/redis_server.js";

interface Step {
  at_us: number;
  note?: string;
  request: { method: string; path: string; peer: string; headers: [string, string][] };
  response: { status: number; headers: Record<string, string | null>; body?: string; problem?: Record<string, unknown> };
}
interface PolicySpec {
  name: string;
  algorithm: AlgorithmName;
  quota: { limit: number; period_us: number; burst: number };
  routes?: [string, string][];
  key?: { header: string };
  cost?: number;
  failure?: "open" | "closed";
  redis?: "down";
  count?: "all" | "failures" | "successes";
}
interface Suite {
  name: string;
  identify?: { trusted_proxies?: string[]; header?: string };
  policies: PolicySpec[];
  steps: Step[];
}
const CASES = JSON.parse(readFileSync(join(LUA, "clients", "http", "cases.json"), "utf8")) as { t0_us: number; suites: Suite[] };

let redisServer: RedisServer;
let down: Redis;
let up: Redis;
let suiteNo = 0;

function freePort(): Promise<number> {
  return new Promise((ok) => {
    const s = netServer().listen(0, "127.0.0.1", () => {
      const port = (s.address() as AddressInfo).port;
      s.close(() => ok(port));
    });
  });
}

before(async () => {
  redisServer = await RedisServer.start();
  up = redisServer.client();
  // Nothing listens there: every call fails (connection refused).
  down = new Redis({ host: "127.0.0.1", port: await freePort(), lazyConnect: true, maxRetriesPerRequest: 0 });
  down.on("error", () => {});
});

after(() => {
  up.disconnect();
  down.disconnect();
  redisServer.stop();
});

function send(port: number, step: Step): Promise<{ status: number; headers: IncomingHttpHeaders; body: string }> {
  const { method, path, peer, headers } = step.request;
  return new Promise((ok, fail) => {
    const req = httpRequest(
      {
        host: peer.includes(":") ? "::1" : "127.0.0.1",
        port,
        method,
        path,
        localAddress: peer,
        // Raw headers keep repeated lines; with them Node adds no Host.
        headers: [["host", "localhost"], ...headers].flatMap((h) => h),
      },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (body += chunk));
        res.on("end", () => ok({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.on("error", fail);
    req.end();
  });
}

describe("the shared HTTP cases through Express", () => {
  for (const suite of CASES.suites) {
    it(suite.name, async () => {
      let now = CASES.t0_us;
      const prefix = `express${process.pid}-${suiteNo++}`;
      const policies = suite.policies.map((spec) => {
        const limiter = new Limiter(
          spec.redis === "down" ? down : up,
          spec.algorithm,
          new Quota(spec.quota.limit, spec.quota.period_us, spec.quota.burst),
          // A loaded machine (test files run in parallel): a slow answer is not what is tested.
          { prefix, clock: () => now, quotaCheckEvery: null, logger: null, timeoutMs: 2000, connectTimeoutMs: 30_000 },
        );
        const keyHeader = spec.key?.header;
        return new Policy(spec.name, limiter, {
          routes: spec.routes ?? [],
          key: keyHeader ? (request) => header(request, keyHeader) : undefined,
          cost: spec.cost ?? 1,
          failure: spec.failure ?? "open",
          count: spec.count ?? "all",
          timeoutMs: 2000,
        });
      });
      const identify = new Identify({
        trustedProxies: new TrustedProxies(suite.identify?.trusted_proxies ?? [], suite.identify?.header ?? "x-forwarded-for"),
      });
      const app = express();
      app.use(rateLimit({ policies, identify, logger: null }));
      app.use((req, res) => {
        // The status the request asks for (the counting cases' failures).
        res.status(Number(req.get("x-respond-status") ?? 200));
        res.type("text/plain").send((req as unknown as { rateLimit: RateLimitInfo }).rateLimit.client.key);
      });
      const server: Server = await new Promise((ok) => {
        const s = app.listen(0, "::", () => ok(s));
      });
      const port = (server.address() as AddressInfo).port;
      try {
        for (const [i, step] of suite.steps.entries()) {
          now = CASES.t0_us + step.at_us;
          const got = await send(port, step);
          const where = `${suite.name}, step ${i + 1} (${step.note ?? ""})`;
          const headers: Record<string, string | null> = {};
          for (const name of Object.keys(step.response.headers)) {
            const value = got.headers[name];
            headers[name] = value === undefined ? null : Array.isArray(value) ? value.join(", ") : value;
          }
          assert.deepEqual([got.status, headers], [step.response.status, step.response.headers], where);
          if (step.response.body !== undefined) assert.equal(got.body, step.response.body, where);
          if (step.response.problem !== undefined) {
            assert.equal(got.headers["content-type"], "application/problem+json", where);
            const problem = JSON.parse(got.body) as Record<string, unknown>;
            assert.deepEqual(problem, step.response.problem, where);
            assert.deepEqual(Object.keys(problem), Object.keys(step.response.problem), where);
          }
        }
      } finally {
        await new Promise((ok) => server.close(ok));
      }
    });
  }

  it("is all or nothing under concurrency", async () => {
    // 30 requests at once under a narrow policy (3 per hour) and three wide ones (100 per hour: a fixed
    // window, a sliding log, a GCRA). A wide window ends up holding exactly the requests that passed: what
    // it took for the ones the narrow policy refused was given back by receipt. A debt (GCRA) gives back at
    // least one and never more than it took: refunds of admissions other than the last meet the ledger's
    // conservative bound, as ratelab-http's do on Redis. Peeking first, as the middleware did before
    // receipts, every request saw the same 3 remaining and each wide policy was charged for all 30.
    const prefix = `express${process.pid}-concurrent`;
    const clock = () => CASES.t0_us;
    const options = { prefix, clock, quotaCheckEvery: null, logger: null, timeoutMs: 5000, connectTimeoutMs: 30_000 };
    const limiter = (name: AlgorithmName, limit: number) => new Limiter(up, name, Quota.perHour(limit), options);
    // The narrow limiter's calls wait until all 30 requests are being decided (3 s at most): every
    // decision overlaps every other, whatever order the connections arrive in.
    let arrived = 0;
    let open = () => {};
    const gate = new Promise<void>((ok) => (open = ok));
    const fallback = setTimeout(() => open(), 3000);
    class Gated extends Limiter {
      override async check(key: string | Uint8Array, cost = 1) {
        if (++arrived === 30) open();
        await gate;
        return super.check(key, cost);
      }
    }
    const wide: [string, AlgorithmName][] = [["wide-fw", "fixed-window"], ["wide-sl", "sliding-log"], ["wide-gcra", "gcra"]];
    const policies = [
      new Policy("narrow", new Gated(up, "gcra", Quota.perHour(3), options), { timeoutMs: 5000 }),
      ...wide.map(([name, alg]) => new Policy(name, limiter(alg, 100), { timeoutMs: 5000 })),
    ];
    const app = express();
    app.use(rateLimit({ policies, logger: null }));
    app.use((_req, res) => {
      res.send("ok");
    });
    const server: Server = await new Promise((ok) => {
      const s = app.listen(0, "::", () => ok(s));
    });
    try {
      const port = (server.address() as AddressInfo).port;
      const step = { at_us: 0, request: { method: "GET", path: "/", peer: "127.0.0.1", headers: [] }, response: { status: 0, headers: {} } };
      const statuses = (await Promise.all(Array.from({ length: 30 }, () => send(port, step)))).map((r) => r.status);
      assert.equal(statuses.filter((s) => s === 200).length, 3, String(statuses));
      assert.equal(statuses.filter((s) => s === 429).length, 27, String(statuses));
      const left: Record<string, number> = {};
      for (const [name, alg] of wide) left[name] = (await limiter(alg, 100).peek(`${name}:ip:127.0.0.1`, 0)).remaining;
      console.log(`# after 30 requests at once, 3 passed: ${JSON.stringify(left)} remaining of 100`);
      // Every unit a refused request took is given back, in any order.
      assert.deepEqual([left["wide-fw"], left["wide-sl"], left["wide-gcra"]], [97, 97, 97]);
    } finally {
      clearTimeout(fallback);
      await new Promise((ok) => server.close(ok));
    }
  });

  it("refuses a bad configuration with a clear error", () => {
    const limiter = new Limiter(up, "gcra", Quota.perMinute(5));
    assert.throws(() => new Policy("a:b", limiter), /policy name "a:b"/);
    assert.throws(() => new Policy("p", limiter, { failure: "maybe" as never }), /failure is "open" or "closed"/);
    assert.throws(() => new Policy("p", limiter, { count: "errors" as never }), /count is "all", "failures" or "successes"/);
    assert.throws(() => new Policy("p", limiter, { routes: [["POST", "login"]] }), /invalid route pattern "login"/);
    assert.throws(() => new Policy("p", limiter, { routes: [[null, "/{*rest}/x"]] }), /catch-all/);
    assert.throws(() => rateLimit({ policies: [new Policy("p", limiter), new Policy("p", limiter)] }), /two policies are named "p"/);
    assert.throws(() => new TrustedProxies(["proxy.local"]), /host names are not resolved/);
    assert.throws(() => new TrustedProxies([], "x-real-ip"), /x-forwarded-for or forwarded/);
  });
});
