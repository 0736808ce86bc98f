// A throwaway redis-server for the tests: random port, no persistence, its
// output in a log file, killed at the end (and when this process exits).

import { spawn, type ChildProcess } from "node:child_process";
import { accessSync, constants, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { Redis, type RedisOptions } from "ioredis";

/** lua/clients/node/dist/testing -> the repository's lua/. */
export const LUA = resolve(fileURLToPath(new URL("../../../..", import.meta.url)));

export function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? ok(address.port) : fail(new Error("no port"))));
    });
  });
}

function which(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? "").split(":")) {
    const path = join(dir, name);
    try {
      accessSync(path, constants.X_OK);
      return path;
    } catch {
      // Not in this folder.
    }
  }
  return undefined;
}

export class RedisServer {
  private constructor(
    readonly port: number,
    private process: ChildProcess,
    private readonly dir: string,
    private readonly args: readonly string[],
  ) {}

  private static spawn(binary: string, args: readonly string[]): ChildProcess {
    const child = spawn(binary, args, { stdio: "ignore" });
    process.once("exit", () => child.kill("SIGKILL"));
    return child;
  }

  static async start(extra: readonly string[] = []): Promise<RedisServer> {
    const binary = process.env.RATELAB_REDIS_SERVER || which("redis-server");
    if (!binary) {
      throw new Error(
        "redis-server not found: install it (Debian/Ubuntu: sudo apt-get install redis-server) or set RATELAB_REDIS_SERVER",
      );
    }
    const dir = mkdtempSync(join(tmpdir(), "ratelab-node-redis-"));
    for (let attempt = 0; attempt < 10; attempt++) {
      const port = await freePort();
      const args = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--dir", dir, "--logfile", join(dir, "redis.log"), ...extra];
      const server = new RedisServer(port, RedisServer.spawn(binary, args), dir, [binary, ...args]);
      if (await server.ready()) return server;
      server.kill();
    }
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`redis-server did not start; see ${join(dir, "redis.log")}`);
  }

  /** Kills it (its connections closed by the kernel); `restart` starts it again, empty, on the same port. */
  kill(): void {
    this.process.kill("SIGCONT");
    this.process.kill("SIGKILL");
  }

  /**
   * A client reconnecting meanwhile may hold the port for a moment (a connection the kernel gave the
   * port itself as its source): tried a few times.
   */
  async restart(): Promise<void> {
    const [binary, ...args] = this.args as [string, ...string[]];
    for (let attempt = 0; attempt < 20; attempt++) {
      if (this.process.exitCode === null && this.process.signalCode === null) {
        await new Promise((ok) => this.process.once("exit", ok));
      }
      this.process = RedisServer.spawn(binary, args);
      if (await this.ready()) return;
      this.kill();
      await new Promise((ok) => setTimeout(ok, 100));
    }
    throw new Error(`redis-server did not start again on port ${this.port}; see ${join(this.dir, "redis.log")}`);
  }

  private async ready(): Promise<boolean> {
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      if (this.process.exitCode !== null) return false;
      const client = this.client({ lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      client.on("error", () => {}); // Not up yet: the loop tries again.
      try {
        await client.connect();
        if ((await client.ping()) === "PONG") return true;
      } catch {
        await new Promise((ok) => setTimeout(ok, 50));
      } finally {
        client.disconnect();
      }
    }
    return false;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}/`;
  }

  client(options: RedisOptions = {}): Redis {
    return new Redis({ host: "127.0.0.1", port: this.port, ...options });
  }

  /** SIGSTOP: the server answers nothing (the kernel still accepts connections into its backlog). */
  pause(): void {
    this.process.kill("SIGSTOP");
  }

  resume(): void {
    this.process.kill("SIGCONT");
  }

  stop(): void {
    this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
