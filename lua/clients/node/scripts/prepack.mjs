// `npm pack` / `npm publish` step, in plain JavaScript so that it runs on a
// fresh checkout: installs the dev dependencies if they are not there yet
// (`npm ci`, as package-lock.json pins them), builds the TypeScript, and
// copies the scripts from the repository's lua/ (links to the algorithm
// crates' files, followed) and the algorithms' spec (lua/clients/
// algorithms.json) into this package's lua/, so that a packed package ships
// the very files (the tests compare what the client loads with lua/, byte
// for byte).

import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const repoLua = resolve(root, "..", "..");
const npm = process.platform === "win32" ? "npm.cmd" : "npm";
// Their output goes to stderr: `npm pack --json` prints its JSON on stdout.
const run = (args) => execFileSync(npm, args, { cwd: root, stdio: ["ignore", 2, 2] });

if (!existsSync(join(root, "node_modules", "typescript", "package.json"))) {
  console.error("prepack: no dev dependencies yet: npm ci");
  run(["ci", "--no-audit", "--no-fund"]);
}
run(["run", "build"]);

if (!existsSync(join(repoLua, "prologue.lua"))) {
  throw new Error(`prepack: ${repoLua} holds no prologue.lua: pack from ratelab's lua/clients/node`);
}
const target = join(root, "lua");
mkdirSync(join(target, "clients"), { recursive: true });
const files = readdirSync(repoLua).filter((f) => f.endsWith(".lua"));
for (const file of files) copyFileSync(join(repoLua, file), join(target, file));
copyFileSync(join(repoLua, "clients", "algorithms.json"), join(target, "clients", "algorithms.json"));
console.error(`prepack: copied ${files.length} scripts and algorithms.json from ${repoLua} to ${target}`);
