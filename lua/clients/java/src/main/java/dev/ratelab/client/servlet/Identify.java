package dev.ratelab.client.servlet;

import jakarta.servlet.http.HttpServletRequest;

import java.util.Collections;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.function.Function;

/**
 * Who is calling: a known API key, else the IP address: the peer's, or the
 * one trusted proxies recorded (see {@link TrustedProxies}); IPv6 clients
 * grouped by /64 by default. As {@code ratelab-http} identifies them.
 */
public final class Identify {
    /** An identity the application vouches for: an account and its plan. */
    public record Identity(String id, Optional<String> plan) {
        public Identity {
            Objects.requireNonNull(id, "id");
            Objects.requireNonNull(plan, "plan");
        }

        public static Identity of(String id) {
            return new Identity(id, Optional.empty());
        }

        public static Identity of(String id, String plan) {
            return new Identity(id, Optional.of(plan));
        }
    }

    private final TrustedProxies proxies;
    private final int ipv6Prefix;
    private final String apiKeyHeader;
    private final Function<String, Optional<Identity>> resolve;
    private final String anonymousPlan;

    private Identify(Builder b) {
        this.proxies = b.proxies;
        this.ipv6Prefix = b.ipv6Prefix;
        this.apiKeyHeader = b.apiKeyHeader;
        this.resolve = b.resolve;
        this.anonymousPlan = b.anonymousPlan;
    }

    /** By IP, no trusted proxy. */
    public static Identify byIp() {
        return builder().build();
    }

    public static Builder builder() {
        return new Builder();
    }

    /** The options of {@link Identify}. */
    public static final class Builder {
        private TrustedProxies proxies = TrustedProxies.none();
        private int ipv6Prefix = 64;
        private String apiKeyHeader;
        private Function<String, Optional<Identity>> resolve;
        private String anonymousPlan;

        /** The proxies whose forwarding header is believed. */
        public Builder trustedProxies(TrustedProxies proxies) {
            this.proxies = Objects.requireNonNull(proxies);
            return this;
        }

        /** Proxies at these networks (CIDR or addresses) writing {@code X-Forwarded-For}. */
        public Builder trustedProxies(String... networks) {
            return trustedProxies(TrustedProxies.of(networks));
        }

        /** Anonymous IPv6 clients grouped by their first {@code bits} (default 64; 128: each address alone). */
        public Builder ipv6Prefix(int bits) {
            if (bits < 0 || bits > 128) {
                throw new IllegalArgumentException("ipv6Prefix must be 0 to 128, not " + bits);
            }
            this.ipv6Prefix = bits;
            return this;
        }

        /** Identify by an API key in {@code header}: {@code resolve} answers the identity of a key it knows. */
        public Builder apiKey(String header, Function<String, Optional<Identity>> resolve) {
            this.apiKeyHeader = Objects.requireNonNull(header);
            this.resolve = Objects.requireNonNull(resolve);
            return this;
        }

        /** The plan of clients identified by IP. */
        public Builder anonymousPlan(String plan) {
            this.anonymousPlan = plan;
            return this;
        }

        public Identify build() {
            return new Identify(this);
        }
    }

    /** The client of {@code request}. */
    public Client client(HttpServletRequest request) {
        String forwarding = proxies.header().name;
        List<String> lines = Collections.list(request.getHeaders(forwarding));
        return client(request.getRemoteAddr(), lines, apiKeyHeader == null ? null : request.getHeader(apiKeyHeader));
    }

    Client client(String peer, List<String> forwardingLines, String apiKeyValue) {
        byte[] ip = null;
        if (peer != null) {
            String p = peer;
            if (p.startsWith("[") && p.endsWith("]")) {
                p = p.substring(1, p.length() - 1);
            }
            int zone = p.indexOf('%');
            if (zone >= 0) {
                p = p.substring(0, zone);
            }
            byte[] parsed = Ip.parse(p);
            if (parsed != null) {
                ip = proxies.clientIp(parsed, forwardingLines);
            }
        }
        Optional<String> ipText = ip == null ? Optional.empty() : Optional.of(Ip.text(ip));
        if (resolve != null && apiKeyValue != null) {
            String value = TrustedProxies.trim(apiKeyValue);
            if (!value.isEmpty()) {
                Optional<Identity> identity = resolve.apply(value);
                if (identity != null && identity.isPresent()) {
                    return new Client(Client.Kind.API_KEY, "key:" + identity.get().id(), identity.get().plan(), ipText);
                }
            }
        }
        Optional<String> plan = Optional.ofNullable(anonymousPlan);
        if (ip == null) {
            return new Client(Client.Kind.IP, "ip:unknown", plan, ipText);
        }
        if (ip.length == 16 && ipv6Prefix < 128) {
            return new Client(Client.Kind.IP, "ip:" + Ip.text(Ip.network(ip, ipv6Prefix)) + "/" + ipv6Prefix, plan, ipText);
        }
        return new Client(Client.Kind.IP, "ip:" + ipText.get(), plan, ipText);
    }
}
