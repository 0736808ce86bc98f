package dev.ratelab.client;

/** The tests' throwaway redis-server, for the tests of other packages. */
public final class RedisServerHandle implements AutoCloseable {
    private final RedisServer server;

    private RedisServerHandle(RedisServer server) {
        this.server = server;
    }

    public static RedisServerHandle start() {
        return new RedisServerHandle(RedisServer.start());
    }

    public String url() {
        return server.url();
    }

    @Override
    public void close() {
        server.close();
    }
}
