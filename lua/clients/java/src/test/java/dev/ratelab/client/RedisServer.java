package dev.ratelab.client;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A throwaway redis-server for the tests ({@code RATELAB_REDIS_SERVER} or
 * PATH): random port, no persistence, output to a log file, killed at the
 * end (and when the JVM exits).
 */
final class RedisServer implements AutoCloseable {
    final int port;
    final Path dir;
    private final List<String> extra;
    private Process process;

    private RedisServer(int port, List<String> extra) throws IOException {
        this.port = port;
        this.extra = extra;
        this.dir = Files.createTempDirectory("ratelab-java-redis-");
    }

    static String binary() {
        String env = System.getenv("RATELAB_REDIS_SERVER");
        if (env != null && !env.isEmpty()) {
            return env;
        }
        for (String dir : System.getenv().getOrDefault("PATH", "").split(":")) {
            Path p = Path.of(dir, "redis-server");
            if (Files.isExecutable(p)) {
                return p.toString();
            }
        }
        fail("redis-server not found: install it (Debian/Ubuntu: sudo apt-get install redis-server) or set RATELAB_REDIS_SERVER");
        return null;
    }

    static RedisServer start(String... extra) {
        for (int attempt = 0; attempt < 10; attempt++) {
            try {
                RedisServer s = new RedisServer(freePort(), List.of(extra));
                if (s.launch()) {
                    return s;
                }
                s.close();
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
        }
        fail("redis-server did not start");
        return null;
    }

    /** With the native module loaded: {@code RATELAB_MODULE_PATH}, or the error that says how to build it. */
    static RedisServer withModule() {
        return start("--loadmodule", modulePath());
    }

    /**
     * {@code RATELAB_MODULE_PATH}, else the library {@code cargo test --workspace} leaves in the target
     * directory ({@code CARGO_TARGET_DIR} or the repository's {@code target/}).
     */
    static String modulePath() {
        String env = System.getenv("RATELAB_MODULE_PATH");
        List<Path> candidates = new ArrayList<>();
        if (env != null && !env.isEmpty()) {
            candidates.add(Path.of(env));
        } else {
            Path repo = Repo.lua().getParent();
            String target = System.getenv("CARGO_TARGET_DIR");
            Path dir = target == null || target.isEmpty() ? repo.resolve("target") : repo.resolve(target);
            candidates.add(dir.resolve("debug/deps/libratelab_redis_module.so"));
            candidates.add(dir.resolve("debug/libratelab_redis_module.so"));
        }
        for (Path p : candidates) {
            if (Files.isRegularFile(p)) {
                return p.toString();
            }
        }
        fail("ratelab's native module not found (" + candidates + "): build it with `cargo build -p "
                + "ratelab-redis-module` (just test does) or set RATELAB_MODULE_PATH");
        return null;
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    private boolean launch() throws IOException {
        List<String> cmd = new ArrayList<>(List.of(binary(), "--port", String.valueOf(port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", dir.toString(), "--logfile", dir.resolve("redis.log").toString(),
                "--enable-debug-command", "local"));
        cmd.addAll(extra);
        process = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(dir.resolve("stdout.log").toFile()).start();
        ALL.add(this);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (System.nanoTime() < deadline) {
            if (!process.isAlive()) {
                return false;
            }
            if ("+PONG".equals(command("PING"))) {
                return true;
            }
            sleep(50);
        }
        return false;
    }

    /** One inline command over a socket of its own; its first reply line, or null when the server does not answer. */
    String command(String... words) {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress("127.0.0.1", port), 1000);
            s.setSoTimeout(5000);
            StringBuilder out = new StringBuilder("*" + words.length + "\r\n");
            for (String w : words) {
                out.append('$').append(w.getBytes(StandardCharsets.UTF_8).length).append("\r\n").append(w).append("\r\n");
            }
            OutputStream o = s.getOutputStream();
            o.write(out.toString().getBytes(StandardCharsets.UTF_8));
            o.flush();
            InputStream in = s.getInputStream();
            StringBuilder line = new StringBuilder();
            int c;
            while ((c = in.read()) >= 0 && c != '\n') {
                if (c != '\r') {
                    line.append((char) c);
                }
            }
            return line.toString();
        } catch (IOException e) {
            return null;
        }
    }

    String url() {
        return "redis://127.0.0.1:" + port;
    }

    long pid() {
        return process.pid();
    }

    /** SIGSTOP: the server holds every connection and answers nothing. */
    void pause() {
        signal("STOP");
    }

    void resume() {
        signal("CONT");
    }

    private void signal(String name) {
        try {
            new ProcessBuilder("kill", "-" + name, String.valueOf(process.pid())).start().waitFor();
        } catch (IOException | InterruptedException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Killed (SIGKILL), then started again on the same port, empty. */
    void restart() {
        kill();
        try {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (true) {
                if (launch()) {
                    return;
                }
                if (System.nanoTime() > deadline) {
                    fail("redis-server did not start again on port " + port + "; see " + dir);
                }
                sleep(100);
            }
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    void kill() {
        if (process != null && process.isAlive()) {
            resume();
            process.destroyForcibly();
            try {
                process.waitFor();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    @Override
    public void close() {
        kill();
        ALL.remove(this);
        try (var files = Files.walk(dir)) {
            files.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // A temporary folder left behind is harmless.
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    private static final List<RedisServer> ALL = java.util.Collections.synchronizedList(new ArrayList<>());

    static {
        // No server outlives the tests, however they end.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            for (RedisServer s : new ArrayList<>(ALL)) {
                s.kill();
            }
        }));
    }
}
