package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
)

// TrustedProxies are the networks of the proxies in front of the
// application, whose forwarding header (X-Forwarded-For by default, or
// Forwarded) is believed, as ratelab-http's TrustedProxies: a peer outside
// them is the client whatever the headers say; through them, the header is
// read from the right, skipping trusted proxies; an element that is not an
// address stops the walk at the last address that was vouched for.
type TrustedProxies struct {
	networks []netip.Prefix
	header   string
}

// NewTrustedProxies takes networks in CIDR notation or addresses
// (10.0.0.0/8, fd00::/8, 127.0.0.2; host names are not resolved) and the
// header to read: "x-forwarded-for" or "forwarded" (any case; "" is
// x-forwarded-for).
func NewTrustedProxies(networks []string, header string) (*TrustedProxies, error) {
	h := strings.ToLower(header)
	if h == "" {
		h = "x-forwarded-for"
	}
	if h != "x-forwarded-for" && h != "forwarded" {
		return nil, fmt.Errorf("httplimit: the forwarding header is x-forwarded-for or forwarded, not %q", header)
	}
	p := &TrustedProxies{header: h}
	for _, text := range networks {
		prefix, err := parseNetwork(strings.TrimSpace(text))
		if err != nil {
			return nil, fmt.Errorf("httplimit: %q is neither an IP address nor a network in CIDR notation "+
				"(10.0.0.0/8, fd00::/8); host names are not resolved: give the proxy's address", text)
		}
		p.networks = append(p.networks, prefix)
	}
	return p, nil
}

func parseNetwork(text string) (netip.Prefix, error) {
	if !strings.Contains(text, "/") {
		addr, err := netip.ParseAddr(text)
		if err != nil || addr.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("not an address")
		}
		addr = canonical(addr)
		return netip.PrefixFrom(addr, addr.BitLen()), nil
	}
	prefix, err := netip.ParsePrefix(text)
	if err != nil {
		return netip.Prefix{}, err
	}
	// An IPv4 network written as IPv6 (::ffff:10.0.0.0/104) is the IPv4
	// network.
	if addr := prefix.Addr(); addr.Is4In6() && prefix.Bits() >= 96 {
		return netip.PrefixFrom(addr.Unmap(), prefix.Bits()-96).Masked(), nil
	}
	return prefix.Masked(), nil
}

// Contains reports whether ip is one of the trusted networks'.
func (p *TrustedProxies) Contains(ip netip.Addr) bool {
	ip = canonical(ip)
	for _, n := range p.networks {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

// ClientIP is the client's address for a request from peer with header.
func (p *TrustedProxies) ClientIP(peer netip.Addr, header http.Header) netip.Addr {
	client := canonical(peer)
	if !p.Contains(client) {
		return client
	}
	hops := p.hops(header)
	for i := len(hops) - 1; i >= 0; i-- {
		if !hops[i].IsValid() {
			// Nothing left of this was vouched for.
			return client
		}
		client = canonical(hops[i])
		if !p.Contains(client) {
			return client
		}
	}
	return client
}

func (p *TrustedProxies) hops(header http.Header) []netip.Addr {
	var hops []netip.Addr
	for _, line := range header.Values(p.header) {
		if p.header == "x-forwarded-for" {
			for _, element := range strings.Split(line, ",") {
				hops = append(hops, parseNode(element))
			}
		} else {
			for _, element := range elementsFromTheRight(line) {
				hops = append(hops, forwardedFor(element))
			}
		}
	}
	return hops
}

// canonical: an IPv4 address written as IPv6 (mapped ::ffff:1.2.3.4, or
// compatible ::1.2.3.4) is the IPv4 address; :: and ::1 stay.
func canonical(ip netip.Addr) netip.Addr {
	ip = ip.WithZone("")
	if ip.Is4In6() {
		return ip.Unmap()
	}
	if ip.Is6() {
		b := ip.As16()
		zeros := true
		for _, x := range b[:12] {
			zeros = zeros && x == 0
		}
		if last := uint32(b[12])<<24 | uint32(b[13])<<16 | uint32(b[14])<<8 | uint32(b[15]); zeros && last > 1 {
			return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		}
	}
	return ip
}

var (
	bracketed = regexp.MustCompile(`^\[([^\]]+)\](?::\d{1,5})?$`)
	v4Port    = regexp.MustCompile(`^([^:]+):\d{1,5}$`)
)

// parseNode reads one hop: 1.2.3.4, 2001:db8::1, [2001:db8::1], with or
// without a port; anything else (unknown, _hidden, junk) is invalid.
func parseNode(raw string) netip.Addr {
	text := strings.Trim(raw, " \t")
	if ip, err := netip.ParseAddr(text); err == nil && ip.Zone() == "" {
		return ip
	}
	if m := bracketed.FindStringSubmatch(text); m != nil {
		if ip, err := netip.ParseAddr(m[1]); err == nil && ip.Is6() && ip.Zone() == "" {
			return ip
		}
	}
	if m := v4Port.FindStringSubmatch(text); m != nil {
		if ip, err := netip.ParseAddr(m[1]); err == nil && ip.Is4() {
			return ip
		}
	}
	return netip.Addr{}
}

// elementsFromTheRight splits a Forwarded line on the commas outside
// quoted strings.
func elementsFromTheRight(line string) []string {
	var elements []string
	end, quoted := len(line), false
	for i := len(line) - 1; i >= 0; i-- {
		switch line[i] {
		case '"':
			backslashes := 0
			for i-1-backslashes >= 0 && line[i-1-backslashes] == '\\' {
				backslashes++
			}
			if !quoted || backslashes%2 == 0 {
				quoted = !quoted
			}
		case ',':
			if !quoted {
				elements = append(elements, line[i+1:end])
				end = i
			}
		}
	}
	elements = append(elements, line[:end])
	for i, j := 0, len(elements)-1; i < j; i, j = i+1, j-1 {
		elements[i], elements[j] = elements[j], elements[i]
	}
	return elements
}

func splitOutsideQuotes(text string, separator byte) []string {
	var parts []string
	start, quoted, escaped := 0, false, false
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case c == separator && !quoted:
			parts = append(parts, text[start:i])
			start = i + 1
		}
	}
	return append(parts, text[start:])
}

func unquote(value string) (string, bool) {
	if !strings.HasPrefix(value, `"`) {
		return value, true
	}
	var out strings.Builder
	for i := 1; i < len(value); i++ {
		switch c := value[i]; c {
		case '\\':
			if i+1 >= len(value) {
				return "", false
			}
			i++
			out.WriteByte(value[i])
		case '"':
			return out.String(), i == len(value)-1
		default:
			out.WriteByte(c)
		}
	}
	return "", false
}

func forwardedFor(element string) netip.Addr {
	var node string
	found := false
	for _, pair := range splitOutsideQuotes(element, ';') {
		name, value, ok := strings.Cut(pair, "=")
		if !ok {
			return netip.Addr{}
		}
		if strings.ToLower(strings.TrimSpace(name)) == "for" {
			if found {
				// Two for: which would a proxy mean?
				return netip.Addr{}
			}
			found = true
			if node, ok = unquote(strings.TrimSpace(value)); !ok {
				return netip.Addr{}
			}
		}
	}
	if !found {
		return netip.Addr{}
	}
	return parseNode(node)
}

// Identity is who an API key belongs to: an account and its plan.
type Identity struct {
	ID   string
	Plan string
}

// Client is the caller of one request: Key is "key:<id>" (an API key the
// application knows) or "ip:<address>" (an IPv6 client by its network:
// "ip:2001:db8:1:2::/64"), or "ip:unknown".
type Client struct {
	Key  string
	Plan string
	// IP is the client's address (invalid when unknown).
	IP netip.Addr
	// ByAPIKey: identified by an API key, not by address.
	ByAPIKey bool
}

// Identify says who is calling: a known API key, else the IP address.
type Identify struct {
	// TrustedProxies whose forwarding header is believed (nil: none).
	TrustedProxies *TrustedProxies
	// IPv6Prefix groups anonymous IPv6 clients by their first bits
	// (default 64; 128: each address alone).
	IPv6Prefix int
	// APIKeyHeader names the header an API key comes in ("" for none);
	// ResolveAPIKey says whose a key is (false: unknown, identified by IP).
	APIKeyHeader  string
	ResolveAPIKey func(key string) (Identity, bool)
	// AnonymousPlan is the plan of clients identified by IP.
	AnonymousPlan string
}

// Client identifies the caller of r.
func (id *Identify) Client(r *http.Request) Client {
	var ip netip.Addr
	if peer, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		ip = canonical(peer.Addr())
		if id.TrustedProxies != nil {
			ip = id.TrustedProxies.ClientIP(ip, r.Header)
		}
	}
	if id.APIKeyHeader != "" && id.ResolveAPIKey != nil {
		if value := strings.TrimSpace(r.Header.Get(id.APIKeyHeader)); value != "" {
			if who, ok := id.ResolveAPIKey(value); ok {
				return Client{Key: "key:" + who.ID, Plan: who.Plan, IP: ip, ByAPIKey: true}
			}
		}
	}
	client := Client{Plan: id.AnonymousPlan, IP: ip}
	prefix := id.IPv6Prefix
	if prefix == 0 {
		prefix = 64
	}
	switch {
	case !ip.IsValid():
		client.Key = "ip:unknown"
	case ip.Is6() && prefix < 128:
		network := netip.PrefixFrom(ip, prefix).Masked()
		client.Key = fmt.Sprintf("ip:%s/%d", network.Addr(), prefix)
	default:
		client.Key = "ip:" + ip.String()
	}
	return client
}
