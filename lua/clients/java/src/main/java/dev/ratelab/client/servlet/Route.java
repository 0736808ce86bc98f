package dev.ratelab.client.servlet;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * A method (null: any) and a path pattern in axum's syntax, as ratelab-http
 * matches them: literal segments, {@code {name}} for one non-empty segment,
 * {@code {*name}} last for the rest (even nothing). The filter matches it
 * against the path the container routes by (within the application,
 * decoded, normalized, without path parameters); a {@code GET} route also
 * matches {@code HEAD}.
 */
public final class Route {
    private enum Kind { LITERAL, PARAM, REST }

    private record Segment(Kind kind, String value) {}

    private final String method;
    private final String pattern;
    private final List<Segment> segments = new ArrayList<>();

    /** {@code method} ({@code "POST"}, or null for any) and {@code pattern} ({@code "/sms/{to}"}). */
    public Route(String method, String pattern) {
        if (pattern == null || !pattern.startsWith("/")) {
            throw error(pattern, "a pattern starts with '/'");
        }
        String[] pieces = pattern.substring(1).split("/", -1);
        for (int i = 0; i < pieces.length; i++) {
            String piece = pieces[i];
            if (piece.startsWith("{")) {
                if (!piece.endsWith("}")) {
                    throw error(pattern, "a '{' must close with '}' at the end of its segment");
                }
                String name = piece.substring(1, piece.length() - 1);
                Kind kind = Kind.PARAM;
                if (name.startsWith("*")) {
                    if (i + 1 != pieces.length) {
                        throw error(pattern, "a catch-all {*name} must be the last segment");
                    }
                    name = name.substring(1);
                    kind = Kind.REST;
                }
                if (name.isEmpty() || name.matches(".*[{}*].*")) {
                    throw error(pattern, "a parameter needs a name: {id}, {*rest}");
                }
                segments.add(new Segment(kind, name));
            } else if (piece.contains("{") || piece.contains("}")) {
                throw error(pattern, "braces are only allowed around a whole segment: {name} or {*name}");
            } else {
                segments.add(new Segment(Kind.LITERAL, piece));
            }
        }
        this.method = method == null ? null : method.toUpperCase(Locale.ROOT);
        this.pattern = pattern;
    }

    private static IllegalArgumentException error(String pattern, String reason) {
        return new IllegalArgumentException("invalid route pattern " + pattern + ": " + reason);
    }

    public boolean matches(String requestMethod, String path) {
        if (method != null && !(method.equals(requestMethod) || (method.equals("GET") && "HEAD".equals(requestMethod)))) {
            return false;
        }
        if (path == null || !path.startsWith("/")) {
            return false;
        }
        String[] pieces = path.substring(1).split("/", -1);
        int i = 0;
        for (Segment s : segments) {
            if (s.kind == Kind.REST) {
                return true;
            }
            if (i >= pieces.length) {
                return false;
            }
            if (s.kind == Kind.LITERAL && !pieces[i].equals(s.value)) {
                return false;
            }
            if (s.kind == Kind.PARAM && pieces[i].isEmpty()) {
                return false;
            }
            i++;
        }
        return i == pieces.length;
    }

    @Override
    public String toString() {
        return (method == null ? "*" : method) + " " + pattern;
    }
}
