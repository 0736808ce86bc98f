// The Node side of the cross-language tests: the same line protocol as the
// Rust example `protocol_client` (crates/ratelab/examples/protocol_client.rs).
//
//   node dist/testing/protocol_client.js <redis-url> [prefix]
//
// `quota <limit> <period_us> <burst>` answers {"ok":true};
// `check|peek <algorithm> <key> <cost> <now>` (`now` in µs, or `-` for Redis
// TIME) and `refund <algorithm> <key> <cost> <now> <owed>` (µs the admission
// still weighs) answer the decision, or {"error":..,"kind":..}.

import { createInterface } from "node:readline";

import { Redis } from "ioredis";

import { Limiter, Quota, type AlgorithmName } from "../src/index.js";

const [url, prefix = "ratelab"] = process.argv.slice(2);
if (!url) {
  console.error("usage: protocol_client <redis-url> [prefix]");
  process.exit(2);
}
const client = new Redis(url);
let quota = Quota.perSecond(5, 10);
let now = 0;
const limiters = new Map<string, Limiter>();

function limiter(name: AlgorithmName, callerClock: boolean): Limiter {
  const id = `${name} ${quota.limit} ${quota.periodMicros} ${quota.burst} ${callerClock}`;
  let l = limiters.get(id);
  if (!l) {
    l = new Limiter(client, name, quota, {
      prefix,
      clock: callerClock ? () => now : undefined,
      // A loaded test machine: a slow answer is not what is tested.
      timeoutMs: 5_000,
    });
    limiters.set(id, l);
  }
  return l;
}

async function answer(line: string): Promise<unknown> {
  const words = line.split(/\s+/).filter((w) => w !== "");
  const [command, ...args] = words;
  try {
    if (command === "quota" && args.length === 3) {
      const [limit, period, burst] = args.map(Number) as [number, number, number];
      quota = new Quota(limit, period, burst);
      return { ok: true };
    }
    const refund = command === "refund" && args.length === 5;
    if (((command === "check" || command === "peek") && args.length === 4) || refund) {
      const [name, key, cost, at, owed] = args as [string, string, string, string, string?];
      const l = limiter(name as AlgorithmName, at !== "-");
      if (at !== "-") now = Number(at);
      const d = refund
        ? await l.refund(key, Number(cost), Number(owed))
        : await l[command as "check" | "peek"](key, Number(cost));
      return {
        allowed: d.allowed,
        limit: d.limit,
        remaining: d.remaining,
        retry_after_micros: d.retryAfterMicros,
        reset_after_micros: d.resetAfterMicros,
        delay_micros: d.delayMicros,
      };
    }
    return { error: `unknown command: ${line}`, kind: "Usage" };
  } catch (e) {
    return { error: e instanceof Error ? e.message : String(e), kind: e instanceof Error ? e.name : "Error" };
  }
}

// One line at a time, in order: each answer before the next command is read.
const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (line.trim() === "") continue;
  process.stdout.write(JSON.stringify(await answer(line)) + "\n");
}
client.disconnect();
