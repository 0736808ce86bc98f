package dev.ratelab.client.servlet;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.regex.Pattern;

/**
 * IP addresses as ratelab-http reads and writes them: literals only (never a
 * DNS lookup), IPv4-mapped and -compatible IPv6 as IPv4, IPv6 written as
 * RFC 5952 says (as Rust's {@code Ipv6Addr} displays it).
 */
final class Ip {
    private Ip() {}

    private static final Pattern V4 = Pattern.compile("(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)(\\.(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)){3}");
    private static final Pattern V6 = Pattern.compile("[0-9A-Fa-f:.]{2,45}");

    /** The address's 4 or 16 bytes, or null when {@code text} is not an IP literal. */
    static byte[] parse(String text) {
        if (text == null) {
            return null;
        }
        if (V4.matcher(text).matches()) {
            return literal(text);
        }
        if (text.indexOf(':') >= 0 && V6.matcher(text).matches()) {
            byte[] b = literal(text);
            if (b == null) {
                return null;
            }
            if (b.length == 4) {
                // Java reads ::ffff:a.b.c.d as IPv4 itself: keep the 16 bytes it stands for.
                byte[] mapped = new byte[16];
                mapped[10] = (byte) 0xff;
                mapped[11] = (byte) 0xff;
                System.arraycopy(b, 0, mapped, 12, 4);
                return mapped;
            }
            return b;
        }
        return null;
    }

    private static byte[] literal(String text) {
        try {
            // A literal: InetAddress parses it without a lookup (the patterns above let nothing else through).
            return InetAddress.getByName(text).getAddress();
        } catch (UnknownHostException | SecurityException e) {
            return null;
        }
    }

    /** IPv4 (mapped, or compatible but {@code ::} and {@code ::1}) as 4 bytes; anything else as it is. */
    static byte[] canonical(byte[] b) {
        if (b.length == 4) {
            return b;
        }
        boolean zeros10 = true;
        for (int i = 0; i < 10; i++) {
            zeros10 &= b[i] == 0;
        }
        if (zeros10 && (b[10] & 0xff) == 0xff && (b[11] & 0xff) == 0xff) {
            return java.util.Arrays.copyOfRange(b, 12, 16);
        }
        if (zeros10 && b[10] == 0 && b[11] == 0) {
            long last = ((b[12] & 0xffL) << 24) | ((b[13] & 0xff) << 16) | ((b[14] & 0xff) << 8) | (b[15] & 0xff);
            if (last > 1) {
                return java.util.Arrays.copyOfRange(b, 12, 16);
            }
        }
        return b;
    }

    /** The address written canonically (RFC 5952 for IPv6). */
    static String text(byte[] b) {
        if (b.length == 4) {
            return (b[0] & 0xff) + "." + (b[1] & 0xff) + "." + (b[2] & 0xff) + "." + (b[3] & 0xff);
        }
        int[] groups = new int[8];
        for (int i = 0; i < 8; i++) {
            groups[i] = ((b[2 * i] & 0xff) << 8) | (b[2 * i + 1] & 0xff);
        }
        int best = -1;
        int bestLen = 0;
        for (int i = 0; i < 8; ) {
            if (groups[i] != 0) {
                i++;
                continue;
            }
            int j = i;
            while (j < 8 && groups[j] == 0) {
                j++;
            }
            if (j - i > bestLen && j - i > 1) {
                best = i;
                bestLen = j - i;
            }
            i = j;
        }
        if (best < 0) {
            return hex(groups, 0, 8);
        }
        return hex(groups, 0, best) + "::" + hex(groups, best + bestLen, 8);
    }

    private static String hex(int[] groups, int from, int to) {
        StringBuilder out = new StringBuilder();
        for (int i = from; i < to; i++) {
            if (i > from) {
                out.append(':');
            }
            out.append(Integer.toHexString(groups[i]));
        }
        return out.toString();
    }

    /** {@code b} with every bit from {@code prefix} on cleared. */
    static byte[] network(byte[] b, int prefix) {
        byte[] out = b.clone();
        for (int bit = prefix; bit < out.length * 8; bit++) {
            out[bit >> 3] &= (byte) ~(0x80 >> (bit & 7));
        }
        return out;
    }

    /** A network in CIDR notation (or one address); {@link IllegalArgumentException} for anything else. */
    record Network(byte[] base, int prefix) {
        static Network parse(String text) {
            String t = text.trim();
            int slash = t.indexOf('/');
            String address = slash < 0 ? t : t.substring(0, slash);
            byte[] b = Ip.parse(address);
            int max = b == null ? 0 : b.length * 8;
            int bits = max;
            if (b != null && slash >= 0) {
                String p = t.substring(slash + 1);
                bits = p.matches("\\d{1,3}") ? Integer.parseInt(p) : -1;
            }
            if (b == null || bits < 0 || bits > max) {
                throw new IllegalArgumentException(Json.quote(text) + " is neither an IP address nor a network in CIDR "
                        + "notation (10.0.0.0/8, fd00::/8); host names are not resolved: give the proxy's address");
            }
            byte[] c = canonical(b);
            if (b.length == 16 && c.length == 4) {
                // ::ffff:10.0.0.0/104 is 10.0.0.0/8.
                bits = Math.max(0, bits - 96);
            }
            return new Network(network(c, bits), bits);
        }

        boolean contains(byte[] address) {
            return address.length == base.length && java.util.Arrays.equals(network(address, prefix), base);
        }
    }

    /** JSON quoting, for messages. */
    static final class Json {
        static String quote(String s) {
            return dev.ratelab.client.Json.quote(s);
        }
    }
}
