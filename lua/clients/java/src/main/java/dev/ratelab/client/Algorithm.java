package dev.ratelab.client;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Collectors;

/**
 * One algorithm on one quota, as the scripts see it: its parameters
 * ({@code ARGV[7...]}), capacity, longest wait, whether its state is a debt,
 * and the key suffix its fingerprint names. Computed from
 * {@code algorithms.json} (which the Rust implementation generates), so that
 * a new algorithm needs no change here. Immutable.
 */
public final class Algorithm {
    private final String name;
    private final String code;
    private final String scriptFile;
    private final List<Long> params;
    private final long capacity;
    private final long maxWaitMicros;
    private final boolean debt;
    private final String fingerprintInput;
    private final String keySuffix;

    private Algorithm(Protocol.Spec.Entry entry, Quota quota) {
        this.name = entry.name();
        this.code = entry.code();
        this.scriptFile = entry.script();
        List<Long> values = new ArrayList<>();
        for (String quantity : entry.params()) {
            values.add(quantity(quantity, quota));
        }
        this.params = List.copyOf(values);
        this.capacity = quantity(entry.capacity(), quota);
        this.maxWaitMicros = Math.multiplyExact(entry.maxWaitTimes(), quantity(entry.maxWaitOf(), quota));
        this.debt = entry.debt();
        this.fingerprintInput = Protocol.SPEC.stateFormat + ":" + code + ":"
                + params.stream().map(String::valueOf).collect(Collectors.joining(","));
        String digest = Protocol.sha1Hex(fingerprintInput.getBytes(StandardCharsets.US_ASCII));
        this.keySuffix = code + ":" + digest.substring(0, 8);
    }

    /**
     * The algorithm {@code name} ({@code "gcra"}, {@code "token-bucket"}, one
     * of {@link Protocol#algorithms()}) on {@code quota}. An unknown name, or a
     * quota the store cannot hold (a sliding log above its largest burst), is
     * an {@link IllegalArgumentException}.
     */
    public static Algorithm of(String name, Quota quota) {
        Protocol.Spec.Entry entry = Protocol.SPEC.entry(name);
        if (entry.maxBurst() != null && quota.burst() > entry.maxBurst()) {
            throw new IllegalArgumentException(name + " of " + quota.burst() + " units: " + entry.unsupported()
                    + " (at most " + entry.maxBurst() + ")");
        }
        return new Algorithm(entry, quota);
    }

    private static long quantity(String of, Quota q) {
        long steps = Protocol.SPEC.maxSteps;
        return switch (of) {
            case "burst" -> q.burst();
            case "interval" -> q.emissionIntervalMicros();
            case "tolerance" -> q.burstToleranceMicros();
            case "window" -> q.windowMicros();
            case "window_step" -> Quota.ceilDiv(q.windowMicros(), steps);
            case "window_steps" -> Quota.ceilDiv(q.windowMicros(), Quota.ceilDiv(q.windowMicros(), steps));
            default -> throw new IllegalStateException("no quantity " + of);
        };
    }

    public String name() {
        return name;
    }

    /** The key code ({@code gcra}, {@code tb}, ...). */
    public String code() {
        return code;
    }

    /** The algorithm's script file in lua/. */
    public String scriptFile() {
        return scriptFile;
    }

    /** {@code ARGV[7...]}. */
    public List<Long> params() {
        return params;
    }

    /** The {@code limit} of every decision: the burst. */
    public long capacity() {
        return capacity;
    }

    /** The longest wait the script answers from state it wrote itself, µs. */
    public long maxWaitMicros() {
        return maxWaitMicros;
    }

    /**
     * The state is a debt (GCRA, token bucket, leaky meter and queue): a
     * settlement above the cost charges it whatever the room.
     */
    public boolean debt() {
        return debt;
    }

    /** {@code <state format>:<code>:<params joined by commas>}, the state format {@code algorithms.json}'s ({@code v3}). */
    public String fingerprintInput() {
        return fingerprintInput;
    }

    /** {@code <code>:<first 8 hex digits of the SHA-1 of the fingerprint input>}. */
    public String keySuffix() {
        return keySuffix;
    }

    /** The native module's command, {@code RATELAB.<NAME>}. */
    public String moduleCommand() {
        return "RATELAB." + name.toUpperCase(java.util.Locale.ROOT);
    }

    @Override
    public String toString() {
        return name + " " + fingerprintInput;
    }
}
