// Receipts: what one admission took, handed back by the check that made it,
// so that a settlement (or a refund) gives back only what the limiter can
// prove that admission still holds (lua/README.md, "Receipts and
// settlements").
//
// A receipt holds the key, the cost the admission was charged, and the stamp
// the script answered. It names the limiter that issued it (held in a private
// field: a copy made with a spread or `structuredClone` is a plain object,
// and no limiter takes it), and is usable once: a second settlement rejects
// with `ReceiptSpent`.
//
// What cannot be stopped in a process: a receipt serialized with `toJSON`
// (`JSON.stringify`) can be loaded (`Limiter.receiptFromJSON`) any number
// of times, in any process. The scripts bound what such a replay or forgery
// does: never above the key's capacity, never more than the unused cost per
// call, nothing for an admission whose time has passed; a debt's replayed
// stamp gives back, over all its replays, at most what remains of its end;
// at most what a reset of that key would do (lua/README.md, "What a replayed
// or forged stamp can do").

/** The version of `Receipt.toJSON`'s format. */
export const RECEIPT_FORMAT = 1;

/** What a receipt's issuer is known by, in its serialized form. */
export interface Issuer {
  readonly prefix: string;
  readonly algorithm: { readonly fingerprintInput: string };
}

/** A receipt as JSON (`Receipt.toJSON`), for a process that settles it elsewhere. */
export interface ReceiptJSON {
  readonly ratelab_receipt: number;
  readonly prefix: string;
  readonly fingerprint: string;
  readonly key_hex: string;
  readonly cost: number;
  readonly stamp_at: number;
  readonly stamp_mark: number;
}

/**
 * What one admission took: settle it once with the limiter that issued it
 * (`limiter.settle(receipt, actual)`, `limiter.refund(receipt)`), or drop it
 * (the admission then counts as charged). Made by a limiter's check, never
 * by hand.
 */
export class Receipt {
  readonly #issuer: Issuer;
  #spent = false;
  /** The user key the admission was charged to, as bytes. */
  readonly key: Buffer;
  /** The cost the admission was charged. */
  readonly cost: number;
  /**
   * What the script wrote at the admission: for a debt, the instant the key
   * was full again right after it (µs); for a window, the window's index or
   * the instant the units were logged at.
   */
  readonly stampAt: number;
  /** A debt's ledger at the admission; 0 for a window. */
  readonly stampMark: number;

  /** @internal Limiters make receipts; a receipt made by hand names no limiter and none takes it. */
  constructor(issuer: Issuer, key: Uint8Array, cost: number, stampAt: number, stampMark: number) {
    this.#issuer = issuer;
    this.key = Buffer.from(key);
    this.cost = cost;
    this.stampAt = stampAt;
    this.stampMark = stampMark;
  }

  /** Settled or refunded already (or handed to a settlement that failed). */
  get spent(): boolean {
    return this.#spent;
  }

  /** @internal Whether `issuer` made this receipt. */
  issuedBy(issuer: Issuer): boolean {
    return this.#issuer === issuer;
  }

  /** @internal Spends it: false if it was spent already. */
  spend(): boolean {
    if (this.#spent) return false;
    this.#spent = true;
    return true;
  }

  /** @internal Who issued it, for error messages. */
  issuerName(): string {
    return `prefix ${JSON.stringify(this.#issuer.prefix)}, ${this.#issuer.algorithm.fingerprintInput}`;
  }

  /**
   * The receipt as JSON, for another process (a job queue's worker) to
   * settle with a limiter of the same prefix, algorithm and quota
   * (`Limiter.receiptFromJSON`). Serializing does not spend it: each copy
   * loaded is a receipt of its own, which the scripts bound as they bound
   * any replayed stamp.
   */
  toJSON(): ReceiptJSON {
    return {
      ratelab_receipt: RECEIPT_FORMAT,
      prefix: this.#issuer.prefix,
      fingerprint: this.#issuer.algorithm.fingerprintInput,
      key_hex: this.key.toString("hex"),
      cost: this.cost,
      stamp_at: this.stampAt,
      stamp_mark: this.stampMark,
    };
  }
}

/** The fields of `Receipt.toJSON`'s output, checked for shape (`RangeError` otherwise); whose they are is the limiter's to check. */
export function parseReceipt(data: string | ReceiptJSON): ReceiptJSON & { key: Buffer } {
  let value: unknown = data;
  if (typeof data === "string") {
    try {
      value = JSON.parse(data);
    } catch (e) {
      throw new RangeError(`not a receipt: invalid JSON (${(e as Error).message})`);
    }
  }
  const v = value as Record<string, unknown> | null;
  if (typeof v !== "object" || v === null || v.ratelab_receipt !== RECEIPT_FORMAT) {
    throw new RangeError(`not a receipt of format ${RECEIPT_FORMAT}: ${JSON.stringify(value)?.slice(0, 200)}`);
  }
  for (const name of ["prefix", "fingerprint", "key_hex"]) {
    if (typeof v[name] !== "string") throw new RangeError(`not a receipt: ${name} must be a string`);
  }
  const hex = v.key_hex as string;
  if (!/^([0-9a-fA-F]{2})*$/.test(hex)) throw new RangeError("not a receipt: key_hex is not hexadecimal");
  for (const [name, max] of [
    ["cost", 0xffffffff],
    ["stamp_at", Number.MAX_SAFE_INTEGER],
    ["stamp_mark", Number.MAX_SAFE_INTEGER],
  ] as const) {
    const n = v[name];
    if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 0 || n > max) {
      throw new RangeError(`not a receipt: ${name} must be an integer from 0 to ${max}, not ${String(n)}`);
    }
  }
  if (v.cost === 0) throw new RangeError("not a receipt: a cost of 0 takes nothing, and has no receipt");
  return { ...(v as unknown as ReceiptJSON), key: Buffer.from(hex, "hex") };
}
