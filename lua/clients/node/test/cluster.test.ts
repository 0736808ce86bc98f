// The limiter on a real Redis Cluster (three masters, ioredis's Cluster):
// keys on every master, the script loaded after NOSCRIPT, one TIME sample of
// every master for all the calls, and a paused master timing a check out
// uncharged.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { after, before, describe, it } from "node:test";

import { Cluster, type Redis } from "ioredis";

import { Limiter, Quota, Timeout } from "../src/index.js";
import { RedisServer } from "../testing/redis_server.js";

const QUOTA = Quota.perMinute(10);
let nodes: RedisServer[] = [];
let admins: Redis[] = [];
let cluster: Cluster;

before(async () => {
  nodes = await Promise.all([0, 1, 2].map(() => RedisServer.start(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])));
  execFileSync("redis-cli", ["--cluster", "create", ...nodes.map((n) => `127.0.0.1:${n.port}`), "--cluster-replicas", "0", "--cluster-yes"], {
    stdio: "ignore",
  });
  admins = nodes.map((n) => n.client());
  for (let i = 0; i < 200; i++) {
    const info = String(await admins[0]!.cluster("INFO"));
    if (info.includes("cluster_state:ok")) break;
    await new Promise((ok) => setTimeout(ok, 100));
  }
  cluster = new Cluster([{ host: "127.0.0.1", port: nodes[0]!.port }]);
  cluster.on("error", () => {});
});

after(() => {
  cluster.disconnect();
  for (const a of admins) a.disconnect();
  for (const n of nodes) n.stop();
});

describe("a Redis Cluster", () => {
  it("checks on every master, one TIME sample of each", async () => {
    for (const a of admins) await a.script("FLUSH");
    const limiter = new Limiter(cluster, "gcra", QUOTA, { prefix: "cluster", logger: null, timeoutMs: 5000 });
    const keys = Array.from({ length: 30 }, (_, i) => `user${i}`);
    for (const key of keys) assert.equal((await limiter.check(key, 3)).remaining, 7);
    for (const key of keys) assert.equal((await limiter.peek(key, 0)).remaining, 7);
    const stats = limiter.stats();
    assert.deepEqual([stats.answered, stats.clockSamples, stats.timeouts, stats.errors], [60, 1, 0, 0]);
    assert.ok(stats.reloads >= 1 && stats.reloads <= 3, `reloads ${stats.reloads}`);
    const sizes = await Promise.all(admins.map((a) => a.dbsize()));
    assert.ok(sizes.every((s) => s > 0), String(sizes));
  });

  it("a paused master times a check out, uncharged", async () => {
    // A timeout a loaded machine cannot miss, and the caller's clock, frozen: what is tested is that the
    // paused master times the call out, while it is still paused, uncharged.
    const limiter = new Limiter(cluster, "gcra", QUOTA, {
      prefix: "clusterpause",
      breaker: { threshold: 0 },
      logger: null,
      timeoutMs: 1000,
      clock: () => 1_700_000_000_000_000,
    });
    // A key whose slot the first master serves.
    const slots = (await admins[0]!.cluster("SLOTS")) as unknown as [number, number, [string, number]][];
    const mine = slots.filter(([, , [, port]]) => port === nodes[0]!.port);
    let key = "";
    for (let i = 0; !key; i++) {
      const slot = Number(await admins[0]!.cluster("KEYSLOT", limiter.redisKey(`k${i}`)));
      if (mine.some(([from, to]) => slot >= from && slot <= to)) key = `k${i}`;
    }
    assert.equal((await limiter.check(key)).remaining, 9);
    nodes[0]!.pause();
    try {
      await assert.rejects(limiter.check(key), Timeout);
    } finally {
      nodes[0]!.resume();
    }
    assert.equal((await limiter.peek(key, 0)).remaining, 9);
  });
});
