// The framework-neutral half of the HTTP middleware (`./express.ts`),
// behaving as the Rust `ratelab-http` layer: who the client is (API key,
// else IP address, believing forwarding headers only from trusted proxies,
// IPv6 grouped by /64), which policies apply (per route), the decision across
// several policies (all or nothing: every limiter with receipts takes the
// cost at once, and a request refused by one policy gets back what the others
// took, by receipt), counting only failures or only successes (by receipt:
// consume first, refund when the response does not count), and what the
// response carries: `429` with `Retry-After` and
// an RFC 9457 problem body, `503` when a policy that fails closed cannot
// decide, and the `RateLimit-Policy` and `RateLimit` fields of
// draft-ietf-httpapi-ratelimit-headers-11, byte for byte as `ratelab-http`
// writes them.

import { BlockList, isIP } from "node:net";

import { CostTooHigh, DataError, RatelabError, Timeout, Unavailable } from "./errors.js";
import type { Decision, Limiter } from "./limiter.js";
import type { Receipt } from "./receipt.js";

/** The problem type of a refusal (draft-ietf-httpapi-ratelimit-headers-11). */
export const QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded";
/** The largest structured-field Integer: values past it are clamped. */
export const INTEGER_MAX = 999_999_999_999_999;
/** The default bound on one policy's limiter calls for a request, ms. */
export const DEFAULT_POLICY_TIMEOUT_MS = 100;

/** Request headers: [lower-case name, value] pairs, in order, repeats kept. */
export type Headers = readonly (readonly [string, string])[];

// -- addresses -----------------------------------------------------------------

/** An IP address as 4 or 16 bytes. */
function bytesOf(ip: string): Buffer | undefined {
  const family = isIP(ip);
  if (family === 4) return Buffer.from(ip.split(".").map(Number));
  if (family !== 6) return undefined;
  let text = ip;
  // An embedded IPv4 tail (::ffff:1.2.3.4) as two groups.
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4?.[1]) {
    const b = v4[1].split(".").map(Number) as [number, number, number, number];
    text = text.slice(0, -v4[1].length) + `${((b[0] << 8) | b[1]).toString(16)}:${((b[2] << 8) | b[3]).toString(16)}`;
  }
  const [head = "", tail] = text.split("::") as [string, string?];
  const parse = (s: string) => (s === "" ? [] : s.split(":").map((g) => parseInt(g, 16)));
  const h = parse(head);
  const t = tail === undefined ? [] : parse(tail);
  const groups = tail === undefined ? h : [...h, ...new Array<number>(8 - h.length - t.length).fill(0), ...t];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(g, i * 2));
  return out;
}

function v4Text(b: Buffer): string {
  return `${b[0]}.${b[1]}.${b[2]}.${b[3]}`;
}

function v6Text(b: Buffer): string {
  // RFC 5952, as Rust's Ipv6Addr Display writes it.
  const groups = Array.from({ length: 8 }, (_, i) => b.readUInt16BE(i * 2));
  let best = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen && j - i > 1) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (gs: number[]) => gs.map((g) => g.toString(16)).join(":");
  if (best < 0) return hex(groups);
  return `${hex(groups.slice(0, best))}::${hex(groups.slice(best + bestLen))}`;
}

/** An address in canonical form: IPv4-mapped (`::ffff:1.2.3.4`) and compatible (`::1.2.3.4`) IPv6 as IPv4; `::`, `::1` stay. */
export function canonical(ip: string): string {
  const b = bytesOf(ip);
  if (!b) return ip;
  if (b.length === 4) return v4Text(b);
  const zeros10 = b.subarray(0, 10).every((x) => x === 0);
  if (zeros10 && b[10] === 0xff && b[11] === 0xff) return v4Text(b.subarray(12));
  if (zeros10 && b[10] === 0 && b[11] === 0) {
    const last = b.readUInt32BE(12);
    if (last > 1) return v4Text(b.subarray(12));
  }
  return v6Text(b);
}

/** One hop: `1.2.3.4`, `2001:db8::1`, `[2001:db8::1]`, with or without a port; anything else is undefined. */
function parseNode(raw: string): string | undefined {
  const text = raw.replace(/^[ \t]+|[ \t]+$/g, "");
  if (isIP(text)) return text;
  let m = /^\[([^\]]+)\](?::\d{1,5})?$/.exec(text);
  if (m?.[1] && isIP(m[1]) === 6) return m[1];
  m = /^([^:]+):\d{1,5}$/.exec(text);
  if (m?.[1] && isIP(m[1]) === 4) return m[1];
  return undefined;
}

function elementsFromTheRight(line: string): string[] {
  const elements: string[] = [];
  let end = line.length;
  let quoted = false;
  for (let i = line.length - 1; i >= 0; i--) {
    const c = line[i];
    if (c === '"') {
      let backslashes = 0;
      while (i - 1 - backslashes >= 0 && line[i - 1 - backslashes] === "\\") backslashes++;
      if (!quoted || backslashes % 2 === 0) quoted = !quoted;
    } else if (c === "," && !quoted) {
      elements.push(line.slice(i + 1, end));
      end = i;
    }
  }
  elements.push(line.slice(0, end));
  return elements.reverse();
}

function splitOutsideQuotes(text: string, separator: string): string[] {
  const parts: string[] = [];
  let start = 0;
  let quoted = false;
  let escaped = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (escaped) escaped = false;
    else if (quoted && c === "\\") escaped = true;
    else if (c === '"') quoted = !quoted;
    else if (c === separator && !quoted) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(text.slice(start));
  return parts;
}

function unquote(value: string): string | undefined {
  if (!value.startsWith('"')) return value;
  let out = "";
  for (let i = 1; i < value.length; i++) {
    const c = value[i];
    if (c === "\\") {
      if (i + 1 >= value.length) return undefined;
      out += value[++i];
    } else if (c === '"') {
      return i === value.length - 1 ? out : undefined;
    } else out += c;
  }
  return undefined;
}

function forwardedFor(element: string): string | undefined {
  let node: string | undefined;
  for (const pair of splitOutsideQuotes(element, ";")) {
    const at = pair.indexOf("=");
    if (at < 0) return undefined;
    if (pair.slice(0, at).trim().toLowerCase() === "for") {
      if (node !== undefined) return undefined; // Two `for`s: which one would a proxy mean?
      node = unquote(pair.slice(at + 1).trim());
      if (node === undefined) return undefined;
    }
  }
  return node === undefined ? undefined : parseNode(node);
}

/**
 * The networks of the proxies in front of the application, whose forwarding
 * header (`x-forwarded-for` by default, or `forwarded`) is believed, as
 * `ratelab_http::TrustedProxies` does: a peer outside them is the client
 * whatever the headers say; through them, the header is read from the right,
 * skipping trusted proxies; an element that is not an address stops the walk
 * at the last address that was vouched for.
 */
export class TrustedProxies {
  private readonly list = new BlockList();
  readonly header: "x-forwarded-for" | "forwarded";

  constructor(networks: readonly string[] = [], header: string = "x-forwarded-for") {
    const h = header.toLowerCase();
    if (h !== "x-forwarded-for" && h !== "forwarded") {
      throw new RangeError(`the forwarding header is x-forwarded-for or forwarded, not ${JSON.stringify(header)}`);
    }
    this.header = h;
    for (const text of networks) {
      const [address = "", prefix, ...rest] = String(text).trim().split("/");
      const family = isIP(address);
      const bits = prefix === undefined ? (family === 4 ? 32 : 128) : Number(prefix);
      if (!family || rest.length || !/^\d+$/.test(String(bits)) || bits > (family === 4 ? 32 : 128)) {
        throw new RangeError(
          `${JSON.stringify(text)} is neither an IP address nor a network in CIDR notation (10.0.0.0/8, fd00::/8); ` +
            "host names are not resolved: give the proxy's address",
        );
      }
      const canon = canonical(address);
      if (family === 6 && isIP(canon) === 4 && bits >= 96) this.list.addSubnet(canon, bits - 96, "ipv4");
      else this.list.addSubnet(address, bits, family === 4 ? "ipv4" : "ipv6");
    }
  }

  contains(ip: string): boolean {
    const c = canonical(ip);
    return this.list.check(c, isIP(c) === 4 ? "ipv4" : "ipv6");
  }

  private hops(headers: Headers): (string | undefined)[] {
    const hops: (string | undefined)[] = [];
    for (const [name, value] of headers) {
      if (name !== this.header) continue;
      if (this.header === "x-forwarded-for") hops.push(...value.split(",").map(parseNode));
      else hops.push(...elementsFromTheRight(value).map(forwardedFor));
    }
    return hops;
  }

  /** The client's address for a request from `peer` with `headers`. */
  clientIp(peer: string, headers: Headers): string {
    const p = canonical(peer);
    if (!this.contains(p)) return p;
    let client = p;
    for (const hop of this.hops(headers).reverse()) {
      if (hop === undefined) return client; // Nothing left of this was vouched for.
      client = canonical(hop);
      if (!this.contains(client)) return client;
    }
    return client;
  }
}

// -- who the client is -------------------------------------------------------------

/** An identity the application vouches for: an account id and its plan. */
export interface Identity {
  readonly id: string;
  readonly plan?: string;
}

/** The caller of one request: `key` is `key:<id>` or `ip:<address or IPv6 network>`. */
export interface Client {
  readonly kind: "api_key" | "ip";
  readonly key: string;
  readonly plan: string | undefined;
  readonly ip: string | undefined;
}

export interface IdentifyOptions {
  /** Networks (CIDR or addresses) of trusted proxies, or a `TrustedProxies`. */
  trustedProxies?: TrustedProxies | readonly string[];
  /** Group anonymous IPv6 clients by their first bits (default 64; 128: each address alone). */
  ipv6Prefix?: number;
  /** Identify by an API key in `header`: `resolve` returns the identity of a key it knows. */
  apiKey?: { header: string; resolve: (key: string) => Identity | undefined };
  /** The plan of clients identified by IP. */
  anonymousPlan?: string;
}

/** Who is calling: a known API key, else the IP address (see `IdentifyOptions`). */
export class Identify {
  readonly proxies: TrustedProxies;
  readonly ipv6Prefix: number;

  constructor(private readonly options: IdentifyOptions = {}) {
    const p = options.trustedProxies;
    this.proxies = p instanceof TrustedProxies ? p : new TrustedProxies(p ?? []);
    const prefix = options.ipv6Prefix ?? 64;
    if (!Number.isSafeInteger(prefix) || prefix < 0) throw new RangeError(`ipv6Prefix must be 0 to 128, not ${prefix}`);
    this.ipv6Prefix = Math.min(prefix, 128);
  }

  client(peer: string | undefined, headers: Headers): Client {
    const ip = peer && isIP(peer.split("%")[0] ?? "") ? this.proxies.clientIp(peer.split("%")[0] ?? "", headers) : undefined;
    const plan = this.options.anonymousPlan;
    const apiKey = this.options.apiKey;
    if (apiKey) {
      const header = apiKey.header.toLowerCase();
      const value = headers.find(([n]) => n === header)?.[1].trim();
      const identity = value ? apiKey.resolve(value) : undefined;
      if (identity) return { kind: "api_key", key: `key:${identity.id}`, plan: identity.plan, ip };
    }
    if (ip === undefined) return { kind: "ip", key: "ip:unknown", plan, ip };
    if (isIP(ip) === 6 && this.ipv6Prefix < 128) {
      const b = bytesOf(ip) as Buffer;
      for (let bit = this.ipv6Prefix; bit < 128; bit++) b[bit >> 3] = (b[bit >> 3] as number) & ~(0x80 >> (bit & 7));
      return { kind: "ip", key: `ip:${v6Text(b)}/${this.ipv6Prefix}`, plan, ip };
    }
    return { kind: "ip", key: `ip:${ip}`, plan, ip };
  }
}

// -- which policies apply ----------------------------------------------------------

/**
 * A method (undefined: any) and a path pattern in axum's syntax: literal
 * segments, `{name}` for one non-empty segment, `{*name}` last for the rest
 * (even nothing). Matched against the raw path; a `GET` route also matches `HEAD`.
 */
export class Route {
  private readonly segments: ["literal" | "param" | "rest", string][] = [];
  readonly method: string | undefined;

  constructor(method: string | undefined | null, readonly pattern: string) {
    const error = (reason: string) => new RangeError(`invalid route pattern ${JSON.stringify(pattern)}: ${reason}`);
    if (typeof pattern !== "string" || !pattern.startsWith("/")) throw error("a pattern starts with '/'");
    const pieces = pattern.slice(1).split("/");
    pieces.forEach((piece, i) => {
      if (piece.startsWith("{")) {
        if (!piece.endsWith("}")) throw error("a '{' must close with '}' at the end of its segment");
        let name = piece.slice(1, -1);
        let kind: "param" | "rest" = "param";
        if (name.startsWith("*")) {
          if (i + 1 !== pieces.length) throw error("a catch-all {*name} must be the last segment");
          name = name.slice(1);
          kind = "rest";
        }
        if (!name || /[{}*]/.test(name)) throw error("a parameter needs a name: {id}, {*rest}");
        this.segments.push([kind, name]);
      } else if (/[{}]/.test(piece)) {
        throw error("braces are only allowed around a whole segment: {name} or {*name}");
      } else this.segments.push(["literal", piece]);
    });
    this.method = method ? method.toUpperCase() : undefined;
  }

  matches(method: string, path: string): boolean {
    if (this.method !== undefined && !(this.method === method || (this.method === "GET" && method === "HEAD"))) return false;
    if (!path.startsWith("/")) return false;
    const pieces = path.slice(1).split("/");
    let i = 0;
    for (const [kind, value] of this.segments) {
      if (kind === "rest") return true;
      if (i >= pieces.length) return false;
      if (kind === "literal" && pieces[i] !== value) return false;
      if (kind === "param" && !pieces[i]) return false;
      i++;
    }
    return i === pieces.length;
  }
}

/** What the policies see of a request: its head. */
export interface Request {
  readonly method: string;
  readonly path: string;
  readonly headers: Headers;
  readonly peer: string | undefined;
}

/** The first value of header `name` in `request`. */
export function header(request: Request, name: string): string | undefined {
  const n = name.toLowerCase();
  return request.headers.find(([k]) => k === n)?.[1];
}

export interface PolicyOptions {
  /** The routes it applies to, `[method or null, pattern]` (none: every route). */
  routes?: readonly (readonly [string | null, string])[];
  /** The plans it applies to (none: every client). */
  plans?: readonly string[];
  /** The key it counts under (default: the client's); undefined: the policy does not apply. */
  key?: (request: Request, client: Client) => string | undefined;
  /** What a request costs (default 1). */
  cost?: number | ((request: Request, client: Client) => number);
  /** `"open"` (the default): pass unchecked, with an alert; `"closed"`: `503`. */
  failure?: "open" | "closed";
  /** The most all its limiter calls for one request take, ms (default 100). */
  timeoutMs?: number;
  /**
   * Which responses count: `"all"` (the default), `"failures"` (failed
   * logins: express-rate-limit's `skipSuccessfulRequests`) or `"successes"`
   * (`skipFailedRequests`). The cost is taken with a receipt before the
   * request runs, and refunded once the response head says it does not
   * count: requests in flight together never pass beyond the quota.
   */
  count?: "all" | "failures" | "successes";
  /** Which statuses are failures (default: 400 or more). */
  failedWhen?: (status: number) => boolean;
}

/** A limiter the policies can use: a `Limiter`, or anything with its `check` (and `peek`, `settle`, `refund` for more). */
type PolicyLimiter = Pick<Limiter, "check" | "quota"> & Partial<Pick<Limiter, "peek" | "settle" | "refund" | "algorithm" | "warm">>;

/**
 * One quota policy: a name (1 to 64 of `A-Z a-z 0-9 _ . -`, what clients see
 * in the fields), a `Limiter` (built with the default `onFailure: "error"`:
 * the policy's own `failure` decides), and `PolicyOptions`. The limiter sees
 * `<name>:<key>`.
 */
export class Policy {
  readonly routes: Route[];
  readonly failure: "open" | "closed";
  readonly timeoutMs: number;
  readonly count: "all" | "failures" | "successes";
  readonly q: number;
  readonly w: number;
  /** One unit back every `interval` µs (the steady refills, `ratelab-http`'s `Refill::Steady`). */
  readonly interval: number | undefined;
  /** Units come back on a schedule only the limiter knows (the sliding log and counter): `t` is asked with a peek. */
  readonly sliding: boolean;
  /** The limiter issues receipts and settles them: what one policy took for a request another refused is given back. */
  readonly refunds: boolean;
  readonly item: string;
  private readonly failedWhen: (status: number) => boolean;

  constructor(
    readonly name: string,
    readonly limiter: Limiter,
    private readonly options: PolicyOptions = {},
  ) {
    if (typeof name !== "string" || !/^[A-Za-z0-9_.-]{1,64}$/.test(name)) {
      throw new RangeError(
        `policy name ${JSON.stringify(name)} is not 1 to 64 characters among A-Z a-z 0-9 _ . - ` +
          "(it appears in the RateLimit headers and the limiter keys)",
      );
    }
    this.failure = options.failure ?? "open";
    if (this.failure !== "open" && this.failure !== "closed") {
      throw new RangeError(`failure is "open" or "closed", not ${JSON.stringify(options.failure)}`);
    }
    this.count = options.count ?? "all";
    if (!["all", "failures", "successes"].includes(this.count)) {
      throw new RangeError(`count is "all", "failures" or "successes", not ${JSON.stringify(options.count)}`);
    }
    const l = limiter as PolicyLimiter;
    this.refunds = typeof l.settle === "function" && typeof l.refund === "function";
    if (this.count !== "all" && !this.refunds) {
      throw new TypeError(`policy ${JSON.stringify(name)}: count ${JSON.stringify(this.count)} consumes first and refunds by receipt, and its limiter has no settle (a Limiter has)`);
    }
    this.failedWhen = options.failedWhen ?? ((status) => status >= 400);
    const cost = options.cost ?? 1;
    if (typeof cost !== "function" && !(Number.isSafeInteger(cost) && cost >= 0)) {
      throw new RangeError(`cost must be a non-negative integer or a function, not ${String(cost)}`);
    }
    this.timeoutMs = options.timeoutMs ?? DEFAULT_POLICY_TIMEOUT_MS;
    if (!(this.timeoutMs > 0)) throw new RangeError(`timeoutMs must be positive, not ${this.timeoutMs}`);
    this.routes = (options.routes ?? []).map(([method, pattern]) => new Route(method, pattern));
    const quota = limiter.quota;
    // Rounded up, at least 1 s: the advertised rate is never faster.
    this.q = quota.burst;
    this.w = Math.max(1, Math.ceil(quota.windowMicros / 1_000_000));
    const algorithm = l.algorithm?.name ?? "";
    // One unit back every interval: a debt (GCRA, the token bucket, the
    // leaky buckets, as algorithms.json says).
    const steady = l.algorithm?.debt ?? false;
    this.interval = steady ? quota.emissionIntervalMicros : undefined;
    this.sliding = ["sliding-log", "sliding-counter"].includes(algorithm);
    this.item = `"${name}";q=${Math.min(this.q, INTEGER_MAX)};w=${Math.min(this.w, INTEGER_MAX)}`;
  }

  /** Something about a request is decided once its response is known (here: whether it counts). */
  get afterResponse(): boolean {
    return this.count !== "all";
  }

  /** Whether a response of `status` counts. */
  counts(status: number): boolean {
    if (this.count === "all") return true;
    const failed = this.failedWhen(status);
    return this.count === "failures" ? failed : !failed;
  }

  /** [limiter key, cost] if the policy applies to the request. */
  applies(request: Request, client: Client): [string, number] | undefined {
    if (this.routes.length && !this.routes.some((r) => r.matches(request.method, request.path))) return undefined;
    const plans = this.options.plans ?? [];
    if (plans.length && !(client.plan !== undefined && plans.includes(client.plan))) return undefined;
    const key = this.options.key ? this.options.key(request, client) : client.key;
    if (key === undefined) return undefined;
    const cost = typeof this.options.cost === "function" ? this.options.cost(request, client) : (this.options.cost ?? 1);
    return [`${this.name}:${key}`, cost];
  }
}

// -- deciding ----------------------------------------------------------------------

type State = "pending" | "peeked" | "decided" | "given_back" | "never" | "failed_open" | "failed_closed";

/** One applicable policy's part of a verdict. */
export class Report {
  /** `given_back`: admitted, then refunded (another policy refused the request). */
  state: State = "pending";
  decision: Decision | undefined = undefined;
  error: RatelabError | undefined = undefined;
  retryAfterMs: number | undefined = undefined;
  deadline = 0;
  /** What the admission took, while something may give it back: another policy's refusal, or the response. */
  receipt: Receipt | undefined = undefined;
  /** `t` when a peek said it (the sliding log and counter), µs. */
  nextMicros: number | undefined = undefined;

  constructor(
    readonly policy: Policy,
    readonly key: string,
    readonly cost: number,
  ) {}

  /** A new state: `t` is for the decision it came with. */
  set(state: State, decision: Decision | undefined): void {
    this.state = state;
    this.decision = decision;
    this.nextMicros = undefined;
  }

  get violated(): boolean {
    return (this.state === "decided" && this.decision !== undefined && !this.decision.allowed) || this.state === "never";
  }

  get admitted(): boolean {
    return this.state === "decided" && this.decision !== undefined && this.decision.allowed;
  }

  /** `t`: µs until more quota is available than `remaining`. */
  nextAfterMicros(): number | undefined {
    const d = this.decision;
    if (!d) return undefined;
    if (this.nextMicros !== undefined) return this.nextMicros;
    if (d.remaining >= d.limit) return 0;
    if (!d.allowed && this.cost === 1 && d.retryAfterMicros > 0) return d.retryAfterMicros;
    return waitFor(d, this.policy.interval, d.remaining + 1);
  }

  /** The units to peek for when `t` needs the limiter (the sliding log and counter): `r + 1`. */
  wanted(): number | undefined {
    const d = this.decision;
    if (!this.policy.sliding || this.nextMicros !== undefined || !d) return undefined;
    if (d.remaining >= d.limit || (!d.allowed && this.cost === 1 && d.retryAfterMicros > 0)) return undefined;
    if (typeof (this.policy.limiter as PolicyLimiter).peek !== "function") return undefined;
    return d.remaining + 1;
  }
}

/** µs until `units` are available: exact for a steady refill, else until full. */
export function waitFor(d: Decision, interval: number | undefined, units: number): number {
  if (d.remaining >= units) return 0;
  if (interval !== undefined) return Math.max(0, d.resetAfterMicros - Math.max(0, d.limit - units) * interval);
  return d.resetAfterMicros;
}

/** A limiter that could not decide, and what the policy did about it. */
export interface Failure {
  readonly policy: string;
  readonly client: Client;
  readonly error: RatelabError;
  readonly mode: "open" | "closed";
}

function waitsForResponse(report: Report): boolean {
  return report.policy.afterResponse && report.cost !== 0 && report.admitted && report.receipt !== undefined;
}

/** What happens to a request: `pass`, `refuse` (429) or `unavailable` (503). */
export class Verdict {
  delayMicros = 0;

  constructor(
    readonly reports: Report[],
    readonly outcome: "pass" | "refuse" | "unavailable",
    readonly client: Client,
    readonly failures: Failure[] = [],
  ) {}

  /** Some policy decides something from the response (it counts only failures or successes, and took the cost with a receipt). */
  get pending(): boolean {
    return this.reports.some(waitsForResponse);
  }

  /** `Retry-After`, whole seconds rounded up, at least 1; undefined when no wait helps or for a pass. */
  get retryAfterSecs(): number | undefined {
    if (this.outcome === "refuse") {
      let wait = 0;
      for (const r of this.reports) {
        if (!r.violated) continue;
        if (!r.decision) return undefined;
        wait = Math.max(wait, r.decision.retryAfterMicros);
      }
      return Math.max(1, Math.ceil(wait / 1_000_000));
    }
    if (this.outcome === "unavailable") {
      const hints = this.reports.filter((r) => r.state === "failed_closed").map((r) => r.retryAfterMs ?? 0);
      return Math.max(1, Math.ceil(Math.max(0, ...hints) / 1000));
    }
    return undefined;
  }

  /** `RateLimit-Policy` (every policy that applied) and `RateLimit` (every one that decided). */
  fields(): [string, string][] {
    const out: [string, string][] = [];
    if (this.reports.length) out.push(["RateLimit-Policy", this.reports.map((r) => r.policy.item).join(", ")]);
    const items: string[] = [];
    for (const r of this.reports) {
      const t = r.nextAfterMicros();
      if (t === undefined || !r.decision) continue;
      const secs = Math.ceil(t / 1_000_000);
      items.push(`"${r.policy.name}";r=${Math.min(r.decision.remaining, INTEGER_MAX)};t=${Math.min(secs, INTEGER_MAX)}`);
    }
    if (items.length) out.push(["RateLimit", items.join(", ")]);
    return out;
  }

  /** The status and RFC 9457 body (members in ratelab-http's order) of a refusal or a 503. */
  problem(): [number, string] {
    if (this.outcome === "unavailable") {
      return [
        503,
        JSON.stringify({
          type: "about:blank",
          title: "Service Unavailable",
          status: 503,
          detail:
            "The rate limiter could not decide whether this request is within its quota, " +
            "and refuses it rather than let it pass unchecked. Try again later.",
          "unavailable-policies": this.reports.filter((r) => r.state === "failed_closed").map((r) => r.policy.name),
        }),
      ];
    }
    const violated = this.reports.filter((r) => r.violated);
    const reasons = violated.map((r) =>
      r.state === "never"
        ? `a request costing ${r.cost} can never pass policy "${r.policy.name}", which admits at most ${r.policy.q} at once`
        : `policy "${r.policy.name}" allows ${r.policy.q} per ${r.policy.w} s`,
    );
    const retry = this.retryAfterSecs;
    const detail = reasons.join("; ") + (retry !== undefined ? `; retry in ${retry} s.` : ".");
    return [
      429,
      JSON.stringify({
        type: QUOTA_EXCEEDED,
        title: "Request cannot be satisfied as assigned quota has been exceeded",
        status: 429,
        detail,
        "violated-policies": violated.map((r) => r.policy.name),
      }),
    ];
  }
}

/** The reports of every policy that applies to the request. */
export function match(policies: readonly Policy[], request: Request, client: Client): Report[] {
  const reports: Report[] = [];
  for (const policy of policies) {
    const applied = policy.applies(request, client);
    if (applied) reports.push(new Report(policy, applied[0], applied[1]));
  }
  return reports;
}

/**
 * `work`, bounded by `ms` (or by what is left before `deadline`, a
 * `performance.now()` instant); what it brings after that goes to `onLate`.
 */
function bounded<T>(work: () => Promise<T>, policy: Policy, deadline?: number, onLate?: (value: T) => void): Promise<T> {
  const left = deadline === undefined ? policy.timeoutMs : deadline - performance.now();
  if (left <= 0) return Promise.reject(new Timeout(`policy ${policy.name}: its timeout passed`));
  const promise = work();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      promise.then((value) => onLate?.(value), () => undefined);
      reject(new Timeout(`the rate limiter did not answer within ${policy.timeoutMs} ms`));
    }, Math.ceil(left));
    promise.then(
      (d) => {
        clearTimeout(timer);
        resolve(d);
      },
      (e: unknown) => {
        clearTimeout(timer);
        reject(e);
      },
    );
  });
}

/**
 * `t` for the policies whose decision does not say it (the sliding log and
 * counter): a peek of `r + 1` units, whose `retryAfterMicros` is when more
 * than `r` is available (concurrently, each bounded by its policy's timeout).
 * A peek that fails leaves `t` the wait until full: late, never early.
 */
export async function completeNext(reports: readonly Report[]): Promise<void> {
  const wanted = reports.flatMap((r) => {
    const units = r.wanted();
    return units === undefined ? [] : [[r, units] as const];
  });
  if (!wanted.length) return;
  const answers = await Promise.allSettled(
    wanted.map(([r, units]) => bounded(() => (r.policy.limiter as Limiter).peek(r.key, units), r.policy)),
  );
  answers.forEach((answer, i) => {
    const report = (wanted[i] as readonly [Report, number])[0];
    // Units came back since the decision (another request's refund): none to wait for.
    if (answer.status === "fulfilled") report.nextMicros = answer.value.allowed ? 0 : answer.value.retryAfterMicros;
  });
}

/**
 * After the response head (its `status`): each policy that counts only
 * failures or successes and admitted the request refunds its receipt if the
 * response does not count (concurrently, each bounded by its policy's
 * timeout); the refund's answer becomes the policy's decision, so that the
 * response's fields show the key as the refund left it. A refund that fails
 * keeps the charge (the logger is told).
 */
export async function settleAfterResponse(verdict: Verdict, status: number, logger?: { warn(message: string): void } | null): Promise<void> {
  const calls: [Report, Promise<Decision>][] = [];
  for (const report of verdict.reports) {
    if (!waitsForResponse(report)) continue;
    const receipt = report.receipt as Receipt;
    report.receipt = undefined;
    if (report.policy.counts(status)) continue; // The charge stands.
    calls.push([report, bounded(() => report.policy.limiter.refund(receipt), report.policy)]);
  }
  if (!calls.length) return;
  const answers = await Promise.allSettled(calls.map(([, call]) => call));
  answers.forEach((answer, i) => {
    const report = (calls[i] as [Report, Promise<Decision>])[0];
    if (answer.status === "fulfilled") {
      if (!answer.value.degraded) report.set("decided", answer.value);
    } else {
      logger?.warn(`rate limiter of policy ${report.policy.name} failed after the response: the request's refund is lost: ${String(answer.reason)}`);
    }
  });
  await completeNext(verdict.reports);
}

/**
 * Decides one request against every policy that applies to it, as
 * `ratelab-http`'s guide says ("Several policies on one request"): one policy
 * is asked once, with its cost. With several, all or nothing: every policy
 * whose limiter issues receipts takes the cost with one, all at once, while
 * the others are peeked (cost 0); then those are asked with the cost (the
 * ones the peek predicted to refuse first: a refusal consumes nothing). A
 * request refused (or failed closed) anywhere gives every receipt back before
 * it is answered, so it leaves every policy as if it never came. A policy
 * that decides from the response takes its cost with a receipt even alone,
 * and keeps it for the response.
 */
export async function decide(reports: Report[], client: Client, logger?: { warn(message: string): void } | null): Promise<Verdict> {
  const failures: Failure[] = [];
  if (!reports.length) return new Verdict([], "pass", client);
  // Connecting is bounded by each limiter's connect timeout, not by its policy's: the first requests on a
  // busy Redis are decided, not failed open.
  await Promise.all(
    [...new Set(reports.map((r) => r.policy.limiter as PolicyLimiter))].map((l) => (typeof l.warm === "function" ? l.warm() : undefined)),
  );
  const started = performance.now();
  for (const r of reports) r.deadline = started + r.policy.timeoutMs;
  const several = reports.length > 1;
  const after = (): Verdict["outcome"] | undefined => {
    if (reports.some((r) => r.violated)) return "refuse";
    if (reports.some((r) => r.state === "failed_closed")) return "unavailable";
    return undefined;
  };
  const ask = async (asks: [number, Ask][]) => {
    if (!asks.length) return;
    const results = await Promise.allSettled(asks.map(([i, how]) => call(reports[i] as Report, how)));
    results.forEach((result, n) => {
      const [i, how] = asks[n] as [number, Ask];
      record(reports[i] as Report, result, how, client, failures);
    });
  };
  const finish = async (outcome: Verdict["outcome"]) => {
    const verdict = new Verdict(reports, outcome, client, failures);
    if (outcome === "pass") {
      // Nothing will give these back: the charge stands.
      for (const r of reports) if (!r.policy.afterResponse) r.receipt = undefined;
      verdict.delayMicros = Math.max(0, ...reports.filter((r) => r.state === "decided" && r.decision).map((r) => r.decision?.delayMicros ?? 0));
    } else {
      await giveBack(reports, logger);
    }
    await completeNext(reports);
    return verdict;
  };
  const receipted = (r: Report) => r.policy.refunds && r.cost > 0 && (several || r.policy.afterResponse);
  await ask(reports.map((r, i): [number, Ask] => [i, receipted(r) ? "receipt" : several && r.cost > 0 ? "peek" : "charge"]));
  let outcome = after();
  if (outcome) return finish(outcome);
  // The policies that only peeked (limiters without receipts): those predicted to refuse go first, alone,
  // since a refusal consumes nothing; then the rest.
  const peeked = reports.flatMap((r, i) => (r.state === "peeked" ? [i] : []));
  const predicted = peeked.filter((i) => {
    const r = reports[i] as Report;
    return (r.decision?.remaining ?? 0) < r.cost;
  });
  const rest = peeked.filter((i) => !predicted.includes(i));
  for (const round of [predicted, rest]) {
    await ask(round.map((i): [number, Ask] => [i, "charge"]));
    outcome = after();
    if (outcome) return finish(outcome);
  }
  return finish("pass");
}

/** How one policy is asked in a round: cost 0; the cost, nothing to give back; the cost, keeping the receipt. */
type Ask = "peek" | "charge" | "receipt";

/**
 * Refunds, concurrently, every receipt held: the request is not served. Each
 * answer (the key as the refund left it) becomes its report's decision. A
 * refund that fails keeps its units taken.
 */
async function giveBack(reports: Report[], logger?: { warn(message: string): void } | null): Promise<void> {
  const held = reports.filter((r) => r.receipt !== undefined);
  if (!held.length) return;
  const refunds = held.map((r) => {
    const receipt = r.receipt as Receipt;
    r.receipt = undefined;
    return bounded(() => r.policy.limiter.refund(receipt), r.policy);
  });
  const answers = await Promise.allSettled(refunds);
  answers.forEach((answer, i) => {
    const report = held[i] as Report;
    if (answer.status === "fulfilled") {
      if (!answer.value.degraded && report.admitted) report.set("given_back", answer.value);
    } else {
      logger?.warn(`rate limiter of policy ${report.policy.name} failed to give back the units of a refused request: they stay taken: ${String(answer.reason)}`);
    }
  });
}

function call(report: Report, how: Ask): Promise<Decision> {
  const { policy } = report;
  // A check that answers after its policy's timeout goes on: an admission it brings is given back, as the
  // request was answered without it.
  const giveBack = (late: Decision) => {
    if (late.receipt && policy.refunds) policy.limiter.refund(late.receipt).catch(() => undefined);
  };
  return bounded(() => policy.limiter.check(report.key, how === "peek" ? 0 : report.cost), policy, report.deadline, giveBack);
}

function record(report: Report, result: PromiseSettledResult<Decision>, how: Ask, client: Client, failures: Failure[]): void {
  if (result.status === "fulfilled" && !result.value.degraded) {
    report.set(how === "peek" ? "peeked" : "decided", result.value);
    if (how === "receipt" && result.value.allowed) report.receipt = result.value.receipt;
    return;
  }
  // A state without a decision: the peek's is not reported.
  report.set(report.state, undefined);
  let error: RatelabError;
  let hint: number | undefined;
  if (result.status === "fulfilled") {
    // A limiter's own failure policy answered: to the layer that is an outage, and the route's mode wins.
    const d = result.value;
    error = new Unavailable(`the limiter's backend is failing: its failure policy ${d.allowed ? "admitted" : "refused"} the request`);
    hint = d.retryAfterMicros ? d.retryAfterMicros / 1000 : undefined;
  } else if (result.reason instanceof CostTooHigh) {
    report.state = "never";
    return;
  } else if (result.reason instanceof RatelabError) {
    error = result.reason;
    hint = result.reason instanceof Unavailable ? result.reason.retryAfterMs : undefined;
  } else {
    error = new RatelabError(String(result.reason));
  }
  // Data errors fail closed whatever the mode: nothing repairs them by waiting.
  const mode = error instanceof DataError ? "closed" : report.policy.failure;
  report.error = error;
  failures.push({ policy: report.policy.name, client, error, mode });
  if (mode === "open") report.state = "failed_open";
  else {
    report.state = "failed_closed";
    report.retryAfterMs = hint;
  }
}
