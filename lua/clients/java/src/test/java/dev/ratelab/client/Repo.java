package dev.ratelab.client;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

/** The repository's lua/ folder (Maven passes it), and what the tests read there. */
final class Repo {
    private Repo() {}

    static Path lua() {
        String dir = System.getProperty("ratelab.repo.lua");
        return Path.of(dir != null ? dir : "../..").toAbsolutePath().normalize();
    }

    static byte[] bytes(String file) {
        try {
            return Files.readAllBytes(lua().resolve(file));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> json(String file) {
        return (Map<String, Object>) Json.parse(new String(bytes(file), StandardCharsets.UTF_8));
    }

    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> list(Object o) {
        return (List<Map<String, Object>>) o;
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> map(Object o) {
        return (Map<String, Object>) o;
    }

    static long n(Object o) {
        return (Long) o;
    }
}
