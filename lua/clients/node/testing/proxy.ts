// A TCP proxy in front of a redis-server, for faults a server does not show
// on cue: connections held before they reach it (a host slow to accept), and
// its replies held back after it ran what it was sent (a stall between a
// script and its reply).

import { connect, createServer, type Server, type Socket } from "node:net";

import { Redis, type RedisOptions } from "ioredis";

export class Proxy {
  /** `performance.now()` instants at which each connection was accepted. */
  readonly accepted: number[] = [];
  private connecting = true;
  private replying = true;
  private readonly waitingToConnect: (() => void)[] = [];
  private readonly heldReplies: (() => void)[] = [];
  private readonly sockets = new Set<Socket>();
  private readonly onAccept: (() => void)[] = [];

  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}

  static start(upstream: number): Promise<Proxy> {
    return new Promise((ok) => {
      const server = createServer();
      server.listen(0, "127.0.0.1", () => {
        const address = server.address();
        const proxy = new Proxy(server, typeof address === "object" && address ? address.port : 0);
        server.on("connection", (client) => proxy.serve(client, upstream));
        ok(proxy);
      });
    });
  }

  client(options: RedisOptions = {}): Redis {
    return new Redis({ host: "127.0.0.1", port: this.port, ...options });
  }

  /** New connections are accepted, then reach Redis only on `releaseConnections`. */
  holdConnections(): void {
    this.connecting = false;
  }

  releaseConnections(): void {
    this.connecting = true;
    for (const go of this.waitingToConnect.splice(0)) go();
  }

  /** What Redis sends back waits in the proxy until `releaseReplies`; what clients send still reaches it. */
  holdReplies(): void {
    this.replying = false;
  }

  releaseReplies(): void {
    this.replying = true;
    for (const send of this.heldReplies.splice(0)) send();
  }

  /** Resolves once `n` connections have been accepted. */
  accepts(n: number): Promise<void> {
    return new Promise((ok) => {
      const check = () => {
        if (this.accepted.length >= n) ok();
        else this.onAccept.push(check);
      };
      check();
    });
  }

  close(): Promise<void> {
    this.releaseConnections();
    this.releaseReplies();
    for (const socket of this.sockets) socket.destroy();
    return new Promise((ok) => this.server.close(() => ok()));
  }

  private serve(client: Socket, upstream: number): void {
    this.sockets.add(client);
    client.on("close", () => this.sockets.delete(client));
    client.on("error", () => {});
    this.accepted.push(performance.now());
    for (const check of this.onAccept.splice(0)) check();
    // Until the connection goes on, what the client sends waits in its socket.
    client.pause();
    const go = () => {
      const server = connect(upstream, "127.0.0.1");
      this.sockets.add(server);
      server.on("close", () => {
        this.sockets.delete(server);
        client.end();
      });
      server.on("error", () => client.destroy());
      client.on("close", () => server.destroy());
      client.on("data", (data) => server.write(data));
      server.on("data", (data) => {
        if (this.replying) client.write(data);
        else this.heldReplies.push(() => client.write(data));
      });
      client.resume();
    };
    if (this.connecting) go();
    else this.waitingToConnect.push(go);
  }
}
