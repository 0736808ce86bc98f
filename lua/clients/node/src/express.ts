// Rate limiting middleware for Express (and Connect, or a plain `node:http`
// handler chain), behaving as the Rust `ratelab-http` layer: the same client
// identity, policies, rounds, `429`/`503` responses and
// `RateLimit-Policy`/`RateLimit` fields (see `./http.ts`).
//
//   import express from "express";
//   import { Redis } from "ioredis";
//   import { Limiter, Quota } from "ratelab-client";
//   import { Identify, Policy, rateLimit } from "ratelab-client/express";
//
//   const redis = new Redis();
//   redis.on("error", (error) => console.warn(`redis: ${error.message}`)); // else Node prints each failed reconnection
//   const app = express();
//   app.use(rateLimit({
//     policies: [
//       new Policy("default", new Limiter(redis, "gcra", Quota.perMinute(100))),
//       new Policy("login", new Limiter(redis, "gcra", new Quota(5, 900_000_000)), {
//         routes: [["POST", "/login"]], failure: "closed",
//         key: (request) => header(request, "x-account"),
//       }),
//     ],
//     identify: new Identify({ trustedProxies: ["10.0.0.0/8"] }),
//   }));
//
// Express's own `trust proxy` setting is not read: the middleware reads the
// socket's peer address and believes forwarding headers only from its own
// trusted proxies.
//
// A policy that counts only failures (or successes) refunds the request's
// receipt once the response head says it does not count: the middleware
// holds the head (and what is written after it) until then, bounded by the
// policy's timeout, so that its `RateLimit` fields show the key as the refund
// left it and the client's next request sees it. A request whose response
// never starts keeps its charge.

import type { IncomingMessage, ServerResponse } from "node:http";

import { Identify, decide, match, settleAfterResponse, type Client, type Failure, type Headers, type Policy, type Verdict } from "./http.js";
import type { Logger } from "./resilience.js";

export {
  DEFAULT_POLICY_TIMEOUT_MS,
  Identify,
  Policy,
  QUOTA_EXCEEDED,
  Report,
  Route,
  TrustedProxies,
  Verdict,
  canonical,
  completeNext,
  decide,
  header,
  match,
  settleAfterResponse,
  waitFor,
  type Client,
  type Failure,
  type Headers,
  type Identity,
  type IdentifyOptions,
  type PolicyOptions,
  type Request,
} from "./http.js";

export interface RateLimitOptions {
  /** The policies, names unique, in the order their fields are listed. */
  policies: readonly Policy[];
  /** Who the client is (default: by IP, no trusted proxy). */
  identify?: Identify;
  /** Called with every limiter failure. */
  onFailure?: (failure: Failure) => void;
  /** Where a warning goes, at most once a second per policy (default `console`; `null`: nowhere). */
  logger?: Logger | null;
}

/** What a request that passed carries: `req.rateLimit`. */
export interface RateLimitInfo {
  readonly verdict: Verdict;
  readonly client: Client;
}

type Next = (error?: unknown) => void;

/**
 * Holds `res`'s head, and everything written after it, from the first
 * `writeHead`, `flushHeaders`, `write` or `end` (its status known) until
 * `before(status)` settles; then lets them through, in order.
 */
function holdHead(res: ServerResponse, before: (status: number) => Promise<void>): void {
  type Method = (...args: unknown[]) => unknown;
  const r = res as unknown as Record<"writeHead" | "write" | "end" | "flushHeaders", Method>;
  const originals = { writeHead: r.writeHead, write: r.write, end: r.end, flushHeaders: r.flushHeaders };
  const queue: (() => void)[] = [];
  let held = false;
  const release = () => {
    Object.assign(r, originals);
    for (const replay of queue.splice(0)) replay();
  };
  const hold = (status: number) => {
    if (held) return;
    held = true;
    before(status).catch(() => undefined).finally(release);
  };
  const intercept = (name: keyof typeof originals, returns: (args: unknown[]) => unknown) => {
    r[name] = (...args: unknown[]) => {
      hold(name === "writeHead" && typeof args[0] === "number" ? args[0] : res.statusCode);
      queue.push(() => originals[name].apply(res, args));
      return returns(args);
    };
  };
  intercept("writeHead", () => res);
  intercept("flushHeaders", () => undefined);
  intercept("write", () => true);
  intercept("end", () => res);
}

/** The middleware: `(req, res, next)`; a request that passes gets `req.rateLimit`. */
export function rateLimit(options: RateLimitOptions): (req: IncomingMessage, res: ServerResponse, next: Next) => void {
  const policies = [...options.policies];
  const names = policies.map((p) => p.name);
  const duplicate = names.find((n, i) => names.indexOf(n) !== i);
  if (duplicate !== undefined) throw new RangeError(`two policies are named ${JSON.stringify(duplicate)}`);
  const identify = options.identify ?? new Identify();
  const logger = options.logger === undefined ? console : options.logger;
  const logged = new Map<string, number>();

  const alert = (verdict: Verdict) => {
    for (const failure of verdict.failures) {
      options.onFailure?.(failure);
      const now = performance.now();
      if (now - (logged.get(failure.policy) ?? -Infinity) >= 1000) {
        logged.set(failure.policy, now);
        logger?.warn(
          `rate limiter of policy ${failure.policy} failed for ${failure.client.key}: ${failure.error.message}; ` +
            `the policy fails ${failure.mode}`,
        );
      }
    }
  };

  return (req, res, next) => {
    const raw = req.rawHeaders;
    const headers: [string, string][] = [];
    for (let i = 0; i + 1 < raw.length; i += 2) headers.push([(raw[i] as string).toLowerCase(), raw[i + 1] as string]);
    const url = (req as IncomingMessage & { originalUrl?: string }).originalUrl ?? req.url ?? "/";
    const request = {
      method: (req.method ?? "GET").toUpperCase(),
      path: url.split("?", 1)[0] || "/",
      headers: headers as Headers,
      peer: req.socket.remoteAddress,
    };
    const client = identify.client(request.peer, request.headers);
    decide(match(policies, request, client), client, logger).then(
      (verdict) => {
        alert(verdict);
        const fields = verdict.fields();
        if (verdict.outcome !== "pass") {
          const [status, body] = verdict.problem();
          res.statusCode = status;
          res.setHeader("Content-Type", "application/problem+json");
          const retry = verdict.retryAfterSecs;
          if (retry !== undefined) res.setHeader("Retry-After", String(retry));
          for (const [name, value] of fields) res.appendHeader(name, value);
          res.setHeader("Content-Length", Buffer.byteLength(body));
          res.end(body);
          return;
        }
        if (verdict.pending) {
          // Whether the response counts is known with its head: a refund first, then the fields as it left the key.
          holdHead(res, async (status) => {
            await settleAfterResponse(verdict, status, logger);
            if (!res.headersSent) for (const [name, value] of verdict.fields()) res.appendHeader(name, value);
          });
        } else {
          for (const [name, value] of fields) res.appendHeader(name, value);
        }
        (req as IncomingMessage & { rateLimit?: RateLimitInfo }).rateLimit = { verdict, client };
        // A queueing policy (leaky queue) gave the request a later slot.
        if (verdict.delayMicros > 0) setTimeout(() => next(), Math.ceil(verdict.delayMicros / 1000));
        else next();
      },
      (error: unknown) => next(error),
    );
  };
}
