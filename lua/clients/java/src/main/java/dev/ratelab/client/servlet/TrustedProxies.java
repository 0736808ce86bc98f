package dev.ratelab.client.servlet;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;

/**
 * The networks of the proxies in front of the application, whose forwarding
 * header ({@code X-Forwarded-For} by default, or {@code Forwarded}) is
 * believed, as {@code ratelab_http::TrustedProxies} does: a peer outside them
 * is the client whatever the headers say; through them, the header is read
 * from the right, skipping trusted proxies; an element that is not an
 * address stops the walk at the last address that was vouched for.
 */
public final class TrustedProxies {
    /** Which forwarding header the proxies write. */
    public enum Header {
        X_FORWARDED_FOR("x-forwarded-for"),
        FORWARDED("forwarded");

        final String name;

        Header(String name) {
            this.name = name;
        }
    }

    private final List<Ip.Network> networks;
    private final Header header;

    private TrustedProxies(List<Ip.Network> networks, Header header) {
        this.networks = networks;
        this.header = header;
    }

    /** No proxy: the peer is the client. */
    public static TrustedProxies none() {
        return new TrustedProxies(List.of(), Header.X_FORWARDED_FOR);
    }

    /**
     * Proxies at {@code networks} (addresses or CIDR networks: {@code 10.0.0.0/8},
     * {@code fd00::/8}) that write {@code header}. A host name is an
     * {@link IllegalArgumentException}: nothing is resolved.
     */
    public static TrustedProxies of(Header header, List<String> networks) {
        List<Ip.Network> list = new ArrayList<>();
        for (String n : networks) {
            list.add(Ip.Network.parse(n));
        }
        return new TrustedProxies(Collections.unmodifiableList(list), header);
    }

    /** Proxies at {@code networks} that write {@code X-Forwarded-For}. */
    public static TrustedProxies of(String... networks) {
        return of(Header.X_FORWARDED_FOR, List.of(networks));
    }

    public Header header() {
        return header;
    }

    boolean contains(byte[] address) {
        for (Ip.Network n : networks) {
            if (n.contains(address)) {
                return true;
            }
        }
        return false;
    }

    /** The client's address (canonical bytes) for a request from {@code peer} with the header's lines. */
    byte[] clientIp(byte[] peer, List<String> lines) {
        byte[] p = Ip.canonical(peer);
        if (!contains(p)) {
            return p;
        }
        List<byte[]> hops = new ArrayList<>();
        for (String line : lines) {
            if (header == Header.X_FORWARDED_FOR) {
                for (String element : line.split(",", -1)) {
                    hops.add(node(element));
                }
            } else {
                for (String element : elementsFromTheRight(line)) {
                    hops.add(forwardedFor(element));
                }
            }
        }
        byte[] client = p;
        for (int i = hops.size() - 1; i >= 0; i--) {
            byte[] hop = hops.get(i);
            if (hop == null) {
                // Nothing left of this was vouched for.
                return client;
            }
            client = Ip.canonical(hop);
            if (!contains(client)) {
                return client;
            }
        }
        return client;
    }

    /** One hop: {@code 1.2.3.4}, {@code 2001:db8::1}, {@code [2001:db8::1]}, with or without a port; else null. */
    static byte[] node(String raw) {
        String text = trim(raw);
        byte[] b = Ip.parse(text);
        if (b != null) {
            return b;
        }
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("\\[([^\\]]+)\\](?::\\d{1,5})?").matcher(text);
        if (m.matches()) {
            byte[] v6 = Ip.parse(m.group(1));
            return v6 != null && m.group(1).indexOf(':') >= 0 ? v6 : null;
        }
        m = java.util.regex.Pattern.compile("([^:]+):\\d{1,5}").matcher(text);
        if (m.matches()) {
            byte[] v4 = Ip.parse(m.group(1));
            return v4 != null && v4.length == 4 ? v4 : null;
        }
        return null;
    }

    /** Spaces and tabs off both ends (what HTTP calls optional white space), nothing else. */
    static String trim(String s) {
        int a = 0;
        int b = s.length();
        while (a < b && (s.charAt(a) == ' ' || s.charAt(a) == '\t')) {
            a++;
        }
        while (b > a && (s.charAt(b - 1) == ' ' || s.charAt(b - 1) == '\t')) {
            b--;
        }
        return s.substring(a, b);
    }

    private static List<String> elementsFromTheRight(String line) {
        List<String> elements = new ArrayList<>();
        int end = line.length();
        boolean quoted = false;
        for (int i = line.length() - 1; i >= 0; i--) {
            char c = line.charAt(i);
            if (c == '"') {
                int backslashes = 0;
                while (i - 1 - backslashes >= 0 && line.charAt(i - 1 - backslashes) == '\\') {
                    backslashes++;
                }
                if (!quoted || backslashes % 2 == 0) {
                    quoted = !quoted;
                }
            } else if (c == ',' && !quoted) {
                elements.add(line.substring(i + 1, end));
                end = i;
            }
        }
        elements.add(line.substring(0, end));
        Collections.reverse(elements);
        return elements;
    }

    private static List<String> splitOutsideQuotes(String text, char separator) {
        List<String> parts = new ArrayList<>();
        int start = 0;
        boolean quoted = false;
        boolean escaped = false;
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (escaped) {
                escaped = false;
            } else if (quoted && c == '\\') {
                escaped = true;
            } else if (c == '"') {
                quoted = !quoted;
            } else if (c == separator && !quoted) {
                parts.add(text.substring(start, i));
                start = i + 1;
            }
        }
        parts.add(text.substring(start));
        return parts;
    }

    private static String unquote(String value) {
        if (!value.startsWith("\"")) {
            return value;
        }
        StringBuilder out = new StringBuilder();
        for (int i = 1; i < value.length(); i++) {
            char c = value.charAt(i);
            if (c == '\\') {
                if (i + 1 >= value.length()) {
                    return null;
                }
                out.append(value.charAt(++i));
            } else if (c == '"') {
                return i == value.length() - 1 ? out.toString() : null;
            } else {
                out.append(c);
            }
        }
        return null;
    }

    private static byte[] forwardedFor(String element) {
        String node = null;
        for (String pair : splitOutsideQuotes(element, ';')) {
            int at = pair.indexOf('=');
            if (at < 0) {
                return null;
            }
            if (pair.substring(0, at).trim().toLowerCase(Locale.ROOT).equals("for")) {
                if (node != null) {
                    // Two `for`s: which one would a proxy mean?
                    return null;
                }
                node = unquote(pair.substring(at + 1).trim());
                if (node == null) {
                    return null;
                }
            }
        }
        return node == null ? null : node(node);
    }
}
