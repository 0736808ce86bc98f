package httplimit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelab "github.com/ratelab/ratelab/lua/clients/go"
	"github.com/ratelab/ratelab/lua/clients/go/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The shared HTTP cases (lua/clients/http/cases.json), which the ASGI and
// Express middlewares and ratelab-http run too, through a real net/http
// server on a dual-stack socket, each request sent from the peer address
// its case names (127.0.0.x, ::1).

type caseStep struct {
	AtUs    int64  `json:"at_us"`
	Note    string `json:"note"`
	Request struct {
		Method  string      `json:"method"`
		Path    string      `json:"path"`
		Peer    string      `json:"peer"`
		Headers [][2]string `json:"headers"`
	} `json:"request"`
	Response struct {
		Status  int                `json:"status"`
		Headers map[string]*string `json:"headers"`
		Body    *string            `json:"body"`
		Problem json.RawMessage    `json:"problem"`
	} `json:"response"`
}

type casePolicy struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Quota     struct {
		Limit    int   `json:"limit"`
		PeriodUs int64 `json:"period_us"`
		Burst    int   `json:"burst"`
	} `json:"quota"`
	Routes  [][2]string              `json:"routes"`
	Key     *struct{ Header string } `json:"key"`
	Cost    *int                     `json:"cost"`
	Failure string                   `json:"failure"`
	Redis   string                   `json:"redis"`
	Count   string                   `json:"count"`
}

type caseSuite struct {
	Name     string `json:"name"`
	Identify *struct {
		TrustedProxies []string `json:"trusted_proxies"`
		Header         string   `json:"header"`
	} `json:"identify"`
	Policies []casePolicy `json:"policies"`
	Steps    []caseStep   `json:"steps"`
}

func loadCases(t *testing.T) (int64, []caseSuite) {
	path := filepath.Join(redistest.RepoRoot(t), "lua", "clients", "http", "cases.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cases struct {
		T0     int64       `json:"t0_us"`
		Suites []caseSuite `json:"suites"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases.Suites) == 0 {
		t.Fatal("no suites in cases.json")
	}
	return cases.T0, cases.Suites
}

func silent() *slog.Logger { return slog.New(slog.DiscardHandler) }

// serve runs handler on a dual-stack socket; the port.
func serve(t *testing.T, handler http.Handler) int {
	listener, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		t.Fatal(err)
	}
	server := &http.Server{Handler: handler}
	go server.Serve(listener)
	t.Cleanup(func() { server.Close() })
	return listener.Addr().(*net.TCPAddr).Port
}

// send sends a request from peer.
func send(t *testing.T, port int, method, path, peer string, headers [][2]string) *http.Response {
	host := "127.0.0.1"
	if strings.Contains(peer, ":") {
		host = "::1"
	}
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(peer)}}
	client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true}}
	req, err := http.NewRequest(method, "http://"+net.JoinHostPort(host, strconv.Itoa(port))+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		req.Header.Add(h[0], h[1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func downClient(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)), DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestTheSharedHTTPCases(t *testing.T) {
	redis.SetLogger(quietRedis{})
	t0, suites := loadCases(t)
	s := redistest.Start(t)
	up, down := s.Client(t), downClient(t)
	for n, suite := range suites {
		t.Run(suite.Name, func(t *testing.T) {
			var now atomic.Int64
			now.Store(t0)
			prefix := fmt.Sprintf("gohttp-%d", n)
			var policies []*Policy
			for _, spec := range suite.Policies {
				client := up
				if spec.Redis == "down" {
					client = down
				}
				quota := ratelab.Quota{}
				quota, err := ratelab.NewQuota(spec.Quota.Limit, time.Duration(spec.Quota.PeriodUs)*time.Microsecond)
				if err != nil {
					t.Fatal(err)
				}
				limiter, err := ratelab.NewLimiter(client, ratelab.AlgorithmName(spec.Algorithm), quota.WithBurst(spec.Quota.Burst),
					ratelab.WithPrefix(prefix), ratelab.WithClock(func() time.Time { return time.UnixMicro(now.Load()) }),
					ratelab.WithQuotaCheckEvery(0), ratelab.WithLogger(nil), ratelab.WithTimeout(2*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				options := PolicyOptions{Timeout: 2 * time.Second}
				for _, r := range spec.Routes {
					options.Routes = append(options.Routes, Route{Method: r[0], Pattern: r[1]})
				}
				if spec.Key != nil {
					options.Key = Header(spec.Key.Header)
				}
				if spec.Cost != nil {
					options.Cost = Fixed(*spec.Cost)
				}
				if spec.Failure == "closed" {
					options.Failure = FailClosed
				}
				options.Count = map[string]Count{"": CountAll, "all": CountAll, "failures": CountFailures, "successes": CountSuccesses}[spec.Count]
				policies = append(policies, MustPolicy(spec.Name, limiter, options))
			}
			identify := &Identify{}
			if suite.Identify != nil {
				proxies, err := NewTrustedProxies(suite.Identify.TrustedProxies, suite.Identify.Header)
				if err != nil {
					t.Fatal(err)
				}
				identify.TrustedProxies = proxies
			}
			mw, err := New(Options{Policies: policies, Identify: identify, Logger: silent()})
			if err != nil {
				t.Fatal(err)
			}
			port := serve(t, mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				info, _ := FromContext(r.Context())
				status := 200
				if s := r.Header.Get("X-Respond-Status"); s != "" {
					status, _ = strconv.Atoi(s)
				}
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(status)
				_, _ = io.WriteString(w, info.Client.Key)
			})))
			for i, step := range suite.Steps {
				now.Store(t0 + step.AtUs)
				resp := send(t, port, step.Request.Method, step.Request.Path, step.Request.Peer, step.Request.Headers)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				where := fmt.Sprintf("step %d (%s)", i+1, step.Note)
				got := map[string]*string{}
				for name := range step.Response.Headers {
					if values := resp.Header.Values(name); len(values) > 0 {
						joined := strings.Join(values, ", ")
						got[name] = &joined
					} else {
						got[name] = nil
					}
				}
				if resp.StatusCode != step.Response.Status || !reflect.DeepEqual(got, step.Response.Headers) {
					t.Fatalf("%s: %d %s, want %d %s", where, resp.StatusCode, show(got), step.Response.Status, show(step.Response.Headers))
				}
				if step.Response.Body != nil && string(body) != *step.Response.Body && step.Request.Method != "HEAD" {
					t.Fatalf("%s: body %q, want %q", where, body, *step.Response.Body)
				}
				if step.Response.Problem != nil {
					if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
						t.Fatalf("%s: content type %q", where, ct)
					}
					if !sameJSONInOrder(body, step.Response.Problem) {
						t.Fatalf("%s: problem %s, want %s", where, body, step.Response.Problem)
					}
				}
			}
		})
	}
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func show(headers map[string]*string) string {
	parts := []string{}
	for k, v := range headers {
		if v == nil {
			parts = append(parts, k+": (absent)")
		} else {
			parts = append(parts, k+": "+*v)
		}
	}
	return "{" + strings.Join(parts, "; ") + "}"
}

// sameJSONInOrder: equal values, and the members in the same order.
func sameJSONInOrder(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil || !reflect.DeepEqual(x, y) {
		return false
	}
	return reflect.DeepEqual(memberOrder(a), memberOrder(b))
}

func memberOrder(data []byte) []string {
	d := json.NewDecoder(strings.NewReader(string(data)))
	var keys []string
	depth, expectKey := 0, false
	for {
		tok, err := d.Token()
		if err != nil {
			return keys
		}
		if v, ok := tok.(json.Delim); ok {
			if v == '{' || v == '[' {
				depth++
				expectKey = depth == 1 && v == '{'
			} else {
				depth--
				expectKey = depth == 1
			}
			continue
		}
		if depth == 1 {
			if s, ok := tok.(string); ok && expectKey {
				keys = append(keys, s)
				expectKey = false
			} else {
				expectKey = true
			}
		}
	}
}

func TestMemberOrderSeesEveryMember(t *testing.T) {
	got := memberOrder([]byte(`{"type":"x","list":["a","b"],"status":429,"o":{"k":1},"last":"y"}`))
	if !reflect.DeepEqual(got, []string{"type", "list", "status", "o", "last"}) {
		t.Fatal(got)
	}
}

// gated holds every check until n are waiting (or 3 s pass): every
// request's decision overlaps every other's.
type gated struct {
	*ratelab.Limiter
	arrived atomic.Int64
	n       int64
	open    chan struct{}
	once    sync.Once
}

func (g *gated) Check(ctx context.Context, key string, cost int) (ratelab.Decision, error) {
	if g.arrived.Add(1) == g.n {
		g.once.Do(func() { close(g.open) })
	}
	select {
	case <-g.open:
	case <-time.After(3 * time.Second):
	}
	return g.Limiter.Check(ctx, key, cost)
}

func TestSeveralPoliciesAreAllOrNothingUnderConcurrency(t *testing.T) {
	// 30 requests at once under a narrow policy (3 per hour) and three wide
	// ones (100 per hour: a fixed window, a sliding log, a GCRA): each wide
	// one ends up holding exactly the 3 requests that passed; what it took
	// for the 27 the narrow policy refused was given back by receipt.
	s := redistest.Start(t)
	client := s.Client(t)
	opts := []ratelab.Option{ratelab.WithPrefix("together"), ratelab.WithClock(func() time.Time { return time.UnixMicro(1_700_000_000_000_000) }),
		ratelab.WithQuotaCheckEvery(0), ratelab.WithLogger(nil), ratelab.WithTimeout(5 * time.Second)}
	limiter := func(name ratelab.AlgorithmName, limit int) *ratelab.Limiter {
		l, err := ratelab.NewLimiter(client, name, ratelab.PerHour(limit), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	narrow := &gated{Limiter: limiter(ratelab.GCRA, 3), n: 30, open: make(chan struct{})}
	wide := map[string]ratelab.AlgorithmName{"wide-fw": ratelab.FixedWindow, "wide-sl": ratelab.SlidingLog, "wide-gcra": ratelab.GCRA}
	policies := []*Policy{MustPolicy("narrow", narrow, PolicyOptions{Timeout: 5 * time.Second})}
	for _, name := range []string{"wide-fw", "wide-sl", "wide-gcra"} {
		policies = append(policies, MustPolicy(name, limiter(wide[name], 100), PolicyOptions{Timeout: 5 * time.Second}))
	}
	mw, err := New(Options{Policies: policies, Logger: silent()})
	if err != nil {
		t.Fatal(err)
	}
	port := serve(t, mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })))
	statuses := make([]int, 30)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := send(t, port, "GET", "/", "127.0.0.1", nil)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	if count[200] != 3 || count[429] != 27 {
		t.Fatalf("%v", statuses)
	}
	for name, algorithm := range wide {
		d, err := limiter(algorithm, 100).Peek(context.Background(), name+":ip:127.0.0.1", 0)
		if err != nil || d.Remaining != 97 {
			t.Errorf("%s: %d left of 100 after 3 passed (%v)", name, d.Remaining, err)
		}
	}
}

func TestABadConfigurationIsAClearError(t *testing.T) {
	s := redistest.Start(t)
	limiter, _ := ratelab.NewLimiter(s.Client(t), ratelab.GCRA, ratelab.PerMinute(5))
	cases := []struct {
		err     error
		message string
	}{
		{second(NewPolicy("a:b", limiter, PolicyOptions{})), `policy name "a:b"`},
		{second(NewPolicy("p", limiter, PolicyOptions{Failure: 7})), "failure is FailOpen or FailClosed"},
		{second(NewPolicy("p", limiter, PolicyOptions{Count: 9})), "count is CountAll"},
		{second(NewPolicy("p", limiter, PolicyOptions{Routes: []Route{{"POST", "login"}}})), `invalid route pattern "login"`},
		{second(NewPolicy("p", limiter, PolicyOptions{Routes: []Route{{"", "/{*rest}/x"}}})), "catch-all"},
		{second(NewPolicy("p", limiter, PolicyOptions{Routes: []Route{{"", "/a{b}"}}})), "whole segment"},
		{second(New(Options{Policies: []*Policy{MustPolicy("p", limiter, PolicyOptions{}), MustPolicy("p", limiter, PolicyOptions{})}})), `two policies are named "p"`},
		{second(NewTrustedProxies([]string{"proxy.local"}, "")), "host names are not resolved"},
		{second(NewTrustedProxies(nil, "x-real-ip")), "x-forwarded-for or forwarded"},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.message) {
			t.Errorf("%v, want %q", c.err, c.message)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestRoutesMatchAsAxumPatterns(t *testing.T) {
	cases := []struct {
		route        Route
		method, path string
		matches      bool
	}{
		{Route{"POST", "/login"}, "POST", "/login", true},
		{Route{"POST", "/login"}, "GET", "/login", false},
		{Route{"GET", "/"}, "HEAD", "/", true},
		{Route{"", "/sms/{to}"}, "PUT", "/sms/123", true},
		{Route{"", "/sms/{to}"}, "PUT", "/sms/", false},
		{Route{"", "/sms/{to}"}, "PUT", "/sms/1/x", false},
		{Route{"", "/files/{*rest}"}, "GET", "/files/", true},
		{Route{"", "/files/{*rest}"}, "GET", "/files/a/b/c", true},
		{Route{"", "/files/{*rest}"}, "GET", "/file", false},
	}
	for _, c := range cases {
		r, err := compileRoute(c.route)
		if err != nil || r.matches(c.method, c.path) != c.matches {
			t.Errorf("%+v %s %s: %v (%v)", c.route, c.method, c.path, !c.matches, err)
		}
	}
}
