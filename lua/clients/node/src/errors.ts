// The errors of this client, and how a Redis error is told to be an outage
// (Redis unavailable: the failure policy applies) or a data error (Redis
// answered, and what it said needs repair), as the Rust `ratelab-redis`
// crate tells them.

/** Every error of this client. */
export class RatelabError extends Error {
  override name = "RatelabError";
}

/** A cost above the capacity: it could never pass, even on a fresh key. An error, not a refusal. */
export class CostTooHigh extends RatelabError {
  override name = "CostTooHigh";
}

/**
 * Redis answered, and the answer is about the key or the call, not Redis's
 * reachability: corrupt state, a key of another type, invalid arguments,
 * another protocol version (`ratelab: protocol version 4 expected, got ...`),
 * a settlement or reset that would take the key past a ceiling of the
 * protocol (`ratelab <algorithm>: out of range at ...`: nothing was written),
 * a reply no script could send, out of memory. No failure policy hides it
 * (unless `policyOnDataErrors`): someone has to look.
 */
export class DataError extends RatelabError {
  override name = "DataError";
}

/** A receipt that cannot be settled here (`ForeignReceipt`, `ReceiptSpent`): nothing was sent to Redis. */
export class ReceiptError extends RatelabError {
  override name = "ReceiptError";
}

/**
 * A receipt another limiter issued (another instance, or a serialized receipt
 * of another prefix, algorithm or quota): only its issuer settles it. The
 * receipt is untouched.
 */
export class ForeignReceipt extends ReceiptError {
  override name = "ForeignReceipt";
}

/** A receipt settled or refunded already (or handed to a settlement that failed): an admission is settled at most once. */
export class ReceiptSpent extends ReceiptError {
  override name = "ReceiptSpent";
}

/**
 * An outage: Redis could not decide (no answer within the timeout, a failed
 * connection, a cluster slot moving or down, an open circuit breaker). This
 * is where the failure policy applies. `retryAfterMs`, when known, is the
 * wait until Redis is tried again.
 */
export class Unavailable extends RatelabError {
  override name = "Unavailable";
  retryAfterMs: number | undefined = undefined;
}

/**
 * Redis did not answer within the limiter's timeout (ioredis's queue
 * included), or ioredis did not connect within `connectTimeoutMs`. A check
 * that timed out is not charged: its deadline has passed on Redis's clock,
 * and an admission whose reply comes later is given back when it comes.
 */
export class Timeout extends Unavailable {
  override name = "Timeout";
}

/** The connection was refused, lost or closed; the server is loading, busy, read-only; a slot is moving or down. */
export class BackendError extends Unavailable {
  override name = "BackendError";
}

/** The call reached Redis after its deadline: nothing was charged. */
export class Expired extends BackendError {
  override name = "Expired";
}

/** Redis failed repeatedly and is not called for a while; `retryAfterMs` is the wait until a probe may go. */
export class CircuitOpen extends Unavailable {
  override name = "CircuitOpen";
  constructor(retryAfterMs: number) {
    super(`the rate limiter backend is failing; next attempt in ${Math.round(retryAfterMs)} ms`);
    this.retryAfterMs = retryAfterMs;
  }
}

/**
 * Another limiter used the same user key and algorithm with another quota:
 * the two count in different Redis keys, and each caller gets both quotas.
 * Never thrown by a check: the alert hook receives it.
 */
export class QuotaMismatch extends RatelabError {
  override name = "QuotaMismatch";
  constructor(
    readonly key: Buffer,
    readonly ours: string,
    readonly theirs: string,
  ) {
    super(
      `quota mismatch on key ${JSON.stringify(key.subarray(0, 64).toString("latin1"))}: this limiter counts it as ` +
        `${ours}, another limiter as ${theirs}; they use different Redis keys, so each caller gets both quotas`,
    );
  }
}

// Redis error codes (the first word of an error reply) that mean "not now",
// not "never": the failure policy applies.
const OUTAGE_CODES = new Set(["BUSY", "LOADING", "MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY"]);

/** `error` (thrown while talking to Redis) as this client's error: an outage or a data error. */
export function classify(error: unknown): RatelabError {
  if (error instanceof RatelabError) return error;
  if (error instanceof Error && error.name === "ReplyError") {
    const message = error.message;
    if (message.startsWith("ratelab expired")) return new Expired(message, { cause: error });
    const code = message.split(" ", 1)[0] ?? "";
    if (OUTAGE_CODES.has(code)) {
      return new BackendError(`the rate limiter backend failed: ${message}`, { cause: error });
    }
    return new DataError(message, { cause: error });
  }
  // Connection refused, closed or reset, ioredis giving up on a command
  // (MaxRetriesPerRequestError), a cluster without a node for the slot.
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return new BackendError(`the rate limiter backend failed: ${text}`, { cause: error });
}
