package dev.ratelab.client;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;

/**
 * The Java side of the cross-language tests of the script protocol: the line
 * protocol of the Rust example {@code protocol_client}
 * (crates/ratelab/examples/protocol_client.rs), one command a line on stdin,
 * one JSON line answered on stdout.
 *
 * <pre>
 * java -cp target/classes:target/test-classes:$(cat target/classpath.txt) dev.ratelab.client.ProtocolClient redis://127.0.0.1:6379/ [prefix]
 * </pre>
 *
 * <ul>
 *   <li>{@code quota <limit> <period_us> <burst>} answers {@code {"ok":true}}.</li>
 *   <li>{@code check <algorithm> <key> <cost> <now>} ({@code now} in µs, or {@code -} for Redis TIME)
 *       answers the decision, and for an admission of a positive cost {@code receipt} (a number naming
 *       its receipt), {@code stamp_at} and {@code stamp_mark}.</li>
 *   <li>{@code peek <algorithm> <key> <cost> <now>} answers the decision.</li>
 *   <li>{@code settle <algorithm> <receipt> <actual> <now>} settles that receipt (of this process, for
 *       this algorithm and quota) to {@code actual} units; {@code refund <algorithm> <receipt> <now>}
 *       settles it to 0. A receipt is used once. Answers the decision after it.</li>
 *   <li>{@code reset <algorithm> <key> <now>} answers {@code {"ok":true}}.</li>
 *   <li>{@code mismatches} answers {@code {"quota_mismatches":n}}.</li>
 * </ul>
 *
 * Anything else answers {@code {"error":..,"kind":"Usage"}}; an error of the client
 * {@code {"error":..,"kind":<its class>}}.
 */
public final class ProtocolClient {
    private final Redis redis;
    private final String prefix;
    private Quota quota = Quota.perSecond(5).withBurst(10);
    private long now;
    private final Map<String, Limiter> limiters = new HashMap<>();
    private final Map<Long, Map.Entry<String, Receipt>> receipts = new HashMap<>();
    private long nextReceipt = 1;

    ProtocolClient(Redis redis, String prefix) {
        this.redis = redis;
        this.prefix = prefix;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: ProtocolClient <redis-url> [prefix]");
            System.exit(2);
        }
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        try (Redis redis = Redis.connect(args[0])) {
            ProtocolClient client = new ProtocolClient(redis, args.length > 1 ? args[1] : Protocol.DEFAULT_PREFIX);
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                out.println(client.answer(line));
            }
        }
        // Lettuce's threads are not daemons everywhere: leave at once.
        System.exit(0);
    }

    private String id(String name, boolean callerClock) {
        return name + " " + quota.limit() + " " + quota.periodMicros() + " " + quota.burst() + " " + callerClock;
    }

    private Limiter limiter(String name, boolean callerClock) {
        return limiters.computeIfAbsent(id(name, callerClock), id -> {
            Limiter.Builder b = Limiter.builder(redis, name, quota).prefix(prefix)
                    // A loaded test machine: a slow answer is not what is tested.
                    .timeout(Duration.ofSeconds(5));
            if (callerClock) {
                b.clock(() -> now);
            }
            return b.build();
        });
    }

    String answer(String line) {
        String[] w = line.trim().split("\\s+");
        try {
            if (w[0].equals("quota") && w.length == 4) {
                quota = Quota.of(Long.parseLong(w[1]), Long.parseLong(w[2]), Long.parseLong(w[3]));
                return "{\"ok\":true}";
            }
            if (w[0].equals("mismatches") && w.length == 1) {
                long n = limiters.values().stream().mapToLong(l -> l.stats().quotaMismatches()).sum();
                return "{\"quota_mismatches\":" + n + "}";
            }
            String op = w[0];
            String name;
            String what;
            String number;
            String at;
            if ((op.equals("check") || op.equals("peek") || op.equals("settle")) && w.length == 5) {
                name = w[1];
                what = w[2];
                number = w[3];
                at = w[4];
            } else if ((op.equals("refund") || op.equals("reset")) && w.length == 4) {
                name = w[1];
                what = w[2];
                number = "0";
                at = w[3];
            } else {
                return usage("unknown command: " + line);
            }
            boolean callerClock = !at.equals("-");
            Limiter limiter = limiter(name, callerClock);
            if (callerClock) {
                now = Long.parseLong(at);
            }
            switch (op) {
                case "check": {
                    Decision d = limiter.check(what, Long.parseLong(number));
                    if (d.receipt().isEmpty()) {
                        return json(d, "");
                    }
                    Receipt r = d.receipt().get();
                    long n = nextReceipt++;
                    receipts.put(n, Map.entry(id(name, callerClock), r));
                    return json(d, ",\"receipt\":" + n + ",\"stamp_at\":" + r.stampAt() + ",\"stamp_mark\":" + r.stampMark());
                }
                case "peek":
                    return json(limiter.peek(what, Long.parseLong(number)), "");
                case "settle":
                case "refund": {
                    Map.Entry<String, Receipt> held = receipts.get(parseOrZero(what));
                    if (held == null || !held.getKey().equals(id(name, callerClock))) {
                        return usage("no receipt " + what + " of this limiter");
                    }
                    receipts.remove(parseOrZero(what));
                    return json(limiter.settle(held.getValue(), Long.parseLong(number)), "");
                }
                default:
                    limiter.reset(what);
                    return "{\"ok\":true}";
            }
        } catch (RatelabException e) {
            return "{\"error\":" + Json.quote(String.valueOf(e.getMessage())) + ",\"kind\":" + Json.quote(e.getClass().getSimpleName()) + "}";
        } catch (IllegalArgumentException e) {
            return usage(String.valueOf(e.getMessage()));
        }
    }

    private static long parseOrZero(String s) {
        try {
            return Long.parseLong(s);
        } catch (NumberFormatException e) {
            return 0;
        }
    }

    private static String usage(String message) {
        return "{\"error\":" + Json.quote(message) + ",\"kind\":\"Usage\"}";
    }

    private static String json(Decision d, String more) {
        return "{\"allowed\":" + d.allowed() + ",\"limit\":" + d.limit() + ",\"remaining\":" + d.remaining()
                + ",\"retry_after_micros\":" + d.retryAfterMicros() + ",\"reset_after_micros\":" + d.resetAfterMicros()
                + ",\"delay_micros\":" + d.delayMicros() + more + "}";
    }
}
