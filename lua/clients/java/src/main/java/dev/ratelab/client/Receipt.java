package dev.ratelab.client;

import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * What one admission took: the key, the cost it was charged, and the stamp
 * the script answered ({@code stampAt}, {@code stampMark}). Settle it once
 * with the limiter that issued it ({@link Limiter#settle}, {@link
 * Limiter#refund}), or drop it (the admission then counts as charged). Made
 * by a limiter's check, never by hand; not {@link java.io.Serializable} (a
 * deserialized copy would be a second, unspent receipt): {@link #toJson()}
 * and {@link Limiter#receiptFromJson} carry one to another process.
 *
 * <p>What cannot be stopped: JSON loaded any number of times, in any process,
 * gives as many receipts. The scripts bound what such a replay or forgery
 * does (lua/README.md, "What a replayed or forged stamp can do"): never above
 * the key's capacity, never more than the unused cost per call, nothing for
 * an admission whose time has passed; at most what a reset of that key would
 * do, to that key only.
 */
public final class Receipt {
    /** The version of {@link #toJson()}'s format. */
    public static final int FORMAT = 1;

    private final Limiter issuer;
    private final byte[] key;
    private final long cost;
    private final long stampAt;
    private final long stampMark;
    private final AtomicBoolean spent = new AtomicBoolean();

    Receipt(Limiter issuer, byte[] key, long cost, long stampAt, long stampMark) {
        this.issuer = issuer;
        this.key = key.clone();
        this.cost = cost;
        this.stampAt = stampAt;
        this.stampMark = stampMark;
    }

    /** The user key the admission was charged to, as bytes. */
    public byte[] key() {
        return key.clone();
    }

    /** The cost the admission was charged. */
    public long cost() {
        return cost;
    }

    /**
     * What the script wrote at the admission: for a debt, the instant the key
     * was full again right after it (µs); for a window, the window's index or
     * the instant the units were logged at.
     */
    public long stampAt() {
        return stampAt;
    }

    /** A debt's ledger at the admission; 0 for a window. */
    public long stampMark() {
        return stampMark;
    }

    /** Settled or refunded already (or handed to a settlement that failed). */
    public boolean spent() {
        return spent.get();
    }

    boolean issuedBy(Limiter limiter) {
        return issuer == limiter;
    }

    Limiter issuer() {
        return issuer;
    }

    /** Spends it: false if it was spent already. Atomic: two threads never both get it. */
    boolean spend() {
        return spent.compareAndSet(false, true);
    }

    /**
     * The receipt as JSON, the format the Python and Node clients read and
     * write: {@code {"ratelab_receipt":1,"prefix":..,"fingerprint":..,"key_hex":..,"cost":..,"stamp_at":..,"stamp_mark":..}}.
     * Serializing does not spend it.
     */
    public String toJson() {
        return "{\"ratelab_receipt\":" + FORMAT
                + ",\"prefix\":" + Json.quote(issuer.prefix())
                + ",\"fingerprint\":" + Json.quote(issuer.algorithm().fingerprintInput())
                + ",\"key_hex\":" + Json.quote(HexFormat.of().formatHex(key))
                + ",\"cost\":" + cost
                + ",\"stamp_at\":" + stampAt
                + ",\"stamp_mark\":" + stampMark + "}";
    }

    @Override
    public String toString() {
        return "Receipt(key=" + printable(key) + ", cost=" + cost + ", stamp=(" + stampAt + ", " + stampMark
                + "), spent=" + spent() + ")";
    }

    static String printable(byte[] key) {
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < Math.min(key.length, 64); i++) {
            int b = key[i] & 0xff;
            if (b >= 0x20 && b < 0x7f && b != '\\') {
                out.append((char) b);
            } else {
                out.append(String.format("\\x%02x", b));
            }
        }
        return out.toString();
    }

    /** The fields of {@link #toJson()}'s output, checked for shape ({@link IllegalArgumentException} otherwise). */
    record Fields(String prefix, String fingerprint, byte[] key, long cost, long stampAt, long stampMark) {
        static Fields parse(String text) {
            Object value;
            try {
                value = Json.parse(text);
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("not a receipt: " + e.getMessage());
            }
            if (!(value instanceof Map<?, ?> map) || !Long.valueOf(FORMAT).equals(map.get("ratelab_receipt"))) {
                throw new IllegalArgumentException("not a receipt of format " + FORMAT + ": "
                        + text.substring(0, Math.min(200, text.length())));
            }
            for (String name : List.of("prefix", "fingerprint", "key_hex")) {
                if (!(map.get(name) instanceof String)) {
                    throw new IllegalArgumentException("not a receipt: " + name + " must be a string");
                }
            }
            byte[] key;
            try {
                key = HexFormat.of().parseHex((String) map.get("key_hex"));
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("not a receipt: key_hex is not hexadecimal");
            }
            long cost = integer(map, "cost", 0xFFFF_FFFFL);
            long at = integer(map, "stamp_at", Protocol.MAX_EXACT);
            long mark = integer(map, "stamp_mark", Protocol.MAX_EXACT);
            if (cost == 0) {
                throw new IllegalArgumentException("not a receipt: a cost of 0 takes nothing, and has no receipt");
            }
            return new Fields((String) map.get("prefix"), (String) map.get("fingerprint"), key, cost, at, mark);
        }

        private static long integer(Map<?, ?> map, String name, long max) {
            Object v = map.get(name);
            if (!(v instanceof Long n) || n < 0 || n > max) {
                throw new IllegalArgumentException(
                        "not a receipt: " + name + " must be an integer from 0 to " + max + ", not " + v);
            }
            return n;
        }
    }

    static String keyText(byte[] key) {
        return new String(key, StandardCharsets.UTF_8);
    }
}
