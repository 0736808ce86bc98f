// `npm pack` / `npm publish` step: copies the scripts from the repository's
// lua/ into this package's lua/, so that a packed package ships the very
// files (the tests compare what the client loads with lua/, byte for byte).

import { copyFileSync, mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { ALGORITHMS } from "./protocol.js";

const root = resolve(fileURLToPath(new URL("../..", import.meta.url)));
const repoLua = resolve(root, "..", "..");
const target = join(root, "lua");
mkdirSync(target, { recursive: true });
for (const file of ["prologue.lua", ...Object.values(ALGORITHMS).map((a) => a.script)]) {
  copyFileSync(join(repoLua, file), join(target, file));
}
console.log(`copied the scripts from ${repoLua} to ${target}`);
