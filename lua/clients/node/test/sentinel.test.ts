// The limiter through a Sentinel-managed connection (ioredis's `sentinels`
// option): a primary, its replica and a sentinel, all real processes. The
// primary is killed; the sentinel promotes the replica; ioredis asks the
// sentinel where the primary is now, and the limiter carries on with the
// state the replica holds. While there is no primary, checks fail as
// outages (the failure policy's business), never as data errors.

import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { Redis } from "ioredis";

import { Limiter, Quota, RatelabError, Unavailable } from "../src/index.js";
import { freePort, RedisServer } from "../testing/redis_server.js";

const SERVICE = "ratelab-primary";
const sleep = (ms: number) => new Promise((ok) => setTimeout(ok, ms));

let primary: RedisServer;
let replica: RedisServer;
let sentinel: ChildProcess;
let sentinelPort: number;
let dir: string;
const admins: Redis[] = [];

async function until(ready: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    if (await ready().catch(() => false)) return;
    await sleep(50);
  }
  throw new Error(what);
}

function admin(port: number): Redis {
  const client = new Redis({ host: "127.0.0.1", port, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on("error", () => {});
  admins.push(client);
  return client;
}

async function primaryPort(): Promise<number> {
  const reply = (await admin(sentinelPort).call("SENTINEL", "get-master-addr-by-name", SERVICE)) as string[];
  return Number(reply[1]);
}

before(async () => {
  // Its replica syncs at once, not after the default 5 s wait for more.
  primary = await RedisServer.start(["--repl-diskless-sync-delay", "0"]);
  replica = await RedisServer.start(["--replicaof", "127.0.0.1", String(primary.port)]);
  dir = mkdtempSync(join(tmpdir(), "ratelab-node-sentinel-"));
  sentinelPort = await freePort();
  const config = join(dir, "sentinel.conf");
  writeFileSync(
    config,
    [
      `port ${sentinelPort}`,
      "bind 127.0.0.1",
      `dir ${dir}`,
      `logfile ${join(dir, "sentinel.log")}`,
      `sentinel monitor ${SERVICE} 127.0.0.1 ${primary.port} 1`,
      `sentinel down-after-milliseconds ${SERVICE} 300`,
      `sentinel failover-timeout ${SERVICE} 2000`,
      "",
    ].join("\n"),
  );
  const binary = process.env.RATELAB_REDIS_SERVER || "redis-server";
  sentinel = spawn(binary, [config, "--sentinel"], { stdio: "ignore" });
  process.once("exit", () => sentinel.kill("SIGKILL"));
  await until(async () => (await primaryPort()) === primary.port, "the sentinel did not see the primary");
  await until(async () => String(await admin(replica.port).info("replication")).includes("master_link_status:up"), "the replica did not sync");
});

after(() => {
  for (const a of admins) a.disconnect();
  sentinel.kill("SIGKILL");
  replica.stop();
  primary.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("Redis Sentinel", () => {
  it("a failover through the sentinel keeps the replicated state", async () => {
    const client = new Redis({
      sentinels: [{ host: "127.0.0.1", port: sentinelPort }],
      name: SERVICE,
      sentinelRetryStrategy: () => 50,
      retryStrategy: () => 50,
    });
    client.on("error", () => {});
    const limiter = new Limiter(client, "gcra", Quota.perHour(10), {
      prefix: "sentinel",
      timeoutMs: 1000,
      breaker: { threshold: 0 },
      logger: null,
    });
    for (const left of [9, 8, 7]) assert.equal((await limiter.check("k", 1)).remaining, left);
    // Every admission on the replica before the primary goes: this test is
    // about finding the new primary, not what asynchronous replication may lose.
    // The replica's offset reaching the primary's is the event (WAIT from a
    // connection that wrote nothing counts only the replicas that acknowledged
    // lately, which a loaded machine may not).
    const offset = async (port: number, field: string): Promise<number> => {
      const info = String(await admin(port).info("replication"));
      const line = info.split("\r\n").find((l) => l.startsWith(`${field}:`));
      return Number(line?.slice(field.length + 1) ?? -1);
    };
    const target = await offset(primary.port, "master_repl_offset");
    await until(async () => (await offset(replica.port, "slave_repl_offset")) >= target, "the replica did not catch up");
    primary.stop();

    let outages = 0;
    const deadline = Date.now() + 30_000;
    let remaining: number | undefined;
    while (remaining === undefined) {
      try {
        remaining = (await limiter.check("k", 1)).remaining;
      } catch (e) {
        if (!(e instanceof Unavailable)) {
          assert.fail(`a failover answered ${String(e)} (${e instanceof RatelabError ? "a data error" : "not a ratelab error"}), not an outage`);
        }
        outages++;
        assert.ok(Date.now() < deadline, `no new primary within 30 s (${outages} outages)`);
        await sleep(50);
      }
    }
    assert.equal(await primaryPort(), replica.port);
    // The replica's copy: three taken before, this one now.
    assert.equal(remaining, 6);
    assert.equal((await limiter.peek("k", 0)).remaining, 6);
    console.log(`# ${outages} checks failed as outages during the failover, then served`);
    client.disconnect();
  });
});
