package dev.ratelab.client;

import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisCommandTimeoutException;
import io.lettuce.core.RedisException;

import java.io.IOException;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;

/**
 * How an error raised while talking to Redis is told to be an outage (the
 * failure policy applies) or a data error, as the Rust client tells them.
 */
final class Errors {
    private Errors() {}

    /** Redis error codes that mean "not now", not "never". */
    private static final List<String> OUTAGE_CODES =
            List.of("BUSY", "LOADING", "MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY");

    static Throwable unwrap(Throwable e) {
        while ((e instanceof CompletionException || e instanceof ExecutionException) && e.getCause() != null) {
            e = e.getCause();
        }
        return e;
    }

    /** The future's value, or its failure unwrapped (a {@link RuntimeException} as it was thrown). */
    static <T> T unwrapJoin(java.util.concurrent.CompletableFuture<T> future) {
        try {
            return future.join();
        } catch (CompletionException e) {
            Throwable cause = unwrap(e);
            if (cause instanceof RuntimeException r) {
                throw r;
            }
            throw e;
        }
    }

    /** {@code error} as this client's error. */
    static RatelabException classify(Throwable error) {
        Throwable e = unwrap(error);
        if (e instanceof RatelabException r) {
            return r;
        }
        if (e instanceof RedisCommandTimeoutException) {
            return new TimedOutException("the rate limiter backend did not answer in time: " + e.getMessage());
        }
        if (e instanceof RedisCommandExecutionException x) {
            String message = String.valueOf(x.getMessage());
            if (message.startsWith("ratelab expired")) {
                return new ExpiredException(message);
            }
            if (OUTAGE_CODES.contains(code(message))) {
                return new BackendException("the rate limiter backend failed: " + message, x);
            }
            return new DataException(message, x);
        }
        if (e instanceof RedisException || e instanceof IOException || e instanceof CancellationException) {
            // Connection refused, lost, reset or rejected while disconnected; too many commands pending.
            return new BackendException("the rate limiter backend failed: " + e, e);
        }
        if (e instanceof ClassCastException || e instanceof IllegalArgumentException) {
            return new DataException("invalid reply from Redis: " + e.getMessage(), e);
        }
        return new BackendException("the rate limiter backend failed: " + e, e);
    }

    /** The error reply's code: its first word. */
    static String code(String message) {
        int space = message.indexOf(' ');
        return space < 0 ? message : message.substring(0, space);
    }

    /** {@code ERR unknown command ...}: the server has no such command (no module). */
    static boolean unknownCommand(Throwable error) {
        Throwable e = unwrap(error);
        return e instanceof RedisCommandExecutionException && String.valueOf(e.getMessage()).startsWith("ERR unknown command");
    }

    /** {@code ratelab: protocol version ...}: a module of another version refused the call (nothing decided). */
    static boolean otherVersion(Throwable error) {
        Throwable e = unwrap(error);
        return e instanceof RedisCommandExecutionException && String.valueOf(e.getMessage()).startsWith("ratelab: protocol version ");
    }
}
