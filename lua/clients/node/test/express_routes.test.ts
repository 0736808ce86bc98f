// A policy on a route counts every request Express runs that route's handler
// for, however its path is spelled, and only those: the handler that
// answered is the oracle. The lists below say which spellings are expected
// to reach it, under Express's default routing (case-insensitive, a
// trailing slash allowed) and under `case sensitive routing` and `strict
// routing`, so that a change in Express shows here, not as a silent bypass.

import assert from "node:assert/strict";
import type { Server } from "node:http";
import { connect, type AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";

import express from "express";
import type { Redis } from "ioredis";

import { Limiter, Quota } from "../src/index.js";
import { EXACT_ROUTING, Policy, Route, rateLimit } from "../src/express.js";
import { RedisServer } from "../testing/redis_server.js";

let redisServer: RedisServer;
let redis: Redis;
let run = 0;

before(async () => {
  redisServer = await RedisServer.start();
  redis = redisServer.client();
});

after(() => {
  redis.disconnect();
  redisServer.stop();
});

interface Answer {
  status: number;
  handler: string | undefined;
  policy: string;
  left: string;
}

/** One request with its target exactly as given (node:http would refuse some). */
function sendRaw(port: number, method: string, target: string): Promise<Answer> {
  return new Promise((ok, fail) => {
    const socket = connect(port, "127.0.0.1", () => {
      socket.write(`${method} ${target} HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
    });
    let data = "";
    socket.setEncoding("latin1");
    socket.setTimeout(10_000, () => socket.destroy(new Error(`${method} ${target}: no answer`)));
    socket.on("data", (chunk: string) => (data += chunk));
    socket.on("error", fail);
    socket.on("end", () => {
      const head = data.split("\r\n\r\n", 1)[0] ?? "";
      const [status, ...lines] = head.split("\r\n");
      const field = (name: string) =>
        lines.find((l) => l.toLowerCase().startsWith(`${name}:`))?.slice(name.length + 1).trim();
      ok({
        status: Number(status?.split(" ")[1]),
        handler: field("x-handler"),
        policy: field("ratelimit-policy") ?? "",
        left: field("ratelimit") ?? "",
      });
    });
  });
}

type Settings = { caseSensitive: boolean; strict: boolean };

// [target, the handler Express runs for POST target: default routing, with both settings on]
const SPELLINGS: [string, string, string][] = [
  ["/login", "login", "login"],
  ["/login?next=/x", "login", "login"],
  ["/login#x", "login", "login"],
  ["http://test/login", "login", "login"],
  ["/LOGIN", "login", "other"],
  ["/Login", "login", "other"],
  ["/login/", "login", "other"],
  ["/LOGIN/", "login", "other"],
  ["/login#/x", "login", "login"],
  ["/x#/login", "other", "other"],
  ["/login\\", "other", "other"],
  ["/log%69n", "other", "other"],
  ["/login//", "other", "other"],
  ["/login;x=1", "other", "other"],
  ["//login", "other", "other"],
  ["/a/../login", "other", "other"],
  ["/login%2F", "other", "other"],
  ["/login%20", "other", "other"],
  ["/users/7/reset", "reset", "reset"],
  ["/users/a%2Fb/reset", "reset", "reset"],
  ["/users/%2F/reset", "reset", "reset"],
  ["/USERS/7/Reset", "reset", "other"],
  ["/users/7/reset/", "reset", "other"],
  ["/%75sers/7/reset", "other", "other"],
  ["/users//reset", "other", "other"],
  ["/users/7/x/reset", "other", "other"],
];

async function check(settings: Settings, mount: string) {
  const prefix = `express-routes${process.pid}-${run++}`;
  const options = { prefix, clock: () => 1_700_000_000_000_000, quotaCheckEvery: null, logger: null, timeoutMs: 5000 };
  const policy = (name: string, pattern: string) =>
    new Policy(name, new Limiter(redis, "gcra", Quota.perHour(1000), options), { routes: [["POST", pattern]], timeoutMs: 5000 });
  const app = express();
  if (settings.caseSensitive) app.enable("case sensitive routing");
  if (settings.strict) app.enable("strict routing");
  const answer = (name: string) => (_req: express.Request, res: express.Response) => {
    res.set("x-handler", name).end();
  };
  const limit = rateLimit({ policies: [policy("login", `${mount}/login`), policy("reset", `${mount}/users/{id}/reset`)], logger: null });
  const routes = express.Router({ caseSensitive: settings.caseSensitive, strict: settings.strict });
  routes.post("/login", answer("login"));
  routes.post("/users/:id/reset", answer("reset"));
  if (mount) {
    app.use(mount, limit, routes);
  } else {
    app.use(limit);
    app.post("/login", answer("login"));
    app.post("/users/:id/reset", answer("reset"));
  }
  app.use(answer("other"));
  const server: Server = await new Promise((ok) => {
    const s = app.listen(0, "127.0.0.1", () => ok(s));
  });
  try {
    const port = (server.address() as AddressInfo).port;
    const counted: Record<string, number> = { login: 0, reset: 0 };
    const expected: Record<string, number> = { login: 0, reset: 0 };
    // Mounted: the spellings of the path after the mount point (the others are read before routing).
    for (const [spelling, byDefault, byBoth] of SPELLINGS.filter(([s]) => !mount || s.startsWith("/"))) {
      const target = mount + spelling;
      const want = settings.caseSensitive ? byBoth : byDefault;
      const got = await sendRaw(port, "POST", target);
      assert.equal(got.handler, want, `POST ${target}: Express ran the ${got.handler} handler (${got.status})`);
      for (const name of ["login", "reset"]) {
        const applied = got.policy.includes(`"${name}"`);
        assert.equal(applied, got.handler === name, `POST ${target}: reached ${got.handler}; counted on ${name}: ${applied}`);
        if (got.handler === name) expected[name]! += 1;
        if (applied) {
          // One unit more taken on the policy's one key.
          counted[name]! += 1;
          assert.ok(got.left.startsWith(`"${name}";r=${1000 - counted[name]!};`), `POST ${target}: RateLimit ${got.left}`);
        }
      }
    }
    assert.deepEqual(counted, expected);
    assert.ok(expected.login! >= 4 && expected.reset! >= 3, JSON.stringify(expected));
    // GET is not the POST route's method.
    const get = await sendRaw(port, "GET", `${mount}/login`);
    assert.deepEqual([get.handler, get.policy], ["other", ""]);
  } finally {
    await new Promise((ok) => server.close(ok));
  }
}

describe("a route's policy counts every spelling Express routes to its handler", () => {
  it("with the default routing: case-insensitive, a trailing slash allowed", () => check({ caseSensitive: false, strict: false }, ""));
  it("with case sensitive and strict routing", () => check({ caseSensitive: true, strict: true }, ""));
  it("mounted under a path, on a router of its own", () => check({ caseSensitive: false, strict: false }, "/api"));
});

describe("Route under a routing", () => {
  it("compares literal segments as text, in any case only when routing is not case-sensitive", () => {
    const route = new Route("POST", "/a.b+(c)/x$y");
    const loose = { caseSensitive: false, strict: false };
    assert.ok(route.matches("POST", "/A.B+(C)/X$Y", loose));
    assert.ok(route.matches("POST", "/a.b+(c)/x$y/", loose));
    assert.ok(!route.matches("POST", "/a.b+(c)/x$y//", loose));
    assert.ok(!route.matches("POST", "/aXb+(c)/x$y", loose));
    assert.ok(!route.matches("POST", "/A.b+(c)/x$y", EXACT_ROUTING));
    assert.ok(!route.matches("POST", "/a.b+(c)/x$y/"));
    assert.ok(route.matches("POST", "/a.b+(c)/x$y"));
  });
});
