package dev.ratelab.client;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The pure half of ratelab's script protocol (lua/README.md in the ratelab
 * repository): the version, the algorithms' spec, the key scheme and the
 * scripts. No I/O but reading the scripts and {@code algorithms.json}, which
 * the jar ships (copied from the repository's {@code lua/} at build time);
 * the environment variable {@code RATELAB_LUA_DIR} names another folder to
 * read them from.
 */
public final class Protocol {
    private Protocol() {}

    /** The integers of a script's reply. */
    public static final int REPLY_LEN = 8;

    /** The longest user key, bytes, used as is in a Redis key; longer keys are hashed. */
    public static final int MAX_KEY_LEN = 128;

    /** The most TTL slack the scripts take, ms: 2^52 µs rounded up. */
    public static final long MAX_TTL_SLACK_MS = Quota.ceilDiv(1L << 52, 1000);

    /** The latest instant a debt may end at: 2^52 + 2^51 µs. */
    public static final long MAX_END = (1L << 52) + (1L << 51);

    /** The largest integer the scripts send and take exactly: 2^53 - 1. */
    public static final long MAX_EXACT = (1L << 53) - 1;

    /** The default key prefix. */
    public static final String DEFAULT_PREFIX = "ratelab";

    private static final String RESOURCES = "/dev/ratelab/client/lua/";

    /** The spec, read once. */
    static final Spec SPEC = Spec.load();

    /**
     * The protocol version this client's code implements (its arguments,
     * replies and their checks): {@code algorithms.json} must be of it.
     */
    static final int SPEAKS = 5;

    /** The protocol version this client speaks: {@code algorithms.json}'s, the first argument of every call. */
    public static int version() {
        return SPEC.version;
    }

    /** Every algorithm's name, in the order the Rust implementation lists them. */
    public static List<String> algorithms() {
        return SPEC.names;
    }

    /**
     * Where the scripts are read from: {@code RATELAB_LUA_DIR} when set, else
     * null (the copies the jar ships).
     */
    public static Path luaDir() {
        String env = System.getenv("RATELAB_LUA_DIR");
        return env == null || env.isEmpty() ? null : Path.of(env);
    }

    /** The bytes of {@code file} of lua/ ({@code prologue.lua}, {@code clients/algorithms.json}, ...). */
    static byte[] read(String file) {
        Path dir = luaDir();
        if (dir != null) {
            try {
                return Files.readAllBytes(dir.resolve(file));
            } catch (IOException e) {
                throw new UncheckedIOException(
                        "ratelab file " + dir.resolve(file) + " not readable: RATELAB_LUA_DIR must be ratelab's lua/ folder", e);
            }
        }
        try (InputStream in = Protocol.class.getResourceAsStream(RESOURCES + file)) {
            if (in == null) {
                throw new IllegalStateException("ratelab file " + file + " is missing from the jar (" + RESOURCES
                        + "): build it with Maven from the ratelab repository, or set RATELAB_LUA_DIR to its lua/ folder");
            }
            return in.readAllBytes();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static final Map<String, byte[]> SOURCES = new ConcurrentHashMap<>();

    /**
     * The script of {@code algorithm}: the bytes of {@code prologue.lua}
     * followed by those of its file, nothing added.
     */
    public static byte[] scriptSource(String algorithm) {
        Spec.Entry entry = SPEC.entry(algorithm);
        return SOURCES.computeIfAbsent(algorithm, name -> {
            byte[] prologue = read("prologue.lua");
            byte[] body = read(entry.script());
            byte[] source = new byte[prologue.length + body.length];
            System.arraycopy(prologue, 0, source, 0, prologue.length);
            System.arraycopy(body, 0, source, prologue.length, body.length);
            return source;
        }).clone();
    }

    /** The lowercase hex SHA-1 {@code EVALSHA} names a script by. */
    public static String sha1Hex(byte[] bytes) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-1").digest(bytes));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("no SHA-1 in this JVM", e);
        }
    }

    /**
     * {@code escape(prefix) ":{" tag "}:" suffix}: the tag is the escaped key,
     * {@code %} for an empty one, {@code %H} and the hex SHA-1 of a key longer
     * than {@link #MAX_KEY_LEN} bytes.
     */
    public static byte[] redisKey(String prefix, byte[] key, String suffix) {
        var out = new java.io.ByteArrayOutputStream(prefix.length() + key.length + suffix.length() + 8);
        escape(out, prefix.getBytes(StandardCharsets.UTF_8));
        out.write(':');
        out.write('{');
        if (key.length == 0) {
            out.write('%');
        } else if (key.length > MAX_KEY_LEN) {
            out.writeBytes(("%H" + sha1Hex(key)).getBytes(StandardCharsets.US_ASCII));
        } else {
            escape(out, key);
        }
        out.write('}');
        out.write(':');
        out.writeBytes(suffix.getBytes(StandardCharsets.UTF_8));
        return out.toByteArray();
    }

    private static void escape(java.io.ByteArrayOutputStream out, byte[] bytes) {
        for (byte b : bytes) {
            switch (b) {
                case '%' -> out.writeBytes(new byte[] {'%', '2', '5'});
                case '{' -> out.writeBytes(new byte[] {'%', '7', 'B'});
                case '}' -> out.writeBytes(new byte[] {'%', '7', 'D'});
                default -> out.write(b);
            }
        }
    }

    /** {@code algorithms.json}: every algorithm as the Rust implementation describes it. */
    static final class Spec {
        record Entry(String name, String code, String script, List<String> params, String capacity,
                     String maxWaitOf, long maxWaitTimes, boolean debt, Long maxBurst, String unsupported) {}

        /** The quantities of a quota this client computes, by the names the spec uses. */
        static final List<String> QUANTITIES =
                List.of("burst", "interval", "tolerance", "window", "window_step", "window_steps");

        final int version;
        final String stateFormat;
        final long maxSteps;
        final Map<String, Entry> byName;
        final List<String> names;

        private Spec(int version, String stateFormat, long maxSteps, Map<String, Entry> byName) {
            this.version = version;
            this.stateFormat = stateFormat;
            this.maxSteps = maxSteps;
            this.byName = byName;
            this.names = List.copyOf(byName.keySet());
        }

        Entry entry(String name) {
            Entry entry = byName.get(name);
            if (entry == null) {
                throw new IllegalArgumentException(
                        "unknown algorithm " + name + ": one of " + String.join(", ", names));
            }
            return entry;
        }

        static Spec load() {
            String where = "algorithms.json";
            try {
                Map<String, Object> spec = object(Json.parse(new String(read("clients/algorithms.json"), StandardCharsets.UTF_8)));
                long version = number(spec.get("protocol_version"));
                if (version != SPEAKS) {
                    throw new IllegalStateException(where + " is of protocol version " + version + ", this client "
                            + SPEAKS);
                }
                String stateFormat = (String) spec.get("state_format");
                if (stateFormat == null || stateFormat.isEmpty()) {
                    throw new IllegalStateException(where + " names no state_format");
                }
                long maxSteps = number(spec.get("max_steps"));
                Map<String, Entry> byName = new LinkedHashMap<>();
                for (Object item : (List<?>) spec.get("algorithms")) {
                    Map<String, Object> a = object(item);
                    Map<String, Object> maxWait = object(a.get("max_wait"));
                    List<String> params = new ArrayList<>();
                    for (Object p : (List<?>) a.get("params")) {
                        params.add((String) p);
                    }
                    Object maxBurst = a.get("max_burst");
                    Entry entry = new Entry((String) a.get("name"), (String) a.get("code"), (String) a.get("script"),
                            Collections.unmodifiableList(params), (String) a.get("capacity"),
                            (String) maxWait.get("of"), number(maxWait.get("times")), (Boolean) a.get("debt"),
                            maxBurst == null ? null : number(maxBurst), (String) a.get("unsupported"));
                    List<String> needed = new ArrayList<>(params);
                    needed.add(entry.capacity());
                    needed.add(entry.maxWaitOf());
                    for (String quantity : needed) {
                        if (!QUANTITIES.contains(quantity)) {
                            throw new IllegalStateException(where + ": " + entry.name() + " needs the quantity "
                                    + quantity + ", which this client does not compute (one of "
                                    + String.join(", ", QUANTITIES) + "): add it to Algorithm.java");
                        }
                    }
                    byName.put(entry.name(), entry);
                }
                return new Spec(Math.toIntExact(version), stateFormat, maxSteps, Collections.unmodifiableMap(byName));
            } catch (ClassCastException | NullPointerException | IllegalArgumentException e) {
                throw new IllegalStateException(where + " is not what this client reads: " + e, e);
            }
        }

        @SuppressWarnings("unchecked")
        private static Map<String, Object> object(Object o) {
            return (Map<String, Object>) o;
        }

        private static long number(Object o) {
            return (Long) o;
        }
    }
}
