package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	ratelab "github.com/ratelab/ratelab/lua/clients/go"
)

// IntegerMax is the largest structured-field Integer: values past it are
// clamped.
const IntegerMax = 999_999_999_999_999

// DefaultPolicyTimeout bounds one policy's limiter calls for a request.
const DefaultPolicyTimeout = 100 * time.Millisecond

// Limiter is what a policy asks: a *ratelab.Limiter.
type Limiter interface {
	Check(ctx context.Context, key string, cost int) (ratelab.Decision, error)
	Peek(ctx context.Context, key string, cost int) (ratelab.Decision, error)
	Refund(ctx context.Context, receipt *ratelab.Receipt) (ratelab.Decision, error)
	Quota() ratelab.Quota
	Algorithm() ratelab.Algorithm
}

// FailureMode is what a policy does when its limiter cannot decide.
type FailureMode int

const (
	// FailOpen passes the request unchecked, with an alert (the default).
	FailOpen FailureMode = iota
	// FailClosed answers 503 with Retry-After.
	FailClosed
)

// Count says which responses count against a policy.
type Count int

const (
	// CountAll: every request counts (the default).
	CountAll Count = iota
	// CountFailures: only failures count (failed logins). The cost is taken
	// with a receipt before the request runs, and refunded once the
	// response head says it was not a failure: requests in flight together
	// never pass beyond the quota.
	CountFailures
	// CountSuccesses: only successes count.
	CountSuccesses
)

// Route is a method ("" for any) and a path pattern in axum's syntax:
// literal segments, {name} for one non-empty segment, {*name} last for the
// rest (even nothing). Matched against the raw path; a GET route also
// matches HEAD.
type Route struct {
	Method  string
	Pattern string
}

type segment struct {
	kind  byte // 'l' literal, 'p' parameter, 'r' the rest
	value string
}

type route struct {
	method   string
	segments []segment
}

var paramName = regexp.MustCompile(`[{}*]`)

func compileRoute(r Route) (route, error) {
	invalid := func(why string) error {
		return fmt.Errorf("httplimit: invalid route pattern %q: %s", r.Pattern, why)
	}
	if !strings.HasPrefix(r.Pattern, "/") {
		return route{}, invalid("a pattern starts with '/'")
	}
	out := route{method: strings.ToUpper(r.Method)}
	pieces := strings.Split(r.Pattern[1:], "/")
	for i, piece := range pieces {
		switch {
		case strings.HasPrefix(piece, "{"):
			if !strings.HasSuffix(piece, "}") {
				return route{}, invalid("a '{' must close with '}' at the end of its segment")
			}
			name, kind := piece[1:len(piece)-1], byte('p')
			if strings.HasPrefix(name, "*") {
				if i+1 != len(pieces) {
					return route{}, invalid("a catch-all {*name} must be the last segment")
				}
				name, kind = name[1:], 'r'
			}
			if name == "" || paramName.MatchString(name) {
				return route{}, invalid("a parameter needs a name: {id}, {*rest}")
			}
			out.segments = append(out.segments, segment{kind, name})
		case strings.ContainsAny(piece, "{}"):
			return route{}, invalid("braces are only allowed around a whole segment: {name} or {*name}")
		default:
			out.segments = append(out.segments, segment{'l', piece})
		}
	}
	return out, nil
}

func (r route) matches(method, path string) bool {
	if r.method != "" && r.method != method && !(r.method == "GET" && method == "HEAD") {
		return false
	}
	if !strings.HasPrefix(path, "/") {
		return false
	}
	pieces := strings.Split(path[1:], "/")
	i := 0
	for _, s := range r.segments {
		if s.kind == 'r' {
			return true
		}
		if i >= len(pieces) || (s.kind == 'l' && pieces[i] != s.value) || (s.kind == 'p' && pieces[i] == "") {
			return false
		}
		i++
	}
	return i == len(pieces)
}

// PolicyOptions say where a policy applies and how.
type PolicyOptions struct {
	// Routes it applies to (none: every route).
	Routes []Route
	// Plans it applies to (none: every client).
	Plans []string
	// Key is what it counts under (nil: the client's key); false: the
	// policy does not apply to this request.
	Key func(r *http.Request, c Client) (string, bool)
	// Cost of a request (nil: 1).
	Cost func(r *http.Request, c Client) int
	// Failure: FailOpen (the default) or FailClosed.
	Failure FailureMode
	// Timeout bounds its limiter calls for one request (0: 100 ms).
	Timeout time.Duration
	// Count: CountAll (the default), CountFailures or CountSuccesses.
	Count Count
	// FailedWhen says which statuses are failures (nil: 400 or more).
	FailedWhen func(status int) bool
}

// Header is a Key that counts under a request header's value; the policy
// does not apply to requests without it.
func Header(name string) func(*http.Request, Client) (string, bool) {
	return func(r *http.Request, _ Client) (string, bool) {
		value := r.Header.Get(name)
		return value, value != ""
	}
}

// Fixed is a Cost of n units a request.
func Fixed(n int) func(*http.Request, Client) int {
	return func(*http.Request, Client) int { return n }
}

// Policy is one quota: a name (1 to 64 of A-Z a-z 0-9 _ . -, what clients
// see in the fields), a limiter (made with the default FailError: the
// policy's own Failure decides) and its options. The limiter sees
// "<name>:<key>".
type Policy struct {
	name    string
	limiter Limiter
	options PolicyOptions
	routes  []route
	timeout time.Duration
	q, w    int64
	// interval: one unit back every interval µs (the debts); 0 otherwise.
	interval int64
	// sliding: units come back on a schedule only the limiter knows (the
	// sliding log and counter): t is asked with a peek.
	sliding bool
	item    string
}

var policyName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// NewPolicy checks the name and the options.
func NewPolicy(name string, limiter Limiter, options PolicyOptions) (*Policy, error) {
	if !policyName.MatchString(name) {
		return nil, fmt.Errorf("httplimit: policy name %q is not 1 to 64 characters among A-Z a-z 0-9 _ . - "+
			"(it appears in the RateLimit headers and the limiter keys)", name)
	}
	if limiter == nil {
		return nil, fmt.Errorf("httplimit: policy %q has no limiter", name)
	}
	if options.Failure != FailOpen && options.Failure != FailClosed {
		return nil, fmt.Errorf("httplimit: policy %q: failure is FailOpen or FailClosed, not %d", name, options.Failure)
	}
	if options.Count < CountAll || options.Count > CountSuccesses {
		return nil, fmt.Errorf("httplimit: policy %q: count is CountAll, CountFailures or CountSuccesses, not %d", name, options.Count)
	}
	if options.Timeout < 0 {
		return nil, fmt.Errorf("httplimit: policy %q: the timeout must be positive, not %v", name, options.Timeout)
	}
	p := &Policy{name: name, limiter: limiter, options: options, timeout: options.Timeout}
	if p.timeout == 0 {
		p.timeout = DefaultPolicyTimeout
	}
	for _, r := range options.Routes {
		compiled, err := compileRoute(r)
		if err != nil {
			return nil, err
		}
		p.routes = append(p.routes, compiled)
	}
	quota, algorithm := limiter.Quota(), limiter.Algorithm()
	// Rounded up, at least 1 s: the advertised rate is never faster.
	p.q = int64(quota.Burst())
	p.w = max(1, int64((quota.Window()+time.Second-1)/time.Second))
	if algorithm.Debt {
		p.interval = quota.Interval().Microseconds()
	}
	p.sliding = algorithm.Name == ratelab.SlidingLog || algorithm.Name == ratelab.SlidingCounter
	p.item = fmt.Sprintf("%q;q=%d;w=%d", name, min(p.q, IntegerMax), min(p.w, IntegerMax))
	return p, nil
}

// Name is the policy's name.
func (p *Policy) Name() string { return p.name }

func (p *Policy) afterResponse() bool { return p.options.Count != CountAll }

// counts reports whether a response of status counts.
func (p *Policy) counts(status int) bool {
	failed := status >= 400
	if p.options.FailedWhen != nil {
		failed = p.options.FailedWhen(status)
	}
	switch p.options.Count {
	case CountFailures:
		return failed
	case CountSuccesses:
		return !failed
	}
	return true
}

// applies is the limiter key and cost when the policy applies to r.
func (p *Policy) applies(r *http.Request, c Client) (string, int, bool) {
	if len(p.routes) > 0 {
		matched := false
		for _, route := range p.routes {
			matched = matched || route.matches(r.Method, r.URL.EscapedPath())
		}
		if !matched {
			return "", 0, false
		}
	}
	if len(p.options.Plans) > 0 {
		in := false
		for _, plan := range p.options.Plans {
			in = in || (c.Plan != "" && plan == c.Plan)
		}
		if !in {
			return "", 0, false
		}
	}
	key := c.Key
	if p.options.Key != nil {
		var ok bool
		if key, ok = p.options.Key(r, c); !ok {
			return "", 0, false
		}
	}
	cost := 1
	if p.options.Cost != nil {
		cost = p.options.Cost(r, c)
	}
	return p.name + ":" + key, cost, true
}
