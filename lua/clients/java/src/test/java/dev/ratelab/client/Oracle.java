package dev.ratelab.client;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;

/**
 * The Rust client as an oracle: the example {@code protocol_client}
 * (crates/ratelab/examples/protocol_client.rs) spoken to on its stdin.
 * Found at {@code RATELAB_PROTOCOL_CLIENT}, else in the Cargo target
 * directory ({@code CARGO_TARGET_DIR} or the repository's {@code target/}),
 * built there first with {@code cargo build --locked --workspace --examples}
 * (a no-op after {@code cargo test --workspace}).
 */
final class Oracle implements AutoCloseable {
    private final Process process;
    private final Writer in;
    private final BufferedReader out;

    Oracle(String url, String prefix) {
        try {
            process = new ProcessBuilder(binary().toString(), url, prefix)
                    .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        in = new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8);
        out = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
    }

    private static Path repo() {
        return Repo.lua().getParent();
    }

    static synchronized Path binary() {
        String env = System.getenv("RATELAB_PROTOCOL_CLIENT");
        if (env != null && !env.isEmpty()) {
            return Path.of(env);
        }
        String targetEnv = System.getenv("CARGO_TARGET_DIR");
        Path target = targetEnv == null || targetEnv.isEmpty() ? repo().resolve("target") : repo().resolve(targetEnv);
        Path binary = target.resolve("debug/examples/protocol_client");
        if (!BUILT) {
            // Once per run, failed or not: a failure fails every oracle test alike.
            BUILT = true;
            String cargo = System.getenv().getOrDefault("CARGO", "cargo");
            try {
                Process build = new ProcessBuilder(cargo, "build", "--locked", "--workspace", "--examples")
                        .directory(repo().toFile()).redirectErrorStream(true)
                        .redirectOutput(File.createTempFile("ratelab-cargo", ".log")).start();
                if (build.waitFor() != 0) {
                    fail("building the Rust example protocol_client failed (cargo build --locked --workspace --examples in " + repo() + ")");
                }
            } catch (IOException e) {
                fail("cargo not found: the oracle tests build the Rust example protocol_client (install Rust, or set RATELAB_PROTOCOL_CLIENT): " + e);
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        }
        if (!Files.isExecutable(binary)) {
            fail("no Rust protocol_client at " + binary);
        }
        return binary;
    }

    private static boolean BUILT;

    /** One command; its JSON answer. */
    Map<String, Object> send(String line) {
        try {
            in.write(line + "\n");
            in.flush();
            String answer = out.readLine();
            if (answer == null) {
                fail("the Rust client exited on " + line);
            }
            return Repo.map(Json.parse(answer));
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    @Override
    public void close() {
        try {
            in.close();
            process.waitFor();
        } catch (IOException | InterruptedException e) {
            process.destroyForcibly();
        }
    }
}
