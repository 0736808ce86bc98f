package dev.ratelab.client.servlet;

import java.util.Optional;

/**
 * Who made a request: {@code key} is {@code key:<id>} for a known API key,
 * else {@code ip:<address>} (an IPv6 client as its network,
 * {@code ip:2001:db8:1:2::/64}), or {@code ip:unknown}.
 *
 * @param kind how it was identified
 * @param key what the policies count it under by default
 * @param plan its plan, when known
 * @param ip its address, when known (canonical text)
 */
public record Client(Kind kind, String key, Optional<String> plan, Optional<String> ip) {
    /** How a client was identified. */
    public enum Kind { API_KEY, IP }
}
