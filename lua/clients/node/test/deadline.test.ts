// A check that timed out is never charged: checks (each on its own key,
// timeout 100 ms) start every 10 ms all through a pause of a real
// redis-server (SIGSTOP for 150, 300 and 450 ms); after SIGCONT each key is
// peeked: every check that timed out (or that the script refused as expired)
// left its key full, every check that was answered took its unit.
//
// Before the deadline was placed on a measured clock, the scripts ran until
// `now + timeout + 500 ms` (and the client waited for ioredis without a
// timeout): every check of these pauses was charged, its caller gone.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Expired, Limiter, Quota, Timeout } from "../src/index.js";
import { RedisServer } from "../testing/redis_server.js";

const QUOTA = Quota.perMinute(10);
const sleep = (ms: number) => new Promise((ok) => setTimeout(ok, ms));

describe("checks through a paused Redis", () => {
  for (const pause of [150, 300, 450]) {
    it(`${pause} ms pause: no check that timed out is charged`, async () => {
      const server = await RedisServer.start();
      const client = server.client();
      try {
        const limiter = new Limiter(client, "gcra", QUOTA, { breaker: { threshold: 0 }, quotaCheckEvery: null, logger: null });
        await limiter.check("warm", 0); // connected, script loaded, clock sampled
        // 5 ms off the 10 ms grid: no check gives up just as the server resumes.
        const starts: number[] = [];
        for (let at = 5; at < pause; at += 10) starts.push(at);
        const outcomes = new Map<string, string>();
        const stopped = performance.now() + 20;
        const runs = starts.map(async (at, i) => {
          await sleep(stopped + at - performance.now());
          const key = `k${i}`;
          try {
            await limiter.check(key);
            outcomes.set(key, "answered");
          } catch (e) {
            outcomes.set(key, e instanceof Timeout ? "timeout" : e instanceof Expired ? "expired" : String(e));
          }
        });
        await sleep(stopped - performance.now());
        server.pause();
        await sleep(pause);
        server.resume();
        await Promise.all(runs);
        const peek = new Limiter(client, "gcra", QUOTA, { timeoutMs: null });
        const charged = [];
        for (const [key, outcome] of outcomes) {
          assert.ok(["answered", "timeout", "expired"].includes(outcome), `${key}: ${outcome}`);
          const left = (await peek.peek(key, 0)).remaining;
          if (outcome === "answered") assert.equal(left, 9, key);
          else if (left !== 10) charged.push(key);
        }
        assert.deepEqual(charged, [], `checks charged after their caller gave up`);
        const timedOut = [...outcomes.values()].filter((o) => o === "timeout").length;
        assert.ok(timedOut >= 5, `only ${timedOut} timed out`);
        console.log(`# ${pause} ms pause: ${timedOut} timed out, ${[...outcomes.values()].filter((o) => o === "answered").length} answered`);
      } finally {
        client.disconnect();
        server.stop();
      }
    });
  }
});
