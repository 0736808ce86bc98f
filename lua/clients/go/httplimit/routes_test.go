package httplimit

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelab "github.com/ratelab/ratelab/lua/clients/go"
	"github.com/ratelab/ratelab/lua/clients/go/internal/redistest"
)

// A policy on a route counts every request net/http's ServeMux runs that
// route's handler for, however its path is spelled, and only those: the
// handler each request reached is the oracle, the test's list only says
// which spellings are expected to reach it (so that a change in ServeMux
// shows here, not as a silent bypass).

// sendRaw sends one request with its target exactly as given (http.Client
// would normalise it): the status, the RateLimit-Policy and RateLimit
// fields, and the handler that answered.
func sendRaw(t *testing.T, port int, method, target string) (int, string, string, string) {
	t.Helper()
	conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", method, target)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"), resp.Header.Get("X-Handler")
}

func TestARoutePolicyCountsEverySpellingServeMuxRoutesToItsHandler(t *testing.T) {
	s := redistest.Start(t)
	limiter := func(name string) *Policy {
		quota, _ := ratelab.NewQuota(1000, time.Hour)
		l, err := ratelab.NewLimiter(s.Client(t), ratelab.AlgorithmName("gcra"), quota,
			ratelab.WithPrefix("goroutes"), ratelab.WithClock(func() time.Time { return time.UnixMicro(1_700_000_000_000_000) }),
			ratelab.WithQuotaCheckEvery(0), ratelab.WithLogger(nil), ratelab.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		pattern := map[string]string{"login": "/login", "reset": "/users/{id}/reset"}[name]
		return MustPolicy(name, l, PolicyOptions{Routes: []Route{{"POST", pattern}}, Timeout: 5 * time.Second})
	}
	mw, err := New(Options{Policies: []*Policy{limiter("login"), limiter("reset")}, Logger: silent()})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	answer := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { w.Header().Set("X-Handler", name) }
	}
	mux.Handle("POST /login", answer("login"))
	mux.Handle("POST /users/{id}/reset", answer("reset"))
	mux.Handle("/", answer("other"))
	port := serve(t, mw.Handler(mux))

	cases := []struct {
		method, target, handler string
	}{
		{"POST", "/login", "login"},
		{"POST", "/log%69n", "login"},
		{"POST", "/%6C%6F%67%69%6E", "login"},
		{"POST", "/login?next=/x", "login"},
		{"HEAD", "/login", "other"},
		{"GET", "/log%69n", "other"},
		{"POST", "/LOGIN", "other"},
		{"POST", "/login/", "other"},
		{"POST", "/login;x=1", "other"},
		{"POST", "/login%2F", "other"},
		{"POST", "/%2Flogin", "other"},
		{"POST", "/login%20", "other"},
		{"POST", "//login", ""},           // redirected to the clean path
		{"POST", "/a/../login", ""},       // redirected
		{"POST", "/./login", ""},          // redirected
		{"POST", "/log%69n/../login", ""}, // redirected
		{"POST", "/users/7/reset", "reset"},
		{"POST", "/users/a%2Fb/reset", "reset"},
		{"POST", "/%75sers/7/res%65t", "reset"},
		{"POST", "/users/%2F/reset", "other"}, // ServeMux: a decoded "/" is a trailing slash
		{"POST", "/users/%2Fx/reset", "reset"},
		{"POST", "/users//reset", ""}, // redirected
		{"POST", "/users/7/reset/", "other"},
		{"POST", "/users/7/x/reset", "other"},
	}
	counted := map[string]int{}
	for _, c := range cases {
		status, fields, left, handler := sendRaw(t, port, c.method, c.target)
		reached := ""
		if status == 200 {
			reached = handler
		}
		if reached != c.handler && !(c.handler == "" && status/100 == 3) {
			t.Errorf("%s %s: ServeMux answered %d from %q, want the %q handler", c.method, c.target, status, handler, c.handler)
		}
		for _, name := range []string{"login", "reset"} {
			got := strings.Contains(fields, `"`+name+`"`)
			if got != (reached == name) {
				t.Errorf("%s %s: reached %q; counted on %q: %v", c.method, c.target, reached, name, got)
			}
			if got {
				// One unit more taken on the policy's one key.
				counted[name]++
				if want := fmt.Sprintf(`"%s";r=%d;`, name, 1000-counted[name]); !strings.HasPrefix(left, want) {
					t.Errorf("%s %s: RateLimit %q, want %s...", c.method, c.target, left, want)
				}
			}
		}
	}
	for _, name := range []string{"login", "reset"} {
		want := 0
		for _, c := range cases {
			if c.handler == name {
				want++
			}
		}
		if want < 4 || counted[name] != want {
			t.Errorf("%s: counted %d, want %d", name, counted[name], want)
		}
	}
}
