// The package as a user gets it: `npm pack` on a fresh copy of the
// repository's files (no node_modules, no dist: the prepack step installs
// and builds what it needs), the tarball installed into a fresh Node
// project, and a smoke check from there against a real Redis: the client,
// the Express middleware's entry point, the shipped scripts byte for byte,
// and the TypeScript types (compiled with this repository's tsc).

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";

import { LUA, RedisServer } from "../testing/redis_server.js";

const NODE_DIR = resolve(LUA, "clients", "node");
function run(cmd: string, args: string[], cwd: string): string {
  try {
    return execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 64 << 20 });
  } catch (e) {
    const { stdout, stderr } = e as { stdout?: string; stderr?: string };
    throw new Error(`${cmd} ${args.join(" ")} failed in ${cwd}:\n${String(stdout).slice(-3000)}\n${String(stderr).slice(-3000)}`);
  }
}

let server: RedisServer;
let work: string;

before(async () => {
  server = await RedisServer.start();
  work = mkdtempSync(join(tmpdir(), "ratelab-node-pack-"));
});

after(() => {
  server.stop();
  rmSync(work, { recursive: true, force: true });
});

describe("the npm package", () => {
  it("packs on a fresh checkout, installs into a fresh project, and works there", { timeout: 240_000 }, () => {
    // A fresh checkout: lua/*.lua (links to the crates' scripts, as the
    // files they name), the algorithms' spec, and the client's tracked files
    // only.
    const checkout = join(work, "checkout");
    const lua = join(checkout, "lua");
    mkdirSync(join(lua, "clients"), { recursive: true });
    for (const f of readdirSync(LUA).filter((f) => f.endsWith(".lua"))) {
      cpSync(join(LUA, f), join(lua, f), { dereference: true });
    }
    cpSync(join(LUA, "clients", "algorithms.json"), join(lua, "clients", "algorithms.json"));
    const node = join(lua, "clients", "node");
    for (const entry of ["package.json", "package-lock.json", "tsconfig.json", "src", "test", "testing", "scripts", "README.md"]) {
      cpSync(join(NODE_DIR, entry), join(node, entry), { recursive: true });
    }
    const packed = run("npm", ["pack", "--json", "--pack-destination", work], node);
    const [{ filename, files }] = JSON.parse(packed.slice(packed.indexOf("["))) as [{ filename: string; files: { path: string }[] }];
    const paths = files.map((f) => f.path).sort();
    assert.ok(paths.includes("dist/src/index.d.ts") && paths.includes("dist/src/express.js"), paths.join(" "));
    assert.ok(paths.includes("lua/prologue.lua") && paths.includes("lua/gcra.lua"), paths.join(" "));
    assert.ok(paths.includes("lua/clients/algorithms.json"), paths.join(" "));
    assert.ok(!paths.some((p) => p.startsWith("dist/test") || p.startsWith("src/")), paths.join(" "));

    // A fresh project that depends on the tarball.
    const project = join(work, "project");
    mkdirSync(project);
    writeFileSync(join(project, "package.json"), JSON.stringify({ name: "smoke", private: true, type: "module" }));
    // As a TypeScript project on Node has it: @types/node; and ioredis at the version package-lock.json
    // pins, so that the run is the same on every day (ioredis 6.1.0's own declarations fail to compile
    // with skipLibCheck off, for want of declarations of redis-errors).
    const lock = JSON.parse(readFileSync(join(NODE_DIR, "package-lock.json"), "utf8")) as {
      packages: Record<string, { version: string }>;
    };
    const ioredis = lock.packages["node_modules/ioredis"]?.version;
    assert.ok(ioredis, "package-lock.json pins ioredis");
    run("npm", ["install", "--no-audit", "--no-fund", join(work, filename), `ioredis@${ioredis}`, "@types/node@^20.19.43"], project);
    writeFileSync(
      join(project, "smoke.ts"),
      `import { Redis } from "ioredis";
import { Limiter, Quota, type Decision } from "ratelab-client";
import { Identify, Policy, rateLimit } from "ratelab-client/express";

const redis = new Redis(process.argv[2] ?? "");
// Ten an hour, and a timeout a loaded machine cannot miss: the peek finds what the check left.
const limiter = new Limiter(redis, "gcra", Quota.perHour(10), { prefix: "smoke", timeoutMs: 5000 });
const first: Decision = await limiter.check("alice", 3);
const peeked: Decision = await limiter.peek("alice", 0);
const middleware = rateLimit({ policies: [new Policy("default", limiter)], identify: new Identify({ trustedProxies: ["10.0.0.0/8"] }) });
console.log(JSON.stringify({ first, peeked, middleware: typeof middleware, stats: limiter.stats().answered }));
redis.disconnect();
`,
    );
    writeFileSync(
      join(project, "tsconfig.json"),
      JSON.stringify({ compilerOptions: { target: "es2022", module: "nodenext", strict: true, skipLibCheck: false, types: ["node"] } }),
    );
    // The types as a TypeScript user compiles against them.
    run(process.execPath, [join(NODE_DIR, "node_modules", "typescript", "bin", "tsc"), "-p", "."], project);
    const out = JSON.parse(run(process.execPath, ["smoke.js", server.url], project)) as {
      first: { allowed: boolean; remaining: number };
      peeked: { remaining: number };
      middleware: string;
      stats: number;
    };
    assert.deepEqual([out.first.allowed, out.first.remaining, out.peeked.remaining, out.middleware, out.stats], [true, 7, 7, "function", 2]);
    // The installed package reads the scripts it ships, which are lua/'s.
    const shipped = join(project, "node_modules", "ratelab-client", "lua");
    for (const f of readdirSync(LUA).filter((f) => f.endsWith(".lua"))) {
      assert.deepEqual(readFileSync(join(shipped, f)), readFileSync(join(LUA, f)), f);
    }
    const spec = join("clients", "algorithms.json");
    assert.deepEqual(readFileSync(join(shipped, spec)), readFileSync(join(LUA, spec)));
  });
});
