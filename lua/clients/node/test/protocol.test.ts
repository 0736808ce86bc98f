// The pure protocol: the shared test vectors (lua/clients/vectors.json,
// which the Rust and Python tests check too), the scripts read from lua/
// byte for byte, and quotas validated as Rust validates them.

import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, it } from "node:test";

import {
  ALGORITHMS,
  MAX_KEY_LEN,
  MAX_STORED_LOG_LIMIT,
  MAX_TTL_SLACK_MS,
  PROTOCOL_VERSION,
  Quota,
  algorithm,
  luaDir,
  redisKey,
  scriptSource,
  specPath,
  type AlgorithmName,
} from "../src/index.js";
import { LUA } from "../testing/redis_server.js";

interface Vectors {
  protocol_version: number;
  max_key_len: number;
  max_ttl_slack_ms: number;
  algorithms: {
    algorithm: AlgorithmName;
    code: string;
    script: string;
    quota: { limit: number; period_us: number; burst: number };
    params: number[];
    capacity: number;
    max_wait_us: number;
    debt: boolean;
    fingerprint_input: string;
    key_suffix: string;
  }[];
  keys: { prefix: string; key_hex: string; suffix: string; redis_key_hex: string; key?: string; redis_key?: string }[];
}

const vectors = JSON.parse(readFileSync(join(LUA, "clients", "vectors.json"), "utf8")) as Vectors;

describe("the shared test vectors", () => {
  it("have this client's protocol version, key length and largest slack", () => {
    assert.equal(PROTOCOL_VERSION, vectors.protocol_version);
    assert.equal(PROTOCOL_VERSION, 5);
    assert.equal(MAX_KEY_LEN, vectors.max_key_len);
    assert.equal(MAX_TTL_SLACK_MS, vectors.max_ttl_slack_ms);
  });

  it("give every algorithm's parameters, capacity, longest wait and fingerprint", () => {
    assert.deepEqual(new Set(vectors.algorithms.map((v) => v.algorithm)), new Set(Object.keys(ALGORITHMS)));
    for (const v of vectors.algorithms) {
      const a = algorithm(v.algorithm, new Quota(v.quota.limit, v.quota.period_us, v.quota.burst));
      const id = `${v.algorithm} ${JSON.stringify(v.quota)}`;
      assert.equal(a.code, v.code, id);
      assert.equal(a.scriptFile, v.script, id);
      assert.deepEqual(a.params, v.params, id);
      assert.equal(a.capacity, v.capacity, id);
      assert.equal(a.maxWaitMicros, v.max_wait_us, id);
      assert.equal(a.debt, v.debt, id);
      assert.equal(a.fingerprintInput, v.fingerprint_input, id);
      assert.equal(a.keySuffix, v.key_suffix, id);
    }
  });

  it("give the Redis key of every user key, byte for byte", () => {
    assert.ok(vectors.keys.length > 20);
    for (const v of vectors.keys) {
      const expected = Buffer.from(v.redis_key_hex, "hex");
      assert.deepEqual(redisKey(v.prefix, Buffer.from(v.key_hex, "hex"), v.suffix), expected, v.key_hex);
      if (v.key !== undefined) {
        // A string key is its UTF-8 bytes.
        assert.deepEqual(redisKey(v.prefix, v.key, v.suffix), expected, v.key);
        assert.deepEqual(Buffer.from(v.redis_key ?? "", "utf8"), expected);
      }
    }
  });
});

describe("algorithms.json, the spec this client reads", () => {
  const spec = JSON.parse(readFileSync(join(LUA, "clients", "algorithms.json"), "utf8")) as {
    protocol_version: number;
    algorithms: { name: string; script: string; params: string[] }[];
  };

  it("is what the client read: every algorithm, in Rust's order, of this protocol version", () => {
    assert.equal(spec.protocol_version, PROTOCOL_VERSION);
    assert.deepEqual(Object.keys(ALGORITHMS), spec.algorithms.map((a) => a.name));
    assert.equal(resolve(specPath()), resolve(join(luaDir(), "clients", "algorithms.json")));
  });

  it("names a script in lua/ for every algorithm, and the vectors cover them all", () => {
    for (const a of spec.algorithms) {
      assert.ok(readFileSync(join(LUA, a.script)).length > 0, a.script);
    }
    assert.deepEqual(new Set(vectors.algorithms.map((v) => v.algorithm)), new Set(spec.algorithms.map((a) => a.name)));
  });
});

describe("the scripts", () => {
  it("are the files in lua/, byte for byte", () => {
    const prologue = readFileSync(join(LUA, "prologue.lua"));
    for (const [name, { script }] of Object.entries(ALGORITHMS)) {
      const expected = Buffer.concat([prologue, readFileSync(join(LUA, script))]);
      assert.deepEqual(Buffer.from(scriptSource(name as AlgorithmName), "utf8"), expected, name);
    }
  });

  it("come from lua/, or from a packed copy equal to it", () => {
    const dir = resolve(luaDir());
    if (dir !== resolve(LUA)) {
      for (const file of readdirSync(LUA).filter((f) => f.endsWith(".lua"))) {
        assert.deepEqual(readFileSync(join(dir, file)), readFileSync(join(LUA, file)), file);
      }
    }
  });
});

describe("a quota", () => {
  it("maps the reference quota as Rust does", () => {
    const q = Quota.perSecond(5, 10);
    assert.deepEqual([q.emissionIntervalMicros, q.burstToleranceMicros, q.windowMicros], [200_000, 2_000_000, 2_000_000]);
    assert.equal(Quota.perMinute(10).burst, 10);
  });

  it("refuses what Rust refuses", () => {
    const cases: [() => Quota, RegExp][] = [
      [() => new Quota(0, 1_000_000), /limit must be at least 1/],
      [() => new Quota(1, 0), /period must be longer than zero/],
      [() => new Quota(1, 1_000_000, 0), /burst must be at least 1/],
      [() => new Quota(2_000_000, 1_000_000), /finer than the time resolution/],
      [() => new Quota(1, 2 ** 50 + 1), /longer than the longest/],
      [() => new Quota(1, 2 ** 40, 2_000), /takes longer to refill/],
      [() => new Quota(1.5, 1_000_000), /non-negative integer/],
    ];
    for (const [build, message] of cases) assert.throws(build, message);
  });
});

describe("a sliding log on Redis", () => {
  it("takes at most MAX_STORED_LOG_LIMIT units: one sorted-set member each", () => {
    assert.equal(MAX_STORED_LOG_LIMIT, 10_000);
    const cap = MAX_STORED_LOG_LIMIT ?? assert.fail("algorithms.json gives the sliding log a cap");
    assert.equal(algorithm("sliding-log", Quota.perHour(cap)).capacity, 10_000);
    assert.throws(() => algorithm("sliding-log", Quota.perHour(cap + 1)), /sliding counter/);
    assert.throws(() => algorithm("sliding-log", Quota.perSecond(5, 4_000_000_000)), RangeError);
    // Other algorithms keep one value a key, whatever the burst.
    assert.equal(algorithm("sliding-counter", Quota.perHour(1_000_000)).capacity, 1_000_000);
  });
});
