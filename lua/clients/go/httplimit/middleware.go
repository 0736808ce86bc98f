// Package httplimit is rate limiting middleware for net/http on ratelab's
// limiters, behaving as the Rust ratelab-http layer and the Python and Node
// middlewares do: the same client identity (an API key, else the IP
// address, forwarding headers believed only from trusted proxies, IPv6
// grouped by /64), policies per route and plan, several policies on one
// request decided all or nothing (what one took for a request another
// refused is given back by receipt), 429 with Retry-After and an RFC 9457
// problem body, 503 when a policy that fails closed cannot decide, and the
// RateLimit-Policy and RateLimit fields of draft-ietf-httpapi-ratelimit-headers
// on every response.
//
//	api, _ := ratelab.NewLimiter(rdb, ratelab.GCRA, ratelab.PerMinute(100))
//	login, _ := ratelab.NewLimiter(rdb, ratelab.GCRA, ratelab.PerHour(5))
//	mw, err := httplimit.New(httplimit.Options{Policies: []*httplimit.Policy{
//		httplimit.MustPolicy("default", api, httplimit.PolicyOptions{}),
//		httplimit.MustPolicy("login", login, httplimit.PolicyOptions{
//			Routes: []httplimit.Route{{Method: "POST", Pattern: "/login"}},
//			Key:    httplimit.Header("X-Account"), Failure: httplimit.FailClosed,
//		}),
//	}})
//	http.ListenAndServe(":8080", mw.Handler(mux))
package httplimit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Options configure the middleware.
type Options struct {
	// Policies, names unique, in the order their fields are listed.
	Policies []*Policy
	// Identify says who the client is (nil: by IP, no trusted proxy).
	Identify *Identify
	// OnFailure is called with every limiter failure.
	OnFailure func(Failure)
	// Logger gets a warning at most once a second per policy (nil:
	// slog.Default(); slog.New(slog.DiscardHandler) for none).
	Logger *slog.Logger
}

// Middleware limits the requests of the handlers it wraps.
type Middleware struct {
	policies  []*Policy
	identify  *Identify
	onFailure func(Failure)
	logger    *slog.Logger
	mu        sync.Mutex
	logged    map[string]time.Time
}

// New checks the options.
func New(options Options) (*Middleware, error) {
	seen := map[string]bool{}
	for _, p := range options.Policies {
		if p == nil {
			return nil, fmt.Errorf("httplimit: a nil policy")
		}
		if seen[p.name] {
			return nil, fmt.Errorf("httplimit: two policies are named %q", p.name)
		}
		seen[p.name] = true
	}
	m := &Middleware{policies: options.Policies, identify: options.Identify, onFailure: options.OnFailure,
		logger: options.Logger, logged: map[string]time.Time{}}
	if m.identify == nil {
		m.identify = &Identify{}
	}
	if m.logger == nil {
		m.logger = slog.Default()
	}
	return m, nil
}

// MustPolicy is NewPolicy, panicking on an error: for policies written in
// the program's text.
func MustPolicy(name string, limiter Limiter, options PolicyOptions) *Policy {
	p, err := NewPolicy(name, limiter, options)
	if err != nil {
		panic(err)
	}
	return p
}

type infoKey struct{}

// Info is what a request that passed carries in its context.
type Info struct {
	Verdict *Verdict
	Client  Client
}

// FromContext is the verdict and the client of a request that passed.
func FromContext(ctx context.Context) (Info, bool) {
	info, ok := ctx.Value(infoKey{}).(Info)
	return info, ok
}

func (m *Middleware) logf(policy string) func(string, ...any) {
	return func(format string, args ...any) {
		m.warn(policy, fmt.Sprintf(format, args...))
	}
}

func (m *Middleware) warn(policy, message string) {
	m.mu.Lock()
	last, seen := m.logged[policy]
	now := time.Now()
	if seen && now.Sub(last) < time.Second {
		m.mu.Unlock()
		return
	}
	m.logged[policy] = now
	m.mu.Unlock()
	m.logger.Warn("httplimit: " + message)
}

func (m *Middleware) alert(v *Verdict) {
	for _, f := range v.Failures {
		if m.onFailure != nil {
			m.onFailure(f)
		}
		mode := "closed"
		if f.Open {
			mode = "open"
		}
		m.warn(f.Policy, fmt.Sprintf("rate limiter of policy %s failed for %s: %v; the policy fails %s", f.Policy, f.Client.Key, f.Err, mode))
	}
}

// Handler limits next's requests.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := m.identify.Client(r)
		reports := match(m.policies, func(p *Policy) (string, int, bool) { return p.applies(r, client) })
		v := decide(r.Context(), reports, client, m.logf("*"))
		m.alert(v)
		if v.Outcome != Pass {
			status, body := v.Problem()
			h := w.Header()
			h.Set("Content-Type", "application/problem+json")
			if retry, ok := v.RetryAfterSeconds(); ok {
				h.Set("Retry-After", strconv.FormatInt(retry, 10))
			}
			for _, f := range v.Fields() {
				h.Add(f[0], f[1])
			}
			h.Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(status)
			_, _ = w.Write(body)
			return
		}
		ctx := context.WithValue(r.Context(), infoKey{}, Info{Verdict: v, Client: client})
		if v.Delay > 0 {
			// A queueing policy (the leaky queue) gave the request a later
			// slot.
			timer := time.NewTimer(v.Delay)
			select {
			case <-timer.C:
			case <-r.Context().Done():
				timer.Stop()
				return
			}
		}
		if !v.pending() {
			for _, f := range v.Fields() {
				w.Header().Add(f[0], f[1])
			}
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		// Whether the response counts is known with its head: a refund
		// first, then the fields as it left the key.
		held := &heldHead{ResponseWriter: w, before: func(status int) {
			settleAfterResponse(r.Context(), v, status, m.logf("*"))
			for _, f := range v.Fields() {
				w.Header().Add(f[0], f[1])
			}
		}}
		next.ServeHTTP(held, r.WithContext(ctx))
		held.WriteHeader(http.StatusOK) // no-op when the handler wrote its head
	})
}

// heldHead runs before(status) once, just before the response head is
// written (WriteHeader, or the first Write's implicit 200).
type heldHead struct {
	http.ResponseWriter
	before func(status int)
	wrote  bool
}

func (h *heldHead) WriteHeader(status int) {
	if h.wrote {
		return
	}
	if status >= 100 && status < 200 {
		// An informational head: the final one decides.
		h.ResponseWriter.WriteHeader(status)
		return
	}
	h.wrote = true
	h.before(status)
	h.ResponseWriter.WriteHeader(status)
}

func (h *heldHead) Write(b []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	return h.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer (Flush, deadlines).
func (h *heldHead) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// Flush writes the head first, then flushes.
func (h *heldHead) Flush() {
	h.WriteHeader(http.StatusOK)
	if f, ok := h.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
