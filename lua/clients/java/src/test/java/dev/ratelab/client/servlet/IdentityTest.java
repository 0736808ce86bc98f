package dev.ratelab.client.servlet;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Optional;

import org.junit.jupiter.api.Test;

/** Who the client is, and which routes a pattern matches: the pure half of the filter, case by case. */
class IdentityTest {
    private static String key(Identify identify, String peer, String... forwarded) {
        return identify.client(peer, List.of(forwarded), null).key();
    }

    @Test
    void forwardingHeadersAreBelievedFromTrustedProxiesOnly() {
        Identify identify = Identify.builder().trustedProxies("10.0.0.0/8", "fd00::/8").build();
        assertEquals("ip:203.0.113.9", key(identify, "203.0.113.9", "1.1.1.1"));
        assertEquals("ip:1.1.1.1", key(identify, "10.1.2.3", "1.1.1.1"));
        // From the right, skipping trusted proxies; garbage stops the walk at the last vouched address.
        assertEquals("ip:2.2.2.2", key(identify, "10.1.2.3", "1.1.1.1, 2.2.2.2, 10.9.9.9"));
        assertEquals("ip:10.9.9.9", key(identify, "10.1.2.3", "1.1.1.1, nonsense, 10.9.9.9"));
        // A host name in the header is not an address, and is never resolved.
        assertEquals("ip:10.1.2.3", key(identify, "10.1.2.3", "localhost"));
        // IPv4-mapped peers and hops are IPv4; IPv6 clients are grouped by /64.
        assertEquals("ip:1.1.1.1", key(identify, "::ffff:10.0.0.1", "::ffff:1.1.1.1"));
        assertEquals("ip:2001:db8:1:2::/64", key(identify, "fd00::1", "[2001:db8:1:2:3:4:5:6]:443"));
        assertEquals("ip:2001:db8::1", Identify.builder().ipv6Prefix(128).build().client("2001:db8::1", List.of(), null).key());
        assertEquals("ip:unknown", key(identify, "not an address"));
    }

    @Test
    void forwardedIsReadAsRfc7239Says() {
        Identify identify = Identify.builder()
                .trustedProxies(TrustedProxies.of(TrustedProxies.Header.FORWARDED, List.of("127.0.0.2"))).build();
        assertEquals("ip:2001:db8:cafe::/64", key(identify, "127.0.0.2", "for=198.51.100.1, for=\"[2001:db8:cafe::17]:4711\";proto=https"));
        assertEquals("ip:127.0.0.2", key(identify, "127.0.0.2", "for=1.1.1.1;for=2.2.2.2"));
        assertEquals("ip:127.0.0.2", key(identify, "127.0.0.2", "for=\"_hidden\""));
        assertEquals("ip:3.3.3.3", key(identify, "127.0.0.2", "for=\"3.3.3.3\";by=\"a,b\""));
    }

    @Test
    void anApiKeyTheApplicationKnowsIdentifiesTheClient() {
        Identify identify = Identify.builder()
                .apiKey("x-api-key", k -> k.equals("secret") ? Optional.of(Identify.Identity.of("acme", "pro")) : Optional.empty())
                .anonymousPlan("free").build();
        Client known = identify.client("1.2.3.4", List.of(), " secret ");
        assertEquals(List.of(Client.Kind.API_KEY, "key:acme", Optional.of("pro")), List.of(known.kind(), known.key(), known.plan()));
        Client unknown = identify.client("1.2.3.4", List.of(), "guess");
        assertEquals(List.of("ip:1.2.3.4", Optional.of("free")), List.of(unknown.key(), unknown.plan()));
    }

    @Test
    void badProxyNetworksAreClearErrors() {
        for (String bad : List.of("proxy.internal", "10.0.0.0/33", "::1/129", "10.0.0.0/x", "")) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> TrustedProxies.of(bad));
            assertTrue(e.getMessage().contains("host names are not resolved"), e.getMessage());
        }
        assertThrows(IllegalArgumentException.class, () -> Identify.builder().ipv6Prefix(129));
    }

    @Test
    void routesMatchAsAxumPatternsDo() {
        Route sms = new Route("POST", "/sms/{to}");
        assertTrue(sms.matches("POST", "/sms/123"));
        assertFalse(sms.matches("POST", "/sms/"));
        assertFalse(sms.matches("POST", "/sms/1/2"));
        assertFalse(sms.matches("GET", "/sms/1"));
        Route files = new Route("GET", "/files/{*rest}");
        assertTrue(files.matches("HEAD", "/files/a/b"));
        assertTrue(files.matches("GET", "/files/"));
        assertTrue(new Route(null, "/").matches("DELETE", "/"));
        for (String bad : List.of("nope", "/a{b}", "/{*rest}/x", "/{}", "/{a")) {
            assertThrows(IllegalArgumentException.class, () -> new Route("GET", bad), bad);
        }
    }

    @Test
    void policyNamesAreWhatTheFieldsCanCarry() {
        assertThrows(IllegalArgumentException.class, () -> Policy.builder("has space", null));
        assertThrows(IllegalArgumentException.class, () -> Policy.builder("x".repeat(65), null));
    }
}
