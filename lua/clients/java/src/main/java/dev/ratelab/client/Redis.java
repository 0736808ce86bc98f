package dev.ratelab.client;

import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisConnectionStateListener;
import io.lettuce.core.RedisURI;
import io.lettuce.core.SocketOptions;
import io.lettuce.core.TimeoutOptions;
import io.lettuce.core.api.StatefulConnection;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.cluster.ClusterClientOptions;
import io.lettuce.core.cluster.ClusterTopologyRefreshOptions;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import io.lettuce.core.cluster.api.async.RedisClusterAsyncCommands;
import io.lettuce.core.cluster.models.partitions.RedisClusterNode;
import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.resource.ClientResources;
import io.lettuce.core.resource.Delay;

import java.net.SocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A connection to Redis for ratelab's limiters: one node (or a primary found
 * through Sentinel), or a Redis Cluster. {@link AutoCloseable}: close it when
 * the limiters that use it are done. Thread-safe; every limiter of a process
 * can share one.
 *
 * <pre>{@code
 * try (Redis redis = Redis.connect("redis://localhost:6379")) {
 *     Limiter limiter = Limiter.builder(redis, "gcra", Quota.perMinute(100)).build();
 *     ...
 * }
 * }</pre>
 *
 * <p>It runs on Lettuce, over one multiplexed connection (per node of a
 * cluster): calls from every thread share it, so a burst of concurrent checks
 * never opens a connection each, and there is no pool whose idle connections
 * could go stale. It is set up as a rate limiter needs it:
 *
 * <ul>
 *   <li><b>Connected at once</b> ({@link #connect}, {@link Builder#build()}
 *       wait up to the connect timeout for it): the first checks find it
 *       ready. When Redis cannot be reached then, the failure is logged and
 *       calls fail as outages (the failure policy answers) while a new
 *       attempt is made at most every {@link Builder#reconnectDelay reconnect
 *       delay}.</li>
 *   <li><b>A connect timeout of its own</b> (default {@value #DEFAULT_CONNECT_TIMEOUT_MS}
 *       ms), apart from each call's timeout: connecting is shared by every
 *       call, and never counted against one call's deadline but when no
 *       connection exists yet.</li>
 *   <li><b>Reconnected at once</b> when Redis restarts or a failover moves
 *       the primary, with a backoff capped at {@value #DEFAULT_RECONNECT_DELAY_MS} ms, so
 *       that calls reach Redis again well within 2 s of its return; while
 *       disconnected, calls fail at once (no buffering), and a command in
 *       flight when the connection dropped is never sent again (at most
 *       once: a check is never run twice).</li>
 *   <li><b>No command timeout of Lettuce's own</b>: each call is bounded by
 *       its caller's deadline instead, and a reply that arrives after its
 *       caller gave up is still read (so that an admission made by then can
 *       be given back).</li>
 * </ul>
 *
 * <p>A Sentinel-managed primary is a {@code redis-sentinel://} URI (or
 * {@link #sentinel}): each reconnection asks the sentinels where the primary
 * is now.
 */
public final class Redis implements AutoCloseable {
    /** The default connect timeout, ms. */
    public static final long DEFAULT_CONNECT_TIMEOUT_MS = 2_000;
    /** The longest wait between two reconnection attempts, ms. */
    public static final long DEFAULT_RECONNECT_DELAY_MS = 500;
    /** The most commands one connection holds unanswered before calls fail as outages. */
    public static final int DEFAULT_MAX_PENDING = 100_000;

    private static final System.Logger LOG = System.getLogger("dev.ratelab.client");

    private final RedisClient single;
    private final RedisClusterClient cluster;
    private final List<RedisURI> uris;
    private final ClientResources resources;
    private final boolean ownResources;
    private final Duration connectTimeout;
    private final long retryNanos;
    private final RedisClock clock = new RedisClock();
    /** Bumped on every (re)connection: what a limiter learnt of the server may be stale. */
    private final AtomicLong generation = new AtomicLong();
    private final ScheduledExecutorService timer;
    private final Object lock = new Object();
    private CompletableFuture<StatefulConnection<byte[], byte[]>> current;
    private long failedAt;
    private volatile boolean closed;

    private Redis(Builder b) {
        this.connectTimeout = b.connectTimeout;
        for (RedisURI uri : b.uris) {
            // Lettuce bounds the handshake (HELLO, AUTH, the sentinels' answer) by the URI's timeout.
            uri.setTimeout(connectTimeout);
        }
        this.uris = List.copyOf(b.uris);
        this.retryNanos = b.reconnectDelay.toNanos();
        this.ownResources = b.resources == null;
        this.resources = b.resources != null ? b.resources
                : ClientResources.builder()
                        .reconnectDelay(Delay.exponential(Duration.ofMillis(5), b.reconnectDelay, 2, TimeUnit.MILLISECONDS))
                        .build();
        SocketOptions socket = SocketOptions.builder().connectTimeout(connectTimeout).keepAlive(true).build();
        // Each call is bounded by its caller's deadline, not by Lettuce: a late reply is still read.
        TimeoutOptions timeouts = TimeoutOptions.builder().timeoutCommands(false).build();
        RedisConnectionStateListener listener = new RedisConnectionStateListener() {
            @Override
            public void onRedisConnected(io.lettuce.core.RedisChannelHandler<?, ?> connection, SocketAddress address) {
                // A new connection, maybe to another server: its clock is measured again.
                clock.invalidate();
                generation.incrementAndGet();
            }
        };
        if (b.cluster) {
            this.single = null;
            this.cluster = RedisClusterClient.create(resources, uris);
            ClusterClientOptions.Builder options = ClusterClientOptions.builder()
                    // Adaptive refreshes (MOVED, ASK, reconnections, ...) are on by default; and every 30 s.
                    .topologyRefreshOptions(ClusterTopologyRefreshOptions.builder()
                            .enablePeriodicRefresh(Duration.ofSeconds(30))
                            .build())
                    .autoReconnect(true)
                    // Node connections open on demand: a command waits for its node's (its deadline
                    // bounds it; one that reaches Redis late expires there, charging nothing).
                    .disconnectedBehavior(ClientOptions.DisconnectedBehavior.ACCEPT_COMMANDS)
                    .requestQueueSize(b.maxPending)
                    .socketOptions(socket)
                    .timeoutOptions(timeouts);
            // A command in flight when a connection dropped is never sent again.
            options.replayFilter(command -> true);
            cluster.setOptions(options.build());
            // On a cluster the clock is sampled on every master and kept for its age alone: a node
            // connection opened on demand is not another server.
        } else {
            this.cluster = null;
            this.single = RedisClient.create(resources);
            single.setOptions(ClientOptions.builder()
                    .autoReconnect(true)
                    // A command in flight when the connection dropped is never sent again.
                    .replayFilter(command -> true)
                    .disconnectedBehavior(ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
                    .requestQueueSize(b.maxPending)
                    .socketOptions(socket)
                    .timeoutOptions(timeouts)
                    .build());
            single.addListener(listener);
        }
        ScheduledThreadPoolExecutor t = new ScheduledThreadPoolExecutor(1, runnable -> {
            Thread thread = new Thread(runnable, "ratelab-deadlines");
            thread.setDaemon(true);
            return thread;
        });
        t.setRemoveOnCancelPolicy(true);
        this.timer = t;
        CompletableFuture<StatefulConnection<byte[], byte[]>> first;
        synchronized (lock) {
            first = open();
        }
        try {
            first.get(connectTimeout.toMillis() + 1_000, TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            LOG.log(System.Logger.Level.WARNING, "ratelab: could not connect to Redis at {0} ({1}); limiters "
                    + "answer as in an outage and the connection is tried again", describe(), rootMessage(e));
        }
    }

    /** One node, or a Sentinel-managed primary: {@code redis://host:port}, {@code rediss://...}, {@code redis-sentinel://...}. */
    public static Redis connect(String uri) {
        return builder(uri).build();
    }

    /** A builder for one node or a Sentinel-managed primary. */
    public static Builder builder(String uri) {
        return new Builder(false, List.of(RedisURI.create(uri)));
    }

    /**
     * A builder for one node or a Sentinel-managed primary, from a Lettuce
     * {@link RedisURI} (credentials, TLS, database...); its timeout becomes
     * the connect timeout (Lettuce bounds the handshake by it).
     */
    public static Builder builder(RedisURI uri) {
        return new Builder(false, List.of(uri));
    }

    /** A builder for a Sentinel-managed primary named {@code master}, asking the sentinels at {@code sentinels} ({@code host:port}). */
    public static Builder sentinel(String master, String... sentinels) {
        if (sentinels.length == 0) {
            throw new IllegalArgumentException("at least one sentinel address is needed");
        }
        RedisURI.Builder uri = null;
        for (String address : sentinels) {
            HostPort hp = HostPort.parse(address);
            uri = uri == null ? RedisURI.Builder.sentinel(hp.host, hp.port, master) : uri.withSentinel(hp.host, hp.port);
        }
        return new Builder(false, List.of(uri.build()));
    }

    /** A builder for a Redis Cluster, from the URIs of some of its nodes ({@code redis://host:port}). */
    public static Builder cluster(String... seeds) {
        if (seeds.length == 0) {
            throw new IllegalArgumentException("at least one cluster node is needed");
        }
        List<RedisURI> list = new ArrayList<>();
        for (String seed : seeds) {
            list.add(RedisURI.create(seed));
        }
        return new Builder(true, list);
    }

    private record HostPort(String host, int port) {
        static HostPort parse(String address) {
            int colon = address.lastIndexOf(':');
            if (colon <= 0) {
                throw new IllegalArgumentException("a sentinel address is host:port, not " + address);
            }
            return new HostPort(address.substring(0, colon), Integer.parseInt(address.substring(colon + 1)));
        }
    }

    /** Options of a {@link Redis} connection. */
    public static final class Builder {
        private final boolean cluster;
        private final List<RedisURI> uris;
        private Duration connectTimeout = Duration.ofMillis(DEFAULT_CONNECT_TIMEOUT_MS);
        private Duration reconnectDelay = Duration.ofMillis(DEFAULT_RECONNECT_DELAY_MS);
        private int maxPending = DEFAULT_MAX_PENDING;
        private ClientResources resources;

        private Builder(boolean cluster, List<RedisURI> uris) {
            this.cluster = cluster;
            this.uris = uris;
        }

        /** How long setting up a connection may take (TCP, TLS, {@code HELLO}), apart from each call's timeout. Default 2 s. */
        public Builder connectTimeout(Duration timeout) {
            if (timeout.isNegative() || timeout.isZero()) {
                throw new IllegalArgumentException("the connect timeout must be positive, not " + timeout);
            }
            this.connectTimeout = timeout;
            return this;
        }

        /** The longest wait between two reconnection attempts (default 500 ms; the backoff starts at 5 ms). */
        public Builder reconnectDelay(Duration delay) {
            if (delay.isNegative() || delay.isZero()) {
                throw new IllegalArgumentException("the reconnect delay must be positive, not " + delay);
            }
            this.reconnectDelay = delay;
            return this;
        }

        /**
         * The most commands a connection holds unanswered (default 100 000):
         * during a stall, calls past it fail as outages instead of holding
         * memory. Calls whose callers gave up count until their replies arrive.
         */
        public Builder maxPending(int commands) {
            if (commands < 1) {
                throw new IllegalArgumentException("maxPending must be positive, not " + commands);
            }
            this.maxPending = commands;
            return this;
        }

        /**
         * Lettuce's {@link ClientResources} to share (event loops) with other
         * clients of the process; then its reconnect delay is the one it was
         * built with, and closing this connection leaves it open.
         */
        public Builder clientResources(ClientResources resources) {
            this.resources = Objects.requireNonNull(resources);
            return this;
        }

        /** Connects (waiting up to the connect timeout; see the class's documentation). */
        public Redis build() {
            return new Redis(this);
        }
    }

    private String describe() {
        return uris.toString();
    }

    private static String rootMessage(Throwable e) {
        Throwable t = e;
        while (t.getCause() != null && t.getCause() != t) {
            t = t.getCause();
        }
        return t.toString();
    }

    /** Starts connecting, as the connection from now on; call with {@code lock} held. */
    @SuppressWarnings({"unchecked", "rawtypes"})
    private CompletableFuture<StatefulConnection<byte[], byte[]>> open() {
        CompletableFuture<StatefulConnection<byte[], byte[]>> f;
        if (cluster != null) {
            // The topology first (connectAsync needs it), read from the seeds.
            f = (CompletableFuture) cluster.refreshPartitionsAsync().toCompletableFuture()
                    .thenCompose(loaded -> cluster.connectAsync(ByteArrayCodec.INSTANCE));
        } else {
            f = (CompletableFuture) single.connectAsync(ByteArrayCodec.INSTANCE, uris.get(0)).toCompletableFuture();
        }
        current = f;
        f.whenComplete((c, e) -> {
            if (e != null) {
                synchronized (lock) {
                    failedAt = System.nanoTime();
                }
            } else if (closed) {
                c.closeAsync();
            }
        });
        return f;
    }

    /**
     * The connection, once connected: a failed first attempt is made again
     * when at least the reconnect delay has passed since it failed.
     */
    CompletableFuture<StatefulConnection<byte[], byte[]>> connection() {
        if (closed) {
            return CompletableFuture.failedFuture(new BackendException("this Redis connection was closed"));
        }
        synchronized (lock) {
            CompletableFuture<StatefulConnection<byte[], byte[]>> f = current;
            if (f.isCompletedExceptionally() && System.nanoTime() - failedAt >= retryNanos) {
                return open();
            }
            return f;
        }
    }

    /** The commands of a connection: a node's, or the cluster's (routed by key). */
    @SuppressWarnings("unchecked")
    static RedisClusterAsyncCommands<byte[], byte[]> commands(StatefulConnection<byte[], byte[]> c) {
        if (c instanceof StatefulRedisClusterConnection<?, ?> cc) {
            return ((StatefulRedisClusterConnection<byte[], byte[]>) cc).async();
        }
        return ((StatefulRedisConnection<byte[], byte[]>) c).async();
    }

    /** The primaries' connections of a cluster (for {@code TIME}); a single node's own. */
    @SuppressWarnings("unchecked")
    static List<CompletableFuture<RedisClusterAsyncCommands<byte[], byte[]>>> primaries(StatefulConnection<byte[], byte[]> c) {
        List<CompletableFuture<RedisClusterAsyncCommands<byte[], byte[]>>> out = new ArrayList<>();
        if (c instanceof StatefulRedisClusterConnection<?, ?> raw) {
            StatefulRedisClusterConnection<byte[], byte[]> cc = (StatefulRedisClusterConnection<byte[], byte[]>) raw;
            for (RedisClusterNode node : cc.getPartitions()) {
                if (node.is(RedisClusterNode.NodeFlag.UPSTREAM)) {
                    out.add(cc.getConnectionAsync(node.getNodeId()).thenApply(StatefulRedisConnection::async));
                }
            }
        } else {
            out.add(CompletableFuture.completedFuture(commands(c)));
        }
        return out;
    }

    boolean isCluster() {
        return cluster != null;
    }

    RedisClock clock() {
        return clock;
    }

    long generation() {
        return generation.get();
    }

    ScheduledExecutorService timer() {
        return timer;
    }

    /** Closes the connection (and Lettuce's resources, unless they were given). */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        CompletableFuture<StatefulConnection<byte[], byte[]>> f;
        synchronized (lock) {
            f = current;
        }
        f.thenAccept(StatefulConnection::close);
        if (single != null) {
            single.shutdown(Duration.ZERO, Duration.ofSeconds(2));
        } else {
            cluster.shutdown(Duration.ZERO, Duration.ofSeconds(2));
        }
        if (ownResources) {
            resources.shutdown(0, 2, TimeUnit.SECONDS);
        }
        timer.shutdownNow();
    }

    @Override
    public String toString() {
        return "Redis(" + describe() + (cluster != null ? ", cluster" : "") + ")";
    }
}
