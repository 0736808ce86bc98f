// The Node side of the cross-language tests: the same line protocol as the
// Rust example `protocol_client` (crates/ratelab/examples/protocol_client.rs).
//
//   node dist/testing/protocol_client.js <redis-url> [prefix]
//
// - `quota <limit> <period_us> <burst>` answers {"ok":true}.
// - `check <algorithm> <key> <cost> <now>` (`now` in µs, or `-` for Redis
//   TIME) answers the decision, and for an admission of a positive cost
//   `receipt` (a number naming its receipt), `stamp_at` and `stamp_mark`.
// - `peek <algorithm> <key> <cost> <now>` answers the decision.
// - `settle <algorithm> <receipt> <actual> <now>` settles that receipt (of
//   this process, for this algorithm and quota) to `actual` units;
//   `refund <algorithm> <receipt> <now>` settles it to 0. A receipt is used
//   once. Answers the decision after it.
// - `reset <algorithm> <key> <now>` answers {"ok":true}.
//
// Anything else answers {"error":..,"kind":"Usage"}; an error of the client
// {"error":..,"kind":<its class>}.

import { createInterface } from "node:readline";

import { Redis } from "ioredis";

import { Limiter, Quota, type AlgorithmName, type Decision, type Receipt } from "../src/index.js";

const [url, prefix = "ratelab"] = process.argv.slice(2);
if (!url) {
  console.error("usage: protocol_client <redis-url> [prefix]");
  process.exit(2);
}
const client = new Redis(url);
let quota = Quota.perSecond(5, 10);
let now = 0;
const limiters = new Map<string, Limiter>();
// Receipts not yet settled, by number, with the limiter that issued them.
const receipts = new Map<number, [string, Receipt]>();
let nextReceipt = 1;

function limiterId(name: string, callerClock: boolean): string {
  return `${name} ${quota.limit} ${quota.periodMicros} ${quota.burst} ${callerClock}`;
}

function limiter(name: AlgorithmName, callerClock: boolean): Limiter {
  const id = limiterId(name, callerClock);
  let l = limiters.get(id);
  if (!l) {
    l = new Limiter(client, name, quota, {
      prefix,
      clock: callerClock ? () => now : undefined,
      // A loaded test machine: a slow answer is not what is tested.
      timeoutMs: 5_000,
      connectTimeoutMs: 30_000,
    });
    limiters.set(id, l);
  }
  return l;
}

function json(d: Decision): Record<string, unknown> {
  return {
    allowed: d.allowed,
    limit: d.limit,
    remaining: d.remaining,
    retry_after_micros: d.retryAfterMicros,
    reset_after_micros: d.resetAfterMicros,
    delay_micros: d.delayMicros,
  };
}

const usage = (line: string) => ({ error: `unknown command: ${line}`, kind: "Usage" });

async function answer(line: string): Promise<unknown> {
  const words = line.split(/\s+/).filter((w) => w !== "");
  const [command, ...args] = words;
  try {
    if (command === "quota" && args.length === 3) {
      const [limit, period, burst] = args.map(Number) as [number, number, number];
      quota = new Quota(limit, period, burst);
      return { ok: true };
    }
    let name: string, what: string, number: string, at: string;
    if ((command === "check" || command === "peek" || command === "settle") && args.length === 4) {
      [name, what, number, at] = args as [string, string, string, string];
    } else if ((command === "refund" || command === "reset") && args.length === 3) {
      [name, what, at] = args as [string, string, string];
      number = "0";
    } else {
      return usage(line);
    }
    const callerClock = at !== "-";
    const l = limiter(name as AlgorithmName, callerClock);
    if (callerClock) now = Number(at);
    switch (command) {
      case "check": {
        const d = await l.check(what, Number(number));
        if (!d.receipt) return json(d);
        const id = nextReceipt++;
        receipts.set(id, [limiterId(name, callerClock), d.receipt]);
        return { ...json(d), receipt: id, stamp_at: d.receipt.stampAt, stamp_mark: d.receipt.stampMark };
      }
      case "peek":
        return json(await l.peek(what, Number(number)));
      case "settle":
      case "refund": {
        const held = receipts.get(Number(what));
        if (!held || held[0] !== limiterId(name, callerClock)) {
          return { error: `no receipt ${what} of this limiter`, kind: "Usage" };
        }
        receipts.delete(Number(what));
        return json(await l.settle(held[1], Number(number)));
      }
      default:
        await l.reset(what);
        return { ok: true };
    }
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
